"""Reference solution of transformations.vmap.pairwise_distances."""

import jax
import jax.numpy as jnp


def pairwise_distances(x_BNK, y_MK):
    """(B, N, M) Euclidean distances: out[b, i, j] = |x[b, i] - y[j]|, three vmaps deep.

    One pair's distance keeps the difference inside the square: far from the origin x - y
    is exact in float32, where |x|² + |y|² - 2 x.y would cancel away every digit.
    """

    def dist(a_K, b_K):
        return jnp.sqrt(jnp.sum((a_K - b_K) ** 2))

    to_every_y = jax.vmap(dist, in_axes=(None, 0))  # one x point, every y: (M,)
    table = jax.vmap(to_every_y, in_axes=(0, None))  # every x point of a batch: (N, M)
    return jax.vmap(table, in_axes=(0, None))(x_BNK, y_MK)  # every batch, y shared: (B, N, M)
