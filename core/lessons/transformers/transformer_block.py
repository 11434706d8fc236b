"""Lesson code of apps/transformer_block.py: the order test of section 4.

Does a block see the order of its tokens? Swap token 0 with token ``swap``, run the block on
both orders, and compare the output of the swapped input with the output swapped the same
way: equal (a gap at float32 rounding) means the block is permutation-equivariant. Both
orders and both masks (none, causal) run as the four rows of ONE batch in ONE compiled
program: four separate calls would compile twice (the mask is static in
``transformer.block_forward``), which was most of the section's time.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.lm import transformer


@nnx.jit
def _block_rows(block: transformer.Block, x_BTD, allowed_BTS, positions_BT):
    """The block on every row of x_BTD, row b with its own mask allowed_BTS[b]."""
    return block(x_BTD, allowed_BTS[:, None], positions_BT=positions_BT)[0]


def swapped_order(seq_len: int, swap: int) -> np.ndarray:
    """The permutation 0..T-1 with token 0 and token ``swap`` exchanged (int, shape (T,))."""
    if not 1 <= swap < seq_len:
        raise ValueError(f"swap must name a token 1..{seq_len - 1} of T={seq_len}, got {swap}")
    order_T = np.arange(seq_len)
    order_T[[0, swap]] = order_T[[swap, 0]]
    return order_T


@dataclasses.dataclass(frozen=True)
class OrderTest:
    order_T: np.ndarray  # the permutation applied to the input
    gaps: dict[bool, np.ndarray]  # causal? -> per position max |y(swapped x) - y(x)[order]|
    causal_y_BTD: np.ndarray  # the causal block on the unswapped input (for the check)


def order_test(block: transformer.Block, x_BTD, swap: int) -> OrderTest:
    """Equivariance gaps of ``block`` (B = 1 input x_BTD, positions 0..T-1 with RoPE) without
    a mask and with the causal mask, after swapping token 0 with token ``swap``."""
    x = np.asarray(jnp.asarray(x_BTD).astype(jnp.float32))
    if x.ndim != 3 or x.shape[0] != 1:
        raise ValueError(f"x_BTD must be one sequence (1, T, D), got shape {x.shape}")
    t = x.shape[1]
    order_T = swapped_order(t, swap)
    # rows: (x, no mask), (swapped x, no mask), (x, causal), (swapped x, causal)
    rows = np.concatenate([x, x[:, order_T]] * 2)
    everything, causal = np.ones((t, t), bool), np.tril(np.ones((t, t), bool))
    allowed = np.stack([everything, everything, causal, causal])
    positions = np.broadcast_to(np.arange(t), (4, t))
    y = np.asarray(_block_rows(block, rows, allowed, positions).astype(jnp.float32))
    gaps = {
        is_causal: np.abs(y[base + 1] - y[base][order_T]).max(-1)
        for is_causal, base in ((False, 0), (True, 2))
    }
    return OrderTest(order_T, gaps, y[2:3])
