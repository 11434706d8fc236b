"""Pallas grids and BlockSpecs: which block of each operand every program instance touches.

Two kernels (core.kernels.matmul): ``add`` (x_MN + y_MN, block bm x bn, grid (M/bm, N/bn))
and ``matmul`` by strips (x_MK @ y_KN, grid (M/bm, N/bn): program (i, j) reads the row strip
i of x, bm x K, the column strip j of y, K x bn, and writes block (i, j) of the output).

And blocks that do not divide the array (``ragged_add``): Pallas pads the last block on input
and drops the excess on output; the kernel also copies what it saw, padding included.
"""

from __future__ import annotations

import dataclasses
import functools

import altair as alt
import jax
import numpy as np
import pandas as pd
from jax.experimental import pallas as pl

from core.kernels import matmul, tiling
from core.lab import charts

KERNELS = ("add", "matmul")
DTYPES = ("float32", "bfloat16")
# Interpret mode runs each program instance as its own step on the CPU (tens of milliseconds
# each): more than this many stays out of the headless budget.
MAX_PROGRAMS = 64


@dataclasses.dataclass(frozen=True)
class Operand:
    """One operand of a pallas_call: its array shape, block shape and index map (as text)."""

    name: str
    shape: tuple[int, int]
    block: tuple[int, int]
    index_map: str  # the BlockSpec's index map, as the kernel writes it

    def block_index(self, i: int, j: int) -> tuple[int, int]:
        """The block program (i, j) touches: (block row, block column)."""
        if self.index_map == "(i, 0)":
            return (i, 0)
        if self.index_map == "(0, j)":
            return (0, j)
        return (i, j)

    @property
    def grid(self) -> tuple[int, int]:
        return tiling.grid_of(self.shape, self.block)


def operands(kernel: str, m: int, k: int, n: int, bm: int, bn: int) -> list[Operand]:
    """The operands of ``kernel`` with their blocks; the output last."""
    if kernel == "add":
        return [
            Operand("x", (m, n), (bm, bn), "(i, j)"),
            Operand("y", (m, n), (bm, bn), "(i, j)"),
            Operand("out", (m, n), (bm, bn), "(i, j)"),
        ]
    if kernel == "matmul":
        return [
            Operand("x", (m, k), (bm, k), "(i, 0)"),
            Operand("y", (k, n), (k, bn), "(0, j)"),
            Operand("out", (m, n), (bm, bn), "(i, j)"),
        ]
    raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")


def problem(kernel: str, m: int, k: int, n: int, bm: int, bn: int, dtype: str, program: int):
    """Why this pallas_call cannot run (in words, before Pallas sees it), or None."""
    for operand in operands(kernel, m, k, n, bm, bn):
        if reason := tiling.block_problem(operand.name, operand.shape, operand.block, dtype):
            return reason
    grid = tiling.grid_of((m, n), (bm, bn))
    programs = grid[0] * grid[1]
    if programs > MAX_PROGRAMS:
        return (
            f"the grid {grid} has {programs} program instances; interpret mode runs each one "
            f"as a separate step on the CPU, so more than {MAX_PROGRAMS} is too slow here: "
            "choose larger blocks or a smaller array"
        )
    if not 0 <= program < programs:
        return (
            f"program {program} does not exist: the grid {grid} has {programs} (0..{programs - 1})"
        )
    return None


def program_ids(m: int, n: int, bm: int, bn: int) -> list[tuple[int, int]]:
    """Every program instance (i, j) in the order the grid runs them (row-major, j fastest)."""
    rows, cols = tiling.grid_of((m, n), (bm, bn))
    return [(i, j) for i in range(rows) for j in range(cols)]


def access_rows(ops: list[Operand], ids: list[tuple[int, int]]) -> list[dict]:
    """One row per program: its id, and the block (and element ranges) of each operand."""
    rows = []
    for number, (i, j) in enumerate(ids):
        row = {"program": number, "(i, j)": f"({i}, {j})"}
        for op in ops:
            r, c = op.block_index(i, j)
            verb = "writes" if op.name == "out" else "reads"
            row[f"{op.name}: {verb}"] = (
                f"block ({r}, {c}) = [{r * op.block[0]}:{(r + 1) * op.block[0]}, "
                f"{c * op.block[1]}:{(c + 1) * op.block[1]}]"
            )
        rows.append(row)
    return rows


def block_picture(op: Operand, i: int, j: int, size: int = 150):
    """An Altair picture of ``op``: its blocks as rectangles, the one program (i, j) touches lit."""
    touched = op.block_index(i, j)
    gr, gc = op.grid
    cells = pd.DataFrame(
        [
            {
                "row0": r * op.block[0],
                "row1": (r + 1) * op.block[0],
                "col0": c * op.block[1],
                "col1": (c + 1) * op.block[1],
                "block": f"({r}, {c})",
                "touched": "this program" if (r, c) == touched else "other blocks",
            }
            for r in range(gr)
            for c in range(gc)
        ]
    )
    rows, cols = op.shape
    scale = size / max(rows, cols)
    verb = "writes" if op.name == "out" else "reads"
    base = alt.Chart(cells, title=f"{op.name} {op.shape}: program ({i}, {j}) {verb}")
    x = alt.X("col0:Q", title="column", scale=alt.Scale(domain=[0, cols], nice=False))
    y = alt.Y("row0:Q", title="row", scale=alt.Scale(domain=[0, rows], reverse=True, nice=False))
    rects = base.mark_rect(stroke="white", strokeWidth=1.5).encode(
        x=x,
        x2="col1:Q",
        y=y,
        y2="row1:Q",
        color=alt.Color(
            "touched:N",
            scale=alt.Scale(
                domain=["this program", "other blocks"], range=[charts.PALETTE[1], "#dde3ea"]
            ),
            legend=alt.Legend(orient="bottom", title=None),
        ),
        tooltip=["block:N", "row0:Q", "row1:Q", "col0:Q", "col1:Q"],
    )
    chart = rects
    if gr * gc <= 64:
        labels = (
            base.mark_text(fontSize=9)
            .encode(x=alt.X("mid_c:Q"), y=alt.Y("mid_r:Q"), text="block:N")
            .transform_calculate(
                mid_c="(datum.col0 + datum.col1) / 2", mid_r="(datum.row0 + datum.row1) / 2"
            )
        )
        chart = rects + labels
    return chart.properties(width=max(40, round(cols * scale)), height=max(40, round(rows * scale)))


def example_data(key, kernel: str, m: int, k: int, n: int, dtype: str):
    """The two inputs, standard normal, in ``dtype``."""
    kx, ky = jax.random.split(key)
    shapes = [(m, n), (m, n)] if kernel == "add" else [(m, k), (k, n)]
    return (
        jax.random.normal(kx, shapes[0], dtype),
        jax.random.normal(ky, shapes[1], dtype),
    )


def run(kernel: str, x, y, bm: int, bn: int):
    """The kernel in TPU interpret mode (compiled Mosaic on a TPU)."""
    if kernel == "add":
        return matmul.add(x, y, (bm, bn))
    return matmul.matmul_rows_cols(x, y, bm, bn)


def reference(kernel: str, x, y) -> np.ndarray:
    """NumPy float64 of the same inputs (widened from their dtype)."""
    return matmul.add_reference(x, y) if kernel == "add" else matmul.matmul_reference(x, y)


# --- blocks that do not divide the array: padded on input, excess dropped on output -----------

RAGGED_COLS, RAGGED_BLOCK_COLS = 256, 128  # the demo's columns: two whole block columns


def ragged_problem(rows: int, block_rows: int) -> str | None:
    """Why the ragged demo cannot run (rows x 256 in blocks of block_rows x 128), or None:
    Pallas's block rule only, blocks need not divide (``tiling.block_problem(exact=False)``)."""
    return tiling.block_problem(
        "x", (rows, RAGGED_COLS), (block_rows, RAGGED_BLOCK_COLS), "float32", exact=False
    )


def ragged_data(seed: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """x and y, (rows, 256) float32 standard normal from NumPy's generator (a new shape costs
    no compile, unlike jax.random)."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((2, rows, RAGGED_COLS), dtype=np.float32))


def _add_and_show_kernel(x_ref, y_ref, o_ref, seen_ref):
    o_ref[...] = x_ref[...] + y_ref[...]
    seen_ref[...] = x_ref[...]  # the x block exactly as this program instance received it


@functools.partial(jax.jit, static_argnames=("block", "interpret"))
def ragged_add(x_MN, y_MN, block: tuple[int, int], interpret=None):
    """x + y with ``block``s that need not divide (M, N): (out_MN, seen_PN).

    The grid is ceil(M / bm) x ceil(N / bn). out has x's shape: Pallas drops what the last
    blocks write past the edge. seen_PN, P = grid rows x bm (whole blocks), holds every x block
    as the kernel saw it: rows M..P-1 are the padding Pallas added (NaN in interpret mode,
    unspecified values on a TPU)."""
    interpret = matmul.default_interpret("hlo") if interpret is None else interpret
    grid = tiling.grid_of(x_MN.shape, block)
    padded = (grid[0] * block[0], grid[1] * block[1])
    spec = pl.BlockSpec(block, lambda i, j: (i, j))
    return pl.pallas_call(
        _add_and_show_kernel,
        out_shape=[
            jax.ShapeDtypeStruct(x_MN.shape, x_MN.dtype),
            jax.ShapeDtypeStruct(padded, x_MN.dtype),
        ],
        grid=grid,
        in_specs=[spec, spec],
        out_specs=[spec, spec],
        interpret=interpret,
    )(x_MN, y_MN)


def ragged_rows(rows: int, block_rows: int) -> list[dict]:
    """One row per block row of the grid: the array rows it covers and how many are padding."""
    table = []
    for i in range(tiling.grid_of((rows,), (block_rows,))[0]):
        start, stop = i * block_rows, (i + 1) * block_rows
        real = min(stop, rows) - start
        table.append(
            {
                "block row i": i,
                "covers rows": f"{start}..{stop - 1}",
                "array rows": f"{start}..{start + real - 1}",
                "padding rows": f"{rows}..{stop - 1} ({stop - rows})" if stop > rows else "none",
                "output rows kept": real,
            }
        )
    return table


def ragged_picture(rows: int, block_rows: int, size: int = 220):
    """Altair: the grid's blocks over the array (rows x 256), padding past the edge shaded."""
    grid = tiling.grid_of((rows, RAGGED_COLS), (block_rows, RAGGED_BLOCK_COLS))
    cells = []
    for i in range(grid[0]):
        for j in range(grid[1]):
            start, stop = i * block_rows, (i + 1) * block_rows
            col0, col1 = j * RAGGED_BLOCK_COLS, (j + 1) * RAGGED_BLOCK_COLS
            for part, row0, row1 in (("array", start, min(stop, rows)), ("padding", rows, stop)):
                if row1 > row0:
                    cells.append(
                        {
                            "row0": row0,
                            "row1": row1,
                            "col0": col0,
                            "col1": col1,
                            "part": part,
                            "block": f"({i}, {j})",
                        }
                    )
    padded_rows = grid[0] * block_rows
    scale = size / max(padded_rows, RAGGED_COLS)
    x = alt.X("col0:Q", title="column", scale=alt.Scale(domain=[0, RAGGED_COLS], nice=False))
    y = alt.Y(
        "row0:Q", title="row", scale=alt.Scale(domain=[0, padded_rows], reverse=True, nice=False)
    )
    return (
        alt.Chart(
            pd.DataFrame(cells),
            title=f"x ({rows}, {RAGGED_COLS}) in blocks ({block_rows}, {RAGGED_BLOCK_COLS})",
        )
        .mark_rect(stroke="white", strokeWidth=1.5)
        .encode(
            x=x,
            x2="col1:Q",
            y=y,
            y2="row1:Q",
            color=alt.Color(
                "part:N",
                scale=alt.Scale(domain=["array", "padding"], range=["#dde3ea", charts.PALETTE[1]]),
                legend=alt.Legend(orient="bottom", title=None),
            ),
            tooltip=["block:N", "part:N", "row0:Q", "row1:Q", "col0:Q", "col1:Q"],
        )
        .properties(width=round(RAGGED_COLS * scale), height=round(padded_rows * scale))
    )
