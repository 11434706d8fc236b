"""The kernels against NumPy float64, in TPU interpret mode here and compiled on a TPU.

Each class runs in "interpret" mode (always: races detected, uninitialized memory NaN) and
"tpu" mode (compiled through Mosaic; skipped unless the backend is a TPU), unchanged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.kernels import matmul
from core.tpu import topology_compile

interpret_for = matmul.interpret_for  # the one mapping (flash_attention_test, the capstone)


def test_one_interpret_mapping():
    params = matmul.interpret_for("interpret")
    assert params.detect_races and params.uninitialized_memory == "nan"
    assert matmul.interpret_for("hlo") is True and matmul.interpret_for("tpu") is False
    with pytest.raises(ValueError, match="'mosaic'"):
        matmul.interpret_for("mosaic")


@pytest.mark.parametrize("backend", ["cpu", "tpu"])
def test_default_interpret_compiles_through_mosaic_only_on_a_tpu(monkeypatch, backend):
    # The decision for either backend, taken here: on a TPU the default is False (Mosaic), a
    # bool with no InterpretParams fields (reading .detect_races there was a test's bug).
    monkeypatch.setattr(matmul.jax, "default_backend", lambda: backend)
    if backend == "tpu":
        assert matmul.default_interpret() is False and matmul.default_interpret("hlo") is False
    else:
        assert matmul.default_interpret().detect_races and matmul.default_interpret("hlo") is True


def operands(m, k, n, seed=0, dtype=jnp.float32):
    kx, ky = jax.random.split(jax.random.key(seed))
    return (
        jax.random.normal(kx, (m, k), dtype),
        jax.random.normal(ky, (k, n), dtype),
    )


class TestAdd:
    @pytest.mark.parametrize(("shape", "block"), [((16, 256), (8, 128)), ((512,), (256,))])
    def test_matches_numpy(self, mode, shape, block):
        x, y = jax.random.normal(jax.random.key(1), (2, *shape))
        result = matmul.add(x, y, block, interpret=interpret_for(mode))
        error = numerics.scaled_max_error(result, matmul.add_reference(x, y))
        assert error <= numerics.tolerance("float32")


class TestMatmulRowsCols:
    @pytest.mark.parametrize(
        ("mkn", "bm", "bn"), [((16, 128, 256), 8, 128), ((32, 64, 128), 16, 128)]
    )
    def test_matches_numpy(self, mode, mkn, bm, bn):
        x, y = operands(*mkn)
        result = matmul.matmul_rows_cols(x, y, bm, bn, interpret=interpret_for(mode))
        error = numerics.scaled_max_error(result, matmul.matmul_reference(x, y))
        assert error <= numerics.tolerance("float32")


class TestMatmul:
    @pytest.mark.parametrize(
        ("mkn", "blocks", "dtype"),
        [
            ((16, 256, 256), (8, 128, 128), "float32"),
            ((32, 256, 128), (16, 128, 128), "bfloat16"),
        ],
    )
    def test_matches_numpy(self, mode, mkn, blocks, dtype):
        x, y = operands(*mkn, dtype=jnp.dtype(dtype))
        result = matmul.matmul(x, y, *blocks, interpret=interpret_for(mode))
        assert result.dtype == jnp.dtype(dtype)
        error = numerics.scaled_max_error(result, matmul.matmul_reference(x, y))
        assert error <= numerics.tolerance(dtype)

    def test_missing_init_is_caught(self, mode):
        if mode != "interpret":
            pytest.skip("uninitialized memory is poisoned with NaN only in interpret mode")
        x, y = operands(16, 256, 256)
        # the same shapes with init=True match NumPy (test_matches_numpy's first case)
        buggy = matmul.matmul(x, y, 8, 128, 128, init=False, interpret=interpret_for(mode))
        assert np.isnan(np.asarray(buggy)).all()


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
def test_compiles_through_mosaic_for_v5e():
    report, has_custom_call = matmul.compile_for_topology("v5e:2x2", 16, 256, 128, 8, 128, 128)
    assert has_custom_call
    assert report.device_kind.startswith("TPU v5")
    # every chip holds x, y (arguments) and the output: 16x256 + 256x128 + 16x128 float32
    assert report.memory["argument_size_in_bytes"] == 4 * (16 * 256 + 256 * 128)
    assert report.memory["output_size_in_bytes"] == 4 * 16 * 128
