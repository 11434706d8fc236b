"""Reference solution of pallas.first_tpu_kernel.matmul_bias_relu."""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(x_ref, y_ref, b_ref, o_ref, acc_ref):
    """Program (i, j, k): acc += x block (i, k) @ y block (k, j); at the last k, the epilogue.

    The accumulator is zeroed at k == 0 (it still holds the previous output block's sum, or
    garbage); the bias and the ReLU come once, on the whole sum, when k is the last step:
    ReLU(sum) is not the sum of ReLUs, and a bias added at every step counts K / bk times.
    """
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _epilogue():
        out = jnp.maximum(acc_ref[...] + b_ref[...], 0.0)  # b_ref (1, bn): one row, broadcast
        o_ref[...] = out.astype(o_ref.dtype)


def matmul_bias_relu(x_MK, y_KN, b_1N, bm, bk, bn):
    """ReLU(x_MK @ y_KN + b_1N), (M, N), as one pallas_call on the grid (M/bm, N/bn, K/bk)
    with an f32 accumulator in VMEM scratch (interpret=True: this runs on the CPU)."""
    (m, k), (_, n) = x_MK.shape, y_KN.shape
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x_MK.dtype),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
            pl.BlockSpec((1, bn), lambda i, j, kk: (0, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")
        ),
        interpret=True,
    )(x_MK, y_KN, b_1N)
