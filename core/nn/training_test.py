import functools

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from core import numerics
from core.nn import mlp, nnx_models, training

# On a chip: float32 matmuls at HIGHEST, bounds from numerics (the CPU's values on the CPU).
pytestmark = pytest.mark.usefixtures("highest_matmul_precision_on_tpu")


def _model_and_optimizer(sizes, tx, seed=0):
    model = nnx_models.MLP(sizes, rngs=nnx.Rngs(params=seed))
    return model, nnx.Optimizer(model, tx, wrt=nnx.Param)


def _batch(n=32, seed=0, classes=2):
    name = "moons" if classes == 2 else "blobs"
    return mlp.make_dataset(jax.random.key(seed), name, n, 0.1, classes)


@pytest.mark.parametrize("name", training.OPTIMIZERS)
@pytest.mark.parametrize("sizes,classes", [((2, 8, 2), 2), ((2, 16, 16, 3), 3)])
def test_train_step_equals_optax_applied_by_hand(name, sizes, classes):
    x, y = _batch(48, 1, classes)
    tx = training.make_optimizer(name, 0.05)
    model, optimizer = _model_and_optimizer(sizes, tx)
    before = nnx_models.to_hand_params(model)
    metrics = training.train_step(model, optimizer, x, y)
    training.train_step(model, optimizer, x, y)  # a second step exercises the optimizer state
    reference, grads = training.reference_update(
        functools.partial(mlp.loss, activation="relu"), before, x, y, tx, steps=2
    )
    update = jax.tree.map(np.subtract, nnx_models.to_hand_params(model), before)
    reference_update = jax.tree.map(np.subtract, reference, before)
    bound = numerics.scaled_tolerance(1e-4)
    assert numerics.tree_normwise_max_error(update, reference_update) < bound
    loss = mlp.loss_reference(before, x, y)
    assert float(metrics["loss"]) == pytest.approx(loss, rel=numerics.tolerance("float32"))
    assert float(metrics["accuracy"]) == pytest.approx(
        training.accuracy_reference(mlp.forward_reference(before, x), y), abs=1e-6
    )
    if name == "sgd":
        once = _model_and_optimizer(sizes, tx)
        training.train_step(*once, x, y)
        numpy_step = training.sgd_reference(before, grads, 0.05)
        after_step = nnx_models.to_hand_params(once[0])
        bound = numerics.scaled_tolerance(1e-6)
        assert numerics.tree_scaled_max_error(after_step, numpy_step) < bound


def test_clipping_bounds_the_update():
    x, y = _batch(16)
    tx = training.make_optimizer("sgd", 1.0, clip_norm=0.01)
    model, optimizer = _model_and_optimizer((2, 8, 2), tx)
    before = nnx_models.to_hand_params(model)
    training.train_step(model, optimizer, x, y)
    step = jax.tree.map(np.subtract, nnx_models.to_hand_params(model), before)
    assert np.sqrt(sum(np.sum(np.square(leaf)) for leaf in jax.tree.leaves(step))) <= 0.01 * (
        1 + 1e-5
    )


def test_eval_step_measures_without_updating():
    x, y = _batch(40, 2)
    model, _ = _model_and_optimizer((2, 8, 2), optax.sgd(0.1))
    before = nnx_models.to_hand_params(model)
    result = training.eval_step(model, x, y)
    assert numerics.tree_scaled_max_error(nnx_models.to_hand_params(model), before) == 0.0
    tol = numerics.tolerance("float32")
    np.testing.assert_allclose(
        result["logits"], mlp.forward_reference(before, x), rtol=tol, atol=tol
    )
    assert float(result["loss"]) == pytest.approx(mlp.loss_reference(before, x, y), rel=tol)
    assert float(result["accuracy"]) == pytest.approx(
        training.accuracy_reference(result["logits"], y), abs=1e-6
    )


@pytest.mark.parametrize("batch_size", [8, 20])
def test_train_epoch_equals_a_loop_of_train_steps(batch_size):
    x, y = _batch(64, 3)
    x_SB, y_SB = training.epoch_batches(x, y, batch_size, seed=0, epoch=0)
    scanned = _model_and_optimizer((2, 8, 2), optax.adam(0.01))
    looped = _model_and_optimizer((2, 8, 2), optax.adam(0.01))
    metrics = training.train_epoch(*scanned, x_SB, y_SB)
    losses = [
        float(training.train_step(*looped, x_SB[s], y_SB[s])["loss"]) for s in range(len(x_SB))
    ]
    tol = numerics.tolerance("float32")  # one program against a loop of them
    np.testing.assert_allclose(metrics["loss"], losses, rtol=tol)
    assert (
        numerics.tree_scaled_max_error(
            nnx_models.to_hand_params(scanned[0]), nnx_models.to_hand_params(looped[0])
        )
        < tol
    )


def test_epoch_batches_shuffle_deterministically():
    x = np.arange(20, dtype=np.float32)[:, None]
    y = np.arange(20)
    x_SB, y_SB = training.epoch_batches(x, y, 6, seed=1, epoch=0)
    assert x_SB.shape == (3, 6, 1) and y_SB.shape == (3, 6)
    assert len(set(y_SB.ravel())) == 18 and np.array_equal(x_SB[..., 0], y_SB)
    again = training.epoch_batches(x, y, 6, seed=1, epoch=0)[1]
    other_epoch = training.epoch_batches(x, y, 6, seed=1, epoch=1)[1]
    np.testing.assert_array_equal(y_SB, again)
    assert not np.array_equal(y_SB, other_epoch)
    with pytest.raises(ValueError, match="batch size"):
        training.epoch_batches(x, y, 21, seed=0, epoch=0)


def test_fit_and_train_for_steps_learn_the_moons():
    x, y = _batch(256, 4)
    x_test, y_test = _batch(128, 5)
    model, optimizer = _model_and_optimizer((2, 16, 16, 2), optax.adam(0.01))
    history = training.fit(
        model, optimizer, x, y, epochs=3, batch_size=32, seed=0, x_eval=x_test, y_eval=y_test
    )
    assert [row["epoch"] for row in history] == [1, 2, 3]
    assert history[-1]["train loss"] < history[0]["train loss"]
    model, optimizer = _model_and_optimizer((2, 16, 16, 2), optax.adam(0.01))
    train_rows, eval_rows = training.train_for_steps(
        model,
        optimizer,
        x,
        y,
        steps=50,
        batch_size=32,
        seed=0,
        x_eval=x_test,
        y_eval=y_test,
        eval_every=20,
    )
    assert len(train_rows) == 50 and [r["step"] for r in eval_rows] == [20, 40, 50]
    assert eval_rows[-1]["accuracy"] > 0.8


def test_time_calls_separates_the_first_call():
    calls = []

    def fn(value):
        calls.append(value)
        return value

    timing = training.time_calls(fn, 3, repeats=4)
    assert len(calls) == 5 and len(timing.steady_s) == 4
    assert (
        timing.first_s >= 0
        and timing.median_s == sorted(timing.steady_s)[1] / 2 + sorted(timing.steady_s)[2] / 2
    )
    with pytest.raises(ValueError, match="repeats"):
        training.time_calls(fn, 1, repeats=0)


def test_make_optimizer_names_bad_choices():
    with pytest.raises(ValueError, match="optimizer"):
        training.make_optimizer("rmsprop", 0.1)
    with pytest.raises(ValueError, match="learning rate"):
        training.make_optimizer("sgd", 0.0)
    with pytest.raises(ValueError, match="clip norm"):
        training.make_optimizer("sgd", 0.1, clip_norm=-1.0)
    schedule = optax.cosine_decay_schedule(0.1, 10)
    assert training.make_optimizer("adam", schedule) is not None


def test_train_steps_scanned_equals_train_for_steps():
    x, y = _batch(64, 3)
    x_test, y_test = _batch(16, 4)
    looped = _model_and_optimizer((2, 8, 2), optax.adam(0.01))
    scanned = _model_and_optimizer((2, 8, 2), optax.adam(0.01))
    # 64 // 16 = 4 steps an epoch: 10 steps are 2 epochs and half of a third, reshuffled
    train_rows, _ = training.train_for_steps(
        *looped,
        x,
        y,
        steps=10,
        batch_size=16,
        seed=3,
        x_eval=x_test,
        y_eval=y_test,
        eval_every=10,
    )
    metrics = training.train_steps_scanned(*scanned, x, y, steps=10, batch_size=16, seed=3)
    tol = numerics.tolerance("float32")  # one program against a loop of them
    np.testing.assert_allclose(metrics["loss"], [r["loss"] for r in train_rows], rtol=tol)
    np.testing.assert_allclose(metrics["accuracy"], [r["accuracy"] for r in train_rows])
    assert (
        numerics.tree_scaled_max_error(
            nnx_models.to_hand_params(scanned[0]), nnx_models.to_hand_params(looped[0])
        )
        < tol
    )
    with pytest.raises(ValueError, match="larger than"):
        training.train_steps_scanned(*scanned, x, y, steps=1, batch_size=65, seed=0)


@functools.cache
def _optimizer(name, learning_rate):
    # one transformation object per setting: nnx.jit keys its compiled programs on the
    # optimizer's static parts, and a new optax object each run would compile anew
    return training.make_optimizer(name, learning_rate)


def _train_eval_lesson_run(seed, **overrides):
    """apps/train_eval_step.py's run at its defaults (``overrides`` change some): (test
    accuracy, test loss, first batch's loss)."""
    lesson, data = {**training.TRAIN_EVAL_LESSON, **overrides}, training.TRAIN_EVAL_DATA
    data_key, test_key, _init_key = jax.random.split(jax.random.key(seed), 3)
    x, y = mlp.make_dataset(data_key, "moons", data["train_points"], data["noise"], 2)
    x_test, y_test = mlp.make_dataset(test_key, "moons", data["test_points"], data["noise"], 2)
    sizes = mlp.layer_sizes(2, lesson["hidden"], 2, data["classes"])
    tx = _optimizer(lesson["optimizer"], lesson["learning_rate"])
    model = nnx_models.MLP(sizes, rngs=nnx.Rngs(params=jax.random.key(seed, impl="rbg")))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    metrics = training.train_steps_scanned(
        model, optimizer, x, y, steps=lesson["steps"], batch_size=lesson["batch_size"], seed=seed
    )
    evaluation = training.eval_step(model, x_test, y_test)
    return float(evaluation["accuracy"]), float(evaluation["loss"]), float(metrics["loss"][0])


def test_train_eval_lesson_defaults_learn_on_every_seed():
    # apps/train_eval_step.py claims at its defaults: test accuracy >= 90%, test loss below
    # the first batch's. Proven here over 8 seeds (data, init, batch order), and over 4 seeds
    # at half and twice the learning rate, with margin: 5 points of accuracy, and a test
    # loss below a quarter of the first batch's.
    rate = training.TRAIN_EVAL_LESSON["learning_rate"]
    runs = [_train_eval_lesson_run(seed) for seed in range(8)]
    runs += [_train_eval_lesson_run(s, learning_rate=f * rate) for f in (0.5, 2) for s in range(4)]
    accuracy = min(a for a, _, _ in runs)
    ratio = max(loss / first for _, loss, first in runs)
    print(
        f"train_eval_step defaults (and lr x0.5, x2), 16 runs: worst test accuracy "
        f"{accuracy:.3f} (claim >= 0.9), worst test loss / first batch loss {ratio:.3f} "
        "(claim < 1)"
    )
    assert accuracy >= 0.95 and ratio < 0.25


@pytest.mark.cpu_only(
    "it emulates a TPU's MXU on the CPU and holds the pinned loss to the CPU's float32 bound; "
    "on a chip the rest of the loss (log, exp) runs on the TPU itself (the v5e: 2.6e-5), and "
    "the lesson's own check judges it there at the HIGHEST bound"
)
def test_eval_loss_vs_float64_holds_on_an_emulated_tpu_only_at_highest():
    # The lesson's eval check (apps/train_eval_step.py) on a TPU's MXU, emulated: at DEFAULT
    # (one bfloat16 pass) the loss misses a float32 bound, as it did on the chip (0.3%); through
    # training.eval_at_highest it holds at the TPU's HIGHEST bound, which still catches a bug.
    from core.perf import tpu_emulation

    x, y = _batch(256, 1)
    model, optimizer = _model_and_optimizer((2, 64, 64, 2), optax.adam(0.05))
    for _ in range(30):  # trained to a small loss, as in the lesson: rounding weighs more there
        training.train_step(model, optimizer, x, y)
    want = mlp.loss_reference(nnx_models.to_hand_params(model), x, y)
    tpu = numerics.tolerance("float32", backend="tpu", precision="HIGHEST")
    assert tpu == 5e-4 and "HIGHEST" in tpu.reason
    assert numerics.tolerance("float32", backend="cpu", precision="HIGHEST") == 1e-5

    def relative(loss):
        return abs(float(loss) - want) / want

    with jax.default_matmul_precision("default"):  # as in the app (not this module's fixture)
        default = tpu_emulation.emulate(training.eval_step)(model, x, y)["loss"]
    pinned = tpu_emulation.emulate(functools.partial(training.eval_at_highest, training.eval_step))(
        model, x, y
    )["loss"]
    assert relative(default) > 10 * numerics.TOLERANCE["float32"]  # the old rtol fails there
    assert relative(pinned) <= numerics.TOLERANCE["float32"] <= tpu
    shuffled = tpu_emulation.emulate(
        functools.partial(training.eval_at_highest, training.eval_step)
    )(model, x, y[::-1])["loss"]
    assert relative(shuffled) > 10 * tpu  # wrong labels: a planted bug fails at the TPU's bound
