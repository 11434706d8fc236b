"""Step our CartPole and gymnasium's ``CartPole-v1`` side by side, in float64.

gymnasium keeps ``env.unwrapped.state`` as a float64 NumPy array (it returns a float32 copy as
the observation), so the comparison is made on that float64 state: before every step the
gymnasium state is set from ours, both take the same action, and the next states, rewards and
terminated/truncated flags are compared. When our episode ends, the gymnasium env is reset
(which restarts its ``TimeLimit`` count) and its state set to our reset state, so the 500-step
truncation is the one gymnasium's TimeLimit wrapper applies. gymnasium is imported inside the
functions: it is a test (and lesson-check) dependency only.
"""

from __future__ import annotations

import dataclasses
import math
import time

import jax
import numpy as np

from core import runtime
from core.rl import cartpole

POLICIES = ("random", "balancing", "mixed")


def balancing_action(obs_4: np.ndarray) -> int:
    """A hand-made controller that keeps the pole up for the full 500 steps (push toward the
    side the pole leans and turns to, with a little cart centring): it reaches truncation."""
    x, x_dot, theta, theta_dot = (float(v) for v in obs_4)
    return int(theta + 0.3 * theta_dot + 0.01 * x + 0.1 * x_dot > 0)


@dataclasses.dataclass(frozen=True)
class Parity:
    """What the side-by-side run saw; errors are max |ours - gymnasium| over every step."""

    steps: int
    episodes_ended: int
    terminations: int
    truncations: int
    state_error: float  # float64 state after each step (before reset) vs env.unwrapped.state
    obs_error: float  # our obs vs gymnasium's float32 obs, relative to max(|obs|, 1)
    reward_error: float
    flag_mismatches: int  # steps where terminated or truncated differ
    constants_match: bool  # our Params equal the constants read from env.unwrapped
    states_OS: np.ndarray  # (steps + 1, 4): our physics states (float64), for pictures


def constants_from_gymnasium(env) -> cartpole.Params:
    """Our Params, with every constant read from a gymnasium CartPole env."""
    u = env.unwrapped
    return cartpole.Params(
        gravity=u.gravity,
        masscart=u.masscart,
        masspole=u.masspole,
        length=u.length,
        force_mag=u.force_mag,
        tau=u.tau,
        theta_threshold_radians=u.theta_threshold_radians,
        x_threshold=u.x_threshold,
        max_steps=env.spec.max_episode_steps,
    )


def side_by_side(seed: int, steps: int, policy: str = "mixed") -> Parity:
    """Run ``steps`` steps of both environments under ``policy`` ("random" actions, the
    "balancing" controller, or "mixed": the controller for 500 steps (one truncation) then
    random actions, which end episodes by termination)."""
    import gymnasium as gym

    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    env = gym.make("CartPole-v1")
    params = constants_from_gymnasium(env)
    constants_match = params == cartpole.DEFAULT
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    random_actions = rng.integers(0, 2, size=steps)
    with runtime.enable_float64():
        # Two compiled programs in all: the key of step t is folded in inside the jit.
        step = jax.jit(lambda k, t, s, a: cartpole.step(jax.random.fold_in(k, t), s, a, params))
        base_key = jax.random.key(seed)
        state, obs = jax.jit(lambda k: cartpole.reset(jax.random.fold_in(k, 0), params))(base_key)
        states = [np.asarray(state.physics_4, np.float64)]
        state_err = obs_err = reward_err = 0.0
        mismatches = ended = terminations = truncations = 0
        for t in range(steps):
            controlled = policy == "balancing" or (policy == "mixed" and t < params.max_steps)
            action = balancing_action(np.asarray(obs)) if controlled else int(random_actions[t])
            env.unwrapped.state = np.asarray(state.physics_4, np.float64).copy()
            g_obs, g_reward, g_term, g_trunc, _ = env.step(action)
            state, obs, reward, term, trunc, info = step(
                base_key, np.uint32(t + 1), state, np.int32(action)
            )
            final = np.asarray(info["final_obs"], np.float64)
            state_err = max(state_err, float(np.max(np.abs(final - env.unwrapped.state))))
            scale = max(float(np.max(np.abs(g_obs))), 1.0)
            obs_err = max(obs_err, float(np.max(np.abs(final - g_obs))) / scale)
            reward_err = max(reward_err, abs(float(reward) - g_reward))
            mismatches += int(bool(term) != g_term or bool(trunc) != g_trunc)
            states.append(final)
            if bool(term) or bool(trunc):
                ended += 1
                terminations += int(bool(term))
                truncations += int(bool(trunc))
                env.reset()
                states.append(np.asarray(state.physics_4, np.float64))
    env.close()
    return Parity(
        steps=steps,
        episodes_ended=ended,
        terminations=terminations,
        truncations=truncations,
        state_error=state_err,
        obs_error=obs_err,
        reward_error=reward_err,
        flag_mismatches=mismatches,
        constants_match=constants_match,
        states_OS=np.stack(states),
    )


RESET_SAMPLES = 2000
RESET_ALPHA = 1e-6  # per state variable: a correct reset fails with probability ~4e-6


def ks_two_sample(a, b) -> tuple[float, float]:
    """(D, p): the two-sample Kolmogorov-Smirnov statistic (largest gap between the two
    empirical CDFs) and its asymptotic p-value, Q(sqrt(n m / (n + m)) D) with
    Q(t) = 2 sum_k (-1)^(k-1) exp(-2 k^2 t^2): scipy.stats.ks_2samp(method="asymp") without
    importing scipy (a second of a headless run). Accurate for samples of hundreds."""
    a, b = np.sort(np.asarray(a, np.float64)), np.sort(np.asarray(b, np.float64))
    pooled = np.concatenate([a, b])
    gap = np.abs(
        np.searchsorted(a, pooled, side="right") / a.size
        - np.searchsorted(b, pooled, side="right") / b.size
    )
    d = float(gap.max())
    t = math.sqrt(a.size * b.size / (a.size + b.size)) * d
    k = np.arange(1, 101)
    p = 1.0 if t < 0.2 else float(2 * np.sum((-1.0) ** (k - 1) * np.exp(-2 * k**2 * t**2)))
    return d, min(max(p, 0.0), 1.0)


def resets_vs_gymnasium(
    seed: int, samples: int = RESET_SAMPLES, params: cartpole.Params = cartpole.DEFAULT
) -> dict:
    """Our reset states against gymnasium's: ``samples`` of each (ours from ``cartpole.reset``
    in float64, one key per sample; gymnasium's ``env.unwrapped.state`` after ``env.reset()``),
    compared per state variable by the two-sample Kolmogorov-Smirnov test. The randomness
    differs (JAX keys vs NumPy's generator), so the distributions are compared, not values.
    Returns the smallest p-value over the 4 variables and both sides' largest |state|."""
    import gymnasium as gym

    if samples < 2:
        raise ValueError(f"samples must be >= 2, got {samples}")
    env = gym.make("CartPole-v1")
    env.reset(seed=seed)
    theirs = []
    for _ in range(samples):
        env.reset()
        theirs.append(np.array(env.unwrapped.state, np.float64))
    theirs = np.stack(theirs)
    env.close()
    with runtime.enable_float64():
        # one small program called per sample: cheaper here than compiling a vmapped one
        reset = jax.jit(lambda k, t: cartpole.reset(jax.random.fold_in(k, t), params)[1])
        key = jax.random.key(seed)
        ours = np.stack([np.asarray(reset(key, np.uint32(t))) for t in range(samples)])
    p_values = [ks_two_sample(ours[:, j], theirs[:, j])[1] for j in range(4)]
    return {
        "min_p_value": float(min(p_values)),
        "max_abs": float(np.max(np.abs(ours))),
        "gymnasium_max_abs": float(np.max(np.abs(theirs))),
        "samples": samples,
    }


def rollout_vs_gymnasium(seed: int, num_envs: int, num_steps: int) -> dict:
    """Our vmapped, scanned random-action rollout (float64) against ``num_envs`` gymnasium
    envs given the same actions, each running free within an episode (its state is set from
    ours only at episode starts, where our reset's randomness enters). Returns the max
    float64 state error over every step of every env, the steps whose flags differ, and the
    number of episodes that ended."""
    import gymnasium as gym

    from core.rl import rollout

    with runtime.enable_float64():
        compiled = rollout.compiled_random_rollout(num_envs, num_steps, fast_compile=True)
        trajectory = compiled(jax.random.key(seed))
        traj = jax.tree.map(np.asarray, trajectory)
    state_err, mismatches, ended = 0.0, 0, 0
    for n in range(num_envs):
        env = gym.make("CartPole-v1")
        env.reset(seed=seed + n)
        env.unwrapped.state = traj.obs_TN4[0, n].astype(np.float64).copy()
        for t in range(num_steps):
            _, _, g_term, g_trunc, _ = env.step(int(traj.action_TN[t, n]))
            err = np.max(np.abs(traj.final_obs_TN4[t, n] - env.unwrapped.state))
            state_err = max(state_err, float(err))
            term, trunc = bool(traj.terminated_TN[t, n]), bool(traj.truncated_TN[t, n])
            mismatches += int(term != g_term or trunc != g_trunc)
            if term or trunc:
                ended += 1
                env.reset()
                if t + 1 < num_steps:
                    env.unwrapped.state = traj.obs_TN4[t + 1, n].astype(np.float64).copy()
        env.close()
    return {"state_error": state_err, "flag_mismatches": mismatches, "episodes_ended": ended}


def gymnasium_steps_per_second(
    num_envs: int, total_steps: int, seed: int = 0, clock=time.perf_counter
) -> dict:
    """Steps per second of a Python loop over ``num_envs`` gymnasium ``CartPole-v1`` envs
    (random actions, reset on terminated or truncated), ``total_steps`` steps in all (at
    least one step of every env). Python-side work only: what ``rollout`` replaces."""
    import gymnasium as gym

    envs = [gym.make("CartPole-v1") for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    rounds = max(1, -(-total_steps // num_envs))
    actions = np.random.default_rng(seed).integers(0, 2, size=(rounds, num_envs)).tolist()
    start = clock()
    for row in actions:
        for env, action in zip(envs, row, strict=True):
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
    seconds = clock() - start
    for env in envs:
        env.close()
    return {
        "num_envs": num_envs,
        "num_steps": rounds,
        "seconds": seconds,
        "steps_per_s": rounds * num_envs / seconds,
    }
