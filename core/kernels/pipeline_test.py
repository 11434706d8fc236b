"""The manual DMA pipeline against NumPy float64: TPU interpret mode here, Mosaic on a TPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from core import numerics
from core.kernels import matmul, pipeline
from core.tpu import topology_compile


class TestStreamMatmul:
    @pytest.mark.parametrize(
        ("rows", "chunk", "buffers", "dtype"),
        [(64, 16, 2, "float32"), (64, 32, 1, "bfloat16")],
    )
    def test_matches_numpy(self, mode, rows, chunk, buffers, dtype):
        kx, kw = jax.random.split(jax.random.key(3))
        x = jax.random.normal(kx, (rows, 128), jnp.dtype(dtype))
        w = jax.random.normal(kw, (128, 128), jnp.dtype(dtype))
        interpret = matmul.interpret_params() if mode == "interpret" else False
        result = pipeline.stream_matmul(x, w, chunk, buffers=buffers, interpret=interpret)
        error = numerics.scaled_max_error(result, pipeline.stream_matmul_reference(x, w))
        assert error <= numerics.tolerance(dtype)
        if mode == "interpret":
            assert matmul.races_found() is False  # the detector ran and found none


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
def test_compiles_through_mosaic_for_v6e():
    P = jax.sharding.PartitionSpec
    mesh = topology_compile.topology_mesh("v6e:2x2")
    per_chip = jax.shard_map(
        lambda x, w: pipeline.stream_matmul(x, w, 32, 2, interpret=False),
        mesh=mesh,
        in_specs=(P(), P()),
        out_specs=P(),
        check_vma=False,
    )
    shapes = (jax.ShapeDtypeStruct((64, 128), jnp.float32),) + (
        jax.ShapeDtypeStruct((128, 128), jnp.float32),
    )
    _report, compiled = topology_compile.compile_for_topology(
        per_chip, shapes, (P(), P()), "v6e:2x2"
    )
    assert matmul.TPU_CUSTOM_CALL in compiled.as_text()
