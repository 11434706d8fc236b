"""Gradient transformations written by hand: the global norm and clipping by it.

    global_norm(g)            = sqrt(sum over every leaf of sum g^2)
    clip_by_global_norm(g, c) = g * min(1, c / global_norm(g))   (optax.clip_by_global_norm)

Clipping by the *global* norm rescales every leaf by one factor, so the update keeps its
direction; clipping each leaf (or each element) on its own would bend it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def global_norm(tree) -> jax.Array:
    """The L2 norm of all leaves of ``tree`` taken together (a scalar)."""
    return jnp.sqrt(sum(jnp.sum(jnp.square(leaf)) for leaf in jax.tree.leaves(tree)))


def clip_by_global_norm(tree, max_norm: float):
    """``tree`` scaled by min(1, max_norm / global_norm(tree)); unchanged when within bound."""
    if not max_norm > 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm}")
    norm = global_norm(tree)
    factor = jnp.minimum(1.0, max_norm / jnp.maximum(norm, jnp.finfo(jnp.float32).tiny))
    return jax.tree.map(lambda leaf: (leaf * factor).astype(leaf.dtype), tree)
