"""Batched environments and scanned rollouts: vmap over environments, lax.scan over time.

``batch_reset(key, num_envs)`` and ``batch_step(keys_N, state_N, action_N)`` are CartPole's
functions vmapped over N environments; ``rollout(key, policy, num_envs, num_steps)`` runs a
policy for T steps in one compiled ``lax.scan`` and returns the trajectory with a leading time
axis (``reward_TN``, ``done_TN``, ...). Its baseline, a Python loop over N gymnasium
``CartPole-v1`` envs, is ``gymnasium_parity.gymnasium_steps_per_second``: nothing here
imports gymnasium, so the exercises that run a rollout need no gymnasium.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from core.perf import timing
from core.rl import cartpole

# Compiler options for a short run or a correctness check: XLA:CPU's backend optimization
# level 0 compiles PPO's train program markedly faster and runs it somewhat slower: the right
# trade when compile time is most of the time. Never for timing measurements.
FAST_COMPILE = {"xla_backend_optimization_level": 0}


class Trajectory(NamedTuple):
    """T steps of N environments (time first)."""

    obs_TN4: jax.Array  # observation the action was chosen from
    action_TN: jax.Array
    reward_TN: jax.Array
    terminated_TN: jax.Array
    truncated_TN: jax.Array
    final_obs_TN4: jax.Array  # the observation each step reached (before any reset)
    episode_return_TN: jax.Array  # the finished episode's return where done


def batch_reset(key: jax.Array, num_envs: int, params: cartpole.Params = cartpole.DEFAULT):
    """(state_N, obs_N4): ``num_envs`` independent episodes, one key each."""
    return jax.vmap(lambda k: cartpole.reset(k, params))(jax.random.split(key, num_envs))


def batch_step(keys_N, state_N, action_N, params: cartpole.Params = cartpole.DEFAULT):
    """CartPole's ``step`` vmapped over the leading axis of every argument."""
    return jax.vmap(lambda k, s, a: cartpole.step(k, s, a, params))(keys_N, state_N, action_N)


def random_policy(key: jax.Array, obs_N4: jax.Array) -> jax.Array:
    """Uniform random actions (0 or 1), one per environment (a fair coin: cheaper to compile
    than ``randint``)."""
    return jax.random.bernoulli(key, 0.5, obs_N4.shape[:1]).astype(jnp.int32)


def rollout(
    key: jax.Array,
    policy: Callable[[jax.Array, jax.Array], jax.Array],
    num_envs: int,
    num_steps: int,
    params: cartpole.Params = cartpole.DEFAULT,
) -> Trajectory:
    """Reset ``num_envs`` envs and run ``policy(key, obs_N4) -> action_N`` for ``num_steps``
    steps in one ``lax.scan`` (auto-reset inside the env). Jit it with the sizes static."""
    reset_key, scan_key = jax.random.split(key)
    state_N, obs_N4 = batch_reset(reset_key, num_envs, params)

    def one_step(carry, step_key):
        state_N, obs_N4 = carry
        policy_key, env_key = jax.random.split(step_key)
        action_N = policy(policy_key, obs_N4)
        state_N, next_obs_N4, reward_N, term_N, trunc_N, info = batch_step(
            jax.random.split(env_key, num_envs), state_N, action_N, params
        )
        out = Trajectory(
            obs_N4,
            action_N,
            reward_N,
            term_N,
            trunc_N,
            info["final_obs"],
            info["episode_return"],
        )
        return (state_N, next_obs_N4), out

    _, trajectory = jax.lax.scan(one_step, (state_N, obs_N4), jax.random.split(scan_key, num_steps))
    return trajectory


def compiled_random_rollout(num_envs: int, num_steps: int, fast_compile: bool = False):
    """``key -> Trajectory``: the random-policy rollout, jitted for these sizes (compiled
    now with FAST_COMPILE when ``fast_compile``, else at its first call)."""
    fn = jax.jit(lambda key: rollout(key, random_policy, num_envs, num_steps))
    if fast_compile:
        return fn.lower(jax.random.key(0)).compile(compiler_options=FAST_COMPILE)
    return fn


def jax_steps_per_second(num_envs: int, num_steps: int, repeats: int = 3) -> dict:
    """Environment steps per second of the compiled rollout (median of ``repeats`` runs after
    a compiling warm-up), with its compile time apart."""
    fn = compiled_random_rollout(num_envs, num_steps)
    compile_s = timing.time_first_call(fn, jax.random.key(0))
    samples = timing.time_calls(fn, jax.random.key(1), repeats=repeats, warmup=0).samples
    seconds = timing.summarize(samples).median
    return {
        "num_envs": num_envs,
        "num_steps": num_steps,
        "compile_s": compile_s,
        "seconds": seconds,
        "steps_per_s": num_envs * num_steps / seconds,
    }


def episode_returns(trajectory: Trajectory) -> np.ndarray:
    """The returns of every episode that ended inside the trajectory (any order)."""
    done = np.asarray(trajectory.terminated_TN | trajectory.truncated_TN)
    return np.asarray(trajectory.episode_return_TN)[done]


def mean_or_zero(values: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of ``values`` where ``mask``, 0 where the mask is empty (no NaN)."""
    count = jnp.sum(mask)
    return jnp.where(count > 0, jnp.sum(jnp.where(mask, values, 0)) / jnp.maximum(count, 1), 0)
