"""Reference solution of reinforcement_learning.policy_gradients_ppo.gae: GAE over a rollout of
N environments, a backward jax.lax.scan over time."""

import jax
import jax.numpy as jnp


def gae(reward_TN, value_TN, done_TN, last_value_N, gamma, lam):
    """(T, N) advantages: A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1}, A_T = 0.

    delta_t = r_t + gamma * (1 - done_t) * V(s_{t+1}) - V(s_t), where V(s_{t+1}) is
    value_TN[t + 1], or last_value_N after the rollout's last step (the rollout was cut
    there, the episodes were not). A done step ended its episode: no value after it, and no
    advantage of the next episode flows back into it. The recursion runs backward: A_t needs
    A_{t+1}.
    """
    reward, value = jnp.asarray(reward_TN, jnp.float32), jnp.asarray(value_TN, jnp.float32)
    keep_TN = 1.0 - jnp.asarray(done_TN, jnp.float32)
    last_value = jnp.asarray(last_value_N, jnp.float32)
    next_value_TN = jnp.concatenate([value[1:], last_value[None]], axis=0)
    delta_TN = reward + gamma * keep_TN * next_value_TN - value

    def backward(next_advantage_N, step):
        delta_N, keep_N = step
        advantage_N = delta_N + gamma * lam * keep_N * next_advantage_N
        return advantage_N, advantage_N

    _, advantage_TN = jax.lax.scan(
        backward, jnp.zeros_like(last_value), (delta_TN, keep_TN), reverse=True
    )
    return advantage_TN
