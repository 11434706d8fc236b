import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.lessons.math_optimization import linear_algebra_loss as lal
from core.nn import chunked

SETTINGS = [(1.5, 0.5, 0.3), (1.0, 1.0, 0.0), (3.0, 0.1, -0.95), (0.5, 2.0, 0.8)]


@pytest.mark.parametrize("std_1, std_2, rho", SETTINGS)
@pytest.mark.parametrize("seed", [0, 1])
def test_geometry_and_loss_match_numpy(std_1, std_2, rho, seed):
    data = lal.make_data(jax.random.key(seed), 64, std_1, std_2, rho, 0.2)
    c, lam, v, w_star, g = lal.geometry(data.x_P2, data.y_P)
    grid_w, _ = lal.grid(np.asarray(w_star), np.asarray(lam), points=11)
    ref = lal.reference(data.x_P2, data.y_P, grid_w, w_star, 0.1, 3)
    assert numerics.scaled_max_error(c, ref["c"]) <= 1e-5
    assert numerics.scaled_max_error(lam, ref["eigenvalues"]) <= 1e-5
    got = lal.loss_grid(data.x_P2, data.y_P, jnp.asarray(grid_w, jnp.float32))
    assert numerics.scaled_max_error(got, ref["loss"]) <= 1e-5
    kappa = float(lam[0] / lam[1])
    assert numerics.scaled_max_error(w_star, ref["w_star"]) <= max(1e-5, 50 * kappa * 1.2e-7)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_contours_are_level_sets_and_axes_are_eigenvectors(seed):
    data = lal.make_data(jax.random.key(seed), 128, 1.5, 0.5, 0.3, 0.1)
    c, lam, v, w_star, g = (np.asarray(a, np.float64) for a in lal.geometry(data.x_P2, data.y_P))
    for row in lal.ellipse_rows(w_star, lam, v, points=9):
        d = np.array([row["w1"], row["w2"]]) - w_star
        assert 0.5 * d @ c @ d == pytest.approx(row["level"], rel=1e-4)
    axes = lal.axis_rows(w_star, lam, v)
    first = np.array([axes[1]["w1"], axes[1]["w2"]]) - w_star
    assert np.allclose(c @ first, lam[0] * first, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("std_1, std_2, rho", SETTINGS)
def test_gradient_descent_converges_below_and_diverges_past_two_over_lambda_1(
    seed, std_1, std_2, rho
):
    data = lal.make_data(jax.random.key(seed), 64, std_1, std_2, rho, 0.2)
    c, lam, _, w_star, g = lal.geometry(data.x_P2, data.y_P)
    w0 = w_star + jnp.asarray(lal.START_OFFSET, jnp.float32)
    limit = 2 / float(lam[0])
    below, stopped = lal.descend(c, g, w0, 0.95 * limit, 100)
    assert stopped is None
    assert np.linalg.norm(below[-1] - np.asarray(w_star)) < np.linalg.norm(below[0] - below[-1])
    past, _ = lal.descend(c, g, w0, 1.05 * limit, 100)
    assert np.linalg.norm(past[-1] - np.asarray(w_star)) > 10 * np.linalg.norm(
        np.asarray(lal.START_OFFSET)
    )
    ref = lal.reference(data.x_P2, data.y_P, np.zeros((1, 2)), w0, 0.95 * limit, 100)
    kappa = float(lam[0] / lam[1])
    bound = max(1e-5, 50 * kappa * 1.2e-7) + lal.PATH_ERROR_PER_STEP * 101
    assert numerics.scaled_max_error(below, ref["path"]) <= bound


def test_a_new_step_count_compiles_nothing():
    # the steps control moves by 1: every count reuses the one compiled step (one scan of the
    # whole run compiled again for every count); the path still meets the closed form
    data = lal.make_data(jax.random.key(4), 64, 1.5, 0.5, 0.3, 0.2)
    c, lam, _, w_star, g = lal.geometry(data.x_P2, data.y_P)
    w0 = w_star + jnp.asarray(lal.START_OFFSET, jnp.float32)
    lal.descend(c, g, w0, 0.5 / float(lam[0]), 10)
    with chunked.counting_compiles() as compiled:
        path, stopped = lal.descend(c, g, w0, 1.0 / float(lam[0]), 37)
    assert compiled == [] and stopped is None and path.shape == (38, 2)
    ref = lal.reference(data.x_P2, data.y_P, np.zeros((1, 2)), w0, 1.0 / float(lam[0]), 37)
    bound = max(1e-5, 50 * float(lam[0] / lam[1]) * 1.2e-7) + lal.PATH_ERROR_PER_STEP * 38
    assert numerics.scaled_max_error(path, ref["path"]) <= bound


def test_overflow_is_cut_and_problems_are_named():
    data = lal.make_data(jax.random.key(0), 32, 3.0, 3.0, 0.9, 0.1)
    c, lam, _, w_star, g = lal.geometry(data.x_P2, data.y_P)
    path, stopped = lal.descend(c, g, w_star + 1.0, 2.0, 100)
    assert stopped is not None and len(path) == stopped
    assert np.all(np.isfinite(path)) and np.max(np.abs(path)) <= lal.OVERFLOW
    assert "not unique" in lal.problem(0.0, 1.0)
    assert lal.problem(0.1, 1.0) is None
    with pytest.raises(ValueError, match="not unique"):
        lal.make_data(jax.random.key(0), 8, 1.0, 0.0, 0.0, 0.1)
