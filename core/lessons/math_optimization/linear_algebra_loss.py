"""A linear model's loss surface, for the lesson "Linear algebra and loss intuition".

Data x ~ N(0, Sigma) in 2-D (feature standard deviations s1, s2 and their correlation rho),
targets y = x . w_true + noise. The mean squared error L(w) = 1/(2P) ||X w - y||^2 is a
quadratic bowl: its Hessian is C = X^T X / P, the data's (uncentred) covariance, and its
minimum is w* = C^-1 X^T y / P. Around w* the contours L(w) - L* = c are ellipses with axes
along C's eigenvectors and semi-axes sqrt(2c / lambda_i): a large eigenvalue (a feature with
much spread) makes the bowl steep and narrow in that direction. Gradient descent
w <- w - lr (C w - X^T y / P) moves the error along eigenvector i by (1 - lr lambda_i) per
step: it zigzags across the narrow direction and crawls along the flat one. References in
NumPy float64: C and the loss on the grid from the data directly, the path in closed form.

Dimension glossary: P data points, G grid points, S steps, L contour levels.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from core.nn import chunked
from core.optim import linalg

W_TRUE = (1.0, -1.0)
START_OFFSET = (-2.0, 1.5)  # gradient descent starts at w* + this
LEVELS = (0.05, 0.2, 0.5, 1.0, 2.0)  # contour heights L(w) - L* drawn
OVERFLOW = 1e30
# float32 path vs the float64 closed form: rounding of C and of each step moves every mode's
# rate by ~eps32, so the relative error grows about linearly with the steps (as in
# curvature_hessians, measured below 1.5e-7 per step); this allowance is added per step.
PATH_ERROR_PER_STEP = 1e-6


def problem(std_1: float, std_2: float) -> str | None:
    """Why the loss has no unique minimum for these features, or None."""
    for name, std in (("feature 1", std_1), ("feature 2", std_2)):
        if std <= 0:
            return (
                f"{name} has standard deviation {std:g}: it is constant 0, so the model's "
                f"output never depends on its weight. C = X^T X / P is singular (an eigenvalue "
                "0), the bowl is a flat-bottomed valley and every point along its floor is a "
                "minimum: w* is not unique (the least-squares lesson's rank-deficient case). "
                "Give both features some spread."
            )
    return None


@dataclasses.dataclass(frozen=True)
class Data:
    """x_P2 and y_P (float32) with the covariance they were drawn from (float64)."""

    x_P2: jax.Array
    y_P: jax.Array
    sigma_22: np.ndarray


def make_data(
    key: jax.Array, points: int, std_1: float, std_2: float, correlation: float, noise: float
) -> Data:
    """P points x = L z (L L^T = Sigma), y = x . w_true + noise * e."""
    if reason := problem(std_1, std_2):
        raise ValueError(reason)
    if not -1 < correlation < 1 or noise < 0 or points < 2:
        raise ValueError(
            f"need |rho| < 1, noise >= 0, P >= 2; got {correlation}, {noise}, {points}"
        )
    sigma = np.array(
        [[std_1**2, correlation * std_1 * std_2], [correlation * std_1 * std_2, std_2**2]]
    )
    z, e = linalg.normal_arrays(key, (points, 2), (points,))
    chol = jnp.asarray(np.linalg.cholesky(sigma), jnp.float32)
    x = z @ chol.T
    return Data(x, x @ jnp.asarray(W_TRUE, jnp.float32) + noise * e, sigma)


@jax.jit
def geometry(x_P2, y_P):
    """(C, eigenvalues (descending), eigenvectors (columns), w*, X^T y / P), float32."""
    c = x_P2.T @ x_P2 / x_P2.shape[0]
    g = x_P2.T @ y_P / x_P2.shape[0]
    eigenvalues, vectors = jnp.linalg.eigh(c)
    return c, eigenvalues[::-1], vectors[:, ::-1], jnp.linalg.solve(c, g), g


@jax.jit
def loss_grid(x_P2, y_P, w_G2):
    """L(w) = mean((X w - y)^2) / 2 at every grid point, float32."""
    return jax.vmap(lambda w: 0.5 * jnp.mean((x_P2 @ w - y_P) ** 2))(w_G2)


def _descent_step(w, _index, c, g, learning_rate):
    """One gradient step: (w_next, w_next)."""
    w = w - learning_rate * (c @ w - g)
    return w, w


# Steps per compiled chunk (core.nn.chunked): the steps control moves by 1, so chunks of one step
# (a jitted step called in a loop: at most 100 dispatches of a 2 x 2 update) make every count
# reuse one program; one scan of the run compiled again for every count.
STEPS_CHUNK = 1
_descent_chunks = chunked.ChunkedScan(_descent_step, chunk=STEPS_CHUNK)


def descend(c, g, w0, learning_rate: float, steps: int) -> tuple[np.ndarray, int | None]:
    """(path_S2, stopped_at): gradient descent in float32, cut at the first step whose
    iterate overflows (|w| > OVERFLOW or not finite); stopped_at is that step or None."""
    if learning_rate <= 0 or steps < 1:
        raise ValueError(f"need learning rate > 0 and steps >= 1, got {learning_rate}, {steps}")
    _, ws = _descent_chunks(w0, c, g, jnp.float32(learning_rate), steps=steps)
    path = np.concatenate([np.asarray(w0, np.float32)[None], ws]).astype(np.float64)
    bad = ~np.all(np.isfinite(path), axis=1) | (np.max(np.abs(path), axis=1) > OVERFLOW)
    stopped = int(np.argmax(bad)) if bad.any() else None
    return path[:stopped], stopped


def grid(w_star, eigenvalues, points: int = 41) -> tuple[np.ndarray, float]:
    """(w_G2, half-width): a square grid around w* wide enough for the largest contour and
    the start point."""
    semi = np.sqrt(2 * max(LEVELS) / np.maximum(np.asarray(eigenvalues, np.float64), 1e-12))
    half = 1.15 * max(float(np.max(semi)), float(np.max(np.abs(START_OFFSET))))
    half = min(half, 50.0)
    axis = np.linspace(-half, half, points)
    w1, w2 = np.meshgrid(axis + float(w_star[0]), axis + float(w_star[1]))
    return np.stack([w1.ravel(), w2.ravel()], axis=1), half


def ellipse_rows(w_star, eigenvalues, vectors, points: int = 73) -> list[dict]:
    """Points of the contours L(w) - L* = c: w* + sum_i sqrt(2c/lambda_i) (cos, sin)_i v_i."""
    w_star = np.asarray(w_star, np.float64)
    lam = np.asarray(eigenvalues, np.float64)
    v = np.asarray(vectors, np.float64)
    t = np.linspace(0, 2 * np.pi, points)
    rows = []
    for level in LEVELS:
        semi = np.sqrt(2 * level / lam)
        pts = (
            w_star
            + (semi[0] * np.cos(t))[:, None] * v[:, 0]
            + (semi[1] * np.sin(t))[:, None] * v[:, 1]
        )
        rows += [
            {"level": level, "order": i, "w1": float(p[0]), "w2": float(p[1])}
            for i, p in enumerate(pts)
        ]
    return rows


def axis_rows(w_star, eigenvalues, vectors) -> list[dict]:
    """The eigenvector axes through w*, each as long as the outermost contour's semi-axis."""
    w_star = np.asarray(w_star, np.float64)
    rows = []
    for i in range(2):
        semi = np.sqrt(2 * max(LEVELS) / float(eigenvalues[i]))
        direction = np.asarray(vectors, np.float64)[:, i]
        label = f"v{i + 1} (λ{i + 1} = {float(eigenvalues[i]):.3g})"
        for end, sign in enumerate((-1, 1)):
            p = w_star + sign * semi * direction
            rows.append({"axis": label, "end": end, "w1": float(p[0]), "w2": float(p[1])})
    return rows


def reference(x_P2, y_P, w_G2, w0, learning_rate: float, steps: int) -> dict:
    """NumPy float64: C, its eigenvalues (descending), the loss on the grid, the closed-form
    path w_t = w* + V (1 - lr lambda)^t V^T (w0 - w*)."""
    x, y = np.asarray(x_P2, np.float64), np.asarray(y_P, np.float64)
    c = x.T @ x / len(y)
    w_star = np.linalg.solve(c, x.T @ y / len(y))
    lam, v = np.linalg.eigh(c)
    residual = np.asarray(w_G2, np.float64) @ x.T - y
    with np.errstate(over="ignore", invalid="ignore"):
        factors = (1 - learning_rate * lam)[None, :] ** np.arange(steps + 1)[:, None]
    path = w_star + (factors * (v.T @ (np.asarray(w0, np.float64) - w_star))) @ v.T
    return {
        "c": c,
        "eigenvalues": lam[::-1],
        "loss": 0.5 * np.mean(residual**2, axis=1),
        "path": path,
        "w_star": w_star,
    }
