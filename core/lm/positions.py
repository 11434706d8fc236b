"""Rotary position embeddings (RoPE; Su et al., RoFormer, https://arxiv.org/abs/2104.09864).

Attention alone is blind to order: without a mask, permuting the tokens permutes the outputs
the same way. RoPE gives a query or key at position m its position by ROTATING it: each pair
of channels (2i, 2i + 1) is rotated by the angle m * theta_i, theta_i = base^(-2i / K)
(the paper's eq. 15 and 34, pairs of neighbouring channels). Rotations compose, so

    rope(q, m) . rope(k, n) = q . R(n - m) k

depends on the positions only through the offset n - m: attention sees relative positions.
RoPE has no parameters, and applies to q and k only (never to v).

Shapes: x_BTHK (batch, positions, heads, head dim K; K even), positions_BT integers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

ROPE_BASE = 10000.0  # the paper's base (RoFormer section 3.2.2)


def _check_head_dim(head_dim: int) -> None:
    if head_dim < 2 or head_dim % 2:
        raise ValueError(
            f"RoPE rotates pairs of channels: head dim K must be even and >= 2, got {head_dim}"
        )


def frequencies(head_dim: int, base: float = ROPE_BASE) -> np.ndarray:
    """theta_i = base^(-2i / K) for i = 0 .. K/2 - 1: (K/2,) float64, radians per position."""
    _check_head_dim(head_dim)
    if not base > 1:
        raise ValueError(f"the RoPE base must be > 1, got {base}")
    return base ** (-2.0 * np.arange(head_dim // 2) / head_dim)


def apply_rope(x_BTHK: jax.Array, positions_BT: jax.Array, base: float = ROPE_BASE) -> jax.Array:
    """x_BTHK with pair (2i, 2i + 1) of every head rotated by positions_BT * theta_i.

    Computed in float32 (angles and products) and returned in x's dtype."""
    x_BTHK = jnp.asarray(x_BTHK)
    *lead, t, _, k = x_BTHK.shape
    positions_BT = jnp.asarray(positions_BT)
    if positions_BT.shape[-1] != t:
        raise ValueError(
            f"positions_BT {tuple(positions_BT.shape)} must give one position per token of "
            f"x_BTHK {tuple(x_BTHK.shape)}"
        )
    theta_P = jnp.asarray(frequencies(k, base), jnp.float32)
    angles_BT1P = positions_BT.astype(jnp.float32)[..., None, None] * theta_P
    cos, sin = jnp.cos(angles_BT1P), jnp.sin(angles_BT1P)
    x = x_BTHK.astype(jnp.float32)
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
    return rotated.reshape(x_BTHK.shape).astype(x_BTHK.dtype)


def rotation_matrix(position: float, head_dim: int, base: float = ROPE_BASE) -> np.ndarray:
    """The paper's R^d_{Theta,m} (eq. 15): a (K, K) float64 block-diagonal matrix of 2 x 2
    rotations by m * theta_i. The independent reference builds it entry by entry."""
    theta = frequencies(head_dim, base)
    r = np.zeros((head_dim, head_dim))
    for i, angle in enumerate(position * theta):
        c, s = np.cos(angle), np.sin(angle)
        r[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, -s], [s, c]]
    return r


def rope_reference(x_BTHK, positions_BT, base: float = ROPE_BASE) -> np.ndarray:
    """NumPy float64 reference: R(m) @ x for every token and head, R from ``rotation_matrix``."""
    if isinstance(x_BTHK, np.ndarray):
        x = x_BTHK.astype(np.float64)
    else:  # a jax array (bfloat16 too): its values, widened exactly
        x = np.asarray(jnp.asarray(x_BTHK).astype(jnp.float32), np.float64)
    positions = np.broadcast_to(np.asarray(positions_BT), x.shape[:2])
    out = np.empty_like(x)
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            out[b, t] = x[b, t] @ rotation_matrix(positions[b, t], x.shape[-1], base).T
    return out
