"""RLHF on the byte LM: a frozen learned reward, PPO with a KL penalty, and GRPO.

The **proxy reward** is a reward model learned from the preference pairs of
core.post_training.preferences (the pairs the reward-model and DPO lessons use): a linear
Bradley-Terry model on two bag-of-letters features of a response,

    r_phi(x, y) = w_in * (letters of y that occur in the prompt x)
                + w_out * (other tokens of y, "." excluded)

fitted by Newton's method in NumPy float64 (``fit_proxy``). On the base model's samples it
agrees with the ground truth (``task.true_reward``) well above chance, since letters from the
prompt are the only ones that can be in place; but it sees neither order nor the length that
earns the format point, so a policy that maximises it alone learns to write the longest
responses it can out of prompt letters and to stop writing "." (over-optimising the proxy;
its true reward does not fall here, it just does not follow the proxy: see the rlhf_ppo
lesson).

One compiled program (``train_runs``) trains R runs at once (vmapped over their
hyperparameters, which are traced): each step samples G responses to each of P prompts from
the current policy (the **behaviour policy** of that batch), scores them with the frozen proxy
and takes EPOCHS full-batch Adam steps on the clipped surrogate (losses.clipped_policy_loss):

    PPO   reward R = r_phi - kl_coef * sum_t k1_t (the KL penalty in the reward, per token k1
          to the frozen reference), advantage R - V(x) (whitened over the batch), V a linear
          value head on the frozen reference's features of the prompt, trained by MSE;
    GRPO  advantage = (r_phi - group mean) / group std over the G samples of a prompt
          (losses.grpo_advantages), no value network; the KL is a loss term,
          kl_coef * aggregate(k3_t).

Glossary: R runs, S steps, P prompts per step, G samples per prompt, B = P * G sequences,
T positions, D width, F proxy features.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core.post_training import cache, losses, model, preferences, task

METHODS = ("ppo", "grpo")
BATCH = task.SAMPLE_CHUNK  # responses per step: sampling reuses task.sample's compiled program
EPOCHS = 4  # Adam steps on each sampled batch (all but the first off-policy: ratio != 1)
LEARNING_RATE = 3e-3
VALUE_COEF = 0.5
LETTER_IDS = np.array([ord(c) for c in task.ALPHABET], np.int32)
FEATURES = ("letters from the prompt", "other tokens")
NEWTON_STEPS = 30
RIDGE = 1e-6  # keeps the Newton system invertible if a feature never varies in the pairs
# The RLHF lesson's PPO run at its defaults (the DPO lesson compares its policy with this one)
KL_COEF = 0.2
CLIP = 0.2
STEPS = 30
GROUP = 4


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One run of ``train_runs``: method, KL coefficient, clip epsilon, aggregation."""

    name: str
    method: str = "ppo"
    kl_coef: float = 0.1
    clip: float = 0.2
    aggregation: str = "sequence"

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"{self.name}: method must be one of {METHODS}, got {self.method!r}")
        if self.aggregation not in losses.AGGREGATIONS:
            raise ValueError(
                f"{self.name}: aggregation must be one of {losses.AGGREGATIONS}, "
                f"got {self.aggregation!r}"
            )
        if self.kl_coef < 0:
            raise ValueError(f"{self.name}: kl_coef must be >= 0, got {self.kl_coef}")
        if not 0 < self.clip < 1:
            raise ValueError(f"{self.name}: clip epsilon must be in (0, 1), got {self.clip}")

    def traced(self) -> dict:
        return {
            "kl_coef": jnp.float32(self.kl_coef),
            "clip": jnp.float32(self.clip),
            "is_grpo": jnp.float32(self.method == "grpo"),
            "per_token": jnp.float32(self.aggregation == "token"),
        }


def group_size_problem(group: int) -> str | None:
    """Why ``group`` samples per prompt cannot be used (None when they can)."""
    if BATCH % group:
        return f"{group} samples per prompt do not divide the batch of {BATCH} responses"
    if group < 2:
        return (
            f"a GRPO group of {group} sample has no spread: its standard deviation is 0 and "
            "every advantage (r - mean) / std is 0 (or 0/0): take at least 2 samples per prompt"
        )
    return None


# --- what a response is worth ----------------------------------------------------------------


def response_mask_BT(weights_BT):
    """1 at every response token (weights_BT marks the position BEFORE each one)."""
    w = jnp.asarray(weights_BT)
    return jnp.pad(w[:, :-1], ((0, 0), (1, 0)))


@jax.jit
def features_BF(tokens_BT, weights_BT):
    """The proxy's features (float32): response letters that occur among the prompt's
    letters, and every other response token except "."."""
    tokens = jnp.asarray(tokens_BT)
    mask = response_mask_BT(weights_BT) > 0
    is_letter = jnp.any(tokens[..., None] == LETTER_IDS, axis=-1)
    in_prompt = jnp.any(tokens[:, :, None] == tokens[:, None, : task.PROMPT_LETTERS], axis=-1)
    from_prompt = mask & is_letter & in_prompt
    other = mask & ~from_prompt & (tokens != task.END_ID)
    return jnp.stack([jnp.sum(from_prompt, 1), jnp.sum(other, 1)], axis=1).astype(jnp.float32)


@jax.jit
def proxy_reward_B(proxy_F, tokens_BT, weights_BT):
    """r_phi(x, y) = features . proxy_F."""
    return features_BF(tokens_BT, weights_BT) @ proxy_F


@jax.jit
def true_reward_B(tokens_BT, weights_BT):
    """task.true_reward on token ids (bytes), inside a compiled program: response tokens in
    place that equal the reversed prompt's letters, +1 for 3 letters and "." (4 tokens)."""
    tokens = jnp.asarray(tokens_BT)
    mask = response_mask_BT(weights_BT)
    p, n = task.PROMPT_TOKENS, task.PROMPT_LETTERS
    response = tokens[:, p : p + n]
    target = tokens[:, :n][:, ::-1]
    matches = jnp.sum((response == target) * mask[:, p : p + n], axis=1)
    well_formed = (jnp.sum(mask, 1) == n + 1) & (tokens[:, p + n] == task.END_ID)
    return matches + well_formed.astype(jnp.float32)


def features_reference(prompts, responses) -> np.ndarray:
    """features_BF from the strings (NumPy float64): the same counts, character by character."""
    rows = []
    for prompt, response in zip(prompts, responses, strict=True):
        letters = set(prompt[: task.PROMPT_LETTERS])
        chars = response[:-1] if response.endswith(task.END) else response
        from_prompt = sum(c in letters and c in task.ALPHABET for c in chars)
        rows.append([from_prompt, len(chars) - from_prompt - chars.count(task.END)])
    return np.array(rows, np.float64)


def fit_proxy(pairs: preferences.Pairs) -> np.ndarray:
    """The Bradley-Terry maximum-likelihood weights proxy_F (NumPy float64, Newton's method):
    P(y_w > y_l) = sigmoid((f(y_w) - f(y_l)) . w) on the pairs' labels."""
    diff = np.asarray(
        features_BF(pairs.tokens_w_BT, pairs.weights_w_BT)
        - features_BF(pairs.tokens_l_BT, pairs.weights_l_BT),
        np.float64,
    )
    w = np.zeros(diff.shape[1])
    for _ in range(NEWTON_STEPS):
        p = 1.0 / (1.0 + np.exp(-diff @ w))
        grad = diff.T @ (1.0 - p)
        hessian = (diff * (p * (1 - p))[:, None]).T @ diff + RIDGE * np.eye(len(w))
        w = w + np.linalg.solve(hessian, grad)
    return w


def proxy_agreement(proxy_F, pairs: preferences.Pairs) -> float:
    """Share of pairs with different true rewards that the proxy orders like r*."""
    r_w = np.asarray(proxy_reward_B(jnp.float32(proxy_F), pairs.tokens_w_BT, pairs.weights_w_BT))
    r_l = np.asarray(proxy_reward_B(jnp.float32(proxy_F), pairs.tokens_l_BT, pairs.weights_l_BT))
    differ = pairs.true_w_B != pairs.true_l_B
    return float(np.mean((np.sign(r_w - r_l) == np.sign(pairs.true_w_B - pairs.true_l_B))[differ]))


# --- one compiled program for R runs ---------------------------------------------------------


def _loss(trainable, batch, h):
    """Clipped surrogate (+ the GRPO KL term, + the PPO value loss), and the clip fraction."""
    logp = model.token_logprobs_BT(trainable["policy"], batch["tokens_BT"])
    w = batch["weights_BT"]
    args = (logp, batch["old_logp_BT"], batch["advantages_B"], w, h["clip"])
    by_sequence = losses.clipped_policy_loss(*args, "sequence")
    by_token = losses.clipped_policy_loss(*args, "token")
    k3 = losses.kl_estimators(logp, batch["ref_logp_BT"])["k3"]
    kl_sequence, kl_token = losses.aggregate(k3, w, "sequence"), losses.aggregate(k3, w, "token")
    t = h["per_token"]
    policy_loss = t * by_token + (1 - t) * by_sequence
    kl_loss = t * kl_token + (1 - t) * kl_sequence
    value_B = batch["prompt_features_BD"] @ trainable["value_D"] + trainable["value_b"]
    value_loss = jnp.mean(jnp.square(value_B - batch["returns_B"]))
    g = h["is_grpo"]
    total = policy_loss + g * h["kl_coef"] * kl_loss + (1 - g) * VALUE_COEF * value_loss
    ratio = jnp.exp(logp - batch["old_logp_BT"])
    clipped = (jnp.abs(ratio - 1) > h["clip"]) * w
    return total, jnp.sum(clipped) / jnp.maximum(jnp.sum(w), 1)


def _optimizer(learning_rate):
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adam(learning_rate))


@functools.partial(jax.jit, static_argnames=("group",))
def update(trainable, opt_state, frozen, sampled, h, learning_rate, group):
    """One RL step on a sampled batch: score it (frozen proxy, KL to the frozen reference),
    the advantages (PPO: R - V, GRPO: group-normalised), then EPOCHS Adam steps on _loss.
    ``sampled``: tokens_BT, weights_BT, old_logp_BT (from the behaviour policy, the policy
    in ``trainable`` now), with the G samples of a prompt in consecutive rows."""
    ref = frozen["reference"]
    tokens, weights, old_logp = sampled["tokens_BT"], sampled["weights_BT"], sampled["old_logp_BT"]
    hidden = model.hidden_BTD(ref, tokens)  # one reference pass: log-probs and value features
    ref_logp = model.next_token_logprobs_BT(hidden @ ref["head"], tokens) * weights
    features = hidden[:, task.PROMPT_TOKENS - 1]  # depends on the prompt only
    k1_B = jnp.sum((old_logp - ref_logp) * weights, axis=1)
    k3_B = jnp.sum(losses.kl_estimators(old_logp, ref_logp)["k3"] * weights, axis=1)
    proxy_B = proxy_reward_B(frozen["proxy_F"], tokens, weights)
    returns_B = proxy_B - h["kl_coef"] * k1_B
    value_B = features @ trainable["value_D"] + trainable["value_b"]
    ppo_adv = returns_B - value_B
    ppo_adv = (ppo_adv - jnp.mean(ppo_adv)) / (jnp.std(ppo_adv) + 1e-6)
    grpo_adv = losses.grpo_advantages(proxy_B.reshape(-1, group)).reshape(-1)
    advantages = h["is_grpo"] * grpo_adv + (1 - h["is_grpo"]) * ppo_adv
    batch = {
        "tokens_BT": tokens,
        "weights_BT": weights,
        "old_logp_BT": old_logp,
        "ref_logp_BT": ref_logp,
        "advantages_B": jax.lax.stop_gradient(advantages),
        "returns_B": returns_B,
        "prompt_features_BD": features,
    }
    tx = _optimizer(learning_rate)

    def epoch(carry, _):
        trainable, opt_state = carry
        (_, clip_fraction), grads = jax.value_and_grad(_loss, has_aux=True)(trainable, batch, h)
        updates, opt_state = tx.update(grads, opt_state, trainable)
        return (optax.apply_updates(trainable, updates), opt_state), clip_fraction

    (trainable, opt_state), clip_fraction = jax.lax.scan(
        epoch, (trainable, opt_state), None, EPOCHS
    )
    mask = response_mask_BT(weights)
    metrics = {
        "proxy reward": jnp.mean(proxy_B),
        "true reward": jnp.mean(true_reward_B(tokens, weights)),
        "KL k1 (nats)": jnp.mean(k1_B),
        "KL k3 (nats)": jnp.mean(k3_B),
        "response letters": jnp.mean(jnp.sum(mask * (tokens != task.END_ID), 1)),
        "ends with '.'": jnp.mean(jnp.any((tokens == task.END_ID) * mask, 1)),
        "clip fraction": clip_fraction[-1],
    }
    return trainable, opt_state, metrics, {**batch, "proxy_B": proxy_B}


@dataclasses.dataclass(frozen=True)
class Run:
    """What one run did: metrics per step (before each update), the trained policy, the
    behaviour policy of the last batch, and that batch (tokens, log-probs, advantages)."""

    config: RunConfig
    metrics_S: dict
    policy: dict
    behaviour: dict
    last_batch: dict
    last_proxy_B: np.ndarray


def train_runs(reference, proxy_F, prompts, configs, key, steps: int, group: int, lr=LEARNING_RATE):
    """Train every config from ``reference`` (its key: ``key`` folded with a checksum of the
    config's name, so a run does not depend on the others in the list): each step
    samples ``group`` responses to each of BATCH // group prompts, then ``update``; every run
    and step reuses the same two compiled programs. Returns a list of Run."""
    if problem := group_size_problem(group):
        raise ValueError(problem)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    frozen = {"reference": reference, "proxy_F": jnp.asarray(proxy_F, jnp.float32)}
    prompts_NP = task.prompt_tokens(prompts)
    runs = []
    for config in configs:
        run_key = jax.random.fold_in(key, zlib.crc32(config.name.encode()))
        spec = {  # everything the run depends on (the on-disk cache's key)
            "reference": model.content_hash(reference),
            "proxy_F": model.content_hash(frozen["proxy_F"]),
            "prompts": model.content_hash(prompts_NP),
            "config": dataclasses.asdict(config),
            "key": model.content_hash(jax.random.key_data(run_key)),
            "steps": int(steps),
            "group": int(group),
            "learning_rate": float(lr),
        }
        out, _ = cache.cached(
            "rlhf.train_runs",
            spec,
            lambda c=config, k=run_key: _train_run(frozen, prompts_NP, c, k, steps, group, lr),
        )
        batch = out["last_batch"]
        runs.append(
            Run(config, out["metrics_S"], out["policy"], out["behaviour"], batch, batch["proxy_B"])
        )
    return runs


def _train_run(frozen, prompts_NP, config, run_key, steps, group, lr) -> dict:
    rng = np.random.default_rng(np.asarray(jax.random.key_data(run_key)))
    h = config.traced()
    trainable = {
        "policy": frozen["reference"],
        "value_D": jnp.zeros(task.MODEL.width, jnp.float32),
        "value_b": jnp.zeros((), jnp.float32),
    }
    opt_state = _optimizer(lr).init(trainable)
    history = []
    for s in range(steps):
        picks = rng.choice(len(prompts_NP), BATCH // group, replace=False)
        prompt_BP = np.repeat(prompts_NP[picks], group, axis=0)
        step_key = jax.random.fold_in(run_key, s)
        tokens, weights, logp = task.sample_tokens(trainable["policy"], prompt_BP, step_key)
        sampled = {"tokens_BT": tokens, "weights_BT": weights, "old_logp_BT": logp}
        behaviour = trainable["policy"]
        trainable, opt_state, metrics, batch = update(
            trainable, opt_state, frozen, sampled, h, jnp.float32(lr), group
        )
        history.append(metrics)
    history = jax.device_get(history)  # one transfer per run: the steps run ahead
    return {
        "metrics_S": {k: np.array([m[k] for m in history], np.float64) for k in history[0]},
        "policy": jax.tree.map(np.asarray, trainable["policy"]),
        "behaviour": jax.tree.map(np.asarray, behaviour),
        "last_batch": jax.tree.map(np.asarray, batch),
    }


def ppo_config(kl_coef: float = KL_COEF, clip: float = CLIP, aggregation="sequence") -> RunConfig:
    """The PPO run with a KL penalty (named by its coefficient)."""
    return RunConfig(f"PPO, KL coef {kl_coef:g}", "ppo", kl_coef, clip, aggregation)


def rlhf_policy(reference, pairs: preferences.Pairs, prompts, seed: int) -> tuple[dict, Run]:
    """(policy, run): PPO at the RLHF lesson's defaults against the proxy fitted to ``pairs``,
    from ``reference``: the same run as that lesson's at the same seed."""
    key = jax.random.fold_in(jax.random.key(seed), 23)
    run = train_runs(reference, fit_proxy(pairs), prompts, [ppo_config()], key, STEPS, GROUP)[0]
    return run.policy, run
