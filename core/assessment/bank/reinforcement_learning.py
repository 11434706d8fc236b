"""The assessment item of the phase "Reinforcement learning".

- ``reinforcement_learning.gae_truncation`` (code): GAE that bootstraps at a truncation only.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, Item, rng

_GAE_STUB = '''\
import jax
import jax.numpy as jnp
import numpy as np


def gae(rewards_T, values_T, next_values_T, terminated_T, truncated_T, gamma, lam):
    """Generalized advantage estimation over one rollout of T steps of one environment.

    rewards_T, values_T, next_values_T: (T,) float32. values_T[t] is V(obs_t);
        next_values_T[t] is V of the observation step t led to: at an episode end that is
        the episode's final observation (before the reset), elsewhere it equals values_T[t+1].
    terminated_T, truncated_T: (T,) bool. terminated: the episode truly ended (no future
        reward). truncated: it was cut by a time limit (it had a future). Never both.
    gamma, lam: floats in [0, 1].

    Returns advantages_T, (T,): A_t = sum over l >= 0 of (gamma * lam)^l * delta_{t+l}, where
    delta_t = r_t + gamma * V(next obs of t) - V(obs_t), with no bootstrap term at a
    terminated step (a truncated step bootstraps from next_values_T[t]); the sum stops at
    the step that ends the episode (terminated or truncated) and at the end of the rollout.
    """
    raise NotImplementedError
'''

_GAE_LOOP = """\
import numpy as np


def gae(rewards_T, values_T, next_values_T, terminated_T, truncated_T, gamma, lam):
    advantages = np.zeros(len(rewards_T))
    running = 0.0
    for t in reversed(range(len(rewards_T))):
        {bootstrap}
        delta = rewards_T[t] + gamma * bootstrap - values_T[t]
        running = delta + gamma * {lam} * {keep} * running
        advantages[t] = running
    return advantages
"""
_GAE_RIGHT = {
    "bootstrap": "bootstrap = 0.0 if terminated_T[t] else next_values_T[t]",
    "lam": "lam",
    "keep": "(not (terminated_T[t] or truncated_T[t]))",
}

GAE_TOLERANCE = 1e-5  # max |A - reference| / max(1, max |reference|)


def _gae_source(**mistake: str) -> str:
    return _GAE_LOOP.format(**{**_GAE_RIGHT, **mistake})


def _gae_trajectory(generator: np.random.Generator, steps: int, end_at_last: bool) -> dict:
    """One rollout with 1-3 terminations and 1-3 truncations at seeded steps (never both on
    one step): next_values equals the next step's value except at an episode end."""
    ends = int(generator.integers(1, 4)), int(generator.integers(1, 4))
    places = generator.choice(steps - 1, size=sum(ends), replace=False)
    if end_at_last:
        places[0] = steps - 1
    terminated, truncated = np.zeros(steps, bool), np.zeros(steps, bool)
    terminated[places[: ends[0]]] = True
    truncated[places[ends[0] :]] = True
    values = generator.uniform(-1, 3, steps).astype(np.float32)
    final_values = generator.uniform(-1, 3, steps).astype(np.float32)  # V(final obs) at ends
    next_values = np.append(values[1:], final_values[-1])
    next_values = np.where(terminated | truncated, final_values, next_values).astype(np.float32)
    return {
        "rewards_T": generator.uniform(0, 2, steps).astype(np.float32),
        "values_T": values,
        "next_values_T": next_values,
        "terminated_T": terminated,
        "truncated_T": truncated,
        "gamma": float(generator.choice([0.9, 0.95, 0.99])),
        "lam": float(generator.choice([0.8, 0.9, 0.95])),
    }


def _gae_cases(seed: int, item_id: str) -> list[dict]:
    generator = rng(item_id, seed)
    # Fixed lengths (the ends, values and rewards are seeded): a new T would compile a JAX
    # solution's ops again for every learner seed.
    return [
        _gae_trajectory(generator, 24, end_at_last=True),
        _gae_trajectory(generator, 40, end_at_last=False),
        _gae_trajectory(generator, 64, end_at_last=False),
    ]


class GaeTruncation(CodeItem):
    id = "reinforcement_learning.gae_truncation"
    phase = "Reinforcement learning"
    lesson = "policy_gradients_ppo"
    title = "GAE with terminations and truncations"
    function_name = "gae"
    stub = _GAE_STUB
    solution_module = "core.assessment.solutions.gae"

    def prompt(self, seed: int) -> str:
        lengths = ", ".join(str(len(c["rewards_T"])) for c in _gae_cases(seed, self.id))
        return (
            "Complete `gae(...)`: generalized advantage estimation that tells a terminated "
            "step (no future: no bootstrap) from a truncated one (cut by a time limit: "
            "bootstrap from the value of the real next observation), and stops the sum at "
            "either. JAX (a reverse `jax.lax.scan`) or NumPy. The hidden tests run "
            f"rollouts of T = {lengths} steps with terminations and truncations at seeded "
            "steps and compare with a float64 NumPy reference (max error "
            f"{GAE_TOLERANCE:g} of the advantages' scale)."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "truncation treated as termination (no bootstrap)": _gae_source(
                bootstrap=(
                    "bootstrap = 0.0 if terminated_T[t] or truncated_T[t] else next_values_T[t]"
                )
            ),
            "the sum not stopped at episode ends": _gae_source(keep="1.0"),
            "lambda omitted": _gae_source(lam="1.0"),
            "bootstrap from values_T[t + 1] (the next episode's first state)": _gae_source(
                bootstrap=(
                    "bootstrap = 0.0 if terminated_T[t] else "
                    "(values_T[t + 1] if t + 1 < len(values_T) else next_values_T[t])"
                )
            ),
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        from core.rl import references

        tests = []
        for case in _gae_cases(seed, self.id):
            steps = len(case["rewards_T"])
            name = (
                f"T={steps}, gamma={case['gamma']:g}, lam={case['lam']:g}, "
                f"{int(case['terminated_T'].sum())} terminations, "
                f"{int(case['truncated_T'].sum())} truncations"
            )
            inputs = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in case.items()}
            out = np.asarray(function(**inputs), np.float64)
            # The course's float64 reference, a forward sum per step (an N=1 batch axis).
            expected = references.gae_reference(
                *(case[k][:, None] for k in ("rewards_T", "values_T", "next_values_T")),
                case["terminated_T"][:, None],
                case["truncated_T"][:, None],
                case["gamma"],
                case["lam"],
            )[0][:, 0]
            if out.shape != expected.shape:
                tests.append(
                    HiddenTest(
                        name, False, f"returned shape {out.shape}, expected {expected.shape}"
                    )
                )
                continue
            gap = np.abs(out - expected)
            scale = max(1.0, float(np.max(np.abs(expected))))
            error = float(np.max(gap)) / scale
            if not math.isfinite(error):
                tests.append(HiddenTest(name, False, "the advantages hold NaN or inf"))
                continue
            passed = error <= GAE_TOLERANCE
            detail = f"max |A - reference| / {scale:.3g} = {error:.2e}; tolerance {GAE_TOLERANCE:g}"
            if not passed:
                t = int(np.flatnonzero(gap > GAE_TOLERANCE * scale)[-1])
                kind = (
                    "a terminated step"
                    if case["terminated_T"][t]
                    else "a truncated step"
                    if case["truncated_T"][t]
                    else "a step that does not end its episode"
                )
                detail += (
                    f"; the last wrong step is t={t} ({kind}): A={out[t]:.4f}, "
                    f"reference {expected[t]:.4f}"
                )
            tests.append(HiddenTest(name, passed, detail))
        return tests


ITEMS: tuple[Item, ...] = (GaeTruncation(),)
