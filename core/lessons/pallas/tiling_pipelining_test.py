from __future__ import annotations

import pytest

from core.lessons.pallas import tiling_pipelining as tp


def test_vmem_per_core_is_jax_tpu_info():
    # The figures the issue quotes from jax's tpu_info: 128 MiB v5e/v6e, 64 MiB v5p/TPU7x.
    mib = {g: tp.chip_info(g)["vmem_bytes"] / 2**20 for g in tp.GENERATIONS}
    assert mib == {"v5e": 128, "v6e": 128, "v5p": 64, "TPU7x": 64}
    # v5e's peak and bandwidth are the ones the matmul guide used (197 TFLOP/s, 819 GB/s)
    v5e = tp.chip_info("v5e")
    assert v5e["bf16_flops"] == pytest.approx(197e12) and v5e["hbm_bytes_per_s"] == pytest.approx(
        819e9, rel=0.01
    )


def test_vmem_parts_by_hand():
    parts = tp.vmem_parts(512, 1024, 256, "bfloat16", 2)
    assert list(parts.values()) == [
        2 * 512 * 1024 * 2,
        2 * 1024 * 256 * 2,
        2 * 512 * 256 * 2,
        512 * 256 * 4,
    ]
    rows = tp.vmem_rows(4096, 4096, 4096, "float32", 1)  # 3 x 64 MiB + 64 MiB
    assert [r["fits"] for r in rows] == ["no"] * 4
    assert rows[0]["blocks need (MiB)"] == 256


def test_roofline_by_hand():
    # 1024^3, 128 blocks, bf16: x read 8x, y read 8x, out once: (2 * 8 + 1) * 2 MiB
    r = tp.roofline(1024, 1024, 1024, 128, 128, 128, "bfloat16", "v5e")
    assert r["HBM bytes"] == 17 * 2 * 1024**2
    assert r["intensity (FLOP/byte)"] == pytest.approx(2 * 1024**3 / (17 * 2 * 1024**2))
    assert r["bound"] == "memory"
    assert r["utilization"] == pytest.approx(r["intensity (FLOP/byte)"] / r["ridge (FLOP/byte)"])
    big = tp.roofline(8192, 8192, 8192, 512, 1024, 1024, "bfloat16", "v5e")
    assert big["bound"] == "compute" and big["utilization"] == 1.0


@pytest.mark.parametrize(("copy_s", "compute_s"), [(1.0, 2.0), (2.0, 1.0), (1.0, 1.0)])
@pytest.mark.parametrize("steps", [1, 2, 7])
def test_closed_form_equals_simulated_timeline(steps, copy_s, compute_s):
    simulated = max(row["end"] for row in tp.timeline(steps, copy_s, compute_s, 2))
    assert tp.pipelined_seconds(steps, copy_s, compute_s) == pytest.approx(simulated)
    serial = max(row["end"] for row in tp.timeline(steps, copy_s, compute_s, 1))
    assert serial == pytest.approx(steps * (copy_s + compute_s))


def test_pipeline_model_is_below_the_roofline_and_above_published():
    for bm, bk, bn, size, published in tp.PUBLISHED_V5E:
        roof = tp.roofline(size, size, size, bm, bk, bn, "bfloat16", "v5e")["utilization"]
        model = tp.pipelined_utilization(size, size, size, bm, bk, bn, "bfloat16", "v5e")
        assert published / 100 <= model <= roof + 1e-12


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((256, 128, 48, "float32"), "does not divide"),
        ((256, 128, 8, "bfloat16"), "multiple of 16"),
        ((2048, 128, 16, "float32"), "too slow"),
    ],
)
def test_dma_problem(args, words):
    assert words in tp.dma_problem(*args)
    assert tp.dma_problem(256, 128, 32, "bfloat16") is None
