import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.post_training import losses

F32 = numerics.tolerance("float32")


def _mask(rng, b, t):
    weights = np.zeros((b, t), np.float32)
    for row in range(b):
        start = rng.integers(0, t - 2)
        weights[row, start : rng.integers(start + 1, t)] = 1
    return weights


@pytest.mark.parametrize("b, t, v", [(2, 5, 7), (6, 9, 256)])
def test_token_loss_matches_the_float64_loop(b, t, v):
    rng = np.random.default_rng(b)
    logits = rng.normal(size=(b, t, v)).astype(np.float32) * 3
    tokens = rng.integers(0, v, (b, t))
    weights = _mask(rng, b, t)
    ours = float(losses.token_loss_from_logits(logits, tokens, weights))
    assert (
        numerics.scaled_max_error(ours, losses.masked_token_loss_reference(logits, tokens, weights))
        < F32
    )


def test_masked_positions_get_exactly_zero_logit_gradient():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 9, 256)).astype(np.float32)
    tokens = rng.integers(0, 256, (4, 9))
    weights = _mask(rng, 4, 9)
    grad = losses.logits_gradient_BTV(logits, tokens, weights)
    assert np.all(grad[weights == 0] == 0.0)  # exactly, not approximately
    assert np.all(np.abs(grad[weights > 0]).sum(-1) > 0)
    # the gradient of a mean over n marked tokens: softmax - one_hot, divided by n
    b, t = np.argwhere(weights > 0)[0]
    p = np.exp(logits[b, t] - logits[b, t].max())
    p /= p.sum()
    p[tokens[b, t + 1]] -= 1
    assert numerics.scaled_max_error(grad[b, t], p / weights.sum()) < F32


@pytest.mark.parametrize("n", [1, 16])
def test_bradley_terry_matches_its_closed_form(n):
    rng = np.random.default_rng(n)
    r_w, r_l = rng.normal(size=(2, n)) * 5
    ours = float(losses.bradley_terry_loss(jnp.float32(r_w), jnp.float32(r_l)))
    assert numerics.scaled_max_error(ours, losses.bradley_terry_reference(r_w, r_l)) < F32
    # closed form written differently: -log(e^{r_w} / (e^{r_w} + e^{r_l}))
    direct = np.mean(-np.log(np.exp(r_w) / (np.exp(r_w) + np.exp(r_l))))
    assert losses.bradley_terry_reference(r_w, r_l) == pytest.approx(direct, rel=1e-10)
    assert float(losses.bradley_terry_loss(jnp.zeros(3), jnp.zeros(3))) == pytest.approx(np.log(2))


@pytest.mark.parametrize("beta", [0.05, 0.5, 2.0])
def test_dpo_matches_its_closed_form(beta):
    rng = np.random.default_rng(int(beta * 100))
    lw, ll, rw, rl = (rng.normal(size=8) * 4 - 6 for _ in range(4))
    loss, margins = losses.dpo_loss(*(jnp.float32(a) for a in (lw, ll, rw, rl)), beta)
    ref_loss, ref_margins = losses.dpo_reference(lw, ll, rw, rl, beta)
    assert numerics.scaled_max_error(float(loss), ref_loss) < F32
    assert numerics.scaled_max_error(margins, ref_margins) < F32
    # the policy equal to the reference: every margin 0 and the loss log 2
    zero_loss, zero_margins = losses.dpo_loss(
        jnp.float32(lw), jnp.float32(ll), jnp.float32(lw), jnp.float32(ll), beta
    )
    assert float(zero_loss) == pytest.approx(np.log(2), rel=1e-6)
    assert np.all(np.asarray(zero_margins) == 0)


def test_kl_estimators_match_numpy_and_estimate_the_exact_kl():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(1, 1, 6))
    ref_logits = logits + rng.normal(size=(1, 1, 6)) * 0.7
    exact = float(
        np.asarray(losses.exact_kl_BT(jnp.float32(logits), jnp.float32(ref_logits)))[0, 0]
    )
    assert (
        numerics.scaled_max_error(exact, losses.exact_kl_reference(logits, ref_logits)[0, 0]) < F32
    )
    # sample tokens from pi and average the estimators
    p = np.exp(logits[0, 0] - logits[0, 0].max())
    p /= p.sum()
    q = np.exp(ref_logits[0, 0] - ref_logits[0, 0].max())
    q /= q.sum()
    draws = rng.choice(6, size=200_000, p=p)
    logp, logq = np.log(p[draws]), np.log(q[draws])
    ours = {
        k: np.asarray(v)
        for k, v in losses.kl_estimators(jnp.float32(logp), jnp.float32(logq)).items()
    }
    reference = losses.kl_estimators_reference(logp, logq)
    for name in ("k1", "k2", "k3"):
        assert numerics.scaled_max_error(ours[name], reference[name]) < F32
    for name in ("k1", "k3"):  # unbiased: their means estimate the exact KL
        assert abs(reference[name].mean() - exact) < 5 * reference[name].std() / np.sqrt(len(draws))
    assert np.all(reference["k3"] >= 0) and np.all(reference["k2"] >= 0)


@pytest.mark.parametrize("shape", [(1, 4), (5, 8), (3, 2)])
def test_grpo_advantages_match_numpy(shape):
    rng = np.random.default_rng(shape[1])
    rewards = rng.integers(0, 5, shape).astype(np.float64)
    ours = losses.grpo_advantages(rewards)
    assert numerics.scaled_max_error(ours, losses.grpo_advantages_reference(rewards)) < F32
    ties = losses.grpo_advantages(np.ones((2, 4)))
    assert np.all(np.asarray(ties) == 0)


def test_aggregation_and_the_length_bias_of_token_gradients():
    weights = np.zeros((2, 6), np.float32)
    weights[0, :1] = 1  # a 1-token response
    weights[1, :4] = 1  # a 4-token response
    advantages = np.array([1.0, 1.0])
    per_sequence = losses.token_gradient_weights_BT(advantages, weights, "sequence")
    per_token = losses.token_gradient_weights_BT(advantages, weights, "token")
    # per sequence: -A / (B * |y_i|); per token: -A / (total tokens)
    assert numerics.scaled_max_error(per_sequence[0, 0], -1 / 2) < F32
    assert numerics.scaled_max_error(per_sequence[1, :4], np.full(4, -1 / 8)) < F32
    assert numerics.scaled_max_error(per_token[weights > 0], np.full(5, -1 / 5)) < F32
    assert np.all(per_sequence[weights == 0] == 0) and np.all(per_token[weights == 0] == 0)
    values = jnp.asarray(np.arange(12.0).reshape(2, 6))
    assert float(losses.aggregate(values, weights, "sequence")) == pytest.approx(
        (0 + (6 + 7 + 8 + 9) / 4) / 2
    )
    assert float(losses.aggregate(values, weights, "token")) == pytest.approx(
        (0 + 6 + 7 + 8 + 9) / 5
    )
    with pytest.raises(ValueError, match="aggregation"):
        losses.aggregate(values, weights, "mean")


def test_clipped_policy_loss_clips_the_ratio():
    weights = np.ones((1, 1), np.float32)
    old = jnp.zeros((1, 1))
    for log_ratio, advantage, expected in [
        (np.log(1.5), 1.0, -1.2),  # ratio 1.5 > 1.2: clipped for a positive advantage
        (np.log(1.5), -1.0, 1.5),  # not clipped for a negative one (min takes the worse)
        (np.log(0.5), -1.0, 0.8),
        (np.log(1.1), 2.0, -2.2),
    ]:
        loss = losses.clipped_policy_loss(
            jnp.full((1, 1), log_ratio), old, jnp.array([advantage]), weights, 0.2, "token"
        )
        assert float(loss) == pytest.approx(expected, rel=1e-5)
