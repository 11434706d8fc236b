import jax
import numpy as np
import pytest

from core.lessons.math_optimization import least_squares as ls


def _slope(rows, method, dtype, lo, hi):
    by = {r["condition"]: r["error"] for r in rows if (r["method"], r["dtype"]) == (method, dtype)}
    return np.log10(np.float64(by[hi]) / by[lo]) / np.log10(hi / lo)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rows, cols", [(2, 2), (12, 6), (64, 16)])
def test_error_grows_like_kappa_for_lstsq_and_kappa_squared_for_normal_equations(seed, rows, cols):
    sweep = ls.sweep(jax.random.key(seed), rows, cols)
    assert 0.5 <= _slope(sweep, "lstsq", "float64", 1e2, 1e10) <= 1.5
    assert 1.5 <= _slope(sweep, "normal equations", "float64", 1e1, 1e6) <= 2.5
    for r in sweep:
        if r["predicted"] < 1e-2:  # below saturation: within the slack of the bound
            assert r["error"] <= ls.error_bound(r["method"], r["dtype"], r["condition"]), r
    # at κ = 1e4 float32 normal equations are >10x worse than float32 lstsq (they have lost
    # nearly every digit); lstsq float64 still has digits at κ = 1e12
    by = {(r["method"], r["dtype"], r["condition"]): r["error"] for r in sweep}
    assert by[("normal equations", "float32", 1e4)] > 10 * by[("lstsq", "float32", 1e4)]
    assert by[("lstsq", "float64", 1e12)] < 1e-2


@pytest.mark.parametrize("rank", [1, 3, 5])
def test_rank_deficient_lstsq_is_the_minimum_norm_solution(rank):
    a, x, b = ls.systems(jax.random.key(rank), 10, 6, rank, [100.0])
    pinv_solution = np.linalg.pinv(a[0]) @ b[0]
    for dtype in ls.DTYPES:
        got = ls.solve(a, b, "lstsq", dtype)[0]
        bound = max(ls.error_bound("lstsq", dtype, 100.0), 1e-12)
        assert ls.relative_errors(got[None], pinv_solution[None])[0] <= bound
    # another solution (true x) fits as well but is longer; the null space is K - rank wide
    assert np.linalg.norm(a[0] @ x[0] - b[0]) <= 1e-12
    assert np.linalg.norm(pinv_solution) < np.linalg.norm(x[0])
    assert ls.null_space(a[0]).shape == (6, 6 - rank)
    family = ls.solution_family(a[0], b[0], pinv_solution)
    residuals = [r["residual ||A x - b||"] for r in family]
    norms = [r["||x||"] for r in family]
    assert max(residuals) <= 1e-10 and min(norms) == pytest.approx(np.linalg.norm(pinv_solution))


def test_systems_have_the_asked_spectrum():
    a, x, b = ls.systems(jax.random.key(0), 8, 4, 3, [1.0, 1e6])
    assert np.allclose(np.linalg.svd(a[1], compute_uv=False), [1, 1e-3, 1e-6, 0], atol=1e-12)
    assert np.allclose(np.einsum("cmk,ck->cm", a, x), b)
    assert ls.solution_family(np.eye(3), np.ones(3), np.ones(3)) == []


def test_problems():
    assert "M >= K" in ls.problem(3, 5, 2)
    assert "at most its number of columns" in ls.problem(8, 4, 6)
    assert ls.problem(4, 4, 4) is None
    assert "singular" in ls.normal_equations_problem(2, 4)
    assert ls.normal_equations_problem(4, 4) is None
    with pytest.raises(ValueError, match="M >= K"):
        ls.systems(jax.random.key(0), 2, 3, 2, [1.0])


@pytest.mark.parametrize("log10_condition", [0.0, 4.0, 4.5, 8.0, 12.0])
@pytest.mark.parametrize("rows, cols, rank", [(12, 6, 6), (12, 6, 3), (64, 16, 16)])
def test_the_lstsq_check_never_passes_on_a_vacuous_tolerance(log10_condition, rows, cols, rank):
    # issue 25: at κ = 1e8 the float32 tolerance 50 κ ε was 6e2, so x = 0 passed
    condition = 10.0**log10_condition
    a, _, b = ls.systems(jax.random.key(1), rows, cols, rank, [condition])
    solved = {dtype: ls.solve(a, b, "lstsq", dtype)[0] for dtype in ls.DTYPES}
    errors, tolerances, no_digits = ls.lstsq_check(a[0], b[0], solved, condition)
    assert all(errors[name] <= tolerances[name] for name in errors), errors
    assert max(tolerances.values()) < ls.MEANINGFUL_BOUND
    assert no_digits == [d for d in ls.DTYPES if ls.error_bound("lstsq", d, condition) >= 0.1]
    # planted: x = 0, and the answer nudged along A's strongest direction, fail in every dtype
    strongest = np.linalg.svd(a[0])[2][0]
    for dtype in ls.DTYPES:
        nudged = solved[dtype] + 1e-3 * np.linalg.norm(solved[dtype]) * strongest
        for wrong in (np.zeros(cols), nudged):
            errors, tolerances, _ = ls.lstsq_check(a[0], b[0], {dtype: wrong}, condition)
            assert any(not errors[n] <= tolerances[n] for n in errors), (dtype, errors)


def test_the_lstsq_check_on_a_tpu_host_judges_float64_as_computed_on_the_cpu(monkeypatch):
    """On the v5e chip the check raised 'a TPU has no float64' (issue 37): the float64 solve
    runs on the CPU device, so its tolerance is the CPU's; float32's follows the TPU rule."""
    from core import numerics

    a, _, b = ls.systems(jax.random.key(1), 12, 6, 6, [10.0])
    solved = {dtype: ls.solve(a, b, "lstsq", dtype)[0] for dtype in ls.DTYPES}
    monkeypatch.setattr(numerics, "computed_backend", lambda: "tpu")
    errors, tolerances, _ = ls.lstsq_check(a[0], b[0], solved, 10.0)
    forward = {name: tolerances[name] for name in tolerances if "vs NumPy" in name}
    assert any(name.startswith("float64") for name in forward)
    assert all(errors[name] <= tolerances[name] for name in errors), errors
