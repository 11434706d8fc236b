"""Lesson code of "Minibatches, expectation, and gradient noise".

Least squares, loss_n(w) = (x_n . w - y_n)^2 / 2, so the per-example gradient is
g_n = (x_n . w - y_n) x_n and the full-batch gradient g = mean_n g_n. A minibatch gradient
g_B = mean of B of the g_n is an unbiased estimate of g, E g_B = g, and its spread is

    with replacement      E ||g_B - g||^2 = sigma^2 / B
    without replacement   E ||g_B - g||^2 = sigma^2 / B * (N - B) / (N - 1)

where sigma^2 = mean_n ||g_n - g||^2 (the trace of the per-example gradient covariance).
Without replacement the noise vanishes at B = N (the batch is the data set).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

# The measured variance is a mean over D draws of ||g_B - g||^2, a heavy-tailed quantity
# (per-example gradients are residual x input), so its error is judged in its own standard
# errors (the draws' std / sqrt(D)). Heavy tails make that std an underestimate in a few
# hundred draws (at one feature the worst of 40 runs was 4.9 standard errors,
# minibatch_noise_test), so the bound is 6.
Z_BOUND = 6.0
# The mean of D minibatch gradients is off g by ~sqrt(variance / D); 25 x variance / D is a
# 5-sigma bound on its squared norm.
MEAN_SIGMAS = 5.0


def problem(examples: int, batch: int) -> str | None:
    """Why the epoch demo cannot run with this batch size, or None."""
    if batch > examples:
        return (
            f"a batch of {batch} from {examples} examples cannot be drawn without "
            "replacement: every example would have to appear more than once"
        )
    if examples % batch:
        return (
            f"B={batch} does not divide N={examples}: one epoch would end with a short batch "
            f"of {examples % batch}, and the average of the batch means would weight its "
            "examples more"
        )
    return None


@functools.partial(jax.jit, static_argnames=("examples", "features"))
def make_problem(key, examples: int, features: int, noise: float):
    """(x_ND, y_N, w_D): data y = x w* + noise, and the point w (= w* + N(0, 1)) where the
    gradients are taken."""
    kx, kw, kn, kp = jax.random.split(key, 4)
    x = jax.random.normal(kx, (examples, features))
    w_true = jax.random.normal(kw, (features,))
    y = x @ w_true + noise * jax.random.normal(kn, (examples,))
    return x, y, w_true + jax.random.normal(kp, (features,))


def loss_one(w_D, x_D, y):
    return 0.5 * (x_D @ w_D - y) ** 2


@jax.jit
def per_example_gradients(x_ND, y_N, w_D):
    """g_ND: the gradient of each example's loss, by vmap over jax.grad."""
    return jax.vmap(jax.grad(loss_one), in_axes=(None, 0, 0))(w_D, x_ND, y_N)


def full_gradient_reference(x_ND, y_N, w_D) -> np.ndarray:
    """X^T (X w - y) / N in NumPy float64 (the closed form)."""
    x, y, w = (np.asarray(a, np.float64) for a in (x_ND, y_N, w_D))
    return x.T @ (x @ w - y) / len(y)


@functools.partial(jax.jit, static_argnames=("draws", "replace", "sizes"))
def prefix_minibatch_means(key, g_ND, draws: int, replace: bool, sizes: tuple[int, ...]):
    """(draws, len(sizes), D): for each draw, the mean of the first B sampled per-example
    gradients for every B of ``sizes``: nested batches of one sample. Without replacement the
    sample is a permutation; with, N uniform indices."""
    n = g_ND.shape[0]
    keys = jax.random.split(key, draws)
    if replace:
        index = jax.vmap(lambda k: jax.random.randint(k, (n,), 0, n))(keys)
    else:
        index = jax.vmap(lambda k: jax.random.permutation(k, n))(keys)
    sums = jnp.cumsum(g_ND[index], axis=1)[:, jnp.asarray(sizes) - 1]
    return sums / jnp.asarray(sizes, g_ND.dtype)[None, :, None]


def batch_sizes(examples: int) -> list[int]:
    """Powers of two up to N, and N."""
    sizes = [2**k for k in range(int(np.log2(examples)) + 1)]
    return sizes + ([examples] if sizes[-1] != examples else [])


def noise_table(key, g_ND, draws: int) -> list[dict]:
    """For every batch size and both samplings: the measured E ||g_B - g||^2 over ``draws``
    draws, the closed form, the squared norm of the mean of the draws minus g."""
    g = np.asarray(g_ND, np.float64)
    full = g.mean(0)
    n = len(g)
    sigma2 = float(np.mean(np.sum((g - full) ** 2, axis=1)))
    rows = []
    sizes = tuple(batch_sizes(n))
    for replace, k in ((True, jax.random.fold_in(key, 1)), (False, jax.random.fold_in(key, 2))):
        means = np.asarray(prefix_minibatch_means(k, g_ND, draws, replace, sizes), np.float64)
        for i, b in enumerate(sizes):
            g_b = means[:, i]
            theory = sigma2 / b * (1.0 if replace else (n - b) / (n - 1))
            squared = np.sum((g_b - full) ** 2, axis=1)
            rows.append(
                {
                    "sampling": "with replacement" if replace else "without replacement",
                    "B": b,
                    "measured variance": float(np.mean(squared)),
                    "standard error": float(np.std(squared) / np.sqrt(draws)),
                    "theory": theory,
                    "sigma^2 / B": sigma2 / b,
                    "|mean of draws - g|^2": float(np.sum((g_b.mean(0) - full) ** 2)),
                }
            )
    return rows


def variance_z(row: dict) -> float:
    """|measured - theory| in standard errors of the measurement (0 when both are ~0:
    without replacement at B = N every draw is the whole data set)."""
    gap = abs(row["measured variance"] - row["theory"])
    if row["theory"] == 0:
        return 0.0 if row["measured variance"] <= 1e-10 else float("inf")
    return gap / max(row["standard error"], 1e-300)


def mean_within_bound(row: dict, draws: int) -> bool:
    """The draws' mean is within MEAN_SIGMAS standard errors of g (squared norms)."""
    return row["|mean of draws - g|^2"] <= MEAN_SIGMAS**2 * row["theory"] / draws + 1e-10


def epoch_means(key, g_ND, batch: int):
    """One shuffled epoch without replacement: (N / B, D) batch means; their mean is g."""
    n, d = g_ND.shape
    order = jax.random.permutation(key, n)
    return jnp.mean(g_ND[order].reshape(n // batch, batch, d), axis=1)
