from __future__ import annotations

import pytest

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
