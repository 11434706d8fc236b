import dataclasses

import jax
import numpy as np
import pytest

from core import numerics
from core.lessons.deployment import adapt_pretrained as ap
from core.nn import chunked
from core.post_training import cache, lora

DEFAULTS = {k: ap.LESSON[k] for k in ("rank", "alpha", "steps", "learning_rate")}


@pytest.fixture(scope="module")
def base():
    return ap.pretrain(0)[0]


@pytest.fixture(scope="module")
def task():
    return ap.shifted_task(ap.LESSON["shift"], ap.LESSON["shots"], 0)


@pytest.fixture(scope="module")
def results(base, task):
    return ap.run_all(base, task, **DEFAULTS, seed=0)


def test_shifts_match_explicit_pixel_formulas():
    x = np.random.default_rng(0).random((3, 8, 8, 1)).astype(np.float32)
    inverted = ap.shift_images(x, "inverted ink")
    moved = ap.shift_images(x, "shifted 2 px right")
    turned = ap.shift_images(x, "rotated 90 degrees")
    for n in range(3):
        for y in range(8):
            for c in range(8):
                assert inverted[n, y, c, 0] == np.float32(1.0) - x[n, y, c, 0]
                assert moved[n, y, c, 0] == (x[n, y, c - 2, 0] if c >= 2 else 0.0)
                # counter-clockwise quarter turn: out[y, c] = in[c, 7 - y]
                assert turned[n, y, c, 0] == x[n, c, 7 - y, 0]
    with pytest.raises(ValueError, match="shift must be one of"):
        ap.shift_images(x, "blurred")
    with pytest.raises(ValueError, match=r"\(N, 8, 8, K\)"):
        ap.shift_images(x[:, :4], "inverted ink")


def test_the_pretrained_model_is_good_on_the_unshifted_digits_and_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    first, origin1 = ap.pretrain(1)
    again, origin2 = ap.pretrain(1)
    assert (origin1, origin2) == (cache.ORIGIN_TRAINED, cache.ORIGIN_CACHE)
    for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(again), strict=True):
        assert np.array_equal(a, b)
    unshifted = ap.shifted_task("shifted 2 px right", 1, 0)
    from core.data import digits

    split = digits.load(ap.PRETRAIN["test_fraction"], 0)
    accuracy = ap.base_accuracy(first, dataclasses.replace(unshifted, x_test=ap.flat(split.x_test)))
    assert accuracy > 0.95
    # the shift really is a shift: the pretrained model loses most of it
    assert ap.base_accuracy(first, unshifted) < accuracy - 0.4


def test_shifted_task_draws_shots_per_class_from_the_training_split():
    t = ap.shifted_task("rotated 90 degrees", 7, 3)
    assert np.array_equal(np.bincount(t.y_train), np.full(10, 7))
    assert t.x_train.shape == (70, 64)
    with pytest.raises(ValueError, match="shots per class must be in"):
        ap.shifted_task("rotated 90 degrees", 0, 0)


@pytest.mark.parametrize("rank", [1, 4, 16, 32])
def test_trainable_counts_from_the_pytrees_equal_the_closed_form(base, rank):
    adapters = ap.init_adapters(base, rank, jax.random.key(0))
    sizes = ap.sizes()
    hidden, classes = sizes[-2], sizes[-1]
    by_hand = {
        "head only": hidden * classes + classes,
        "full fine-tuning": sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:], strict=True)),
        "LoRA": sum(rank * (i + o) for i, o in zip(sizes[:-2], sizes[1:-1], strict=True))
        + hidden * classes
        + classes,
    }
    for method in ap.METHODS:
        trainable, _ = ap.split_trainable(method, base, adapters)
        assert lora.count(trainable) == ap.trainable_closed_form(method, sizes, rank)
        assert lora.count(trainable) == by_hand[method]
    # planted: LoRA counted without its trained head is caught
    trainable, _ = ap.split_trainable("LoRA", base, adapters)
    assert lora.count(trainable["adapters"]) != ap.trainable_closed_form("LoRA", sizes, rank)


def test_head_only_and_lora_leave_the_backbone_bitwise_unchanged(base, results):
    for method in ("head only", "LoRA"):
        for trained, original in zip(results[method].layers[:-1], base[:-1], strict=True):
            assert np.array_equal(trained["w"], original["w"])
            assert np.array_equal(trained["b"], original["b"])
        assert not np.array_equal(results[method].layers[-1]["w"], base[-1]["w"])
    # planted: full fine-tuning (a "head-only" run that trained everything) is caught
    assert not np.array_equal(results["full fine-tuning"].layers[0]["w"], base[0]["w"])


def test_a_head_only_split_that_trains_the_backbone_is_caught(base, task, monkeypatch):
    # planted: "head only" handed the full fine-tuning split; the frozen-backbone
    # comparison the app's check makes (trained layers vs the pretrained ones) must fail
    real = ap.split_trainable
    monkeypatch.setattr(ap, "split_trainable", lambda m, p, a=None: real("full fine-tuning", p, a))
    leaky = ap.adapt("head only", base, task, **DEFAULTS, seed=0)
    changed = [not np.array_equal(t["w"], b["w"]) for t, b in zip(leaky.layers, base, strict=True)]
    assert all(changed)


def test_lora_forward_equals_the_float64_merge_and_a_wrong_scale_is_caught(results, task):
    r = results["LoRA"]
    scale = DEFAULTS["alpha"] / DEFAULTS["rank"]
    logits = ap.forward(r.layers, r.adapters, np.float32(scale), task.x_test)
    reference = ap.reference_logits(r.layers, r.adapters, scale, task.x_test)
    assert numerics.scaled_max_error(logits, reference) < numerics.tolerance("float32")
    merged = ap.forward(ap.merged_layers(r.layers, r.adapters, scale), None, 0.0, task.x_test)
    assert numerics.scaled_max_error(merged, reference) < numerics.tolerance("float32")
    # planted: merging without alpha/R (scale 1) is far outside the tolerance
    wrong = ap.reference_logits(r.layers, r.adapters, 1.0, task.x_test)
    assert numerics.scaled_max_error(logits, wrong) > 100 * numerics.tolerance("float32")
    # planted: the adapters dropped (the base backbone only)
    dropped = ap.reference_logits(r.layers, None, scale, task.x_test)
    assert numerics.scaled_max_error(logits, dropped) > 100 * numerics.tolerance("float32")


def test_fresh_adapters_start_at_the_pretrained_model(base, task):
    adapters = ap.init_adapters(base, 4, jax.random.key(5))
    assert all(not np.any(a["b_RO"]) for a in adapters)
    fresh = ap.forward(base, adapters, np.float32(2.0), task.x_test)
    plain = ap.forward(base, None, 0.0, task.x_test)
    assert np.array_equal(np.asarray(fresh), np.asarray(plain))


def test_every_method_learns_the_shift(base, task, results):
    before = ap.base_accuracy(base, task)
    for r in results.values():
        assert r.loss_S[-1] < 0.5 * r.loss_S[0]
        assert r.accuracy > before + 0.3
        assert r.first_s > 0 and r.train_s > 0


def test_a_new_step_count_compiles_nothing(base, task, results):
    # the steps control moves by 10: every count it offers reuses each method's compiled chunk
    # (one scan of the whole run compiled again for every count, three methods each)
    steps = DEFAULTS["steps"] + 3 * ap.ADAPT_CHUNK
    with chunked.counting_compiles() as compiled:
        longer = ap.run_all(base, task, **{**DEFAULTS, "steps": steps}, seed=0)
    assert compiled == []
    for method, r in longer.items():
        assert r.loss_S.shape == (steps,)
        # the first DEFAULTS["steps"] steps are the same updates as the default run's
        np.testing.assert_array_equal(r.loss_S[: DEFAULTS["steps"]], results[method].loss_S)


@pytest.mark.parametrize("shift", ap.CLAIM_SHIFTS)
def test_claim_full_fine_tuning_beats_head_only_over_seeds(shift):
    for seed in range(4):
        params = ap.pretrain(seed)[0]
        t = ap.shifted_task(shift, ap.LESSON["shots"], seed)
        head = ap.adapt("head only", params, t, **DEFAULTS, seed=seed)
        full = ap.adapt("full fine-tuning", params, t, **DEFAULTS, seed=seed)
        assert full.accuracy >= head.accuracy + ap.CLAIM_MARGIN, (shift, seed)


def _fake(method, accuracy, count):
    return ap.Adapted(method, {}, {}, [], None, np.zeros(1), accuracy, count, 1.0, 1.0)


def test_choose_takes_the_fewest_parameters_that_meet_target_and_budget():
    results = {
        "head only": _fake("head only", 0.75, 650),
        "full fine-tuning": _fake("full fine-tuning", 0.9, 8970),
        "LoRA": _fake("LoRA", 0.82, 1674),
    }
    assert ap.choose(results, 0.8, 2000)[0] == "LoRA"
    assert ap.choose(results, 0.7, 2000)[0] == "head only"
    assert ap.choose(results, 0.85, 10_000)[0] == "full fine-tuning"
    winner, why = ap.choose(results, 0.85, 2000)
    assert winner is None and "no method reaches 85%" in why and "LoRA (82.0%)" in why
    with pytest.raises(ValueError, match="accuracy target"):
        ap.choose(results, 1.5, 2000)


def test_rank_problem_refuses_ranks_that_are_not_parameter_efficient():
    assert ap.max_rank() == 32  # 256 R + 650 < 8970
    assert ap.rank_problem(32) is None
    assert "no longer a low-rank adaptation" in ap.rank_problem(33)
    assert "must be >= 1" in ap.rank_problem(0)
    with pytest.raises(ValueError, match="no longer a low-rank"):
        ap.init_adapters([{"w": np.zeros((64, 64)), "b": np.zeros(64)}] * 3, 40, jax.random.key(0))
    with pytest.raises(ValueError, match="method must be one of"):
        ap.split_trainable("prompt tuning", [])
