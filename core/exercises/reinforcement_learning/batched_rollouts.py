"""Exercises of the lesson batched_rollouts: how many episodes end in a batched rollout
(predict) and the discounted returns of a (T, N) trajectory with auto-resets (code)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.reinforcement_learning._shared import PHASE, _array_test


class EpisodesEnded(PredictItem):
    """Under a time limit of L steps that the pole cannot fall within, every episode lasts
    exactly L steps; each env resets on its own step, so each ends floor(T / L) of them."""

    id = "reinforcement_learning.batched_rollouts.episodes_ended"
    phase = PHASE
    lesson = "batched_rollouts"
    title = "Episodes that end in a batched rollout"
    units = ""  # a count of episodes
    rel_tol = 0.0
    abs_tol = 0.5  # a count: the nearest integer is the answer
    # From any reset state (each variable within +-0.05) and any actions, 6 steps take the
    # pole to at most 71% of its 12-degree limit and the cart nowhere near the track's end
    # (every corner of the reset box under a constant push, the worst case): no termination.
    LIMITS = (3, 4, 5, 6)
    hints = (
        "Follow one environment first. How many steps does each of its episodes last, and "
        "what does the step that ends one return as the next state?",
        "Each episode lasts exactly max_steps steps, and the reset happens inside that same "
        "step (the next step already belongs to the new episode). An episode still running "
        "when the rollout stops has not ended.",
        "One env ends floor(T / max_steps) episodes; the N envs run side by side, each "
        "resetting on its own: N · floor(T / max_steps).",
    )

    def params(self, generator):
        while True:
            limit = int(generator.choice(self.LIMITS))
            steps = int(generator.integers(2 * limit + 1, 41))
            # the rollout stops mid-episode, and a reset step after every end would change
            # the count: the planted mistakes are all distinguishable
            if steps % limit and steps // limit != steps // (limit + 1):
                break
        return {
            "num_envs": int(generator.integers(2, 9)),
            "num_steps": steps,
            "max_steps": limit,
            "seed": int(generator.integers(0, 2**16)),
        }

    def prompt(self, params) -> str:
        n, t, limit = params["num_envs"], params["num_steps"], params["max_steps"]
        return (
            f"The lesson's `rollout` runs **N = {n}** CartPole environments for **T = {t} "
            f"steps** with random actions, each environment's time limit set to "
            f"**max_steps = {limit}** (`cartpole.Params(max_steps={limit})`: in {limit} steps "
            "from a reset state the pole cannot fall, so no episode terminates). **Predict "
            "how many episodes end inside the trajectory**: the number of (step, env) entries "
            "where `terminated | truncated` is True. The lesson's library then runs it."
        )

    def live(self, params) -> float:
        import functools

        import jax

        from core.rl import cartpole, rollout

        run = functools.partial(
            rollout.rollout,
            policy=rollout.random_policy,
            num_envs=params["num_envs"],
            num_steps=params["num_steps"],
            params=cartpole.Params(max_steps=params["max_steps"]),
        )
        key = jax.random.key(params["seed"])
        compiled = jax.jit(run).lower(key).compile(compiler_options=rollout.FAST_COMPILE)
        trajectory = compiled(key)
        return float(np.sum(np.asarray(trajectory.terminated_TN | trajectory.truncated_TN)))

    def derive(self, params):
        n, t, limit = params["num_envs"], params["num_steps"], params["max_steps"]
        value = n * (t // limit)
        return value, (
            f"No episode can terminate in {limit} steps, so every one is truncated on its "
            f"{limit}th step, and that same step resets the environment (the next state is "
            f"the new episode's first). One environment's episodes end at steps {limit}, "
            f"{2 * limit}, ...: ⌊{t} / {limit}⌋ = {t // limit} of them inside {t} steps; the "
            f"last {t % limit} step(s) belong to an episode still running, which has not "
            f"ended. The {n} environments run in lockstep here (all reset together at the "
            f"start), each resetting on its own step: {n} × {t // limit} = **{value}**. The "
            f"trajectory holds {n} × {t} = {n * t} environment steps; with random actions "
            "and the usual limit of 500, the ends would fall at random steps instead, and no "
            "env would wait for another."
        )

    def wrong(self, params, expected):
        n, t, limit = params["num_envs"], params["num_steps"], params["max_steps"]
        return {
            "the unfinished last episode counted: N * ceil(T / L)": n * -(-t // limit),
            "one environment's episodes only": t // limit,
            "a reset step after every end (next-step autoreset): N * floor(T / (L + 1))": n
            * (t // (limit + 1)),
        }


_RETURNS_STUB = '''\
import jax
import jax.numpy as jnp


def discounted_returns(reward_TN, done_TN, gamma):
    """The discounted return to go of every step of a rollout, time first.

    reward_TN: (T, N) float32 reward of step t in env n.
    done_TN: (T, N) bool, True where step t ended its episode (the env reset after it, so
        step t + 1 belongs to the next episode).
    gamma: the discount, a float in (0, 1].

    Returns (T, N): G_t = r_t + gamma * r_{t+1} + gamma^2 * r_{t+2} + ..., summing the
    rewards of step t's own episode only, up to its end or the end of the rollout
    (whichever comes first; nothing is added after the rollout's last step).
    """
    raise NotImplementedError
'''

_RETURNS_LOOP = """\
import numpy as np


def discounted_returns(reward_TN, done_TN, gamma):
    r = np.asarray(reward_TN, np.float64){transpose}
    keep = 1.0 - np.asarray(done_TN, np.float64){transpose}
    out = np.zeros_like(r)
    running = np.zeros(r.shape[1])
    for t in {order}:
        running = {term} + gamma * {keep} * running
        out[t] = running
    return out{transpose}
"""
_RETURNS_RIGHT = {
    "transpose": "",
    "order": "reversed(range(len(r)))",
    "term": "r[t]",
    "keep": "keep[t]",
}


def _returns_source(**mistake: str) -> str:
    return _RETURNS_LOOP.format(**{**_RETURNS_RIGHT, **mistake})


_RETURNS_FROM_START = """\
import numpy as np


def discounted_returns(reward_TN, done_TN, gamma):
    r = np.asarray(reward_TN, np.float64)
    keep = 1.0 - np.asarray(done_TN, np.float64)
    out = np.zeros_like(r)
    running = np.zeros(r.shape[1])
    for t in reversed(range(len(r))):
        running = gamma**t * r[t] + keep[t] * running
        out[t] = running
    return out
"""

# float32 inputs, a float64 reference: returns of up to ~1000 summed over 500 steps, a
# rounding (~6e-8 of the running return) per step; the reference solution's error reaches
# 3e-6 of the largest return over 60 seeds, and a float32 sum in another order (a matrix of
# discounts) may reach several times that. Every planted mistake is off by 0.1 or more.
RETURNS_TOLERANCE = 1e-4


def returns_reference(reward, done, gamma) -> np.ndarray:
    """Discounted returns in float64 NumPy by the definition: for each step, the forward sum
    of gamma^k r_{t+k} up to and including the step that ends its episode."""
    r, d = np.asarray(reward, np.float64), np.asarray(done, bool)
    steps, envs = r.shape
    out = np.zeros((steps, envs))
    for n in range(envs):
        for t in range(steps):
            total = 0.0
            for k in range(t, steps):
                total += gamma ** (k - t) * r[k, n]
                if d[k, n]:
                    break
            out[t, n] = total
    return out


class DiscountedReturns(CodeItem):
    id = "reinforcement_learning.batched_rollouts.discounted_returns"
    phase = PHASE
    lesson = "batched_rollouts"
    title = "Discounted returns of a batched trajectory"
    function_name = "discounted_returns"
    stub = _RETURNS_STUB
    solution_module = "core.exercises.solutions.discounted_returns"
    hints = (
        "G_t = r_t + γ·G_{t+1} within an episode: each return needs the next step's, so "
        "loop over time backward (or jax.lax.scan(..., reverse=True)). Time is axis 0; "
        "carry one running return per environment, shape (N,).",
        "Where done_t, step t + 1 is another episode's: G_t = r_t there, so multiply the "
        "carried G_{t+1} by (1 − done_t). After the rollout's last step there is nothing: "
        "start from G_T = 0.",
        "running = zeros(N); for t from T−1 down to 0: running = r[t] + γ·(1 − done[t])·"
        "running; G[t] = running. The discount counts from step t, not from the rollout's "
        "start.",
    )
    CASES = (
        # (name, T, N, gamma from the seed or fixed, rewards, chance of an end)
        ("auto-resets mid-rollout", 20, 4, None, "uniform", 0.12),
        ("one env (N = 1)", 12, 1, None, "uniform", 0.15),
        (
            "500 CartPole-like steps (rewards of 1 and of 100), gamma 0.999",
            500,
            3,
            0.999,
            "large",
            0.004,
        ),  # fmt: skip
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `discounted_returns(...)` for a trajectory as the lesson's rollout "
            "returns it (time first, every env resetting on its own step). JAX or NumPy. The "
            "hidden tests run "
            + ", ".join(f"T = {c[1]} x N = {c[2]}" for c in self.CASES)
            + " with episode ends at seeded steps (at least one in the middle of every "
            "env), and compare every return with a float64 NumPy reference (max error "
            f"{RETURNS_TOLERANCE:g} of the returns' scale)."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "no (1 - done) mask: the next episode's rewards leak into this one": (
                _returns_source(keep="1.0")
            ),
            "the recursion run forward (a discounted sum of the past)": _returns_source(
                order="range(len(r))"
            ),
            "the recursion run over the env axis (axis 1), not time": _returns_source(
                transpose=".T"
            ),
            "discounted from the rollout's start (gamma^t r_t), not from step t": (
                _RETURNS_FROM_START
            ),
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        tests = []
        for name, steps, envs, fixed, rewards, end_chance in self.CASES:
            gamma = fixed or float(generator.choice([0.9, 0.95, 0.99]))
            done = generator.random((steps, envs)) < end_chance
            done[generator.integers(1, steps - 2, envs), np.arange(envs)] = True
            if rewards == "large":  # 1 per step, and now and then a bonus of 100
                reward = np.where(generator.random((steps, envs)) < 0.05, 100.0, 1.0)
            else:
                reward = generator.uniform(-1, 2, (steps, envs))
            reward = reward.astype(np.float32)
            expected = returns_reference(reward, done, gamma)
            got = function(reward.copy(), done.copy(), gamma)
            label = f"{name}: T={steps}, N={envs}, gamma={gamma:g}"
            tests.append(_array_test(label, got, expected, RETURNS_TOLERANCE, "returns"))
        return tests
