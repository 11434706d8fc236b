"""NumPy float64 references for the RL estimators, written another way than core.rl.ppo.

``gae_reference`` sums each step's discounted TD errors forward, episode segment by episode
segment (A_t = sum_l (gamma lambda)^l delta_{t+l} up to the step that ends the episode), in
Python loops: the definition, where ``ppo.gae`` runs the backward recursion in ``lax.scan``.
``clipped_surrogate_reference`` is PPO's objective in its closed form by the sign of the
advantage: A min(rho, 1 + eps) for A >= 0, A max(rho, 1 - eps) for A < 0.
``bootstrap_percentile_reference`` replays a percentile bootstrap in float64 NumPy on the
resamples drawn from a JAX key (S indices uniform on 0 .. S-1, with replacement, per resample):
the same draws as ``evaluation.bootstrap_ci``, so the two agree to rounding and no Monte Carlo
tolerance is needed.
``trajectory`` makes test trajectories with both kinds of episode end in them.
"""

from __future__ import annotations

import numpy as np


def gae_reference(reward_TN, value_TN, next_value_TN, terminated_TN, truncated_TN, gamma, lam):
    """(advantage_TN, target_TN) in float64. next_value is V(final observation) of each step;
    a terminated step contributes no bootstrap; any episode end stops the sum."""
    r, v, nv = (np.asarray(a, np.float64) for a in (reward_TN, value_TN, next_value_TN))
    term, trunc = np.asarray(terminated_TN, bool), np.asarray(truncated_TN, bool)
    T, N = r.shape
    advantage = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(t, T):
                bootstrap = 0.0 if term[k, n] else gamma * nv[k, n]
                total += weight * (r[k, n] + bootstrap - v[k, n])
                if term[k, n] or trunc[k, n]:
                    break
                weight *= gamma * lam
            advantage[t, n] = total
    return advantage, advantage + v


def clipped_surrogate_reference(ratio, advantage, clip_eps):
    """PPO's clipped objective, mean over samples, by cases on the advantage's sign."""
    rho, a = np.asarray(ratio, np.float64), np.asarray(advantage, np.float64)
    per_sample = np.where(
        a >= 0, a * np.minimum(rho, 1 + clip_eps), a * np.maximum(rho, 1 - clip_eps)
    )
    return float(per_sample.mean())


def bootstrap_percentile_reference(key, samples_S, resamples: int, confidence: float):
    """(mean, low, high) in float64: the mean of each of ``resamples`` resamples of the S
    samples (indices from ``jax.random.randint(key, (resamples, S), 0, S)``: with replacement),
    and np.percentile's linear-interpolation quantiles ``(1 -/+ confidence) / 2`` of them."""
    import jax

    x = np.asarray(samples_S, np.float64)
    index_BS = np.asarray(jax.random.randint(key, (resamples, x.shape[0]), 0, x.shape[0]))
    means_B = x[index_BS].mean(axis=1)
    alpha = 100.0 * (1.0 - confidence) / 2
    low, high = np.percentile(means_B, [alpha, 100.0 - alpha], method="linear")
    return float(x.mean()), float(low), float(high)


def trajectory(seed: int, steps: int, envs: int, ends: int = 2) -> dict:
    """A random trajectory (float64) of ``steps`` x ``envs`` with ``ends`` terminations and
    ``ends`` truncations placed at random (never both on one step), rewards in [0, 2],
    values in [-1, 3]. Needs steps * envs >= 2 * ends."""
    if steps * envs < 2 * ends:
        raise ValueError(f"{steps} x {envs} steps cannot hold {2 * ends} episode ends")
    rng = np.random.default_rng(seed)
    places = rng.choice(steps * envs, size=2 * ends, replace=False)
    terminated = np.zeros(steps * envs, bool)
    truncated = np.zeros(steps * envs, bool)
    terminated[places[:ends]] = True
    truncated[places[ends:]] = True
    return {
        "reward_TN": rng.uniform(0, 2, (steps, envs)),
        "value_TN": rng.uniform(-1, 3, (steps, envs)),
        "next_value_TN": rng.uniform(-1, 3, (steps, envs)),
        "terminated_TN": terminated.reshape(steps, envs),
        "truncated_TN": truncated.reshape(steps, envs),
    }
