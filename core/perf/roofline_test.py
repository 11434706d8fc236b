import jax
import pytest

from core import runtime
from core.perf import roofline
from core.tpu import topology_compile


@pytest.mark.parametrize(("m", "n", "k"), [(64, 32, 16), (256, 256, 256), (100, 3, 7)])
def test_cpu_cost_analysis_matches_the_closed_form_in_f32(m, n, k):
    # the CPU compiler's counts, whatever the default backend (a TPU pads and tiles)
    cpu = runtime.cpu_device()
    cost = roofline.cost_from_compiled(roofline.compile_matmul(m, n, k, "float32", cpu))
    closed = roofline.matmul_cost(m, n, k, 4)
    assert cost.flops == 2 * m * n * k == closed.flops
    assert cost.bytes == closed.bytes == (m * k + k * n + m * n) * 4


@pytest.mark.parametrize("op", roofline.ELEMENTWISE_OPS)
@pytest.mark.parametrize("n", [1000, 4096])
def test_elementwise_cost_is_one_op_per_element(op, n):
    cpu = runtime.cpu_device()  # the CPU compiler's counts, whatever the default backend
    cost = roofline.cost_from_compiled(roofline.compile_elementwise(op, n, "float32", cpu))
    closed = roofline.elementwise_cost(op, n, 4)
    assert (cost.flops, cost.transcendentals) == (closed.flops, closed.transcendentals)
    assert cost.bytes == closed.bytes == 2 * n * 4


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tpu_compiler_counts_2mnk_flops(dtype):
    device = topology_compile.topology_devices("v5e:2x2")[0]
    cost = roofline.cost_from_compiled(roofline.compile_matmul(128, 256, 64, dtype, device))
    assert cost.flops == 2 * 128 * 256 * 64
    assert cost.bytes >= roofline.matmul_cost(128, 256, 64, 2 if dtype == "bfloat16" else 4).bytes


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
@pytest.mark.parametrize("kernel", ["matmul", "tanh"])
def test_the_cpu_claim_is_checked_on_the_cpu_whatever_the_default_backend(kernel):
    """Kind 6 of issue 37: hlo_roofline's "CPU f32 bytes vs closed form" failed on a TPU, where
    the default device's compiler (the TPU's: padded, tiled) counted other bytes. With a TPU
    chip's compiler as the default device (libtpu's v5e topology, ahead of time), the claim
    about the CPU compiler is still evaluated by the CPU compiler and holds exactly."""
    device = topology_compile.topology_devices("v5e:2x2")[0]
    sizes = {"m": 256, "n": 256, "k": 256, "op": kernel, "elements": 4096}
    with jax.default_device(device):
        on_default = roofline.cost_from_compiled(roofline.compile_matmul(256, 256, 256, "float32"))
        errors = roofline.cpu_float32_errors(
            "matmul" if kernel == "matmul" else "elementwise", **sizes
        )
    assert on_default.bytes != roofline.matmul_cost(256, 256, 256, 4).bytes  # the TPU's count
    assert errors == {
        "CPU f32 FLOPs + transcendentals vs closed form": 0.0,
        "CPU f32 bytes vs closed form": 0.0,
    }


def test_roofline_time_and_bound():
    peak, bandwidth = 100.0, 10.0  # ridge at 10 FLOP/byte
    memory_bound = roofline.Cost(flops=50, bytes=50)  # I = 1
    compute_bound = roofline.Cost(flops=1000, bytes=10)  # I = 100
    assert roofline.roofline_seconds(memory_bound, peak, bandwidth) == 5.0
    assert roofline.roofline_seconds(compute_bound, peak, bandwidth) == 10.0
    assert roofline.bound(memory_bound.intensity, peak, bandwidth) == "memory-bound"
    assert roofline.bound(compute_bound.intensity, peak, bandwidth) == "compute-bound"
    assert roofline.attainable_flops(1.0, peak, bandwidth) == 10.0
    assert roofline.attainable_flops(1e6, peak, bandwidth) == peak


def test_matmul_intensity_grows_with_size():
    small = roofline.matmul_cost(8, 8, 8, 4).intensity
    large = roofline.matmul_cost(1024, 1024, 1024, 4).intensity
    assert small == pytest.approx(2 * 8**3 / (3 * 64 * 4))
    assert large == pytest.approx(2 * 1024**3 / (3 * 1024**2 * 4))


def test_roof_rows_include_the_ridge():
    rows = roofline.roof_rows("m", 100.0, 10.0)
    assert any(
        r["intensity"] == pytest.approx(10.0) and r["FLOP/s"] == pytest.approx(100.0) for r in rows
    )
    assert rows[0]["FLOP/s"] == pytest.approx(rows[0]["intensity"] * 10.0)


def test_bad_inputs():
    with pytest.raises(ValueError, match="op"):
        roofline.elementwise_fn("sqrt")
    with pytest.raises(ValueError, match="positive"):
        roofline.matmul_cost(0, 1, 1, 4)
    with pytest.raises(ValueError, match="positive"):
        roofline.roofline_seconds(roofline.Cost(1, 1), 0, 1)
    assert jax.device_count() >= 1
