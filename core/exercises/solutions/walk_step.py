"""Reference solution of reinforcement_learning.functional_env.walk_step: one step of N 1-D
walks as a pure function, with terminated, truncated and the automatic reset."""

import jax.numpy as jnp


def walk_step(position_N, time_N, action_N, reset_position_N, goal, max_steps):
    """(position_N, time_N, reward_N, terminated_N, truncated_N, final_position_N).

    Both branches are computed for every environment and jnp.where picks one per
    environment: no Python `if` on an array, so the function jits and vmaps. The time
    counts this step before the limit is checked (the max_steps-th step truncates), and an
    episode that ended, either way, restarts at its reset position with the time at 0.
    """
    position, time = jnp.asarray(position_N, jnp.int32), jnp.asarray(time_N, jnp.int32)
    moved_N = position + jnp.where(jnp.asarray(action_N) == 1, 1, -1)
    time_N = time + 1
    terminated_N = jnp.abs(moved_N) >= goal
    truncated_N = time_N >= max_steps
    reward_N = jnp.where(moved_N >= goal, 1.0, jnp.where(moved_N <= -goal, -1.0, 0.0))
    done_N = terminated_N | truncated_N
    new_position_N = jnp.where(done_N, jnp.asarray(reset_position_N, jnp.int32), moved_N)
    new_time_N = jnp.where(done_N, 0, time_N)
    return new_position_N, new_time_N, reward_N, terminated_N, truncated_N, moved_N
