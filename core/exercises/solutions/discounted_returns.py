"""Reference solution of reinforcement_learning.batched_rollouts.discounted_returns: the
discounted return to go of every step of a (T, N) trajectory, a backward jax.lax.scan."""

import jax
import jax.numpy as jnp


def discounted_returns(reward_TN, done_TN, gamma):
    """(T, N) returns: G_t = r_t + gamma * (1 - done_t) * G_{t+1}, G_T = 0.

    Time is the leading axis (as the rollout's trajectory has it), so the scan runs over it,
    from the last step back, carrying one running return per environment. A done step ends
    its episode: the next episode's rewards belong to another return.
    """
    reward = jnp.asarray(reward_TN, jnp.float32)
    keep_TN = 1.0 - jnp.asarray(done_TN, jnp.float32)

    def backward(next_return_N, step):
        reward_N, keep_N = step
        return_N = reward_N + gamma * keep_N * next_return_N
        return return_N, return_N

    _, return_TN = jax.lax.scan(
        backward, jnp.zeros_like(reward[0]), (reward, keep_TN), reverse=True
    )
    return return_TN
