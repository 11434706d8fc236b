import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.rl import evaluation


@pytest.mark.parametrize("n, resamples, confidence", [(8, 4000, 0.95), (20, 2000, 0.9)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bootstrap_ci_matches_scipy_within_monte_carlo_error(n, resamples, confidence, seed):
    x = np.random.default_rng(seed).gamma(2.0, 50.0, n)  # skewed, like returns
    mean, low, high = evaluation.bootstrap_ci(
        jax.random.key(seed), jnp.asarray(x), resamples, confidence
    )
    ref = evaluation.scipy_ci(x, resamples, confidence, seed + 100)
    tol = evaluation.monte_carlo_tolerance(ref["std"], resamples, confidence)
    assert float(mean) == pytest.approx(x.mean(), rel=1e-6)
    assert abs(float(low) - ref["low"]) <= tol and abs(float(high) - ref["high"]) <= tol
    std = float(evaluation.bootstrap_std(jax.random.key(seed + 7), jnp.asarray(x), resamples))
    assert std == pytest.approx(ref["std"], rel=0.1)  # MC: relative sd 1/sqrt(2B) ~ 1.6%


def test_the_tolerance_catches_a_wrong_interval():
    # The standard-error interval mean +- z * std/sqrt(n) is not the percentile interval of a
    # skewed sample at small n, and the naive "no replacement" resample has no spread at all:
    # both land outside the bound.
    x = np.random.default_rng(5).lognormal(0.0, 1.2, 10)
    ref = evaluation.scipy_ci(x, 20000, 0.95, 0)
    tol = evaluation.monte_carlo_tolerance(ref["std"], 20000, 0.95)
    assert abs(x.mean() - ref["low"]) > tol  # no spread
    assert tol < 0.1 * (ref["high"] - ref["low"])


def test_ranking_flip_rate_and_by_seeds():
    assert evaluation.ranking_flip_rate([1, 2, 3], [2, 3, 4]) == pytest.approx(2 / 9)
    assert evaluation.ranking_flip_rate([10, 11], [0, 1]) == 0.0
    assert evaluation.ranking_flip_rate([1, 2], [2, 1]) == 0.0  # equal means
    rows = evaluation.flip_rate_by_seeds([1, 2, 3, 4], [2, 3, 4, 5], seed=0, draws=4000)
    assert rows[0]["ranking flips"] == pytest.approx(
        evaluation.ranking_flip_rate([1, 2, 3, 4], [2, 3, 4, 5]), abs=0.03
    )
    assert rows[-1]["ranking flips"] == 0.0  # all seeds: the full means themselves


def test_curve_bands_and_validation():
    curve = np.arange(12.0).reshape(4, 3)
    bands = evaluation.curve_bands(jax.random.key(0), curve, 200, 0.9)
    assert bands.shape == (3, 3)
    np.testing.assert_allclose(bands[0], curve.mean(axis=0), rtol=1e-6)
    assert np.all(bands[1] <= bands[0]) and np.all(bands[0] <= bands[2])
    with pytest.raises(ValueError, match="confidence"):
        evaluation.bootstrap_ci(jax.random.key(0), jnp.ones(3), 10, 1.5)
