import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.optim import linalg


@pytest.mark.parametrize("n", [1, 3, 50])
def test_norms_equal_numpy(n):
    x = np.random.default_rng(n).standard_normal(n)
    got = linalg.norms(jnp.asarray(x, jnp.float32))
    for name, order in (("L1", 1), ("L2", 2), ("inf", np.inf)):
        assert numerics.scaled_max_error(got[name], np.linalg.norm(x, order)) <= 1e-5


@pytest.mark.parametrize("order", linalg.ORDERS)
def test_unit_ball_points_have_norm_one(order):
    points = linalg.unit_ball(order, 41)
    ord_ = {"L1": 1, "L2": 2, "inf": np.inf}[order]
    assert np.allclose(np.linalg.norm(points, ord=ord_, axis=1), 1.0)
    assert np.allclose(points[0], points[-1])  # closed


@pytest.mark.parametrize("n", [2, 7])
def test_projection_onto_a_vector(n):
    rng = np.random.default_rng(n)
    x, a = rng.standard_normal(n), rng.standard_normal(n)
    p, r = linalg.project_onto_vector(jnp.asarray(x), jnp.asarray(a))
    expected = a * (x @ a) / (a @ a)
    assert numerics.scaled_max_error(p, expected) <= 1e-5
    assert abs(float(np.dot(np.asarray(r, np.float64), a))) <= 1e-5 * np.linalg.norm(a) ** 2
    with pytest.raises(ValueError, match="zero vector"):
        linalg.project_onto_vector(jnp.asarray(x), jnp.zeros(n))


@pytest.mark.parametrize("n, k", [(3, 1), (8, 3), (20, 20)])
def test_projection_onto_a_subspace_equals_lstsq_and_is_idempotent(n, k):
    rng = np.random.default_rng(n + k)
    a, x = rng.standard_normal((n, k)), rng.standard_normal(n)
    p, r = linalg.project_onto_subspace(jnp.asarray(x, jnp.float32), jnp.asarray(a, jnp.float32))
    expected = a @ np.linalg.lstsq(a, x, rcond=None)[0]
    assert numerics.scaled_max_error(p, expected) <= 1e-5
    assert numerics.scaled_max_error(a.T @ np.asarray(r, np.float64), np.zeros(k)) <= 1e-5
    again, _ = linalg.project_onto_subspace(p, jnp.asarray(a, jnp.float32))
    assert numerics.scaled_max_error(again, p) <= 1e-5


@pytest.mark.parametrize("m, k, condition", [(5, 3, 10.0), (8, 8, 1e6), (4, 1, 1.0)])
def test_matrices_have_the_asked_spectrum(m, k, condition):
    s = linalg.geometric_spectrum(k, condition)
    a = linalg.with_singular_values(jax.random.key(m), m, s)
    assert a.shape == (m, k)
    assert np.allclose(np.linalg.svd(a, compute_uv=False), s, rtol=1e-9)
    assert np.isclose(np.linalg.cond(a), condition, rtol=1e-6)
    eig = np.linspace(-1.0, 3.0, k)
    h = linalg.with_eigenvalues(jax.random.key(k), eig)
    assert np.allclose(h, h.T) and np.allclose(np.linalg.eigvalsh(h), eig, atol=1e-12)
    q = linalg.random_orthogonal(jax.random.key(1), m)
    assert np.allclose(q.T @ q, np.eye(m), atol=1e-12)


def test_lstsq_and_normal_equations_solve_well_conditioned_systems():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 6, 4))
    x = rng.standard_normal((3, 4))
    b = np.einsum("bmk,bk->bm", a, x)
    for solve in (linalg.lstsq, linalg.normal_equations):
        got = solve(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))
        assert numerics.scaled_max_error(got, x) <= 1e-4


def test_lstsq_gives_the_minimum_norm_solution_of_a_rank_deficient_system():
    s = np.array([1.0, 0.5, 0.0])
    a = linalg.with_singular_values(jax.random.key(3), 5, s)
    b = np.random.default_rng(1).standard_normal(5)
    got = linalg.lstsq(jnp.asarray(a[None], jnp.float32), jnp.asarray(b[None], jnp.float32))[0]
    assert numerics.scaled_max_error(got, np.linalg.pinv(a) @ b) <= 1e-4


def test_refusals():
    with pytest.raises(ValueError, match="vector"):
        linalg.norms(jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="order"):
        linalg.unit_ball("L3")
    with pytest.raises(ValueError, match="m >= K"):
        linalg.with_singular_values(jax.random.key(0), 2, np.ones(3))
    with pytest.raises(ValueError, match="condition"):
        linalg.geometric_spectrum(3, 0.5)


def test_normal_arrays_are_one_draw_sliced():
    a, b, c = linalg.normal_arrays(jax.random.key(0), (2, 3), (4,), ())
    assert (a.shape, b.shape, c.shape) == ((2, 3), (4,), ())
    whole = jax.random.normal(jax.random.key(0), (11,))
    assert np.array_equal(np.concatenate([a.ravel(), b, c.ravel()]), whole)
    (only,) = linalg.normal_arrays(jax.random.key(1), (5,))
    assert only.shape == (5,) and only.dtype == jnp.float32
    with pytest.raises(ValueError, match="at least one"):
        linalg.normal_arrays(jax.random.key(0))
