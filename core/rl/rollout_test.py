import jax
import numpy as np
import pytest

from core.rl import cartpole, gymnasium_parity, rollout

# float64 on both sides; random-action episodes are short, so rounding stays ~1e-15.
ROLLOUT_TOLERANCE = 1e-6


@pytest.mark.parametrize("seed, envs, steps", [(0, 3, 60), (5, 1, 120)])
def test_batched_rollout_matches_gymnasium(seed, envs, steps):
    versus = gymnasium_parity.rollout_vs_gymnasium(seed, envs, steps)
    assert versus["state_error"] <= ROLLOUT_TOLERANCE
    assert versus["flag_mismatches"] == 0 and versus["episodes_ended"] >= 2


def test_rollout_equals_stepping_each_env_by_hand():
    # vmap + scan == a Python loop over envs and time with the same keys
    key = jax.random.key(3)
    traj = rollout.rollout(key, rollout.random_policy, 2, 30)
    reset_key, scan_key = jax.random.split(key)
    states, obs = rollout.batch_reset(reset_key, 2)
    for t, step_key in enumerate(jax.random.split(scan_key, 30)):
        policy_key, env_key = jax.random.split(step_key)
        actions = rollout.random_policy(policy_key, obs)
        np.testing.assert_array_equal(actions, traj.action_TN[t])
        env_keys = jax.random.split(env_key, 2)
        for n in range(2):
            one = jax.tree.map(lambda a, n=n: a[n], states)
            _, _, _, term, _, info = cartpole.step(env_keys[n], one, actions[n])
            np.testing.assert_allclose(info["final_obs"], traj.final_obs_TN4[t, n], atol=1e-5)
            assert bool(term) == bool(traj.terminated_TN[t, n])
        states, obs, *_ = rollout.batch_step(env_keys, states, actions)
    assert traj.obs_TN4.shape == (30, 2, 4)


def test_episode_returns_and_throughput_rows():
    traj = rollout.compiled_random_rollout(4, 80, fast_compile=True)(jax.random.key(0))
    returns = rollout.episode_returns(traj)
    assert len(returns) >= 4 and np.all(returns >= 1)
    row = gymnasium_parity.gymnasium_steps_per_second(3, 30)
    assert row["num_steps"] == 10 and row["steps_per_s"] > 0
