from __future__ import annotations

import numpy as np
import pytest

from core.kernels import matmul
from core.lessons.pallas import pallas_grids


def test_matmul_strips_follow_the_index_maps():
    x, y, out = pallas_grids.operands("matmul", 256, 384, 512, 128, 128)
    assert (x.block, y.block, out.block) == ((128, 384), (384, 128), (128, 128))
    assert out.grid == (2, 4)
    # program (1, 3): row strip 1 of x, column strip 3 of y, output block (1, 3)
    assert (x.block_index(1, 3), y.block_index(1, 3), out.block_index(1, 3)) == (
        (1, 0),
        (0, 3),
        (1, 3),
    )


def test_access_rows_cover_every_output_block_once():
    ops = pallas_grids.operands("add", 64, 128, 256, 16, 128)
    ids = pallas_grids.program_ids(64, 256, 16, 128)
    rows = pallas_grids.access_rows(ops, ids)
    assert len(rows) == 4 * 2
    assert rows[3]["(i, j)"] == "(1, 1)"
    assert rows[3]["out: writes"] == "block (1, 1) = [16:32, 128:256]"
    assert len({row["out: writes"] for row in rows}) == len(rows)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("matmul", 256, 256, 256, 96, 128, "float32", 0), "does not divide"),
        (("matmul", 256, 256, 256, 128, 64, "float32", 0), "divisible by 128"),
        (("add", 256, 256, 256, 4, 128, "bfloat16", 0), "divisible by 8"),
        (("add", 1024, 128, 1024, 8, 128, "float32", 0), "too slow"),
        (("add", 256, 128, 256, 128, 128, "float32", 4), "program 4 does not exist"),
    ],
)
def test_problem_explains_refusals(args, words):
    assert words in pallas_grids.problem(*args)


def test_defaults_are_allowed():
    assert pallas_grids.problem("matmul", 256, 256, 256, 128, 128, "float32", 3) is None
    assert pallas_grids.problem("add", 256, 256, 256, 16, 256, "bfloat16", 0) is None


def test_block_picture_lights_one_block():
    x = pallas_grids.operands("matmul", 256, 256, 256, 128, 128)[0]
    spec = pallas_grids.block_picture(x, 1, 0).to_dict()
    cells = next(iter(spec["datasets"].values()))
    lit = [c["block"] for c in cells if c["touched"] == "this program"]
    assert lit == ["(1, 0)"] and len(cells) == 2


@pytest.mark.parametrize(
    "rows, block_rows, mode", [(200, 128, "hlo"), (40, 16, "interpret"), (256, 128, "hlo")]
)
def test_ragged_add_pads_the_last_block_and_drops_the_excess(rows, block_rows, mode):
    rng = np.random.default_rng(rows)
    x, y = (rng.normal(size=(rows, 256)).astype(np.float32) for _ in range(2))
    out, seen = pallas_grids.ragged_add(
        x, y, (block_rows, 128), interpret=matmul.interpret_for(mode)
    )
    out, seen = np.asarray(out), np.asarray(seen)
    # the output has the array's shape and is exact: one float32 add per element
    assert out.shape == (rows, 256)
    np.testing.assert_array_equal(out, x + y)  # NumPy's float32 add, rounded once
    # what the kernel saw: the array's rows, then padding up to whole blocks (NaN here)
    padded = -(-rows // block_rows) * block_rows
    assert seen.shape == (padded, 256)
    np.testing.assert_array_equal(seen[:rows], x)
    assert np.isnan(seen[rows:]).all()
    table = pallas_grids.ragged_rows(rows, block_rows)
    assert len(table) == padded // block_rows
    assert sum(r["output rows kept"] for r in table) == rows
    last = table[-1]["padding rows"]
    assert last == ("none" if padded == rows else f"{rows}..{padded - 1} ({padded - rows})")


def test_ragged_problem_keeps_the_block_rule_but_not_exact_blocks():
    assert pallas_grids.ragged_problem(200, 128) is None
    assert "divisible by 8" in pallas_grids.ragged_problem(200, 12)
    assert "between 1 and" in pallas_grids.ragged_problem(200, 256)


def test_ragged_picture_shades_the_padding_past_the_edge():
    spec = pallas_grids.ragged_picture(200, 128).to_dict()
    cells = next(iter(spec["datasets"].values()))
    padding = [c for c in cells if c["part"] == "padding"]
    assert len(padding) == 2 and all((c["row0"], c["row1"]) == (200, 256) for c in padding)
