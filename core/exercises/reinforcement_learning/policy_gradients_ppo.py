"""Exercises of the lesson policy_gradients_ppo: PPO's clipped objective (predict) and GAE
over a rollout of N environments (code)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.reinforcement_learning._shared import PHASE, _array_test


class ClippedObjective(PredictItem):
    """PPO's objective per sample is min(rho A, clip(rho, 1 - eps, 1 + eps) A): the clip
    takes effect only where it lowers the objective (a ratio past the range in the
    direction the advantage favours)."""

    id = "reinforcement_learning.policy_gradients_ppo.clipped_objective"
    phase = PHASE
    lesson = "policy_gradients_ppo"
    title = "PPO's clipped objective of five samples"
    units = ""  # the advantages' units (a return's)
    rel_tol = 0.0
    # The numbers have two decimals: the exact value is computable by hand, and each planted
    # mistake moves the mean by at least 0.01 (a ratio 0.1 past the range, |A| >= 0.5, / 5).
    abs_tol = 0.005
    SAMPLES = ("favoured, above", "disfavoured, below", "disfavoured, above", "favoured, below")
    hints = (
        "The objective of one sample is min(ρ·A, clip(ρ, 1 − ε, 1 + ε)·A), and "
        "ppo.clipped_surrogate returns the mean over the samples. Work sample by sample.",
        "With A > 0 a larger ρ is better, so the clip caps it at (1 + ε)·A; a ρ below 1 − ε "
        "is NOT raised to 1 − ε (min keeps the smaller ρ·A). With A < 0 it is the mirror "
        "image: a ρ below 1 − ε counts as (1 − ε)·A, a ρ above 1 + ε counts in full.",
        "Per sample: A ≥ 0 gives A·min(ρ, 1 + ε); A < 0 gives A·max(ρ, 1 − ε). Add the five "
        "and divide by 5.",
    )

    def params(self, generator):
        eps = float(generator.choice([0.1, 0.2, 0.3]))
        while True:  # a mean well away from 0: the float32 library and the float64 closed
            # form then agree to far better than the tolerance, relatively too
            ratios, advantages = [], []
            for kind in (*self.SAMPLES, "inside"):
                size = 0.25 * int(generator.integers(2, 11))  # |A| in 0.5, 0.75, ..., 2.5
                past = 0.05 * int(generator.integers(2, 11))  # 0.1 .. 0.5 past the range
                if kind == "inside":
                    inside = round(100 * eps) - 2  # hundredths, 0.02 clear of either end
                    ratio = 1.0 + 0.01 * int(generator.integers(-inside, inside + 1))
                    sign = float(generator.choice([-1.0, 1.0]))
                else:
                    above = kind.endswith("above")
                    ratio = 1.0 + eps + past if above else 1.0 - eps - past
                    sign = 1.0 if kind.startswith("favoured") else -1.0
                ratios.append(round(ratio, 2))
                advantages.append(sign * size)
            order = generator.permutation(5)
            ratios = [ratios[i] for i in order]
            advantages = [advantages[i] for i in order]
            if abs(self._objective(ratios, advantages, eps)) >= 0.25:
                break
        return {"clip_eps": eps, "ratios": ratios, "advantages": advantages}

    @staticmethod
    def _objective(ratios, advantages, eps, mistake: str = "") -> float:
        rho, a = np.asarray(ratios, np.float64), np.asarray(advantages, np.float64)
        clipped = np.clip(rho, 1.0 - eps, 1.0 + eps)
        per_sample = {
            "": np.minimum(rho * a, clipped * a),
            "unclipped": rho * a,
            "always clipped": clipped * a,
            "max": np.maximum(rho * a, clipped * a),
        }[mistake]
        return float(per_sample.mean())

    def prompt(self, params) -> str:
        rows = "\n".join(
            f"| {i + 1} | {r:.2f} | {a:+g} |"
            for i, (r, a) in enumerate(zip(params["ratios"], params["advantages"], strict=True))
        )
        return (
            f"A minibatch of **5 samples**, clip range **ε = {params['clip_eps']:g}**; "
            "ρ = π_new(a|s) / π_old(a|s) is each sample's probability ratio and A its "
            "advantage:\n\n"
            "| sample | ratio ρ | advantage A |\n|---|---|---|\n"
            f"{rows}\n\n"
            "**Predict the value of PPO's clipped objective for this minibatch** (what "
            "`ppo.clipped_surrogate(ratio, advantage, eps)` returns: the objective PPO "
            "maximizes, before any entropy or value term); the lesson's library then computes "
            "it."
        )

    def live(self, params) -> float:
        import jax.numpy as jnp

        from core.rl import ppo

        ratio = jnp.asarray(params["ratios"], jnp.float32)
        advantage = jnp.asarray(params["advantages"], jnp.float32)
        return float(ppo.clipped_surrogate(ratio, advantage, params["clip_eps"]))

    def derive(self, params):
        eps = params["clip_eps"]
        lines, total = [], 0.0
        for i, (r, a) in enumerate(zip(params["ratios"], params["advantages"], strict=True)):
            # the closed form by the advantage's sign (the min of the two products)
            used = min(r, 1 + eps) if a >= 0 else max(r, 1 - eps)
            clipped = used != r
            total += used * a
            why = (
                f"clipped to {used:g}: past 1 {'+' if a >= 0 else '−'} ε in the direction A favours"
                if clipped
                else (
                    "inside the range"
                    if 1 - eps <= r <= 1 + eps
                    else "outside the range but counted in full: min keeps the worse value"
                )
            )
            lines.append(f"- sample {i + 1}: ρ = {r:.2f}, A = {a:+g}: {used:g} × {a:+g} ({why})")
        value = total / 5
        return value, (
            "Per sample the objective is min(ρA, clip(ρ, 1 − ε, 1 + ε)A), which is "
            "A·min(ρ, 1 + ε) for A ≥ 0 and A·max(ρ, 1 − ε) for A < 0:\n\n"
            + "\n".join(lines)
            + f"\n\nThe mean of the five is **{value:.4f}**. The clip only ever lowers a "
            "sample's objective: a ratio pushed past the range in the direction the advantage "
            "favours earns nothing more (and gets no gradient), while a ratio that moved the "
            "wrong way is counted in full, so the objective stays a pessimistic bound."
        )

    def wrong(self, params, expected):
        args = (params["ratios"], params["advantages"], params["clip_eps"])
        return {
            "no clipping: the mean of rho * A": self._objective(*args, "unclipped"),
            "every ratio clipped: the mean of clip(rho) * A": self._objective(
                *args, "always clipped"
            ),
            "max in place of min": self._objective(*args, "max"),
            "the sum over the samples, not the mean": 5 * expected,
        }


_GAE_STUB = '''\
import jax
import jax.numpy as jnp


def gae(reward_TN, value_TN, done_TN, last_value_N, gamma, lam):
    """Generalized advantage estimates of a rollout of T steps of N environments.

    reward_TN: (T, N) float32 reward of step t in env n.
    value_TN: (T, N) float32 V(s_t), the critic's value of the state step t acted from.
    done_TN: (T, N) bool, True where step t ended its episode (the env then reset, so
        s_{t+1} is the next episode's first state). Every end here is a termination: no
        value after it.
    last_value_N: (N,) float32 V(s_T) of the state after the last step: the rollout was cut
        there, the episodes were not.
    gamma, lam: discount and GAE lambda, floats in (0, 1].

    Returns (T, N) advantages: A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1}, with
    delta_t = r_t + gamma * (1 - done_t) * V(s_{t+1}) - V(s_t) and A_T = 0.
    """
    raise NotImplementedError
'''

_GAE_LOOP = """\
import numpy as np


def gae(reward_TN, value_TN, done_TN, last_value_N, gamma, lam):
    r, v = np.asarray(reward_TN, np.float64), np.asarray(value_TN, np.float64)
    keep = 1.0 - np.asarray(done_TN, np.float64)
    next_v = np.concatenate([v[1:], {last}[None]], axis=0)
    advantage = np.zeros_like(r)
    running = np.zeros(r.shape[1])
    for t in {order}:
        delta = r[t] + gamma * {keep_delta} * next_v[t] - v[t]
        running = {delta_term} + gamma * {lam} * {keep_recursion} * running
        advantage[t] = running
    return advantage
"""
_GAE_RIGHT = {
    "last": "np.asarray(last_value_N, np.float64)",
    "order": "reversed(range(len(r)))",
    "keep_delta": "keep[t]",
    "delta_term": "delta",
    "lam": "lam",
    "keep_recursion": "keep[t]",
}


def _gae_source(**mistake: str) -> str:
    return _GAE_LOOP.format(**{**_GAE_RIGHT, **mistake})


# float32 inputs, a float64 reference: the recursion adds a rounding (~6e-8 of the running
# advantage) per step; the reference solution's error stays under 5e-7 of the largest
# advantage over 60 seeds (256 steps), and a float32 sum in another order may reach a few
# times that. Every planted mistake is off by 5e-2 of it or more.
GAE_TOLERANCE = 1e-4


def gae_reference(reward, value, done, last_value, gamma, lam) -> np.ndarray:
    """GAE in float64 NumPy by its definition, a forward sum per step: A_t = sum over l of
    (gamma lam)^l delta_{t+l}, up to the step that ends the episode or the rollout."""
    r, v = np.asarray(reward, np.float64), np.asarray(value, np.float64)
    d, last = np.asarray(done, bool), np.asarray(last_value, np.float64)
    steps, envs = r.shape
    advantage = np.zeros((steps, envs))
    for n in range(envs):
        for t in range(steps):
            total, weight = 0.0, 1.0
            for k in range(t, steps):
                after = 0.0 if d[k, n] else (v[k + 1, n] if k + 1 < steps else last[n])
                total += weight * (r[k, n] + gamma * after - v[k, n])
                if d[k, n]:
                    break
                weight *= gamma * lam
            advantage[t, n] = total
    return advantage


class Gae(CodeItem):
    id = "reinforcement_learning.policy_gradients_ppo.gae"
    phase = PHASE
    lesson = "policy_gradients_ppo"
    title = "GAE over a rollout of N environments"
    function_name = "gae"
    stub = _GAE_STUB
    solution_module = "core.exercises.solutions.gae_rollout"
    hints = (
        "A_t needs A_{t+1}: loop over time from the last step back to the first (a Python "
        "loop over t, or jax.lax.scan(..., reverse=True)), carrying one running advantage "
        "per environment (shape (N,)). Work on whole rows: every env at once.",
        "V(s_{t+1}) is value_TN[t + 1], except after the last step, where it is last_value_N. "
        "Where done_t, both the bootstrap γ·V(s_{t+1}) and the carried γλ·A_{t+1} are "
        "multiplied by 0: s_{t+1} belongs to the next episode.",
        "running = 0; for t from T−1 down to 0: delta = r[t] + γ(1 − d[t])·next_v[t] − v[t]; "
        "running = delta + γλ(1 − d[t])·running; A[t] = running. λ multiplies only the "
        "carried advantage, never delta.",
    )
    CASES = (
        # (name, T, N, gamma and lambda from the seed or fixed, reward scale, chance of an end)
        ("episode ends mid-rollout", 24, 4, None, 1.0, 0.12),
        ("one step (T = 1)", 1, 6, None, 1.0, 0.5),
        ("a long rollout, gamma = lambda = 1, large rewards", 256, 2, (1.0, 1.0), 50.0, 0.02),
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `gae(...)`: the advantages PPO trains on, from a rollout laid out "
            "time first as the lesson's is. JAX or NumPy. The hidden tests run rollouts of "
            + ", ".join(f"T = {c[1]} x N = {c[2]}" for c in self.CASES)
            + " with episode ends at seeded steps (one in the middle of every env of the "
            "first), and compare every advantage with a float64 NumPy reference that sums "
            f"each step's TD errors forward (max error {GAE_TOLERANCE:g} of the advantages' "
            "scale)."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "no (1 - done) mask: advantages flow across episode ends": _gae_source(
                keep_delta="1.0", keep_recursion="1.0"
            ),
            "the recursion run forward in time (A_t from A_{t-1})": _gae_source(
                order="range(len(r))"
            ),
            "lambda applied to delta too (lam * delta + gamma * lam * ...)": _gae_source(
                delta_term="lam * delta"
            ),
            "no bootstrap at the rollout's end (last_value_N taken as 0)": _gae_source(
                last="np.zeros(r.shape[1])"
            ),
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        tests = []
        for name, steps, envs, fixed, scale, end_chance in self.CASES:
            gamma, lam = fixed or (
                float(generator.choice([0.9, 0.95, 0.99])),
                float(generator.choice([0.8, 0.9, 0.95])),
            )
            done = generator.random((steps, envs)) < end_chance
            if steps > 4:  # an episode end in the middle of every env's rollout
                done[generator.integers(1, steps - 2, envs), np.arange(envs)] = True
            reward = (generator.uniform(0, 2, (steps, envs)) * scale).astype(np.float32)
            value = (generator.uniform(-1, 3, (steps, envs)) * scale).astype(np.float32)
            last_value = (generator.uniform(-1, 3, envs) * scale).astype(np.float32)
            expected = gae_reference(reward, value, done, last_value, gamma, lam)
            got = function(reward.copy(), value.copy(), done.copy(), last_value.copy(), gamma, lam)
            label = f"{name}: T={steps}, N={envs}, gamma={gamma:g}, lambda={lam:g}"
            tests.append(_array_test(label, got, expected, GAE_TOLERANCE, "advantages"))
        return tests
