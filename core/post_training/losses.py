"""The objectives of post-training, each beside a NumPy float64 reference of its closed form.

    masked_token_loss     SFT: mean -log p over the tokens weights_BT marks (the response)
    bradley_terry_loss    reward model: mean -log sigmoid(r(y_w) - r(y_l))
    dpo_loss              mean -log sigmoid(beta * ((logpi_w - logref_w) - (logpi_l - logref_l)))
    kl_estimators         per-token KL(pi || ref) estimates k1, k2, k3 from sampled tokens
    exact_kl_BT           the per-token KL over the whole vocabulary (what k1 and k3 estimate)
    grpo_advantages       (r - mean of the group) / (std of the group + eps)
    clipped_policy_loss   PPO's clipped surrogate, aggregated per sequence or per token

Glossary: B batch (sequences), G samples per prompt (a group), T positions, V vocabulary.
Log-probabilities are natural logs (nats).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from core.post_training import model

AGGREGATIONS = ("sequence", "token")
GRPO_EPSILON = 1e-4  # added to the group std (TRL's default): equal rewards give 0, not 0/0


# --- SFT -------------------------------------------------------------------------------------


@jax.jit
def token_loss_from_logits(logits_BTV, tokens_BT, weights_BT):
    """Mean next-token cross-entropy (position t predicts token t+1) over the positions
    weights_BT marks: divided by the number of marked tokens, so prompt and padding add
    nothing and dilute nothing."""
    nll = -model.gather_logprobs(logits_BTV[:, :-1], jnp.asarray(tokens_BT)[:, 1:])
    w = jnp.asarray(weights_BT)[:, :-1]
    return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)


def masked_token_loss(params, _frozen, batch):
    """token_loss_from_logits of the model on batch["tokens_BT"], batch["weights_BT"]."""
    logits = model.logits_BTV(params, batch["tokens_BT"])
    return token_loss_from_logits(logits, batch["tokens_BT"], batch["weights_BT"])


def logits_gradient_BTV(logits_BTV, tokens_BT, weights_BT) -> np.ndarray:
    """d loss / d logits at every position (jax.grad of token_loss_from_logits): exactly 0
    wherever the mask is 0, since those positions never enter the loss."""
    grad = jax.grad(token_loss_from_logits)(jnp.asarray(logits_BTV), tokens_BT, weights_BT)
    return np.asarray(grad)


def masked_token_loss_reference(logits_BTV, tokens_BT, weights_BT) -> float:
    """The same loss in NumPy float64 from logits, walking the marked positions one by one."""
    logits = np.asarray(logits_BTV, np.float64)
    tokens, weights = np.asarray(tokens_BT), np.asarray(weights_BT)
    total, count = 0.0, 0
    for b, t in zip(*np.nonzero(weights > 0), strict=True):
        row = logits[b, t]
        log_norm = row.max() + np.log(np.sum(np.exp(row - row.max())))
        total += log_norm - row[tokens[b, t + 1]]
        count += 1
    return total / max(count, 1)


# --- preferences -----------------------------------------------------------------------------


@jax.jit
def bradley_terry_loss(reward_w_B, reward_l_B):
    """Mean -log sigmoid(r_w - r_l): the Bradley-Terry negative log-likelihood of the
    observed preferences (y_w preferred to y_l)."""
    return jnp.mean(jax.nn.softplus(-(reward_w_B - reward_l_B)))


def bradley_terry_reference(reward_w_B, reward_l_B) -> float:
    """mean log(1 + exp(-(r_w - r_l))) in NumPy float64 (logaddexp keeps it finite)."""
    margin = np.asarray(reward_w_B, np.float64) - np.asarray(reward_l_B, np.float64)
    return float(np.mean(np.logaddexp(0.0, -margin)))


@jax.jit
def dpo_loss(logp_w_B, logp_l_B, ref_w_B, ref_l_B, beta):
    """(mean DPO loss, implicit reward margins_B). The implicit reward of a response is
    beta * (log pi(y) - log pi_ref(y)); the margin is that of y_w minus that of y_l."""
    margins = beta * ((logp_w_B - ref_w_B) - (logp_l_B - ref_l_B))
    return jnp.mean(jax.nn.softplus(-margins)), margins


def dpo_reference(logp_w_B, logp_l_B, ref_w_B, ref_l_B, beta) -> tuple[float, np.ndarray]:
    """The DPO loss and margins in NumPy float64, from the formula as written:
    -log sigmoid(beta * ((log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l))))."""
    f = lambda x: np.asarray(x, np.float64)  # noqa: E731
    margins = beta * ((f(logp_w_B) - f(ref_w_B)) - (f(logp_l_B) - f(ref_l_B)))
    sigmoid = 1.0 / (1.0 + np.exp(-margins))
    return float(np.mean(-np.log(sigmoid))), margins


# --- KL to the reference ---------------------------------------------------------------------


@jax.jit
def kl_estimators(logp_BT, ref_logp_BT):
    """Per-token estimates of KL(pi || ref) from tokens SAMPLED FROM pi, with
    log_ratio = log pi(token) - log ref(token):

        k1 = log_ratio                            unbiased, can be negative
        k2 = log_ratio^2 / 2                      biased, always >= 0
        k3 = exp(-log_ratio) - 1 + log_ratio      unbiased, always >= 0 (Schulman's k3)
    """
    log_ratio = logp_BT - ref_logp_BT
    return {
        "k1": log_ratio,
        "k2": 0.5 * jnp.square(log_ratio),
        "k3": jnp.expm1(-log_ratio) + log_ratio,
    }


def kl_estimators_reference(logp_BT, ref_logp_BT) -> dict[str, np.ndarray]:
    """k1, k2, k3 in NumPy float64: log(p/q), log(p/q)^2 / 2, q/p - 1 - log(q/p)."""
    p, q = np.exp(np.asarray(logp_BT, np.float64)), np.exp(np.asarray(ref_logp_BT, np.float64))
    return {"k1": np.log(p / q), "k2": 0.5 * np.log(p / q) ** 2, "k3": q / p - 1 - np.log(q / p)}


@jax.jit
def exact_kl_BT(logits_BTV, ref_logits_BTV):
    """KL(pi(. | prefix) || ref(. | prefix)) at every position, summed over the vocabulary."""
    logp = jax.nn.log_softmax(logits_BTV, axis=-1)
    ref = jax.nn.log_softmax(ref_logits_BTV, axis=-1)
    return jnp.sum(jnp.exp(logp) * (logp - ref), axis=-1)


def exact_kl_reference(logits_BTV, ref_logits_BTV) -> np.ndarray:
    """sum_v p_v log(p_v / q_v) in NumPy float64 from the two sets of logits."""

    def probs(logits):
        z = np.asarray(logits, np.float64)
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    p, q = probs(logits_BTV), probs(ref_logits_BTV)
    return np.sum(np.where(p > 0, p * np.log(p / q), 0.0), axis=-1)


# --- policy gradients ------------------------------------------------------------------------


@jax.jit
def grpo_advantages(rewards_BG, epsilon: float = GRPO_EPSILON):
    """Group-normalised advantages: each of the G rewards of a prompt minus the group mean,
    divided by the group's standard deviation (ddof=1, as torch.std and TRL) + epsilon."""
    rewards = jnp.asarray(rewards_BG, jnp.float32)
    mean = jnp.mean(rewards, axis=1, keepdims=True)
    std = jnp.std(rewards, axis=1, keepdims=True, ddof=1)
    return (rewards - mean) / (std + epsilon)


def grpo_advantages_reference(rewards_BG, epsilon: float = GRPO_EPSILON) -> np.ndarray:
    """The same by explicit loops in NumPy float64 (sample std with G - 1)."""
    rewards = np.asarray(rewards_BG, np.float64)
    out = np.empty_like(rewards)
    for b, group in enumerate(rewards):
        mean = sum(group) / len(group)
        std = np.sqrt(sum((r - mean) ** 2 for r in group) / (len(group) - 1))
        out[b] = (group - mean) / (std + epsilon)
    return out


def aggregate(values_BT, weights_BT, aggregation: str):
    """Mean of per-token values over the marked tokens, two ways:

    "sequence": the mean within each sequence, then the mean over sequences (each sequence
                weighs the same, so a token of a long sequence weighs less);
    "token":    the sum over every marked token / their count (each token weighs the same).
    """
    if aggregation == "sequence":
        per_sequence = jnp.sum(values_BT * weights_BT, 1) / jnp.maximum(jnp.sum(weights_BT, 1), 1)
        return jnp.mean(per_sequence)
    if aggregation == "token":
        return jnp.sum(values_BT * weights_BT) / jnp.maximum(jnp.sum(weights_BT), 1.0)
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")


@functools.partial(jax.jit, static_argnames=("aggregation",))
def clipped_policy_loss(logp_BT, old_logp_BT, advantages_B, weights_BT, clip, aggregation):
    """PPO's clipped surrogate, negated (a loss): per token
    -min(ratio * A, clip(ratio, 1 - clip, 1 + clip) * A), ratio = pi / pi_old, aggregated
    over the response tokens (``aggregate``). One advantage per sequence."""
    ratio = jnp.exp(logp_BT - old_logp_BT)
    adv = advantages_B[:, None]
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip, 1 + clip) * adv)
    return -aggregate(surrogate, weights_BT, aggregation)


def token_gradient_weights_BT(advantages_B, weights_BT, aggregation: str) -> np.ndarray:
    """d loss / d log pi(token) of clipped_policy_loss at ratio 1 (the first step), measured
    with jax.grad: how hard each response token is pushed, by sequence and aggregation."""
    weights = jnp.asarray(weights_BT, jnp.float32)
    advantages = jnp.asarray(advantages_B, jnp.float32)
    zeros = jnp.zeros_like(weights)
    grad = jax.grad(clipped_policy_loss)(zeros, zeros, advantages, weights, 0.2, aggregation)
    return np.asarray(grad)
