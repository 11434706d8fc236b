"""Reference solution of pallas.blocked_kernel: a blocked matmul on a 3-D Pallas grid."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _matmul_kernel(x_ref, y_ref, o_ref):
    # The output block (i, j) stays the same for every k: zero it on the first k step, then
    # add one (block_m, block_k) @ (block_k, block_n) product per step.
    @pl.when(pl.program_id(2) == 0)
    def _zero():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)


def blocked_matmul(x_MK, y_KN, block_m, block_n, block_k):
    """out_MN (M, N) float32 = x_MK (M, K) @ y_KN (K, N), float32, on the grid
    (M / block_m, N / block_n, K / block_k): program (i, j, k) reads block (i, k) of x and
    block (k, j) of y and adds their product into block (i, j) of the output. Runs in Pallas
    interpret mode (CPU). A block size that does not divide its dimension is a ValueError.
    """
    (m, k), (k_y, n) = x_MK.shape, y_KN.shape
    if k != k_y:
        raise ValueError(f"x is {x_MK.shape} and y is {y_KN.shape}: their K must agree")
    for name, size, block in (("M", m, block_m), ("N", n, block_n), ("K", k, block_k)):
        if block < 1 or size % block:
            raise ValueError(f"block {block} does not divide {name}={size}: pick a divisor")
    return pl.pallas_call(
        _matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(m // block_m, n // block_n, k // block_k),
        in_specs=[
            pl.BlockSpec((block_m, block_k), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((block_k, block_n), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((block_m, block_n), lambda i, j, kk: (i, j)),
        interpret=True,
    )(x_MK, y_KN)
