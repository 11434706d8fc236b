"""Least squares in float32 and float64, for the lesson "Least squares, rank, and conditioning".

A system A x = b with A (M x K) built from chosen singular values (1 down to 1/cond, the
condition number; zeros past the rank), x a random vector and b = A x exactly (float64). Two
solvers, each in float32 and float64: ``jnp.linalg.lstsq`` (SVD; backward stable, relative
error ~ cond * eps) and the normal equations A^T A x = A^T b (forming A^T A squares the
condition number: error ~ cond^2 * eps). Swept over cond = 1 .. 1e12 the errors are straight
lines of slope 1 and 2 on log-log axes, until they saturate near 1. A rank-deficient A has
infinitely many least-squares solutions; lstsq returns the one of minimum norm (pinv(A) b),
while A^T A is singular and the normal equations have no unique answer.

Dimension glossary: M rows (equations), K columns (unknowns), C condition numbers swept.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics, runtime
from core.optim import linalg

METHODS = ("lstsq", "normal equations")
DTYPES = ("float32", "float64")
SWEEP_LOG10 = tuple(range(0, 13))  # cond = 1e0 .. 1e12: the chart's x axis
# Perturbation theory bounds the relative error of a backward-stable solve by ~ cond * eps
# times a modest factor of the sizes; measured here the ratio error / (cond * eps) stays below
# ~5 for lstsq (and error / (cond^2 * eps) below ~5 for the normal equations), over seeds and
# sizes up to 64 x 16. 50 keeps a margin of 10.
AMPLIFICATION_SLACK = 50.0
# A relative-error tolerance this large guarantees no correct digit: at 1 even x = 0 passes
# (its relative error is exactly 1). Past it the forward error is not checked; the optimality
# of the solution (A^T r ~ 0, which holds at any conditioning) is.
MEANINGFUL_BOUND = 0.1
# A backward-stable solve leaves ||A^T r||_inf <= c eps ||A|| (||A|| ||x|| + ||b||) whatever the
# conditioning: measured c stays below ~14 (float64) and ~3 (float32) over seeds 0-3, sizes up
# to 64 x 16, ranks down to 1 and cond 1 .. 1e12 in half decades. 100 keeps a margin of 7.
OPTIMALITY_SLACK = 100.0


def problem(rows: int, cols: int, rank: int) -> str | None:
    """Why this system cannot be built, or None."""
    if cols > rows:
        return (
            f"{cols} unknowns from {rows} equations: this lesson keeps M >= K (an "
            "underdetermined system is always rank deficient: its minimum-norm solution is "
            "shown with rank < K instead)"
        )
    if rank > cols:
        return f"rank {rank} > {cols} columns: a matrix's rank is at most its number of columns"
    return None


def normal_equations_problem(rank: int, cols: int) -> str | None:
    """Why the normal equations cannot solve this system, or None."""
    if rank < cols:
        return (
            f"A has rank {rank} < {cols} columns, so A^T A ({cols} x {cols}) has rank {rank}: "
            "it is singular, `solve` divides by (rounded) zeros and returns garbage, inf or NaN. "
            "The least-squares solutions form a whole affine subspace; lstsq (above) picks the "
            "one of minimum norm. Switch the normal equations off, or raise the rank to K."
        )
    return None


def singular_values(cols: int, rank: int, condition: float) -> np.ndarray:
    """K singular values: ``rank`` of them from 1 to 1/condition (log spaced), then zeros."""
    return np.concatenate([linalg.geometric_spectrum(rank, condition), np.zeros(cols - rank)])


def systems(
    key: jax.Array, rows: int, cols: int, rank: int, conditions
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a_CMK, x_CK, b_CM) float64: one system per condition number, same U, V and x.

    b = A x exactly (in float64): the system is consistent, so every error comes from
    rounding, amplified by the conditioning.
    """
    if reason := problem(rows, cols, rank):
        raise ValueError(reason)
    g_u, g_v, x = linalg.normal_arrays(key, (rows, rows), (cols, cols), (cols,))
    u_MK = linalg.orthogonal_from_gaussian(g_u)[:, :cols]
    v_KK = linalg.orthogonal_from_gaussian(g_v)
    x_K = np.asarray(x, np.float64)
    a_CMK = np.stack([(u_MK * singular_values(cols, rank, c)) @ v_KK.T for c in conditions])
    b_CM = np.einsum("cmk,k->cm", a_CMK, x_K)
    return a_CMK, np.broadcast_to(x_K, (len(conditions), cols)).copy(), b_CM


def solve(a_CMK: np.ndarray, b_CM: np.ndarray, method: str, dtype: str) -> np.ndarray:
    """Solve every system by ``method`` in ``dtype`` (float64 inside jax.enable_x64, on the
    host CPU when JAX's default backend is a TPU: runtime.enable_float64);
    returns float64 NumPy (non-finite entries kept: the caller reports them)."""
    solver = {"lstsq": linalg.lstsq, "normal equations": linalg.normal_equations}[method]
    if dtype == "float64":
        with runtime.enable_float64():
            return np.asarray(solver(jnp.asarray(a_CMK), jnp.asarray(b_CM)), np.float64)
    if dtype != "float32":
        raise ValueError(f"dtype is one of {', '.join(DTYPES)}, got {dtype!r}")
    return np.asarray(
        solver(jnp.asarray(a_CMK, jnp.float32), jnp.asarray(b_CM, jnp.float32)), np.float64
    )


def relative_errors(x_CK: np.ndarray, reference_CK: np.ndarray) -> np.ndarray:
    """||x - ref|| / ||ref|| per system, inf where x is not finite."""
    with np.errstate(invalid="ignore", over="ignore"):
        errors = np.linalg.norm(x_CK - reference_CK, axis=1) / np.linalg.norm(reference_CK, axis=1)
    return np.where(np.isfinite(errors), errors, np.inf)


def sweep(key: jax.Array, rows: int, cols: int, log10_conditions=SWEEP_LOG10) -> list[dict]:
    """Rows {method, dtype, condition, error, predicted}: the error vs cond chart.

    ``error`` is ||x_hat - x|| / ||x|| (inf when the solve gave inf or NaN); ``predicted``
    is cond * eps (lstsq) or cond^2 * eps (normal equations), capped at 1.
    """
    conditions = [10.0**e for e in log10_conditions]
    a, x, b = systems(key, rows, cols, cols, conditions)
    rows_out = []
    for method in METHODS:
        power = 1 if method == "lstsq" else 2
        for dtype in DTYPES:
            errors = relative_errors(solve(a, b, method, dtype), x)
            eps = float(np.finfo(dtype).eps)
            rows_out += [
                {
                    "method": method,
                    "dtype": dtype,
                    "condition": c,
                    "error": float(e),
                    "predicted": min(1.0, c**power * eps),
                }
                for c, e in zip(conditions, errors, strict=True)
            ]
    return rows_out


def error_bound(method: str, dtype: str, condition: float) -> float:
    """AMPLIFICATION_SLACK * cond^p * eps (p = 1 lstsq, 2 normal equations): the tolerance of
    a solve at this conditioning (vacuous once it passes 1)."""
    power = 1 if method == "lstsq" else 2
    return AMPLIFICATION_SLACK * condition**power * float(np.finfo(dtype).eps)


def optimality_error(a_MK: np.ndarray, b_M: np.ndarray, x_K: np.ndarray) -> float:
    """||A^T (A x - b)||_inf / (||A|| (||A|| ||x|| + ||b||)), in NumPy float64: zero exactly at
    a least-squares solution (the residual is orthogonal to A's columns), at any conditioning."""
    a, b, x = (np.asarray(v, np.float64) for v in (a_MK, b_M, x_K))
    norm_a = np.linalg.norm(a, 2)
    scale = norm_a * (norm_a * np.linalg.norm(x) + np.linalg.norm(b))
    with np.errstate(invalid="ignore", over="ignore"):
        error = float(np.max(np.abs(a.T @ (a @ x - b))) / max(scale, 1e-300))
    return error if np.isfinite(error) else float("inf")


def lstsq_check(
    a_MK: np.ndarray, b_M: np.ndarray, x_by_dtype: dict, condition: float
) -> tuple[dict, dict, list[str]]:
    """(errors, tolerances, dtypes without a forward check) for lstsq's solutions by dtype.

    Each solution is compared with NumPy float64 ``np.linalg.lstsq`` (relative error) within
    ``error_bound`` while that bound is below MEANINGFUL_BOUND; past it no correct digit is
    expected at this conditioning and only the optimality A^T r ~ 0 (within OPTIMALITY_SLACK
    eps, the same at every conditioning) is checked, which every solution must also meet.
    """
    reference = np.linalg.lstsq(np.asarray(a_MK, np.float64), b_M, rcond=None)[0]
    errors, tolerances, no_digits = {}, {}, []
    for dtype, x in x_by_dtype.items():
        bound = error_bound("lstsq", dtype, condition)
        if bound < MEANINGFUL_BOUND:
            name = f"{dtype} vs NumPy float64 lstsq (relative)"
            errors[name] = float(relative_errors(np.asarray(x)[None], reference[None])[0])
            # a float64 solve runs on the CPU device (runtime.enable_float64), even on a TPU host
            where = "cpu" if np.dtype(dtype) == np.float64 else None
            tolerances[name] = max(bound, numerics.tolerance(dtype, backend=where))
        else:
            no_digits.append(dtype)
        name = f"{dtype} optimality ||A^T r|| / (||A|| (||A|| ||x|| + ||b||))"
        errors[name] = optimality_error(a_MK, b_M, x)
        tolerances[name] = OPTIMALITY_SLACK * float(np.finfo(dtype).eps)
    return errors, tolerances, no_digits


def null_space(a_MK: np.ndarray) -> np.ndarray:
    """(K, K - rank): orthonormal vectors v with A v = 0 (float64 SVD, relative cut 1e-10)."""
    _, s, vt = np.linalg.svd(a_MK)
    rank = int(np.sum(s > 1e-10 * s[0]))
    return vt[rank:].T


def solution_family(a_MK: np.ndarray, b_M: np.ndarray, x_min_K: np.ndarray) -> list[dict]:
    """x_min + t v along a null-space direction v: the same residual, a larger norm."""
    v = null_space(a_MK)
    if v.shape[1] == 0:
        return []
    direction = v[:, 0]
    return [
        {
            "t": float(t),
            "residual ||A x - b||": float(np.linalg.norm(a_MK @ (x_min_K + t * direction) - b_M)),
            "||x||": float(np.linalg.norm(x_min_K + t * direction)),
        }
        for t in np.linspace(-2.0, 2.0, 21)
    ]
