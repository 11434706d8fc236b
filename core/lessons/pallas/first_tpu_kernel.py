"""A first TPU kernel: the TPU-style matmul, its schedule, the missing-init bug, TPU compiles.

The kernel is core.kernels.matmul.matmul: grid (M/bm, N/bn, K/bk), x block (bm, bk) at
(i, k), y block (bk, bn) at (k, j), output block (bm, bn) at (i, j), an f32 accumulator in
VMEM scratch zeroed at k == 0 and written out at the last k.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from core import numerics
from core.kernels import matmul, tiling

DTYPES = ("float32", "bfloat16")
TOPOLOGIES = ("v5e:2x2", "v6e:2x2", "tpu7x:2x2x1")  # one per generation: v5e, v6e, Ironwood
# Interpret mode runs each program instance as its own step on the CPU: more than this many
# stays out of the headless budget.
MAX_PROGRAMS = 64
SCHEDULE_ROWS = 12  # steps of the grid walk shown


def problem(m: int, k: int, n: int, bm: int, bk: int, bn: int, dtype: str) -> str | None:
    """Why the TPU-style matmul cannot run with these blocks (in words), or None."""
    for name, shape, block in (
        ("x", (m, k), (bm, bk)),
        ("y", (k, n), (bk, bn)),
        ("out", (m, n), (bm, bn)),
    ):
        if (reason := tiling.block_problem(name, shape, block, dtype)) is not None:
            return reason
    grid = tiling.grid_of((m, n, k), (bm, bn, bk))
    if (programs := int(np.prod(grid))) > MAX_PROGRAMS:
        return (
            f"the grid {grid} has {programs} program instances; interpret mode runs each one "
            f"as a separate step on the CPU, so more than {MAX_PROGRAMS} is too slow here: "
            "choose larger blocks or smaller arrays"
        )
    return None


def schedule(m: int, k: int, n: int, bm: int, bk: int, bn: int, init: bool = True) -> list[dict]:
    """The grid walk, step by step: program (i, j, k), the blocks it reads, what pl.when does."""
    gm, gn, gk = tiling.grid_of((m, n, k), (bm, bn, bk))
    rows = []
    for step, (i, j, kk) in enumerate(
        (i, j, kk) for i in range(gm) for j in range(gn) for kk in range(gk)
    ):
        actions = []
        if kk == 0:
            actions.append("acc = 0" if init else "(acc not zeroed: holds garbage)")
        actions.append(f"acc += x[{i},{kk}] @ y[{kk},{j}]")
        if kk == gk - 1:
            actions.append(f"out[{i},{j}] = acc")
        rows.append(
            {
                "step": step,
                "(i, j, k)": f"({i}, {j}, {kk})",
                "x block": f"({i}, {kk})",
                "y block": f"({kk}, {j})",
                "out block": f"({i}, {j})",
                "body": "; ".join(actions),
            }
        )
    return rows


def vmem_bytes(bm: int, bk: int, bn: int, dtype: str) -> dict[str, int]:
    """VMEM the kernel holds: double-buffered x, y, out blocks and the f32 accumulator."""
    itemsize = np.dtype(dtype).itemsize
    parts = {
        "x blocks (2 buffers)": 2 * bm * bk * itemsize,
        "y blocks (2 buffers)": 2 * bk * bn * itemsize,
        "out blocks (2 buffers)": 2 * bm * bn * itemsize,
        "f32 accumulator (scratch)": bm * bn * 4,
    }
    return {**parts, "total": sum(parts.values())}


def missing_init_rows(x, y, blocks: tuple[int, int, int], reference) -> list[dict]:
    """The correct kernel beside the one that skips the k == 0 init, in TPU interpret mode.

    Interpret mode on any backend (a TPU too): only there is uninitialized memory NaN.
    """
    rows = []
    for name, init in (("with pl.when(k == 0) init", True), ("init skipped (the bug)", False)):
        out = matmul.matmul(x, y, *blocks, init=init, interpret=matmul.interpret_params())
        out = np.asarray(out, np.float64)
        nan = float(np.isnan(out).mean())
        error = numerics.scaled_max_error(out, reference)
        rows.append(
            {
                "kernel": name,
                "NaN elements": f"{100 * nan:.0f}%",
                "error vs NumPy": "inf (NaN in the output)" if nan else f"{error:.2g}",
                "caught": "yes: poisoned scratch shows" if nan else "-",
            }
        )
    return rows


def compile_rows(m: int, k: int, n: int, bm: int, bk: int, bn: int, dtype: str) -> list[dict]:
    """Compile the kernel through Mosaic for each of TOPOLOGIES; one row per generation."""
    rows = []
    for topology in TOPOLOGIES:
        try:
            report, has_call = matmul.compile_for_topology(
                topology, m, k, n, bm, bk, bn, jnp.dtype(dtype)
            )
        except Exception as error:  # a refusal by libtpu or Mosaic, shown in the table
            rows.append({"topology": topology, "compiled": f"no: {str(error).splitlines()[0]}"})
            continue
        memory = report.memory
        rows.append(
            {
                "topology": topology,
                "device kind": report.device_kind,
                "JAX devices": report.devices,
                "compiled": "yes",
                f"{matmul.TPU_CUSTOM_CALL} in HLO": "yes" if has_call else "no",
                "arguments (KiB)": memory["argument_size_in_bytes"] / 2**10,
                "output (KiB)": memory["output_size_in_bytes"] / 2**10,
                "peak (KiB)": memory["peak_memory_in_bytes"] / 2**10,
                "code (KiB)": memory["generated_code_size_in_bytes"] / 2**10,
            }
        )
    return rows
