"""Exercises of the lesson "Pallas grids and BlockSpecs": how many padding values a ragged
grid hands the kernel, and the grid and BlockSpecs of a blocked transpose."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.pallas._shared import PHASE, as_float64, wrong_blocks


class PaddingValues(PredictItem):
    """Blocks that do not divide the array: the grid rounds up, and every value of the last
    blocks past the edge is padding (rows past the bottom, columns past the right, and the
    corner where both run over)."""

    id = "pallas.pallas_grids.padding_values"
    phase = PHASE
    lesson = "pallas_grids"
    title = "Padding values a ragged grid hands the kernel"
    units = "values"
    rel_tol = 0.0
    abs_tol = 0.5  # a count: exact
    hints = (
        "Start with the grid: Pallas launches ceil(rows / block rows) x ceil(cols / block "
        "cols) program instances, and every one of them receives a whole block.",
        "Count what the blocks cover, whole blocks included, and take away what the array "
        "holds: the difference is padding.",
        "grid rows x block rows x grid cols x block cols − rows x cols. Counting the bottom "
        "strip and the right strip separately misses their corner, where both run over.",
    )

    def params(self, generator):
        # a TPU-legal block (rows a multiple of 8, columns of 128) that divides neither dim
        block_rows = int(generator.choice([16, 24, 32, 40]))
        rows = block_rows * int(generator.integers(1, 4)) + 8 * int(
            generator.integers(1, block_rows // 8)
        )
        block_cols = int(generator.choice([128, 256]))
        cols = block_cols * int(generator.integers(1, 3)) + int(generator.integers(1, 16)) * 8
        return {"rows": rows, "cols": cols, "block": (block_rows, block_cols)}

    def prompt(self, params) -> str:
        rows, cols, (br, bc) = params["rows"], params["cols"], params["block"]
        return (
            "The lesson's padding demo, `ragged_add(x, y, block)`, adds two arrays with blocks "
            "that need not divide them and copies every x block it receives, as it received "
            "it, into a second output of whole blocks (`seen`). Here x and y are "
            f"**({rows}, {cols})** float32 and the block is **({br}, {bc})**: neither "
            "dimension divides.\n\n"
            "**Predict how many of the values in the x blocks the kernel receives, over the "
            "whole grid, are padding** (not values of x). The lesson's library then runs the "
            "kernel in interpret mode, where padding arrives as NaN, and counts the NaNs in "
            "`seen`."
        )

    def live(self, params) -> float:
        from core.lessons.pallas import pallas_grids

        rows, cols, block = params["rows"], params["cols"], params["block"]
        x = np.zeros((rows, cols), np.float32)
        # interpret=True on every host: the count reads interpret mode's NaN padding
        _out, seen = pallas_grids.ragged_add(x, x, block, interpret=True)
        return float(np.isnan(np.asarray(seen)).sum())

    @staticmethod
    def _parts(params) -> tuple[int, int, int, int]:
        """(grid rows, grid cols, padded rows, padded cols)."""
        rows, cols, (br, bc) = params["rows"], params["cols"], params["block"]
        gr, gc = -(-rows // br), -(-cols // bc)
        return gr, gc, gr * br, gc * bc

    def derive(self, params):
        rows, cols, (br, bc) = params["rows"], params["cols"], params["block"]
        gr, gc, pr, pc = self._parts(params)
        value = pr * pc - rows * cols
        corner = (pr - rows) * (pc - cols)
        return value, (
            f"The grid rounds up: ceil({rows} / {br}) = {gr} block rows and ceil({cols} / "
            f"{bc}) = {gc} block columns, {gr * gc} program instances, each handed a whole "
            f"({br}, {bc}) block of x. Together they cover {pr} x {pc} = {pr * pc} values; x "
            f"holds {rows} x {cols} = {rows * cols}. The rest is padding: "
            f"**{pr * pc} − {rows * cols} = {value}** values: {pr - rows} rows past the bottom "
            f"({(pr - rows) * cols} values beside x's columns), {pc - cols} columns past the "
            f"right ({(pc - cols) * rows} beside x's rows) and the corner where both run over "
            f"({corner}). Pallas drops what the kernel writes there from an output of x's "
            "shape, so an elementwise kernel is right all the same; a kernel that sums across "
            "a ragged dimension adds all of it in."
        )

    def wrong(self, params, expected):
        rows, cols = params["rows"], params["cols"]
        _gr, _gc, pr, pc = self._parts(params)
        return {
            "the grid rounded down: no block passes the edge": 0,
            "only the rows past the bottom (the ragged columns forgotten)": (pr - rows) * cols,
            "only the columns past the right (the ragged rows forgotten)": (pc - cols) * rows,
            "the two strips without their corner": (pr - rows) * cols + (pc - cols) * rows,
        }


_TRANSPOSE_STUB = '''\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _transpose_block(x_ref, o_ref):
    o_ref[...] = x_ref[...].T  # the block of x this program reads, transposed


def blocked_transpose(x_MN, bm, bn):
    """out_NM = x_MN.T as one pl.pallas_call, run with interpret=True (on the CPU).

    x_MN is (M, N), cut into blocks of (bm, bn); bm divides M and bn divides N. The grid
    walks the OUTPUT's blocks: program (i, j) writes block (i, j) of out_NM, and reads the
    one block of x whose transpose that is. Fill in the grid and the two BlockSpecs
    (pl.BlockSpec(block_shape, index_map), index_map(i, j) -> a block index).
    """
    m, n = x_MN.shape
    grid = ...  # how many output blocks along each axis
    x_spec = ...  # the block of x program (i, j) reads
    out_spec = ...  # the block of out program (i, j) writes
    raise NotImplementedError("choose grid, x_spec and out_spec, then delete this line")
    return pl.pallas_call(
        _transpose_block,
        out_shape=jax.ShapeDtypeStruct((n, m), x_MN.dtype),
        grid=grid,
        in_specs=[x_spec],
        out_specs=out_spec,
        interpret=True,
    )(x_MN)
'''


class BlockedTranspose(CodeItem):
    id = "pallas.pallas_grids.blocked_transpose"
    phase = PHASE
    lesson = "pallas_grids"
    title = "The grid and BlockSpecs of a blocked transpose"
    function_name = "blocked_transpose"
    stub = _TRANSPOSE_STUB
    solution_module = "core.exercises.solutions.blocked_transpose"
    hints = (
        "Work from the output: out_NM has N rows and M columns, in blocks of (bn, bm), so the "
        "grid has N / bn block rows and M / bm block columns.",
        "Output block (i, j) covers out rows i*bn.. and columns j*bm..; those are columns "
        "i*bn.. and rows j*bm.. of x. Which block index of x is that, in blocks of (bm, bn)?",
        "grid = (n // bn, m // bm); x_spec = pl.BlockSpec((bm, bn), lambda i, j: (j, i)); "
        "out_spec = pl.BlockSpec((bn, bm), lambda i, j: (i, j)). An index map returns block "
        "indices, never element offsets.",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `blocked_transpose(x_MN, bm, bn)`: the kernel body is written; choose "
            "the grid and the two BlockSpecs so that each program instance reads the right "
            "block of x. The hidden tests run it in interpret mode on float32 arrays with "
            "more block rows than block columns, with blocks that are not square, with a "
            "square grid (where a swapped index map still runs), and with one block holding "
            "the whole array and values up to float32's largest. They compare with NumPy's "
            "`x.T` exactly: a copy does no arithmetic, so every value must come back bit for "
            "bit. Blocks are multiples of 128 both ways: a transpose puts x's rows in the "
            "output's lanes, so both must satisfy the TPU's (8, 128) rule."
        )

    def planted_wrong(self) -> dict[str, str]:
        solution = self.reference_source()
        x_map = "lambda i, j: (j, i))  # x block (j, i)"
        grid = "grid = (n // bn, m // bm)"
        out_block = "pl.BlockSpec((bn, bm), lambda i, j: (i, j))"
        for text in (x_map, grid, out_block):
            assert text in solution, f"the reference no longer holds {text!r}"
        return {
            "x's index map not swapped: (i, j), as if copying": solution.replace(
                x_map, "lambda i, j: (i, j))  # x block (j, i)"
            ),
            "the grid walks x's blocks (M/bm, N/bn), not the output's": solution.replace(
                grid, "grid = (m // bm, n // bn)"
            ),
            "element offsets where block indices belong: (j * bm, i * bn)": solution.replace(
                x_map, "lambda i, j: (j * bm, i * bn))  # x block (j, i)"
            ),
            "the output block shaped like x's, (bm, bn)": solution.replace(
                out_block, "pl.BlockSpec((bm, bn), lambda i, j: (i, j))"
            ),
        }

    def cases(self, seed: int) -> list[tuple[str, np.ndarray, int, int]]:
        """(name, x, bm, bn): four float32 arrays; blocks multiples of 128 both ways."""
        generator = rng(self.id + "/inputs", seed)

        def normal(m, n):
            return generator.normal(size=(m, n)).astype(np.float32)

        g_rows, g_cols = (int(g) for g in generator.permutation([3, 4]))
        long_block = (128, 256) if generator.integers(2) else (256, 128)
        return [
            (
                f"{g_rows} x {g_cols} blocks of (128, 128)",
                normal(128 * g_rows, 128 * g_cols),
                128,
                128,
            ),
            (
                f"3 x 3 blocks of {long_block} (not square)",
                normal(3 * long_block[0], 3 * long_block[1]),
                *long_block,
            ),
            ("a square grid: 2 x 2 blocks of (128, 128)", normal(256, 256), 128, 128),
            (
                "one block, the whole array, values up to float32's largest (3.4e38)",
                generator.uniform(-3.4e38, 3.4e38, size=(128, 256)).astype(np.float32),
                128,
                256,
            ),
        ]

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        return [self._compare(function, *case) for case in self.cases(seed)]

    def _compare(self, function, name, x, bm, bn) -> HiddenTest:
        label = f"{name}: x {x.shape}, bm={bm}, bn={bn}"
        # NumPy's transpose. A copy does no arithmetic: every value must come back bit for
        # bit, so the comparison is exact (no tolerance).
        expected = x.T.astype(np.float64)
        got, why = as_float64(function(x, bm, bn), "the result")
        if got is None:
            return HiddenTest(label, False, why)
        if got.shape != expected.shape:
            return HiddenTest(label, False, f"returned shape {got.shape}; expected {x.T.shape}")
        wrong = ~(got == expected)
        count = int(wrong.sum())
        return HiddenTest(
            label,
            count == 0,
            f"{count} of {expected.size} values differ from x.T "
            f"(tolerance: exact){wrong_blocks(wrong, (bn, bm))}",
        )
