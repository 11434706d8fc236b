import jax
import numpy as np
import pytest

from core import numerics
from core.post_training import dpo, losses, model, preferences, report, task


@pytest.fixture(scope="module")
def small():
    params = jax.tree.map(np.asarray, model.init_params(task.MODEL, jax.random.key(0)))
    pairs = preferences.make_pairs(params, task.all_prompts()[:16], jax.random.key(1), 2)
    return params, pairs


def test_loss_fn_matches_float64_logprobs_and_the_closed_form(small):
    params, pairs = small
    policy = jax.tree.map(lambda x: x * 1.01, params)  # a policy different from the reference
    batch = {**pairs.arrays(), **dpo.reference_logprobs(params, pairs)}
    loss, aux = dpo.loss_fn(policy, 0.5, batch)

    def f64(p, side):
        tokens, weights = getattr(pairs, f"tokens_{side}_BT"), getattr(pairs, f"weights_{side}_BT")
        return model.sequence_logprob_reference(p, task.MODEL, tokens, weights)

    ref_loss, margins = losses.dpo_reference(
        f64(policy, "w"), f64(policy, "l"), f64(params, "w"), f64(params, "l"), 0.5
    )
    assert numerics.scaled_max_error(float(loss), ref_loss) < 1e-5
    assert numerics.scaled_max_error(float(aux["margin"]), margins.mean()) < 1e-5
    same, aux_same = dpo.loss_fn(params, 0.5, batch)  # policy == reference: log 2, margin 0
    assert float(same) == pytest.approx(np.log(2), rel=1e-6)
    assert abs(float(aux_same["margin"])) < 1e-6


def test_kl_of_a_model_to_itself_is_zero(small):
    params, _ = small
    tokens, weights = task.sample(params, task.all_prompts()[:8], jax.random.key(0))
    kl = report.sequence_kl(params, params, tokens, weights)
    assert all(np.all(v == 0) for v in kl.values())


def test_beta_must_be_positive(small):
    params, pairs = small
    with pytest.raises(ValueError, match="beta"):
        dpo.train(params, pairs, 0, steps=2, beta=0.0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_dpo_raises_the_true_reward_over_seeds(seed):
    reference = task.base_params(seed)
    train_pairs, _ = preferences.lesson_data(seed)
    policy, history = dpo.train(reference, train_pairs, seed)
    _, heldout = task.split_prompts(seed)
    key = jax.random.fold_in(jax.random.key(seed), 99)
    before = report.policy_report(reference, reference, heldout, key)["true reward"]
    after = report.policy_report(policy, reference, heldout, key)["true reward"]
    assert after - before >= dpo.REWARD_GAIN
    assert history["margin"][-20:].mean() > 0
