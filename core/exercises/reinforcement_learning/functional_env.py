"""Exercises of the lesson functional_env: where one explicit-Euler step takes the cart
(predict) and a pure, batched step function with auto-reset (code)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.reinforcement_learning._shared import PHASE


class EulerPosition(PredictItem):
    """Explicit Euler moves the cart with the velocity it had BEFORE the step: the push of
    this step changes x_dot, and reaches x only on the next one."""

    id = "reinforcement_learning.functional_env.euler_position"
    phase = PHASE
    lesson = "functional_env"
    title = "Where one step takes the cart"
    units = "m"
    rel_tol = 0.0
    # The inputs have three decimals: x + 0.02 x_dot is exact by hand. The nearest planted
    # mistake (the new velocity) is tau^2 |x_acc| >= 3e-3 m away (|x_acc| > 7 m/s^2 under a
    # 10 N push).
    abs_tol = 1e-4
    hints = (
        "Read `dynamics` in the lesson: which velocity does the new x use, the one before "
        "the step or the one after it?",
        "Explicit Euler: every new value is computed from the OLD state. x_new = x + τ·x_dot "
        "uses the velocity the step started with; the push only changes x_dot_new.",
        "x_new = x + 0.02 s × x_dot, whatever the action, the angle or the angular velocity.",
    )

    def params(self, generator):
        x = float(generator.choice([-1, 1])) * round(float(generator.uniform(0.2, 1.5)), 3)
        x_dot = float(generator.choice([-1, 1])) * round(float(generator.uniform(0.3, 2.0)), 3)
        return {
            "physics": [
                x,
                x_dot,
                round(float(generator.uniform(-0.15, 0.15)), 3),
                round(float(generator.uniform(-1.0, 1.0)), 3),
            ],
            "action": int(generator.integers(0, 2)),
        }

    def prompt(self, params) -> str:
        x, x_dot, theta, theta_dot = params["physics"]
        push = "right (+10 N)" if params["action"] == 1 else "left (−10 N)"
        return (
            "The lesson's CartPole is in the state x = "
            f"**{x:.3f} m**, x_dot = **{x_dot:.3f} m/s**, theta = **{theta:.3f} rad**, "
            f"theta_dot = **{theta_dot:.3f} rad/s**, and takes action **{params['action']}** "
            f"(push {push}). **Predict the cart's position x after this one step**, in "
            "metres (`cartpole.dynamics` advances every τ = 0.02 s); the lesson's library "
            "then takes the step."
        )

    def live(self, params) -> float:
        import jax
        import jax.numpy as jnp

        from core.rl import cartpole

        state = cartpole.State(
            jnp.asarray(params["physics"], jnp.float32), jnp.int32(0), jnp.float32(0.0)
        )
        _, _, _, _, _, info = cartpole.step(jax.random.key(0), state, jnp.int32(params["action"]))
        return float(info["final_obs"][0])

    @staticmethod
    def _x_acc(physics, action) -> float:
        """CartPole's cart acceleration in float64 (the planted semi-implicit mistake)."""
        _, _, theta, theta_dot = physics
        force = 10.0 if action == 1 else -10.0
        total, pole_ml, half = 1.1, 0.05, 0.5
        temp = (force + pole_ml * theta_dot**2 * math.sin(theta)) / total
        theta_acc = (9.8 * math.sin(theta) - math.cos(theta) * temp) / (
            half * (4.0 / 3.0 - 0.1 * math.cos(theta) ** 2 / total)
        )
        return temp - pole_ml * theta_acc * math.cos(theta) / total

    def derive(self, params):
        x, x_dot, _, _ = params["physics"]
        value = x + 0.02 * x_dot
        return value, (
            "`dynamics` is explicit Euler: each new value is computed from the state before "
            f"the step, so x_new = x + τ·x_dot = {x:.3f} + 0.02 × {x_dot:.3f} = "
            f"**{value:.5f} m**. The push, the angle and the angular velocity enter only "
            "x_dot_new (through the cart's acceleration) and reach x one step later. "
            "gymnasium's CartPole offers 'semi-implicit euler' as its other integrator "
            "(x_new from x_dot_new); the default, and the lesson's, is this one, and the "
            "parity check against gymnasium would catch the other."
        )

    def wrong(self, params, expected):
        x, x_dot, _, _ = params["physics"]
        x_dot_new = x_dot + 0.02 * self._x_acc(params["physics"], params["action"])
        return {
            "semi-implicit Euler: x + tau * x_dot_new": x + 0.02 * x_dot_new,
            "tau left out: x + x_dot": x + x_dot,
            "the cart does not move in one step: x": x,
        }


_WALK_STUB = '''\
import jax
import jax.numpy as jnp


def walk_step(position_N, time_N, action_N, reset_position_N, goal, max_steps):
    """One step of N independent walks on a line, as a pure function with auto-reset.

    position_N: (N,) int32 each walker's cell, -goal < position < goal.
    time_N: (N,) int32 steps already taken in each walker's episode.
    action_N: (N,) int32: 0 moves one cell left (-1), 1 moves one cell right (+1).
    reset_position_N: (N,) int32 where a new episode starts (what reset(key) drew).
    goal: the episode TERMINATES when the walker reaches +goal (reward +1.0) or -goal
        (reward -1.0); every other step's reward is 0.0.
    max_steps: the time limit: the episode is TRUNCATED on its max_steps-th step (even if
        that step also terminated it).

    Returns (position_N, time_N, reward_N, terminated_N, truncated_N, final_position_N):
    the state after the step, where every env whose episode ended (terminated or truncated)
    is already reset to (its reset position, time 0); reward_N float32; the two flags bool;
    final_position_N: the cell the step reached, before any reset. Each env decides for
    itself: no Python `if` on the arrays.
    """
    raise NotImplementedError
'''

_WALK = """\
import numpy as np


def walk_step(position_N, time_N, action_N, reset_position_N, goal, max_steps):
    position = np.asarray(position_N, np.int64)
    time = np.asarray(time_N, np.int64)
    moved = position + np.where(np.asarray(action_N) == 1, 1, -1)
    new_time = time + 1
    terminated = {terminated}
    truncated = {truncated}
    reward = np.where(moved >= goal, 1.0, np.where(moved <= -goal, -1.0, 0.0))
    done = {done}
    new_position = np.where(done, np.asarray(reset_position_N, np.int64), moved)
    new_time = {reset_time}
    return new_position, new_time, reward, terminated, truncated, {final}
"""
_WALK_RIGHT = {
    "terminated": "np.abs(moved) >= goal",
    "truncated": "new_time >= max_steps",
    "done": "terminated | truncated",
    "reset_time": "np.where(done, 0, new_time)",
    "final": "moved",
}


def _walk_source(**mistake: str) -> str:
    return _WALK.format(**{**_WALK_RIGHT, **mistake})


WALK_OUTPUTS = ("position_N", "time_N", "reward_N", "terminated_N", "truncated_N",
                "final_position_N")  # fmt: skip


def walk_reference(position, time, action, reset_position, goal, max_steps) -> list[np.ndarray]:
    """The walk's step in plain Python, one environment at a time (independent of any
    array code): the six outputs as float64 arrays (flags as 0/1)."""
    rows = []
    for p, t, a, p0 in zip(position, time, action, reset_position, strict=True):
        cell, steps = int(p) + (1 if int(a) == 1 else -1), int(t) + 1
        terminated, truncated = abs(cell) >= goal, steps >= max_steps
        reward = 1.0 if cell >= goal else -1.0 if cell <= -goal else 0.0
        if terminated or truncated:
            rows.append((int(p0), 0, reward, terminated, truncated, cell))
        else:
            rows.append((cell, steps, reward, terminated, truncated, cell))
    return [np.asarray(column, np.float64) for column in zip(*rows, strict=True)]


class WalkStep(CodeItem):
    id = "reinforcement_learning.functional_env.walk_step"
    phase = PHASE
    lesson = "functional_env"
    title = "A pure step function with auto-reset"
    function_name = "walk_step"
    stub = _WALK_STUB
    solution_module = "core.exercises.solutions.walk_step"
    hints = (
        "Compute everything for every env, then pick per env with jnp.where: the moved "
        "cell, the new time, both flags, the reward, and the state a reset would give.",
        "Count this step first (time + 1), then compare with max_steps: the max_steps-th "
        "step truncates. done = terminated | truncated, and BOTH the position and the time "
        "reset where done.",
        "final_position_N is the moved cell before the reset (the episode's last "
        "observation, like info['final_obs']); the returned position is "
        "jnp.where(done, reset_position_N, moved) and the time jnp.where(done, 0, time + 1).",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `walk_step(...)`: the lesson's pattern (a pure step that resets by "
            "itself, terminated and truncated kept apart, the final observation kept) on an "
            "environment small enough to check by hand. The hidden tests call it on a batch "
            "of 64 seeded states (every way a step can end among them), on one environment "
            "alone with max_steps = 1, and for 40 steps of 5 environments, feeding each step "
            "the state a plain Python reference reached, and compare all six outputs exactly."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "the time limit checked before counting the step (one step late)": _walk_source(
                truncated="time >= max_steps"
            ),
            "the time not reset with the position": _walk_source(reset_time="new_time"),
            "final_position_N after the reset (the episode's last cell lost)": _walk_source(
                final="new_position"
            ),
            "reset only on termination (the time limit ends nothing)": _walk_source(
                done="terminated"
            ),
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        goal, limit = int(generator.integers(3, 6)), int(generator.integers(6, 10))
        tests = []
        # a batch of states: every way a step can end is among them
        envs = 64
        position = generator.integers(-goal + 1, goal, envs)
        time = generator.integers(0, limit, envs)
        action = generator.integers(0, 2, envs)
        position[:4], action[:4] = [goal - 1, -goal + 1, goal - 1, 0], [1, 0, 1, 1]
        time[:4] = [0, 1, limit - 1, limit - 1]  # +goal, -goal, both at once, the limit
        reset = generator.integers(-1, 2, envs)
        tests.append(
            self._compare(
                function,
                (position, time, action, reset, goal, limit),
                f"64 states, goal {goal}, max_steps {limit}",
            )
        )
        tests.append(
            self._compare(
                function,
                ([0], [0], [int(generator.integers(0, 2))], [0], goal, 1),
                "one env, max_steps = 1 (every step truncates)",
            )
        )
        # 40 steps of 5 envs from their reset states, each step fed the reference's state
        position, time = generator.integers(-1, 2, 5), np.zeros(5, np.int64)
        for t in range(40):
            action, reset = generator.integers(0, 2, 5), generator.integers(-1, 2, 5)
            test = self._compare(
                function,
                (position, time, action, reset, goal, limit),
                f"40 steps of 5 envs, goal {goal}, max_steps {limit}: step {t + 1}",
            )
            if not test.passed or t == 39:
                tests.append(test)
                break
            expected = walk_reference(position, time, action, reset, goal, limit)
            position, time = expected[0].astype(np.int64), expected[1].astype(np.int64)
        return tests

    def _compare(self, function, args, name) -> HiddenTest:
        position, time, action, reset, goal, limit = args
        arrays = [np.asarray(a, np.int32) for a in (position, time, action, reset)]
        expected = walk_reference(*arrays, goal, limit)
        got = function(*(a.copy() for a in arrays), goal, limit)
        if not isinstance(got, tuple | list) or len(got) != 6:
            return HiddenTest(name, False, f"expected a tuple of 6 arrays {WALK_OUTPUTS}")
        for output, mine, right in zip(WALK_OUTPUTS, got, expected, strict=True):
            mine = np.asarray(mine)
            if mine.shape != right.shape:
                return HiddenTest(
                    name, False, f"{output} has shape {mine.shape}; expected {right.shape}"
                )
            wrong = np.flatnonzero(mine.astype(np.float64) != right)
            if len(wrong):
                n = int(wrong[0])
                return HiddenTest(
                    name,
                    False,
                    f"{output} of env {n} is {mine[n]}, expected {right[n]:g} (that env was "
                    f"at position {arrays[0][n]}, time {arrays[1][n]}, action "
                    f"{arrays[2][n]}, reset position {arrays[3][n]})",
                )
        return HiddenTest(name, True, "all six outputs equal the reference")
