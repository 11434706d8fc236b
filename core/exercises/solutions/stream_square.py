"""Reference solution of pallas.tiling_pipelining.stream_square."""

import functools

import jax
import jax.numpy as jnp  # noqa: F401 (the stub's imports, kept as the learner sees them)
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(x_hbm, o_ref, buf, sem, *, chunk, n_chunks):
    """Chunk i of x: DMA into slot i % 2 of buf, wait, square into out's rows of chunk i.

    The copy of chunk i + 1 starts before chunk i is squared, into the OTHER slot: the one
    chunk i - 1 used, which the previous step has finished reading. Every copy started is
    waited on, on the semaphore of its slot.
    """

    def copy(i, slot):
        rows = pl.ds(i * chunk, chunk)  # rows, not chunks: chunk i starts at row i * chunk
        return pltpu.make_async_copy(x_hbm.at[rows], buf.at[slot], sem.at[slot])

    copy(0, 0).start()

    def step(i, carry):
        slot = i % 2

        @pl.when(i + 1 < n_chunks)
        def _prefetch():
            copy(i + 1, 1 - slot).start()  # overlaps the work on this chunk below

        copy(i, slot).wait()
        rows = pl.ds(pl.multiple_of(i * chunk, chunk), chunk)
        o_ref[rows, :] = buf[slot] * buf[slot]
        return carry

    jax.lax.fori_loop(0, n_chunks, step, 0)


def stream_square(x_RK, chunk):
    """x_RK ** 2, with x left in HBM and streamed through a two-slot VMEM buffer in DMAs of
    ``chunk`` rows (interpret=True: this runs on the CPU). ``chunk`` divides R."""
    r, k = x_RK.shape
    return pl.pallas_call(
        functools.partial(_kernel, chunk=chunk, n_chunks=r // chunk),
        out_shape=jax.ShapeDtypeStruct((r, k), x_RK.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],  # stays in HBM: the kernel copies it
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),  # the whole output, in VMEM
        scratch_shapes=[
            pltpu.VMEM((2, chunk, k), x_RK.dtype),  # two slots of one chunk each
            pltpu.SemaphoreType.DMA((2,)),  # one DMA semaphore per slot
        ],
        interpret=True,
    )(x_RK)
