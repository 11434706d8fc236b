"""RLHF mechanics, for the lesson "rlhf_ppo": PPO and GRPO against a frozen learned reward.

The base model of core.post_training.task is the frozen reference; the proxy reward is fitted
(Bradley-Terry) on the preference pairs of core.post_training.preferences at the same seed;
core.post_training.rlhf trains four runs from the reference: PPO without a KL penalty (the
proxy over-optimisation demo), PPO with the chosen KL coefficient, and GRPO with each
aggregation.

Without the penalty the policy games the proxy: it drifts far from the reference, stops
writing "." and the proxy reward climbs well above the penalised run's. Its true reward does
NOT fall here (a response of prompt letters still matches about one letter in place, the base
model's samples about 0.7), so this is not shown as reward hacking with a true-reward cost:
what is claimed, and proven over seeds, is that the extra proxy reward buys little true
reward (at most TRUE_PER_EXTRA_PROXY per unit).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from core.lm import tokenizer, transformer
from core.post_training import losses, model, preferences, rlhf, task

# The app's defaults, where the claims below are made (tests/test_app_claims.py compares them
# with the app's flags; rlhf_ppo_test proves the claims over seeds).
RLHF_PPO_LESSON = {
    "kl_coef": rlhf.KL_COEF,
    "clip": rlhf.CLIP,
    "steps": rlhf.STEPS,
    "group": rlhf.GROUP,
    "aggregation": "sequence",
    "seed": 0,
}
LAST_STEPS = 5  # "at the end" = the mean over the last steps' batches (one batch is 64 samples)
# Over-optimisation of the proxy at kl_coef 0, with margin (seen over 8 RL seeds on this
# Intel CPU: KL ratio >= 5.5, the share of "."s apart by >= 0.36, >= 0.78 kept): the KL to the
# reference runs to at least DRIFT_KL_RATIO times that of the penalised run, whose samples keep
# ending with "." (the base model's ~90%) while at least ENDS_GAP fewer of the unpenalised
# run's do; and the extra proxy reward buys little true reward: per unit of proxy reward the
# unpenalised run ends above the penalised one, at most TRUE_PER_EXTRA_PROXY units of true
# reward (seen over RL seeds 0-7 at the defaults on this CPU: -1.0 to 0.22, the extra true
# reward -0.21 to +0.17 for +0.14 to +0.78 of proxy; the penalised run's own proxy gain bought
# 0.57-0.9 of true reward per unit). An absolute margin failed here: seed 0 ends 0.17 above.
DRIFT_KL_RATIO = 3.0
KEPT_ENDS_ABOVE = 0.6
ENDS_GAP = 0.25
TRUE_PER_EXTRA_PROXY = 0.4


@dataclasses.dataclass(frozen=True)
class Result:
    base: dict
    train_pairs: preferences.Pairs
    proxy_F: np.ndarray
    proxy_agreement: float
    prompts: list
    runs: list  # rlhf.Run: PPO kl 0, PPO kl chosen, GRPO per sequence, GRPO per token

    def run(self, name: str) -> rlhf.Run:
        return next(r for r in self.runs if r.config.name == name)

    def identities(self) -> list[dict]:
        rows = [
            {"identity": "reference = base model (frozen)", "sha256": model.short_hash(self.base)},
            {"identity": "preference pairs (train)", "sha256": self.train_pairs.hash()},
            {"identity": "proxy reward (frozen)", "sha256": model.short_hash(self.proxy_F)},
            {
                "identity": "prompt set (RL)",
                "sha256": task.dataset_hash({"prompts": task.prompt_tokens(self.prompts)}),
            },
        ]
        for run in self.runs:
            rows.append(
                {
                    "identity": f"{run.config.name}: behaviour policy of the last batch",
                    "sha256": model.short_hash(run.behaviour),
                }
            )
            rows.append(
                {
                    "identity": f"{run.config.name}: trained policy",
                    "sha256": model.short_hash(run.policy),
                }
            )
        return rows


def configs(kl_coef: float, clip: float, aggregation: str) -> list[rlhf.RunConfig]:
    return [
        rlhf.RunConfig("PPO, no KL penalty", "ppo", 0.0, clip, aggregation),
        rlhf.ppo_config(kl_coef, clip, aggregation),
        rlhf.RunConfig("GRPO, per sequence", "grpo", kl_coef, clip, "sequence"),
        rlhf.RunConfig("GRPO, per token", "grpo", kl_coef, clip, "token"),
    ]


def run(seed, kl_coef, clip, steps, group, aggregation, rl_seed=None, only_ppo=False) -> Result:
    """The lesson's four runs (the two PPO ones with ``only_ppo``); ``rl_seed`` (default
    ``seed``) seeds the RL sampling alone, the base model and pairs stay those of ``seed``."""
    base = task.base_params(seed)
    train_pairs, heldout_pairs = preferences.lesson_data(seed)
    proxy_F = rlhf.fit_proxy(train_pairs)
    prompts, _ = task.split_prompts(seed)
    chosen = configs(kl_coef, clip, aggregation)[: 2 if only_ppo else 4]
    key = jax.random.fold_in(jax.random.key(seed if rl_seed is None else rl_seed), 23)
    runs = rlhf.train_runs(base, proxy_F, prompts, chosen, key, steps, group)
    return Result(
        base, train_pairs, proxy_F, rlhf.proxy_agreement(proxy_F, heldout_pairs), prompts, runs
    )


def at_end(run: rlhf.Run, metric: str) -> float:
    return float(np.mean(run.metrics_S[metric][-LAST_STEPS:]))


def over_optimisation_problems(unpenalised: rlhf.Run, penalised: rlhf.Run) -> list[str]:
    """What is wrong with the claim "without the KL penalty the policy over-optimises the
    proxy (drifts, drops '.', raises the proxy further) and the extra proxy reward buys little
    true reward; with it, it does not drift" (empty when it holds)."""
    problems = []
    hacked = unpenalised
    ends0, ends = at_end(hacked, "ends with '.'"), at_end(penalised, "ends with '.'")
    kl0, kl = at_end(hacked, "KL k3 (nats)"), at_end(penalised, "KL k3 (nats)")
    if not kl0 >= DRIFT_KL_RATIO * kl:
        problems.append(f"KL without the penalty {kl0:.2f} is not {DRIFT_KL_RATIO}x {kl:.2f}")
    if not ends >= KEPT_ENDS_ABOVE:
        problems.append(f"with the KL penalty only {ends:.0%} of the samples end with '.'")
    if not ends - ends0 >= ENDS_GAP:
        problems.append(f"'.' ends {ends0:.0%} of the samples without the penalty, {ends:.0%} with")
    if not at_end(hacked, "proxy reward") > hacked.metrics_S["proxy reward"][:LAST_STEPS].mean():
        problems.append("the proxy reward did not rise without the penalty")
    if not at_end(hacked, "proxy reward") > at_end(penalised, "proxy reward"):
        problems.append("without the penalty the proxy did not end above the penalised run's")
    true0, true = at_end(hacked, "true reward"), at_end(penalised, "true reward")
    extra_proxy = at_end(hacked, "proxy reward") - at_end(penalised, "proxy reward")
    if extra_proxy > 0 and not true0 - true <= TRUE_PER_EXTRA_PROXY * extra_proxy:
        problems.append(
            f"without the penalty the true reward ends at {true0:.2f} vs {true:.2f}: the extra "
            f"proxy reward {extra_proxy:.2f} bought true reward (more than "
            f"{TRUE_PER_EXTRA_PROXY} per unit)"
        )
    return problems


def samples(run: rlhf.Run, count: int = 6) -> list[dict]:
    """A few (prompt, response) rows of a run's last batch, with both rewards."""
    batch = run.last_batch
    tokens, weights = batch["tokens_BT"][:count], batch["weights_BT"][:count]
    prompts = [tokenizer.decode(row[: task.PROMPT_TOKENS]) for row in tokens]
    responses = task.responses_of(tokens, weights)
    return [
        {
            "prompt": p,
            "response": r,
            "proxy reward": float(x),
            "true reward": task.true_reward(p, r),
        }
        for p, r, x in zip(prompts, responses, run.last_proxy_B[:count], strict=True)
    ]


def check_pairs(result: Result, group: int, penalised: str, grpo: str) -> dict:
    """(ours, independent reference) for the lesson's check, on the last batches:

    GRPO advantages the run trained with vs NumPy float64 loops over the groups; the proxy
    and true rewards vs the string functions; per-token k3 (from the sampler's and the
    reference's float32 log-probs) vs NumPy float64 log-probs from core.lm's float64 forward;
    the exact per-position KL (losses.exact_kl_BT) vs NumPy float64 full softmaxes; PPO's
    clipped loss of the trained policy on its last batch vs the closed form in float64; the
    per-token gradient weights of each aggregation vs their closed forms."""
    g_run, p_run = result.run(grpo), result.run(penalised)
    out = {}
    # GRPO advantages and the rewards
    b = g_run.last_batch
    out["GRPO advantages"] = (
        b["advantages_B"],
        losses.grpo_advantages_reference(g_run.last_proxy_B.reshape(-1, group)).reshape(-1),
    )
    prompts = [tokenizer.decode(row[: task.PROMPT_TOKENS]) for row in b["tokens_BT"]]
    responses = task.responses_of(b["tokens_BT"], b["weights_BT"])
    out["proxy reward"] = (
        g_run.last_proxy_B,
        rlhf.features_reference(prompts, responses) @ np.asarray(result.proxy_F, np.float64),
    )
    out["true reward"] = (
        np.asarray(rlhf.true_reward_B(b["tokens_BT"], b["weights_BT"])),
        np.array([task.true_reward(p, r) for p, r in zip(prompts, responses, strict=True)]),
    )
    # KL of the penalised PPO run's behaviour policy to the reference, on its last batch
    b = p_run.last_batch
    tokens, w = b["tokens_BT"], b["weights_BT"]
    logits64 = transformer.lm_reference(model.to_model(p_run.behaviour, task.MODEL), tokens)
    ref64 = transformer.lm_reference(model.to_model(result.base, task.MODEL), tokens)
    logp64, reflogp64 = _taken64(logits64, tokens) * w, _taken64(ref64, tokens) * w
    k3 = np.asarray(losses.kl_estimators(b["old_logp_BT"], b["ref_logp_BT"])["k3"]) * w
    k3_64 = losses.kl_estimators_reference(logp64, reflogp64)["k3"] * w
    out["per-token k3"] = (k3, k3_64)
    exact = np.asarray(
        losses.exact_kl_BT(
            model.logits_BTV(p_run.behaviour, tokens), model.logits_BTV(result.base, tokens)
        )
    )
    exact64 = losses.exact_kl_reference(logits64, ref64)
    out["exact KL per position"] = (exact * w, exact64 * w)
    # k3 is unbiased, exactly: its expectation over the whole vocabulary under the behaviour
    # policy (the project's k3 on every token) vs the closed form q - p + p log(p/q), summed
    # in float64 (which is the exact KL when every token counts)
    ours_e, closed_e = k3_expectation_pair(
        model.logits_BTV(p_run.behaviour, tokens),
        model.logits_BTV(result.base, tokens),
        logits64,
        ref64,
    )
    out["k3's expectation vs its closed form"] = (ours_e * w, closed_e * w)
    # PPO's clipped loss: the trained policy against the batch's behaviour policy
    trained64 = _taken64(
        transformer.lm_reference(model.to_model(p_run.policy, task.MODEL), tokens), tokens
    )
    agg, clip = p_run.config.aggregation, p_run.config.clip
    ours = losses.clipped_policy_loss(
        model.next_token_logprobs_BT(model.logits_BTV(p_run.policy, tokens), tokens),
        b["old_logp_BT"],
        b["advantages_B"],
        w,
        clip,
        agg,
    )
    out["PPO clipped loss"] = (
        float(ours),
        clipped_loss_reference(trained64, logp64, b["advantages_B"], w, clip, agg),
    )
    # gradient weight per token, each aggregation, on the GRPO batch (the length bias)
    b = g_run.last_batch
    lengths = b["weights_BT"].sum(1)
    for agg in losses.AGGREGATIONS:
        grad = losses.token_gradient_weights_BT(b["advantages_B"], b["weights_BT"], agg)
        if agg == "sequence":  # -A_i / (B |y_i|) on each of its tokens
            closed = -b["advantages_B"] / (len(lengths) * lengths)
        else:  # -A_i / (tokens in the batch)
            closed = -b["advantages_B"] / lengths.sum()
        out[f"gradient weights per {agg}"] = (grad, closed[:, None] * b["weights_BT"])
    out["k3 minus exact KL (mean, standard errors)"] = _bias_in_standard_errors(k3, exact64, w)
    return out


K3_LOGP_FLOOR = -80.0  # tokens of log-probability below this are left out of the expectation
# on both sides: exp(-log ratio) would overflow float32 there (exp(88) is its largest)


def k3_expectation_pair(logits_BTV, ref_logits_BTV, logits64_BTV, ref64_BTV):
    """(ours, closed form): E_pi[k3] at every position, ours = sum_v pi_v k3_v with k3 from
    losses.kl_estimators on every token v (float32), the closed form sum_v (q_v - p_v +
    p_v log(p_v / q_v)) in NumPy float64 from float64 logits; both over the tokens whose
    float32 log-probability is above K3_LOGP_FLOOR (over all of them, the closed form is
    the exact KL: sum q = sum p = 1). Unlike a sample mean, this does not depend on the
    estimator's tails, which grow heavy as the policy leaves the reference."""
    logp = jax.nn.log_softmax(logits_BTV, axis=-1)
    ref = jax.nn.log_softmax(ref_logits_BTV, axis=-1)
    kept = np.asarray(logp) > K3_LOGP_FLOOR
    k3 = losses.kl_estimators(logp, ref)["k3"]
    ours = np.sum(np.where(kept, np.asarray(jax.numpy.exp(logp) * k3), 0.0), axis=-1)

    def log_softmax64(z):
        z = np.asarray(z, np.float64)
        z = z - z.max(-1, keepdims=True)
        return z - np.log(np.exp(z).sum(-1, keepdims=True))

    p64, q64 = log_softmax64(logits64_BTV), log_softmax64(ref64_BTV)
    closed = np.exp(q64) - np.exp(p64) + np.exp(p64) * (p64 - q64)
    return ours, np.sum(np.where(kept, closed, 0.0), axis=-1)


def _taken64(logits64, tokens):
    z = logits64 - logits64.max(-1, keepdims=True)
    log_probs = z - np.log(np.exp(z).sum(-1, keepdims=True))
    taken = np.take_along_axis(log_probs[:, :-1], np.asarray(tokens)[:, 1:, None], -1)[..., 0]
    return np.pad(taken, ((0, 0), (0, 1)))


def clipped_loss_reference(logp_BT, old_logp_BT, advantages_B, weights_BT, clip, aggregation):
    """-aggregate(min(r A, clip(r, 1 - e, 1 + e) A)) in NumPy float64, one response at a time."""
    per_sequence, total, count = [], 0.0, 0
    for logp, old, a, w in zip(
        np.asarray(logp_BT, np.float64),
        np.asarray(old_logp_BT, np.float64),
        advantages_B,
        weights_BT,
        strict=True,
    ):
        ratio = np.exp(logp - old)[w > 0]
        surrogate = np.minimum(ratio * a, np.clip(ratio, 1 - clip, 1 + clip) * a)
        per_sequence.append(surrogate.mean())
        total, count = total + surrogate.sum(), count + len(surrogate)
    return -(np.mean(per_sequence) if aggregation == "sequence" else total / count)


def _bias_in_standard_errors(k3, exact, w):
    """(mean of k3 - exact KL over the response tokens) / its standard error. Shown, not
    judged: near the reference it is about a standard normal draw, but as the policy leaves
    the reference k3's tails grow heavy (exp(-log ratio) on tokens the reference likes and
    the policy rarely samples) and the sample's standard error understates them (seen: -11
    at --kl-coef 0 --clip 0.5 --steps 100 --group 16). k3_expectation_pair checks the
    unbiasedness exactly instead."""
    d = (np.asarray(k3, np.float64) - exact)[w > 0]
    return float(d.mean() / (d.std(ddof=1) / np.sqrt(len(d)) + 1e-30))
