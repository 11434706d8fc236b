"""Hessians, their eigenvalues and the learning-rate limit, for the lesson "Curvature,
Hessians, and learning rates".

A quadratic f(w) = 1/2 (w - w*)^T H (w - w*) with H = Q diag(lambda) Q^T of chosen eigenvalues:
its Hessian is H everywhere, and gradient descent w <- w - lr H (w - w*) multiplies the
error's component along eigenvector i by (1 - lr lambda_i) every step. It converges when every
|1 - lr lambda_i| < 1, i.e. lr < 2 / lambda_max, and diverges past it (the lesson's claim,
proven over seeds in the test). A small tanh network's loss has a Hessian that changes with
the weights; at one point it is computed twice: ``jax.hessian`` and column by column from
Hessian-vector products (``jax.jvp`` of ``jax.grad``), and its top eigenvalue by power
iteration on HVPs alone. References: NumPy float64 (the closed-form trajectory; the network's
Hessian by central differences of a hand-written NumPy gradient).

Dimension glossary: N parameters of the quadratic, P network parameters, S steps,
E examples, D input features, H hidden units.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics
from core.nn import chunked
from core.optim import linalg

OVERFLOW = 1e30  # a loss gap past this is called overflowed: the trajectory is cut there
# A run "diverges" when its final loss gap exceeds its first by this factor; 5% past the limit
# for 100 steps gives a growth of 1.1^200 ~ 2e8, far past it.
DIVERGENCE_FACTOR = 1e3
EXAMPLES, INPUTS = 16, 2  # the network's data
POWER_ITERATIONS = 100
# Central differences of a float64 gradient: error ~ eps^(2/3) ~ 4e-11 of the gradient scale
# per entry; 1e-7 leaves room for the network's larger third derivatives.
FD_HESSIAN_TOLERANCE = 1e-7


@dataclasses.dataclass(frozen=True)
class Quadratic:
    """f(w) = 1/2 (w - w*)^T H (w - w*), float64 NumPy: H_NN, its eigenvalues, w*_N, w0_N."""

    h_NN: np.ndarray
    eigenvalues_N: np.ndarray
    w_star_N: np.ndarray
    w0_N: np.ndarray

    @property
    def limit(self) -> float:
        """The largest stable learning rate: 2 / lambda_max."""
        return 2.0 / float(np.max(self.eigenvalues_N))


def spectrum_problem(lam_min: float, lam_max: float) -> str | None:
    """Why a quadratic with these extreme eigenvalues has no minimum to descend to, or None."""
    if lam_min > lam_max:
        return f"lambda_min = {lam_min:g} is above lambda_max = {lam_max:g}: swap them"
    if lam_min <= 0:
        return (
            f"lambda_min = {lam_min:g} <= 0: along that eigenvector f is flat or curves down, so "
            "f has no unique minimum (a valley or a saddle) and gradient descent has nothing "
            "to converge to; keep every eigenvalue > 0 (a convex bowl)"
        )
    return None


def quadratic(key: jax.Array, dim: int, lam_min: float, lam_max: float) -> Quadratic:
    """A random quadratic of ``dim`` parameters with eigenvalues spaced geometrically."""
    if problem := spectrum_problem(lam_min, lam_max):
        raise ValueError(problem)
    g_NN, w_star, w0 = linalg.normal_arrays(key, (dim, dim), (dim,), (dim,))
    eigenvalues = np.geomspace(lam_max, lam_min, dim) if dim > 1 else np.array([lam_max])
    q_NN = linalg.orthogonal_from_gaussian(g_NN)
    h_NN = (q_NN * eigenvalues) @ q_NN.T
    return Quadratic(
        h_NN=(h_NN + h_NN.T) / 2,
        eigenvalues_N=eigenvalues,
        w_star_N=np.asarray(w_star, np.float64),
        w0_N=np.asarray(w0, np.float64),
    )


def quadratic_loss(w_N, h_NN, w_star_N):
    """1/2 (w - w*)^T H (w - w*) in JAX (the dtype of its inputs)."""
    d = w_N - w_star_N
    return 0.5 * d @ (h_NN @ d)


def hvp(f, w, v):
    """The Hessian-vector product H(w) v as jvp of grad: forward-over-reverse, one pass."""
    return jax.jvp(jax.grad(f), (w,), (v,))[1]


def hessian_from_hvps(f, w_P):
    """The full Hessian, one HVP per basis vector (vmapped): P products of cost ~ 2 grads."""
    return jax.vmap(lambda v: hvp(f, w_P, v))(jnp.eye(w_P.size, dtype=w_P.dtype))


def power_iteration(f, w_P, key: jax.Array, iterations: int = POWER_ITERATIONS) -> jax.Array:
    """The eigenvalue of largest magnitude of H(w), from HVPs only (H is never formed)."""
    v = jax.random.normal(key, w_P.shape, w_P.dtype)

    def step(v, _):
        hv = hvp(f, w_P, v)
        return hv / jnp.linalg.norm(hv), None

    v, _ = jax.lax.scan(step, v / jnp.linalg.norm(v), None, length=iterations)
    return v @ hvp(f, w_P, v)


def _descent_step(w_N, _index, h_NN, w_star_N, learning_rate):
    """One gradient step on the quadratic: (w_next, w_next)."""
    w_next = w_N - learning_rate * (h_NN @ (w_N - w_star_N))
    return w_next, w_next


# Steps per compiled chunk (core.nn.chunked): the steps control moves by 10, so every count it
# offers reuses one program (one scan of the run compiled again for every count).
STEPS_CHUNK = 10
_descent_chunks = chunked.ChunkedScan(_descent_step, chunk=STEPS_CHUNK)


@jax.jit
def _gaps(w_KN, h_NN, w_star_N):
    return jax.vmap(lambda w: quadratic_loss(w, h_NN, w_star_N))(w_KN)


def _gaps_by_block(w_SN, h_NN, w_star_N) -> np.ndarray:
    """The loss gap of every row, STEPS_CHUNK rows per call (the last block padded): one
    program for every step count, where one vmap over all rows compiled per count."""
    rows = len(w_SN)
    padded = np.zeros((-(-rows // STEPS_CHUNK) * STEPS_CHUNK, w_SN.shape[1]), w_SN.dtype)
    padded[:rows] = w_SN
    blocks = [
        _gaps(padded[start : start + STEPS_CHUNK], h_NN, w_star_N)
        for start in range(0, len(padded), STEPS_CHUNK)
    ]
    return np.concatenate(jax.device_get(blocks))[:rows]


@dataclasses.dataclass(frozen=True)
class Descent:
    """Gradient descent on a quadratic, in float32: iterates w_SN and loss gaps f(w) - f*,
    step 0 (the start) to the last finite step; ``stopped_at`` is the step where the gap
    overflowed (the run is cut there) or None."""

    learning_rate: float
    w_SN: np.ndarray
    gap_S: np.ndarray
    stopped_at: int | None

    @property
    def diverged(self) -> bool:
        return self.stopped_at is not None or bool(
            self.gap_S[-1] > DIVERGENCE_FACTOR * max(self.gap_S[0], 1e-30)
        )


def descend(q: Quadratic, learning_rate: float, steps: int) -> Descent:
    """Run ``steps`` of gradient descent from q.w0 (float32), cut where the gap overflows."""
    if learning_rate <= 0 or steps < 1:
        raise ValueError(f"learning rate must be > 0 and steps >= 1, got {learning_rate}, {steps}")
    h_NN, w_star_N, w0_N = (np.asarray(a, np.float32) for a in (q.h_NN, q.w_star_N, q.w0_N))
    _, ws = _descent_chunks(w0_N, h_NN, w_star_N, np.float32(learning_rate), steps=steps)
    w_SN = np.concatenate([w0_N[None], ws])
    gaps = _gaps_by_block(w_SN, h_NN, w_star_N)
    w_SN, gaps = w_SN.astype(np.float64), gaps.astype(np.float64)
    bad = ~np.isfinite(gaps) | (gaps > OVERFLOW) | ~np.all(np.isfinite(w_SN), axis=1)
    stopped_at = int(np.argmax(bad)) if bad.any() else None
    keep = slice(None, stopped_at)
    return Descent(learning_rate, w_SN[keep], gaps[keep], stopped_at)


def descent_reference(q: Quadratic, learning_rate: float, steps: int) -> np.ndarray:
    """The iterates in closed form, NumPy float64: w_t = w* + Q (1 - lr lambda)^t Q^T (w0 - w*).

    (H's eigenvectors come from ``np.linalg.eigh``; the eigenvalues are the chosen ones.)
    """
    eigenvalues, q_NN = np.linalg.eigh(q.h_NN)
    c_N = q_NN.T @ (q.w0_N - q.w_star_N)
    t_S = np.arange(steps + 1)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        factors_SN = (1.0 - learning_rate * eigenvalues)[None, :] ** t_S
    return q.w_star_N + (factors_SN * c_N) @ q_NN.T


def mode_factors(q: Quadratic, learning_rate: float) -> list[dict]:
    """Per eigenvalue: the factor 1 - lr lambda the error along its eigenvector gets per step."""
    return [
        {
            "eigenvalue": float(lam),
            "factor 1 - lr lambda": float(1 - learning_rate * lam),
            "|factor|": float(abs(1 - learning_rate * lam)),
            "grows": bool(abs(1 - learning_rate * lam) > 1),
        }
        for lam in q.eigenvalues_N
    ]


# --- The network ----------------------------------------------------------------------------


def network(key: jax.Array, hidden: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(w_P, x_ED, y_E): flat weights of a D -> H (tanh) -> 1 network, and random data."""
    if hidden < 1:
        raise ValueError(f"hidden must be >= 1, got {hidden}")
    w_P, x_ED = linalg.normal_arrays(key, (hidden * (INPUTS + 1),), (EXAMPLES, INPUTS))
    y_E = jnp.sin(2 * x_ED[:, 0]) * jnp.cos(x_ED[:, 1])
    return w_P / np.sqrt(INPUTS), x_ED, y_E


def network_loss(w_P, x_ED, y_E):
    """mean((tanh(x W1^T) w2 - y)^2), W1 = w[:H*D] as H x D, w2 = w[H*D:]."""
    hidden = w_P.size // (INPUTS + 1)
    w1_HD = w_P[: hidden * INPUTS].reshape(hidden, INPUTS)
    w2_H = w_P[hidden * INPUTS :]
    return jnp.mean((jnp.tanh(x_ED @ w1_HD.T) @ w2_H - y_E) ** 2)


def network_gradient_numpy(w_P: np.ndarray, x_ED: np.ndarray, y_E: np.ndarray) -> np.ndarray:
    """The loss gradient by hand-written backprop, NumPy float64 (no JAX)."""
    hidden = w_P.size // (INPUTS + 1)
    w1, w2 = w_P[: hidden * INPUTS].reshape(hidden, INPUTS), w_P[hidden * INPUTS :]
    a = np.tanh(x_ED @ w1.T)
    d_out = 2 * (a @ w2 - y_E) / y_E.size
    d_pre = np.outer(d_out, w2) * (1 - a**2)
    return np.concatenate([(d_pre.T @ x_ED).ravel(), a.T @ d_out])


def network_hessian_reference(w_P, x_ED, y_E) -> np.ndarray:
    """The Hessian by central differences of the NumPy float64 gradient (symmetrized)."""
    w = np.asarray(w_P, np.float64)
    x, y = np.asarray(x_ED, np.float64), np.asarray(y_E, np.float64)
    h = np.cbrt(np.finfo(np.float64).eps) * np.maximum(1.0, np.abs(w))
    columns = []
    for i in range(w.size):
        e = np.zeros_like(w)
        e[i] = h[i]
        up, down = network_gradient_numpy(w + e, x, y), network_gradient_numpy(w - e, x, y)
        columns.append((up - down) / (2 * h[i]))
    hessian = np.stack(columns, axis=1)
    return (hessian + hessian.T) / 2


@jax.jit
def network_hessians(w_P, x_ED, y_E, key):
    """(jax.hessian, Hessian from HVPs, its eigenvalues largest first, power-iteration
    eigenvalue of largest magnitude), float32, every matmul at HIGHEST precision: they are
    compared with NumPy float64 and H with its transpose, and a TPU's DEFAULT (one bfloat16
    pass per matmul) makes H[i, j] and H[j, i], reached by different products, differ."""

    def loss(w):
        return network_loss(w, x_ED, y_E)

    with jax.default_matmul_precision("highest"):
        hessian = jax.hessian(loss)(w_P)
        eigenvalues = jnp.linalg.eigvalsh(hessian)[::-1]
        from_hvps = hessian_from_hvps(loss, w_P)
        return hessian, from_hvps, eigenvalues, power_iteration(loss, w_P, key)


# np.allclose's default atol (1e-8) over its rtol (1e-5): asymmetry's floor, relative to rtol.
ASYMMETRY_FLOOR = 1e-3


def asymmetry(h_PP) -> float:
    """max over entries of |H - H^T| / (ASYMMETRY_FLOOR + |H^T|): the smallest rtol at which
    np.allclose(H, H.T, rtol, atol=rtol * ASYMMETRY_FLOOR) holds. At most 1e-5 is exactly
    np.allclose(H, H.T) with its defaults; inf if H holds a NaN or an inf."""
    h = numerics.as_float64(h_PP)
    if not np.all(np.isfinite(h)):
        return float("inf")
    return float(np.max(np.abs(h - h.T) / (ASYMMETRY_FLOOR + np.abs(h.T)), initial=0.0))


@jax.jit
def quadratic_hessians(h_NN, w_star_N, w_N):
    """(jax.hessian, Hessian from HVPs, its eigenvalues largest first) of the quadratic at w,
    float32."""

    def loss(w):
        return quadratic_loss(w, h_NN, w_star_N)

    hessian = jax.hessian(loss)(w_N)
    return hessian, hessian_from_hvps(loss, w_N), jnp.linalg.eigvalsh(hessian)[::-1]


# The trajectory in float32 vs the float64 closed form: H is rounded to float32, so each mode
# grows or shrinks at a rate off by ~eps32 and the relative error grows about linearly with
# the step count (measured worst 1.4e-7 per step over seeds, sizes and rates to 1.5x the
# limit); this per-step allowance is 7x that, added to the float32 tolerance.
TRAJECTORY_ERROR_PER_STEP = 1e-6
# The claim "diverges past 2/lambda_max, converges below it" is made (and tested) at rates at
# least this far from the limit, with at least CLAIM_STEPS steps: closer to the limit the
# growth (or decay) of the top mode is too slow to tell in a short run.
CLAIM_MARGIN = 0.05
CLAIM_STEPS = 100


def claim_applies(learning_rate: float, limit: float, steps: int) -> bool:
    """Whether the lesson's claim is made for this rate: far enough from the limit, and long."""
    return abs(learning_rate / limit - 1) >= CLAIM_MARGIN and steps >= CLAIM_STEPS
