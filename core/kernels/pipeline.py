"""A manual DMA pipeline: x streams from HBM through a VMEM double buffer; reference beside.

out_RN = x_RK @ w_KN, with x left in HBM (``memory_space=pl.ANY``) and copied in chunks of
``chunk`` rows by explicit DMAs (``pltpu.make_async_copy``), each signalling a DMA semaphore;
w and the output stay in VMEM. With ``buffers=2`` the copy of chunk i + 1 is started before
chunk i is multiplied, so on a TPU the two overlap (the double buffering BlockSpecs do for
you); with ``buffers=1`` the next copy can only start once the multiply has read the one
buffer: copy, compute, copy, compute, in series.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from core.kernels import matmul


def _pipeline_kernel(x_hbm, w_ref, o_ref, buf, sem, *, chunk: int, n_chunks: int, buffers: int):
    def copy(i, slot):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(i * chunk, chunk)], buf.at[slot], sem.at[slot])

    copy(0, 0).start()

    def step(i, carry):
        slot = i % buffers

        def start_next():
            @pl.when(i + 1 < n_chunks)
            def _start():
                copy(i + 1, (i + 1) % buffers).start()

        if buffers > 1:
            start_next()  # prefetch into the other buffer: overlaps the multiply below
        copy(i, slot).wait()
        rows = pl.ds(pl.multiple_of(i * chunk, chunk), chunk)
        o_ref[rows, :] = jnp.dot(buf[slot], w_ref[...], preferred_element_type=jnp.float32).astype(
            o_ref.dtype
        )
        if buffers == 1:
            start_next()  # the only buffer is free again only now
        return carry

    jax.lax.fori_loop(0, n_chunks, step, 0)


@functools.partial(jax.jit, static_argnames=("chunk", "buffers", "interpret"))
def stream_matmul(x_RK, w_KN, chunk: int, buffers: int = 2, interpret=None):
    """x @ w with x streamed from HBM in ``chunk``-row DMAs through ``buffers`` VMEM buffers."""
    interpret = matmul.default_interpret() if interpret is None else interpret
    (r, k), (_, n) = x_RK.shape, w_KN.shape
    return pl.pallas_call(
        functools.partial(_pipeline_kernel, chunk=chunk, n_chunks=r // chunk, buffers=buffers),
        out_shape=jax.ShapeDtypeStruct((r, n), x_RK.dtype),
        in_specs=[
            pl.BlockSpec(memory_space=pl.ANY),  # stays in HBM: the kernel copies it itself
            pl.BlockSpec(memory_space=pltpu.VMEM),
        ],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[
            pltpu.VMEM((buffers, chunk, k), x_RK.dtype),
            pltpu.SemaphoreType.DMA((buffers,)),
        ],
        interpret=interpret,
    )(x_RK, w_KN)


def stream_matmul_reference(x_RK, w_KN) -> np.ndarray:
    """x @ w in NumPy float64."""
    return np.asarray(x_RK, np.float64) @ np.asarray(w_KN, np.float64)
