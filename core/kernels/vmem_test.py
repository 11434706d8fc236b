from __future__ import annotations

import re

import pytest

from core import runtime
from core.kernels import vmem

LACKS_LIBTPU = runtime.host_lacks(["libtpu"], why="compiling Pallas kernels for TPU topologies")


def test_fits_judges_against_the_scoped_limit_not_physical_vmem():
    assert vmem.fits(16 * vmem.MIB, "v5e") and not vmem.fits(16 * vmem.MIB + 1, "v5e")
    assert vmem.fits(24 * vmem.MIB, "v6e") and not vmem.fits(24 * vmem.MIB, "v5e")
    assert vmem.fits(24 * vmem.MIB, "v5e", vmem_limit_bytes=64 * vmem.MIB)
    with pytest.raises(ValueError, match="v4"):
        vmem.default_scoped_vmem_bytes("v4")


def _copy_kernel_compile(topology: str, rows: int, vmem_limit_bytes: int | None):
    """Compile a kernel holding x, out and a scratch of rows x 128 float32 each in VMEM."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from core.tpu import topology_compile

    def kernel(x_ref, o_ref, scratch_ref):
        scratch_ref[...] = x_ref[...] * 2
        o_ref[...] = scratch_ref[...]

    device = topology_compile.topology_devices(topology)[0]
    sharding = jax.sharding.SingleDeviceSharding(device)
    x = jax.ShapeDtypeStruct((rows, 128), jnp.float32, sharding=sharding)
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((rows, 128), jnp.float32)],
        compiler_params=pltpu.CompilerParams(vmem_limit_bytes=vmem_limit_bytes),
    )
    return jax.jit(call, out_shardings=sharding).lower(x).compile()


@pytest.mark.skipif(LACKS_LIBTPU is not None, reason=str(LACKS_LIBTPU))
@pytest.mark.parametrize("generation", list(vmem.DEFAULT_SCOPED_VMEM))
def test_mosaic_reports_the_recorded_default_limit_and_vmem_limit_bytes_lifts_it(generation):
    topology, limit = vmem.DEFAULT_SCOPED_VMEM[generation]
    rows = 3 * limit // (128 * 4) // 4  # buffers of 0.75 x the limit: the scoped two exceed it
    with pytest.raises(Exception, match="scoped vmem limit") as refused:
        _copy_kernel_compile(topology, rows, None)
    reported = re.search(r"limit ([0-9.]+)M exceeded", str(refused.value))
    assert reported and float(reported.group(1)) * vmem.MIB == limit
    _copy_kernel_compile(topology, rows, 2 * limit)  # asks for more: compiles
