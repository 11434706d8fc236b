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


def test_margin_error_follows_the_log_probabilities_a_margin_is_made_of():
    """Correct float32 margins of big, nearly cancelling log-probs pass; a wrong formula fails.

    Four terms of ~20 nats rounded to float32 (as the policy's forward pass leaves them): the
    margin's error is ~beta * 4 * eps32 * 20 whatever the margin's size, so judging it on the
    margin (scaled_max_error) fails correct code, judging it on beta * |log-prob| does not.
    """
    rng = np.random.default_rng(0)
    terms64 = tuple(-20.0 + 0.2 * rng.standard_normal(256) for _ in range(4))
    rounded = (np.float32(t * (1 + 3e-7 * rng.standard_normal(256))) for t in terms64)
    chosen, rejected, ref_chosen, ref_rejected = rounded
    beta = 1.0
    margins32 = beta * ((chosen - ref_chosen) - (rejected - ref_rejected))
    _, reference = losses.dpo_reference(*terms64, beta)
    tolerance = numerics.tolerance("float32")
    assert numerics.scaled_max_error(margins32, reference) > tolerance  # the old measure
    assert dpo.margin_error(margins32, reference, terms64, beta) <= tolerance
    no_reference_terms = beta * (chosen - rejected)  # a planted DPO without the reference log-probs
    assert dpo.margin_error(no_reference_terms, reference, terms64, beta) > 100 * tolerance
    halved = margins32 / 2  # a planted factor (beta applied twice at beta = 0.5, say)
    assert dpo.margin_error(halved, reference, terms64, beta) > 100 * tolerance
