import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from core import numerics
from core.rl import evaluation

CASES = [(n, b, c, seed) for n, b, c in [(8, 4000, 0.95), (20, 2000, 0.9)] for seed in (0, 1, 2)]


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


# Wrong intervals a learner might write. Each passes or fails the scipy comparison above by
# luck of the data; the replay of the same resamples (the lesson's check) rejects each one.
def _normal_from_bootstrap_se(key, x, resamples, confidence):
    std = evaluation.bootstrap_std(key, x, resamples)
    z = stats.norm.ppf((1 + confidence) / 2)
    return jnp.mean(x), jnp.mean(x) - z * std, jnp.mean(x) + z * std


def _without_replacement(key, x, resamples, confidence):
    keys = jax.random.split(key, resamples)
    means = jax.vmap(lambda k: jnp.mean(jax.random.permutation(k, x)))(keys)
    alpha = (1 - confidence) / 2
    return (jnp.mean(x), *jnp.quantile(means, jnp.array([alpha, 1 - alpha])))


def _one_sided_quantiles(key, x, resamples, confidence):  # alpha = 1 - confidence, not half
    return evaluation.bootstrap_ci(key, x, resamples, 1 - 2 * (1 - confidence))


MUTANTS = [_normal_from_bootstrap_se, _without_replacement, _one_sided_quantiles]


def _data(n, seed):
    return np.random.default_rng(seed).gamma(2.0, 50.0, n)


@pytest.mark.parametrize("n, resamples, confidence, seed", CASES)
def test_bootstrap_ci_matches_the_replay_of_its_resamples(n, resamples, confidence, seed):
    errors = evaluation.reference_errors(
        jax.random.key(seed), _data(n, seed), resamples, confidence
    )
    assert max(errors.values()) <= numerics.tolerance("float32"), errors


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("n, resamples, confidence, seed", CASES)
def test_the_replay_rejects_a_wrong_interval(mutant, n, resamples, confidence, seed):
    errors = evaluation.reference_errors(
        jax.random.key(seed), _data(n, seed), resamples, confidence, interval=mutant
    )
    assert max(errors["low"], errors["high"]) > 10 * numerics.tolerance("float32"), errors


@pytest.mark.parametrize("seeds", [2, 3])
@pytest.mark.parametrize("confidence", [0.5, 0.99])
@pytest.mark.parametrize("resamples", [500, 20000])
def test_the_replay_holds_at_the_lessons_smallest_seed_counts(seeds, confidence, resamples):
    # The app's edges (2 seeds, confidence 0.5 .. 0.99, 500 .. 20000 resamples), where the
    # resampled means take a handful of values and the scipy comparison's Monte Carlo bound
    # failed correct code; the normal-SE interval is still rejected there.
    x = _data(seeds, seeds + resamples)
    key = jax.random.key(seeds)
    errors = evaluation.reference_errors(key, x, resamples, confidence)
    assert max(errors.values()) <= numerics.tolerance("float32"), errors
    wrong = evaluation.reference_errors(
        key, x, resamples, confidence, interval=_normal_from_bootstrap_se
    )
    assert max(wrong["low"], wrong["high"]) > 10 * numerics.tolerance("float32"), wrong


def test_the_scipy_bound_fails_correct_code_at_two_seeds():
    # Why the lesson's check is the replay: at 2 seeds and confidence 0.5 a correct percentile
    # bootstrap lands outside the Monte Carlo bound against scipy in most draws.
    misses = 0
    for seed in range(10):
        x = _data(2, seed)
        _, low, high = evaluation.bootstrap_ci(jax.random.key(seed), jnp.asarray(x), 4000, 0.5)
        ref = evaluation.scipy_ci(x, 4000, 0.5, seed + 100)
        tol = evaluation.monte_carlo_tolerance(ref["std"], 4000, 0.5)
        misses += max(abs(float(low) - ref["low"]), abs(float(high) - ref["high"])) > tol
    assert misses >= 5


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
