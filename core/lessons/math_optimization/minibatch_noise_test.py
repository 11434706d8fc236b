import jax
import numpy as np
import pytest

from core import numerics
from core.lessons.math_optimization import minibatch_noise as mn


def _gradients(seed, n, d, noise=0.5):
    x, y, w = mn.make_problem(jax.random.key(seed), n, d, noise)
    return x, y, w, mn.per_example_gradients(x, y, w)


@pytest.mark.parametrize("n, d", [(64, 1), (512, 8), (1000, 16)])
def test_per_example_and_full_gradients_match_closed_form(n, d):
    x, y, w, g = _gradients(n, n, d)
    x64, y64, w64 = (np.asarray(a, np.float64) for a in (x, y, w))
    closed = (x64 @ w64 - y64)[:, None] * x64
    assert numerics.scaled_max_error(g, closed) <= numerics.tolerance("float32")
    assert numerics.scaled_max_error(
        np.asarray(g).mean(0), mn.full_gradient_reference(x, y, w)
    ) <= numerics.tolerance("float32")


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("n, d, draws", [(64, 2, 200), (512, 8, 1000), (256, 1, 300)])
def test_variance_follows_the_closed_form_and_the_mean_is_unbiased(seed, n, d, draws):
    _, _, _, g = _gradients(seed, n, d)
    rows = mn.noise_table(jax.random.key(100 + seed), g, draws)
    assert len(rows) == 2 * len(mn.batch_sizes(n))
    assert max(mn.variance_z(r) for r in rows) <= mn.Z_BOUND * 0.85
    assert all(mn.mean_within_bound(r, draws) for r in rows)
    full = [r for r in rows if r["B"] == n and r["sampling"] == "without replacement"]
    assert full[0]["measured variance"] <= 1e-10


def test_a_wrong_law_is_rejected():
    # the finite-population factor matters: without it the large batches miss by far
    _, _, _, g = _gradients(0, 128, 4)
    rows = mn.noise_table(jax.random.key(1), g, 500)
    r = [r for r in rows if r["B"] == 64 and r["sampling"] == "without replacement"][0]
    assert mn.variance_z({**r, "theory": r["sigma^2 / B"]}) > 3 * mn.Z_BOUND


@pytest.mark.parametrize("n, b", [(512, 32), (64, 64), (100, 1)])
def test_one_epoch_of_batch_means_averages_to_the_full_gradient(n, b):
    x, y, w, g = _gradients(1, n, 4)
    means = mn.epoch_means(jax.random.key(2), g, b)
    assert means.shape == (n // b, 4)
    reference = mn.full_gradient_reference(x, y, w)
    assert numerics.scaled_max_error(np.asarray(means).mean(0), reference) <= 1e-5


def test_refusals():
    assert "without replacement" in mn.problem(64, 128)
    assert "does not divide" in mn.problem(100, 48)
    assert mn.problem(96, 48) is None
    assert mn.batch_sizes(100) == [1, 2, 4, 8, 16, 32, 64, 100]
