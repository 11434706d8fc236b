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
        ((256, 256), (8, 128), "bfloat16"),  # Pallas's rule is 8 x 128 for every dtype
        ((240, 256), (24, 128), "bfloat16"),
    ],
)
def test_allowed_blocks(shape, block, dtype):
    assert tiling.block_problem("x", shape, block, dtype) is None


@pytest.mark.parametrize(
    ("shape", "block", "dtype", "words"),
    [
        ((256, 256), (96, 128), "float32", "does not divide"),
        ((256, 256), (4, 128), "float32", "divisible by 8"),
        ((256, 256), (8, 64), "float32", "divisible by 128"),
        ((256, 256), (4, 128), "bfloat16", "divisible by 8"),
        ((256, 256), (512, 128), "float32", "between 1 and"),
        ((256,), (8, 128), "float32", "dims"),
    ],
)
def test_refused_blocks(shape, block, dtype, words):
    assert words in tiling.block_problem("x", shape, block, dtype)


def test_grid_of():
    assert tiling.grid_of((256, 384), (128, 128)) == (2, 3)


def test_a_block_that_does_not_divide_is_the_courses_refusal_not_pallas():
    assert "does not divide" in tiling.block_problem("x", (200, 256), (128, 128), "float32")
    assert tiling.block_problem("x", (200, 256), (128, 128), "float32", exact=False) is None


def test_pallas_pads_a_block_that_does_not_divide_and_drops_the_excess():
    """200 rows in blocks of 128: the second block hangs 56 rows past the edge; interpret
    mode pads them (with NaN) on input and drops them on output, so x + y is still exact."""
    import jax
    import numpy as np
    from jax.experimental import pallas as pl

    def add(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]

    x = np.random.default_rng(0).normal(size=(200, 256)).astype(np.float32)
    y = np.random.default_rng(1).normal(size=(200, 256)).astype(np.float32)
    spec = pl.BlockSpec((128, 128), lambda i, j: (i, j))
    out = pl.pallas_call(
        add,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=tiling.grid_of(x.shape, (128, 128)),
        in_specs=[spec, spec],
        out_specs=spec,
        interpret=True,
    )(x, y)
    np.testing.assert_array_equal(np.asarray(out), x + y)  # one float32 add per element
