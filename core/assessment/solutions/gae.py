"""Reference solution of reinforcement_learning.gae_truncation: GAE with the
terminated/truncated split, as a backward jax.lax.scan."""

import jax
import jax.numpy as jnp


def gae(rewards_T, values_T, next_values_T, terminated_T, truncated_T, gamma, lam):
    """advantages_T (T,) float32 from one rollout of T steps (all inputs (T,)).

    delta_t = r_t + gamma * V(next obs of step t) * (not terminated_t) - V(obs_t): a truncated
    step still bootstraps from next_values_T[t]; a terminated one has no future.
    A_t = delta_t + gamma * lam * (not ended_t) * A_{t+1}, ended = terminated or truncated,
    and A_T = 0 after the last step.
    """
    rewards, values, next_values = (
        jnp.asarray(x, jnp.float32) for x in (rewards_T, values_T, next_values_T)
    )
    terminated = jnp.asarray(terminated_T, bool)
    ended = terminated | jnp.asarray(truncated_T, bool)
    deltas_T = rewards + gamma * jnp.where(terminated, 0.0, next_values) - values

    def backward(next_advantage, step):
        delta, episode_ended = step
        advantage = delta + gamma * lam * jnp.where(episode_ended, 0.0, next_advantage)
        return advantage, advantage

    _, advantages_T = jax.lax.scan(backward, jnp.float32(0.0), (deltas_T, ended), reverse=True)
    return advantages_T
