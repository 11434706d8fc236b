"""Norms and projections, for the lesson "Vectors, norms, and projections".

Two parts. A vector x and a direction a typed by the learner: x's L1, L2 and inf norms and
its projection onto the line through a. Then a random K-dimensional subspace of R^N (K
Gaussian columns, from the seed) and a random x: its projection onto the subspace. In both,
the residual x - projection is orthogonal to what x was projected onto. The references are
NumPy float64 (``np.linalg.norm``; ``np.linalg.lstsq`` for the subspace, a different
algorithm from the lesson's QR).

Dimension glossary: N dimension, K subspace rank.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from core.optim import linalg

MAX_LENGTH = 16  # typed vectors: enough to see the norms differ, short enough to read
# Typed entries stay within float32's comfortable range: squares and dot products of
# entries up to 1e6 (1e12 * 16 terms) neither overflow nor lose the small entries entirely.
MAX_ENTRY = 1e6


def parse_vector(text: str) -> tuple[np.ndarray | None, str | None]:
    """("1, -2.5, 3" -> array([1, -2.5, 3]), None) or (None, why it is not a vector)."""
    parts = [p for p in text.replace(";", ",").replace(" ", ",").split(",") if p]
    if not parts:
        return None, f"{text!r} holds no number: type entries separated by commas"
    try:
        values = np.array([float(p) for p in parts])
    except ValueError:
        return None, f"{text!r} holds entries that are not numbers"
    if not np.all(np.isfinite(values)):
        return None, f"{text!r} holds an inf or a NaN: a vector needs finite entries"
    if np.any(np.abs(values) > MAX_ENTRY):
        return None, f"{text!r} has an entry beyond +-{MAX_ENTRY:g}; keep entries smaller"
    if values.size > MAX_LENGTH:
        return None, f"{text!r} has {values.size} entries; this lesson takes up to {MAX_LENGTH}"
    return values, None


def line_problem(x_N: np.ndarray, a_N: np.ndarray) -> str | None:
    """Why x cannot be projected onto the line through a, or None."""
    if x_N.shape != a_N.shape:
        return f"x has {x_N.size} entries and a has {a_N.size}: they must live in one space"
    if not np.any(a_N != 0):
        return (
            "a is the zero vector: it spans no line (every multiple of it is 0), and the "
            "projection formula (x.a / a.a) a divides 0 by 0"
        )
    if float(np.sum(np.square(a_N.astype(np.float32)))) < np.finfo(np.float32).tiny:
        return (
            "a is so short that a.a underflows to 0 in float32: the projection would divide by "
            "0 (scale a up: only its direction matters)"
        )
    return None


def subspace_problem(dim: int, rank: int) -> str | None:
    """Why K random columns cannot span a K-dimensional subspace of R^N, or None."""
    if rank > dim:
        return (
            f"{rank} vectors in R^{dim} cannot be independent: at most {dim} are, so they "
            f"span at most a {dim}-dimensional subspace (pick rank <= dimension)"
        )
    return None


def subspace_data(key: jax.Array, dim: int, rank: int) -> tuple[jax.Array, jax.Array]:
    """(x_N, a_NK): a random vector and K random Gaussian columns, float32."""
    return linalg.normal_arrays(key, (dim,), (dim, rank))


def norms_reference(x_N) -> dict[str, float]:
    """L1, L2, inf norms in NumPy float64."""
    x = np.asarray(x_N, np.float64)
    return {
        "L1": np.linalg.norm(x, 1),
        "L2": np.linalg.norm(x, 2),
        "inf": np.linalg.norm(x, np.inf),
    }


def line_reference(x_N, a_N) -> np.ndarray:
    """The projection onto the line through a, in NumPy float64: a (a.x) / (a.a)."""
    x, a = np.asarray(x_N, np.float64), np.asarray(a_N, np.float64)
    return a * (a @ x) / (a @ a)


def subspace_reference(x_N, a_NK) -> np.ndarray:
    """The projection onto span(a), in NumPy float64 by least squares: a lstsq(a, x)."""
    x, a = np.asarray(x_N, np.float64), np.asarray(a_NK, np.float64)
    return a @ np.linalg.lstsq(a, x, rcond=None)[0]


def orthogonality(residual_N, a_NK, x_N) -> float:
    """max_k |a_k . r| / (||a_k|| ||x||): the cosine-sized leak of the residual into each
    column (0 for an exactly orthogonal residual), in float64."""
    r = np.asarray(residual_N, np.float64)
    a = np.asarray(a_NK, np.float64).reshape(r.size, -1)
    scale = np.linalg.norm(a, axis=0) * max(np.linalg.norm(np.asarray(x_N, np.float64)), 1e-300)
    return float(np.max(np.abs(a.T @ r) / scale))


def ball_rows(x_N: np.ndarray | None) -> list[dict]:
    """Rows for the unit-ball chart: each ball's boundary, and x / ||x||_p on it (2-D x)."""
    rows = [
        {"norm": order, "u1": float(u[0]), "u2": float(u[1]), "order": i, "kind": "unit ball"}
        for order in linalg.ORDERS
        for i, u in enumerate(linalg.unit_ball(order))
    ]
    if x_N is not None and x_N.size == 2 and np.any(x_N != 0):
        for order, value in norms_reference(x_N).items():
            u = x_N / value
            rows.append({"norm": order, "u1": u[0], "u2": u[1], "order": 0, "kind": "x / ||x||"})
    return rows


def to_jnp(x_N: np.ndarray) -> jax.Array:
    """A typed vector as the float32 array the lesson computes with."""
    return jnp.asarray(x_N, jnp.float32)
