from __future__ import annotations

import pytest

from core.kernels import tiling


def test_min_tile_by_dtype():
    assert tiling.min_tile("float32") == (8, 128)
    assert tiling.min_tile("bfloat16") == (16, 128)
    assert tiling.min_tile("int8") == (32, 128)
    with pytest.raises(ValueError, match="float64"):
        tiling.min_tile("float64")


@pytest.mark.parametrize(
    ("shape", "block", "dtype"),
    [
        ((256, 256), (128, 128), "float32"),
        ((256, 256), (8, 128), "float32"),
        ((256, 256), (16, 256), "bfloat16"),
        ((4, 100), (4, 100), "float32"),  # the whole array: allowed whatever its size
        ((4096,), (1024,), "float32"),
    ],
)
def test_allowed_blocks(shape, block, dtype):
    assert tiling.block_problem("x", shape, block, dtype) is None


@pytest.mark.parametrize(
    ("shape", "block", "dtype", "words"),
    [
        ((256, 256), (96, 128), "float32", "does not divide"),
        ((256, 256), (4, 128), "float32", "multiple of 8"),
        ((256, 256), (8, 64), "float32", "multiple of 128"),
        ((256, 256), (8, 128), "bfloat16", "multiple of 16"),
        ((256, 256), (512, 128), "float32", "between 1 and"),
        ((256,), (8, 128), "float32", "dims"),
    ],
)
def test_refused_blocks(shape, block, dtype, words):
    assert words in tiling.block_problem("x", shape, block, dtype)


def test_grid_of():
    assert tiling.grid_of((256, 384), (128, 128)) == (2, 3)
