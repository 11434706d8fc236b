"""Reference solution of pallas.pallas_grids.blocked_transpose."""

import jax
import jax.numpy as jnp  # noqa: F401 (the stub's imports, kept as the learner sees them)
from jax.experimental import pallas as pl


def _transpose_block(x_ref, o_ref):
    o_ref[...] = x_ref[...].T  # the block of x this program reads, transposed


def blocked_transpose(x_MN, bm, bn):
    """out_NM = x_MN.T as one pl.pallas_call, run with interpret=True (on the CPU).

    The grid walks the output's blocks, (bn, bm) each: N / bn block rows, M / bm block
    columns. Output block (i, j) holds out rows i*bn.. and columns j*bm.., which are x's
    columns i*bn.. and rows j*bm..: x's block (j, i) in blocks of (bm, bn). An index map
    returns block indices (Pallas multiplies by the block shape), never element offsets.
    """
    m, n = x_MN.shape
    grid = (n // bn, m // bm)
    x_spec = pl.BlockSpec((bm, bn), lambda i, j: (j, i))  # x block (j, i)
    out_spec = pl.BlockSpec((bn, bm), lambda i, j: (i, j))
    return pl.pallas_call(
        _transpose_block,
        out_shape=jax.ShapeDtypeStruct((n, m), x_MN.dtype),
        grid=grid,
        in_specs=[x_spec],
        out_specs=out_spec,
        interpret=True,
    )(x_MN)
