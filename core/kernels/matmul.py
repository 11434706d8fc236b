"""Blocked Pallas kernels: vector add, a grid matmul, and the TPU-style matmul; references beside.

Shapes: x_MK @ y_KN -> out_MN; blocks bm x bk, bk x bn, bm x bn.

- ``add``: one program per block of a 1-D or 2-D array.
- ``matmul_rows_cols``: grid (M/bm, N/bn); program (i, j) reads the row strip i of x
  (bm x K) and the column strip j of y (K x bn) and writes block (i, j).
- ``matmul``: the TPU-style kernel of jax's matmul guide: grid (M/bm, N/bn, K/bk), the
  reduction axis k last and "arbitrary", i and j "parallel"; an f32 accumulator in VMEM
  scratch, zeroed by ``pl.when(k == 0)`` and written out by ``pl.when(k == last)``.
  ``init=False`` skips the zeroing: the bug interpret mode catches (the scratch starts as NaN).

``interpret``: ``interpret_params()`` on CPU (TPU interpret mode: races detected, out-of-bounds
reads raise, uninitialized memory NaN), ``False`` to compile through Mosaic on a TPU (or for a
TPU topology on this host). The references are NumPy float64.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

# The name of the custom call Mosaic kernels become in a compiled TPU program's HLO.
TPU_CUSTOM_CALL = "tpu_custom_call"


def interpret_params():
    """TPU interpret mode that catches bugs: races, out-of-bounds reads, uninitialized reads."""
    return pltpu.InterpretParams(
        detect_races=True, out_of_bounds_reads="raise", uninitialized_memory="nan"
    )


INTERPRET_MODES = ("interpret", "hlo", "tpu")


def interpret_for(mode: str):
    """The ``interpret=`` value of a Pallas call for ``mode`` (the one mapping every caller
    uses): "interpret", TPU interpret mode (interpret_params: races detected, uninitialized
    memory NaN); "hlo", jax's plain HLO interpreter (True: the same kernel semantics, no race
    detector, ~2x cheaper per kernel); "tpu", compiled by Mosaic (False)."""
    if mode not in INTERPRET_MODES:
        raise ValueError(f"interpret mode must be one of {INTERPRET_MODES}, got {mode!r}")
    return {"interpret": interpret_params, "hlo": lambda: True, "tpu": lambda: False}[mode]()


def default_interpret(mode: str = "interpret"):
    """``interpret_for(mode)`` off a TPU, compiled Mosaic (False) on one."""
    value = interpret_for(mode)
    return False if jax.default_backend() == "tpu" else value


# --- vector add -------------------------------------------------------------------------------


def _add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


@functools.partial(jax.jit, static_argnames=("block", "interpret"))
def add(x, y, block: tuple[int, ...], interpret=None):
    """x + y with one program per ``block`` (1-D or 2-D arrays of the same shape)."""
    interpret = default_interpret() if interpret is None else interpret
    grid = tuple(s // b for s, b in zip(x.shape, block, strict=True))
    index_map = lambda *ids: ids  # noqa: E731 (block (i, j) of every operand)
    spec = pl.BlockSpec(block, index_map)
    return pl.pallas_call(
        _add_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=grid,
        in_specs=[spec, spec],
        out_specs=spec,
        interpret=interpret,
    )(x, y)


def add_reference(x, y) -> np.ndarray:
    """x + y in NumPy float64."""
    return np.asarray(x, np.float64) + np.asarray(y, np.float64)


# --- matmul by row and column strips ---------------------------------------------------------


def _strip_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(
        o_ref.dtype
    )


@functools.partial(jax.jit, static_argnames=("bm", "bn", "interpret"))
def matmul_rows_cols(x_MK, y_KN, bm: int, bn: int, interpret=None):
    """x @ y on grid (M/bm, N/bn): program (i, j) reads x[i*bm:(i+1)*bm, :], y[:, j*bn:...]."""
    interpret = default_interpret() if interpret is None else interpret
    (m, k), (_, n) = x_MK.shape, y_KN.shape
    return pl.pallas_call(
        _strip_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x_MK.dtype),
        grid=(m // bm, n // bn),
        in_specs=[
            pl.BlockSpec((bm, k), lambda i, j: (i, 0)),
            pl.BlockSpec((k, bn), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        interpret=interpret,
    )(x_MK, y_KN)


# --- the TPU-style matmul --------------------------------------------------------------------


def _matmul_kernel(x_ref, y_ref, o_ref, acc_ref, *, init: bool):
    k = pl.program_id(2)
    if init:

        @pl.when(k == 0)
        def _zero():
            acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _write():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


DIMENSION_SEMANTICS = ("parallel", "parallel", "arbitrary")  # i, j independent; k a reduction


def matmul_call(
    m: int, k: int, n: int, bm: int, bk: int, bn: int, dtype, init=True, interpret=None
):
    """The pallas_call of the TPU-style matmul for x (m, k) @ y (k, n) (not jitted)."""
    interpret = default_interpret() if interpret is None else interpret
    return pl.pallas_call(
        functools.partial(_matmul_kernel, init=init),
        out_shape=jax.ShapeDtypeStruct((m, n), dtype),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=DIMENSION_SEMANTICS),
        interpret=interpret,
    )


@functools.partial(jax.jit, static_argnames=("bm", "bk", "bn", "init", "interpret"))
def matmul(x_MK, y_KN, bm: int, bk: int, bn: int, init: bool = True, interpret=None):
    """x @ y, TPU style: f32 accumulator in VMEM, init/finalize with pl.when on k."""
    (m, k), (_, n) = x_MK.shape, y_KN.shape
    call = matmul_call(m, k, n, bm, bk, bn, x_MK.dtype, init=init, interpret=interpret)
    return call(x_MK, y_KN)


def matmul_reference(x_MK, y_KN) -> np.ndarray:
    """x @ y in NumPy float64."""
    return np.asarray(x_MK, np.float64) @ np.asarray(y_KN, np.float64)


def compile_for_topology(
    topology_name: str, m: int, k: int, n: int, bm: int, bk: int, bn: int, dtype=jnp.float32
):
    """Compile the TPU-style matmul through Mosaic for a TPU topology (no TPU needed).

    Mosaic kernels are not auto-partitioned, so the kernel runs under ``jax.shard_map`` on
    every chip of the topology with replicated x and y (each chip computes the whole product).
    Returns (core.tpu.topology_compile.CompileReport, whether the compiled HLO holds the TPU
    custom call). Needs libtpu (the `tpu` extra): core.tpu.topology_compile raises ValueError
    without it.
    """
    from core.tpu import topology_compile

    P = jax.sharding.PartitionSpec
    mesh = topology_compile.topology_mesh(topology_name)
    call = matmul_call(m, k, n, bm, bk, bn, dtype, interpret=False)
    per_chip = jax.shard_map(call, mesh=mesh, in_specs=(P(), P()), out_specs=P(), check_vma=False)
    shapes = (jax.ShapeDtypeStruct((m, k), dtype), jax.ShapeDtypeStruct((k, n), dtype))
    report, compiled = topology_compile.compile_for_topology(
        per_chip, shapes, (P(), P()), topology_name
    )
    return report, TPU_CUSTOM_CALL in compiled.as_text()


def races_found() -> bool | None:
    """Whether TPU interpret mode saw a data race since its state was last reset.

    Read from interpret mode's race detector (jax's own Pallas tests read the same flag);
    None when no kernel ran with ``detect_races=True`` or this JAX keeps it elsewhere.
    """
    try:
        from jax._src.pallas.mosaic.interpret import interpret_pallas_call
    except ImportError:
        return None
    state = getattr(interpret_pallas_call, "races", None)
    return None if state is None else bool(state.races_found)
