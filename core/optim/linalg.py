"""Linear-algebra pieces the phase "Math & optimization" teaches from, in JAX.

- ``norms``: L1, L2 and inf norms; ``unit_ball`` points on the 2-D unit circle of each;
- ``project_onto_vector`` and ``project_onto_subspace`` (through a reduced QR): the
  projection and its residual, which is orthogonal to what it was projected onto;
- ``random_orthogonal``, ``with_singular_values``, ``with_eigenvalues``: test matrices of a
  chosen spectrum (built in NumPy float64 from a JAX key, so the spectrum is exact to float64);
- ``lstsq`` and ``normal_equations``: the two ways to solve min ||A x - b||, vmapped over a
  stack of problems.

Dimension glossary: N vector length (dimension), K subspace rank, M rows, P points, B batch.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

ORDERS = ("L1", "L2", "inf")
_ORD = {"L1": 1, "L2": 2, "inf": np.inf}


def norms(x_N: jax.Array) -> dict[str, jax.Array]:
    """{"L1": sum |x_i|, "L2": sqrt(sum x_i^2), "inf": max |x_i|} of a vector."""
    x_N = jnp.asarray(x_N)
    if x_N.ndim != 1:
        raise ValueError(f"norms takes a vector, got shape {x_N.shape}")
    return {name: jnp.linalg.norm(x_N, ord=_ORD[name]) for name in ORDERS}


def unit_ball(order: str, points: int = 181) -> np.ndarray:
    """(points, 2): the boundary {u : ||u||_order = 1} in 2-D, going once around.

    Each direction (cos t, sin t) scaled by 1 / its norm: the L1 ball is a diamond, L2 a
    circle, inf a square.
    """
    if order not in _ORD:
        raise ValueError(f"order is one of {', '.join(ORDERS)}, got {order!r}")
    if points < 5:
        raise ValueError(f"a closed curve needs at least 5 points, got {points}")
    t = np.linspace(0.0, 2 * np.pi, points)
    d_P2 = np.stack([np.cos(t), np.sin(t)], axis=1)
    return d_P2 / np.linalg.norm(d_P2, ord=_ORD[order], axis=1, keepdims=True)


def project_onto_vector(x_N: jax.Array, a_N: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(projection, residual) of x onto the line through a: (x.a / a.a) a and x - that.

    Refuses a zero ``a`` (a line needs a direction); the app explains it before calling.
    """
    if x_N.shape != a_N.shape or x_N.ndim != 1:
        raise ValueError(f"x and a must be vectors of one length, got {x_N.shape}, {a_N.shape}")
    if not bool(jnp.any(a_N != 0)):
        raise ValueError("cannot project onto the zero vector: it spans no line")
    projection = (jnp.dot(x_N, a_N) / jnp.dot(a_N, a_N)) * a_N
    return projection, x_N - projection


def project_onto_subspace(x_N: jax.Array, a_NK: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(projection, residual) of x onto the span of the K columns of a (N >= K, full rank).

    Q R = a (reduced QR): Q's orthonormal columns span the same subspace, and the
    projection is Q (Q^T x). The residual is orthogonal to every column of a.
    """
    if a_NK.ndim != 2 or x_N.shape != (a_NK.shape[0],):
        raise ValueError(f"x (N,) and a (N, K) expected, got {x_N.shape}, {a_NK.shape}")
    q_NK, _ = jnp.linalg.qr(a_NK, mode="reduced")
    projection = q_NK @ (q_NK.T @ x_N)
    return projection, x_N - projection


@functools.partial(jax.jit, static_argnames="shapes")
def _normal_arrays(key, shapes):
    sizes = [math.prod(s) for s in shapes]
    z = jax.random.normal(key, (sum(sizes),))
    parts = jnp.split(z, np.cumsum(sizes)[:-1]) if len(sizes) > 1 else [z]
    return tuple(part.reshape(s) for part, s in zip(parts, shapes, strict=True))


def normal_arrays(key: jax.Array, *shapes: tuple[int, ...]) -> tuple[jax.Array, ...]:
    """Standard normal float32 arrays of these shapes from ONE compiled draw, sliced.

    Every ``jax.random`` call compiles its own random-bits program (slow on XLA:CPU: about
    a second each on two cores); one draw of the total size costs one compile per set of shapes.
    """
    if not shapes:
        raise ValueError("normal_arrays needs at least one shape")
    return _normal_arrays(key, tuple(tuple(int(d) for d in s) for s in shapes))


def random_orthogonal(key: jax.Array, n: int) -> np.ndarray:
    """A random n x n orthogonal matrix (Haar: QR of a Gaussian, signs fixed), float64."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return orthogonal_from_gaussian(jax.random.normal(key, (n, n)))


def orthogonal_from_gaussian(g_NN) -> np.ndarray:
    """The orthogonal factor of a square Gaussian matrix (QR, signs fixed), float64: Haar
    distributed. Lets a caller draw all its randomness in one compiled call."""
    g = np.asarray(g_NN, np.float64)
    if g.ndim != 2 or g.shape[0] != g.shape[1]:
        raise ValueError(f"a square matrix expected, got shape {g.shape}")
    q, r = np.linalg.qr(g)
    return q * np.sign(np.where(np.diag(r) == 0, 1.0, np.diag(r)))


def with_singular_values(key: jax.Array, m: int, s_K: np.ndarray) -> np.ndarray:
    """An m x K float64 matrix U diag(s) V^T with exactly the singular values s (m >= K)."""
    s_K = np.asarray(s_K, np.float64)
    k = s_K.size
    if m < k or k < 1 or np.any(s_K < 0):
        raise ValueError(f"need m >= K >= 1 and s >= 0, got m={m}, s={s_K}")
    key_u, key_v = jax.random.split(key)
    u_MK = random_orthogonal(key_u, m)[:, :k]
    v_KK = random_orthogonal(key_v, k)
    return (u_MK * s_K) @ v_KK.T


def with_eigenvalues(key: jax.Array, eigenvalues_N: np.ndarray) -> np.ndarray:
    """A symmetric N x N float64 matrix Q diag(lambda) Q^T with exactly these eigenvalues."""
    eigenvalues_N = np.asarray(eigenvalues_N, np.float64)
    q = random_orthogonal(key, eigenvalues_N.size)
    h = (q * eigenvalues_N) @ q.T
    return (h + h.T) / 2


def geometric_spectrum(k: int, condition: float) -> np.ndarray:
    """K singular values from 1 down to 1/condition, evenly spaced in log (ratio = condition)."""
    if k < 1 or condition < 1:
        raise ValueError(f"need K >= 1 and condition >= 1, got {k}, {condition}")
    return np.logspace(0.0, -np.log10(condition), k) if k > 1 else np.ones(1)


@jax.jit
def lstsq(a_BMK: jax.Array, b_BM: jax.Array) -> jax.Array:
    """min ||A x - b|| for each of B problems by ``jnp.linalg.lstsq`` (SVD; the minimum-norm
    solution when A is rank deficient). Works in the inputs' dtype."""
    return jax.vmap(lambda a, b: jnp.linalg.lstsq(a, b)[0])(a_BMK, b_BM)


@jax.jit
def normal_equations(a_BMK: jax.Array, b_BM: jax.Array) -> jax.Array:
    """Solve A^T A x = A^T b for each of B problems (Cholesky-free ``jnp.linalg.solve``).

    Forming A^T A squares the condition number: its rounding error grows like cond(A)^2.
    """

    def one(a, b):
        return jnp.linalg.solve(a.T @ a, a.T @ b)

    return jax.vmap(one)(a_BMK, b_BM)
