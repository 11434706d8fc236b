from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.kernels import matmul, matmul_sweep


def test_parse_blocks_and_its_refusals():
    assert matmul_sweep.parse_blocks("128x128x128, 512x1024x1024,") == [
        (128, 128, 128),
        (512, 1024, 1024),
    ]
    for text, words in [
        ("512x1024", "bm x bk x bn"),
        ("512x1024xten", "bm x bk x bn"),
        ("512x1000x1024", "multiple of 128"),
        ("0x128x128", "multiple of 128"),
        ("128x128x128,128x128x128", "twice"),
        (",", "at least one"),
    ]:
        with pytest.raises(ValueError, match=words):
            matmul_sweep.parse_blocks(text)
    # the default sweep is valid by its own rule, and all of it divides both default sizes
    text = ",".join("x".join(map(str, b)) for b in matmul_sweep.BLOCKS)
    assert matmul_sweep.parse_blocks(text) == list(matmul_sweep.BLOCKS)
    for n in matmul_sweep.SIZES:
        assert matmul_sweep.usable_blocks(n, matmul_sweep.BLOCKS) == list(matmul_sweep.BLOCKS)


def test_usable_blocks_keep_whole_grids():
    blocks = [(128, 128, 128), (256, 512, 256), (384, 128, 128), (128, 128, 1024)]
    assert matmul_sweep.usable_blocks(512, blocks) == [(128, 128, 128), (256, 512, 256)]


def test_row_by_hand():
    item = matmul_sweep.row(
        "pallas", 4096, (512, 1024, 1024), "ok", peak_flops=2e14, seconds=[3e-3, 1e-3, 2e-3]
    )
    assert item["median_s"] == 2e-3 and item["flops"] == 2 * 4096**3
    assert item["tflops_per_s"] == pytest.approx(2 * 4096**3 / 2e-3 / 1e12)
    assert item["fraction_of_peak"] == pytest.approx(2 * 4096**3 / 2e-3 / 2e14)
    failed = matmul_sweep.row("pallas", 4096, (1024,) * 3, "error", reason="VMEM")
    assert failed["median_s"] is None and failed["fraction_of_peak"] is None
    with pytest.raises(ValueError, match="timed calls"):
        matmul_sweep.row("xla", 4096, (0, 0, 0), "ok")
    with pytest.raises(ValueError, match="unknown"):
        matmul_sweep.row("cublas", 4096, (0, 0, 0), "skipped")


def test_record_figures_keep_each_configuration_by_size_and_blocks():
    rows = [
        matmul_sweep.row("pallas", 4096, (512, 1024, 1024), "ok", peak_flops=2e14,
                         seconds=[2e-3]),
        matmul_sweep.row("pallas", 4096, (1024, 1024, 1024), "error", reason="VMEM limit"),
        matmul_sweep.row("pallas", 8192, (128, 128, 128), "skipped", reason="budget"),
        matmul_sweep.row("xla", 4096, (0, 0, 0), "ok", peak_flops=2e14, seconds=[1e-3]),
    ]  # fmt: skip
    agreement = [
        {"kernel": "pallas", "dtype": "bfloat16", "scaled_max_error": 1e-3, "tolerance": 0.02},
        {"kernel": "xla", "dtype": "float32", "error": "OOM"},
    ]
    document = {"device_kind": "TPU v5 lite", "dtype": "bfloat16", "accumulator": "float32",
                "peak_flops": 2e14, "rows": rows, "agreement": agreement}  # fmt: skip
    figures = matmul_sweep.record_figures(document)
    assert figures == {
        "device_kind": "TPU v5 lite",
        "dtype": "bfloat16",
        "accumulator": "float32",
        "peak_flops": 2e14,
        "pallas_n4096_b512x1024x1024_ms": 2.0,
        "pallas_n4096_b512x1024x1024_tflops": pytest.approx(2 * 4096**3 / 2e-3 / 1e12),
        "pallas_n4096_b512x1024x1024_fraction_of_peak": pytest.approx(2 * 4096**3 / 2e-3 / 2e14),
        "pallas_n4096_b1024x1024x1024_error": "VMEM limit",
        "xla_n4096_ms": 1.0,
        "xla_n4096_tflops": pytest.approx(2 * 4096**3 / 1e-3 / 1e12),
        "xla_n4096_fraction_of_peak": pytest.approx(2 * 4096**3 / 1e-3 / 2e14),
        "agreement_pallas_bfloat16_error": 1e-3,
        "agreement_pallas_bfloat16_tolerance": 0.02,
    }


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(("n", "blocks"), [(256, (128, 128, 128)), (256, (128, 256, 128))])
def test_agreement_passes_the_kernel_and_fails_a_planted_mismatch(dtype, n, blocks):
    rng = np.random.default_rng(0)
    # on the CPU's device, as it is judged (backend="cpu"): on a chip's TPU the interpreted
    # kernel's float32 dot would be one bfloat16 pass
    cpu = jax.devices("cpu")[0]
    x = jax.device_put(jnp.asarray(rng.standard_normal((n, n)), dtype), cpu)
    y = jax.device_put(jnp.asarray(rng.standard_normal((n, n)), dtype), cpu)
    result = matmul.matmul(x, y, *blocks, interpret=matmul.interpret_for("hlo"))
    found = matmul_sweep.agreement("pallas", result, x, y, dtype, backend="cpu")
    assert found["agrees"] and found["tolerance"] == numerics.TOLERANCE[dtype]
    assert found["shape"] == [n, n]
    # x @ y.T is a product of the same numbers in the wrong layout: errors of order 1
    wrong = matmul_sweep.agreement("pallas", x @ y.T, x, y, dtype, backend="cpu")
    assert not wrong["agrees"] and wrong["scaled_max_error"] > 10 * found["tolerance"]
    # one accumulator step missing (the last k block's product) fails too
    partial = np.asarray(x[:, : n - 128], np.float64) @ np.asarray(y[: n - 128], np.float64)
    assert not matmul_sweep.agreement("pallas", partial, x, y, dtype, backend="cpu")["agrees"]


def test_agreement_judges_float32_on_a_tpu_at_its_matmul_precision():
    x = np.eye(4, dtype=np.float32)
    found = matmul_sweep.agreement("xla", x, x, x, "float32", backend="tpu")
    assert found["tolerance"] == numerics.TOLERANCE["bfloat16"]  # DEFAULT: one bf16 pass
    assert "DEFAULT" in found["tolerance_reason"]
