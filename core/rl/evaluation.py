"""Evaluate agents across seeds: means, bootstrap confidence intervals, ranking flips.

One training run is one draw from a distribution of outcomes (seed: init, exploration,
environment resets). To compare two configurations, train several seeds of each (one vmapped
call: ``core.rl.ppo.compile_runs``), and report the mean with a confidence interval:

- ``bootstrap_ci``: the percentile bootstrap of the mean (resample the S seeds with
  replacement ``resamples`` times, take the ``(1 - confidence) / 2`` and ``(1 + confidence) /
  2`` quantiles of the resampled means, linear interpolation, as scipy.stats.bootstrap's
  ``method="percentile"`` does); it vmaps (over configurations, over training updates);
- ``reference_errors``: the interval against ``references.bootstrap_percentile_reference``,
  the same resamples replayed in float64 NumPy: exact up to float32 rounding, at any seed
  count (the lesson's check);
- ``monte_carlo_tolerance``: how far two independent percentile bootstraps of the same data
  can land apart from resampling noise alone (the bound of the tests against scipy, which
  draws its own resamples; with 2-3 seeds the resampled means take a handful of values and
  this normal-theory bound does not hold, so the lesson does not use it);
- ``ranking_flip_rate``: how often a single seed of A against a single seed of B ranks them
  the other way round from their means: why one seed is not evidence.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from core import numerics
from core.rl import references

# Two independent bootstraps' quantiles differ by resampling noise with standard deviation
# sqrt(2) * sqrt(q (1 - q) / B) / density(quantile); 5 of those standard deviations is a bound
# a correct pair exceeds with probability ~6e-7 (normal tails), while a wrong method (a
# different quantile, no resampling with replacement, the standard error instead of the
# percentile) is off by far more at the resample counts the lesson offers.
MONTE_CARLO_SIGMAS = 5.0


def bootstrap_ci(
    key: jax.Array, samples_S: jax.Array, resamples: int, confidence: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(mean, low, high): the sample mean and its percentile-bootstrap interval.

    ``samples_S`` holds one outcome per seed; ``resamples`` and ``confidence`` are static.
    """
    _validate(resamples, confidence)
    return _percentile_ci(key, samples_S, resamples, confidence)


def _validate(resamples: int, confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 2:
        raise ValueError(f"resamples must be >= 2, got {resamples}")


@functools.partial(jax.jit, static_argnames=("resamples", "confidence"))
def _percentile_ci(key, samples_S, resamples: int, confidence: float):
    S = samples_S.shape[0]
    index_BS = jax.random.randint(key, (resamples, S), 0, S)
    means_B = jnp.mean(samples_S[index_BS], axis=1)
    alpha = (1.0 - confidence) / 2
    low, high = jnp.quantile(means_B, jnp.array([alpha, 1.0 - alpha]))
    return jnp.mean(samples_S), low, high


def reference_errors(
    key: jax.Array, samples_S, resamples: int, confidence: float, interval=bootstrap_ci
) -> dict[str, float]:
    """Errors of ``interval(key, samples, resamples, confidence)`` (mean, low, high) against
    the float64 NumPy replay of the same resamples, each relative to max(max |sample|, 1);
    compare with ``numerics.tolerance("float32")``."""
    x = np.asarray(samples_S, np.float64)
    ours = interval(key, jnp.asarray(x, jnp.float32), resamples, confidence)
    ref = references.bootstrap_percentile_reference(key, x, resamples, confidence)
    scale = max(float(np.max(np.abs(x), initial=0.0)), 1.0)
    return {
        name: numerics.max_abs_error(float(a), b) / scale
        for name, a, b in zip(("mean", "low", "high"), ours, ref, strict=True)
    }


def bootstrap_std(key: jax.Array, samples_S: jax.Array, resamples: int) -> jax.Array:
    """The standard deviation of the resampled means (the bootstrap standard error)."""
    S = samples_S.shape[0]
    index_BS = jax.random.randint(key, (resamples, S), 0, S)
    return jnp.std(jnp.mean(samples_S[index_BS], axis=1), ddof=1)


def monte_carlo_tolerance(boot_std: float, resamples: int, confidence: float) -> float:
    """MONTE_CARLO_SIGMAS standard deviations of the difference of two independent
    percentile-bootstrap endpoints (normal approximation of the bootstrap distribution with
    standard deviation ``boot_std``)."""
    q = (1.0 - confidence) / 2
    z = stats.norm.ppf(1 - q)
    density = stats.norm.pdf(z) / max(boot_std, 1e-12)
    one = math.sqrt(q * (1 - q) / resamples) / density
    return MONTE_CARLO_SIGMAS * math.sqrt(2.0) * one


def scipy_ci(samples_S, resamples: int, confidence: float, seed: int) -> dict:
    """scipy.stats.bootstrap's percentile interval of the mean (its own generator)."""
    result = stats.bootstrap(
        (np.asarray(samples_S, np.float64),),
        np.mean,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return {
        "low": float(result.confidence_interval.low),
        "high": float(result.confidence_interval.high),
        "std": float(result.standard_error),
    }


def ranking_flip_rate(a_S, b_S) -> float:
    """Fraction of (seed of A, seed of B) pairs ranking A and B the other way round from the
    means of A and B (ties count half); 0 when the means are equal and nothing can flip."""
    a, b = np.asarray(a_S, np.float64), np.asarray(b_S, np.float64)
    sign = np.sign(a.mean() - b.mean())
    if sign == 0:
        return 0.0
    diff = sign * (a[:, None] - b[None, :])
    return float(np.mean(np.where(diff < 0, 1.0, np.where(diff == 0, 0.5, 0.0))))


def curve_bands(key: jax.Array, curve_SU, resamples: int, confidence: float) -> np.ndarray:
    """(3, U): mean, low, high of the mean over seeds at every update (bootstrap vmapped over
    updates, one key each; one compiled program)."""
    _validate(resamples, confidence)
    curve = jnp.asarray(curve_SU, jnp.float32)
    keys = jax.random.split(key, curve.shape[1])
    mean, low, high = _bands(keys, curve.T, resamples, confidence)
    return np.stack([np.asarray(mean), np.asarray(low), np.asarray(high)])


@functools.partial(jax.jit, static_argnames=("resamples", "confidence"))
def _bands(keys_U, curve_US, resamples: int, confidence: float):
    return jax.vmap(lambda k, column: _percentile_ci(k, column, resamples, confidence))(
        keys_U, curve_US
    )


def flip_rate_by_seeds(a_S, b_S, seed: int, draws: int = 2000) -> list[dict]:
    """For k = 1 .. S seeds per configuration: how often the means of k seeds of A and k of B
    (drawn without replacement from the runs at hand) rank A and B the other way round from
    all runs' means. k = 1 is ``ranking_flip_rate`` estimated by sampling."""
    a, b = np.asarray(a_S, np.float64), np.asarray(b_S, np.float64)
    sign = np.sign(a.mean() - b.mean())
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(1, min(len(a), len(b)) + 1):
        pick_a = np.argsort(rng.random((draws, len(a))), axis=1)[:, :k]
        pick_b = np.argsort(rng.random((draws, len(b))), axis=1)[:, :k]
        diff = sign * (a[pick_a].mean(axis=1) - b[pick_b].mean(axis=1))
        flips = np.where(diff < 0, 1.0, np.where(diff == 0, 0.5, 0.0))
        rows.append({"seeds per configuration": k, "ranking flips": float(flips.mean())})
    return rows
