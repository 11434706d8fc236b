from __future__ import annotations

import numpy as np
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


def test_fits_is_judged_against_the_default_scoped_limit():
    # bf16 512 x 1024 x 1024, 2 buffers: 2 x (1 + 2 + 1) MiB + 2 MiB f32 accumulator = 10 MiB
    rows = {r["generation"]: r for r in tp.vmem_rows(512, 1024, 1024, "bfloat16", 2)}
    assert rows["v5e"]["fits"] == "yes" and rows["v5e"]["default scoped limit (MiB)"] == 16
    # 1024 x 2048 x 2048: 2 x (4 + 8 + 4) + 8 = 40 MiB: under v5e's 128 MiB, over its 16
    rows = {r["generation"]: r for r in tp.vmem_rows(1024, 2048, 2048, "bfloat16", 2)}
    assert rows["v5e"]["fits"] == "only with vmem_limit_bytes >= 40.0 MiB"
    assert rows["v6e"]["fits"].startswith("only with")


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


# --- the chip's block sweep (a fixture record: no TPU and no timing here) -----------------------
FIXTURE_PEAK = 197e12
FIXTURE_SECONDS = {  # N -> blocks -> seconds of the timed calls (made up, not measured)
    4096: {(128, 128, 128): [0.02, 0.021, 0.019], (512, 1024, 1024): [0.001, 0.0011, 0.0009]},
    8192: {(512, 1024, 1024): [0.006, 0.006]},
}


def _fixture_record(root):
    """A pallas_matmul_blocks record written the way tpu_scripts/matmul_blocks_tpu.py writes it
    (matmul_sweep.row -> record_figures -> records), from the made-up seconds above."""
    from core.kernels import matmul_sweep
    from core.perf import records

    rows = [
        matmul_sweep.row("pallas", n, blocks, "ok", peak_flops=FIXTURE_PEAK, seconds=seconds)
        for n, by_blocks in FIXTURE_SECONDS.items()
        for blocks, seconds in by_blocks.items()
    ]
    rows.append(
        matmul_sweep.row("pallas", 4096, (1024, 1024, 1024), "error", reason="VMEM exceeded")
    )
    rows.append(matmul_sweep.row("pallas", 4096, (256, 256, 256), "skipped", reason="budget"))
    rows.append(
        matmul_sweep.row("xla", 4096, (0, 0, 0), "ok", peak_flops=FIXTURE_PEAK, seconds=[0.001])
    )
    document = {"device_kind": "TPU v5 lite", "dtype": "bfloat16", "accumulator": "float32",
                "peak_flops": FIXTURE_PEAK, "rows": rows, "agreement": []}  # fmt: skip
    quiet = records.measure_load(
        {"load_average": [0.0] * 3, "machine_busy_s": 0.0, "own_s": 0.0, "wall_s": 0.0},
        {"load_average": [0.0] * 3, "machine_busy_s": 1.0, "own_s": 1.0, "wall_s": 1.0},
        cpus=2,
    )
    document = records.make_record(
        tp.TPU_RECORD, "python tpu_scripts/matmul_blocks_tpu.py --out x.json",
        matmul_sweep.record_figures(document), load=quiet,
    )  # fmt: skip
    return records.write_document(document, root)


def test_no_record_is_a_line_that_says_how_to_make_one(tmp_path):
    figures, why = tp.tpu_record(tmp_path)
    assert figures is None
    assert "no benchmark record 'pallas_matmul_blocks'" in why and tp.TPU_COMMAND in why


def test_tpu_block_rows_read_the_record_beside_the_models(tmp_path):
    path = _fixture_record(tmp_path)
    figures, citation = tp.tpu_record(tmp_path)
    assert str(path.name) in citation
    assert tp.measured_label(figures, citation).startswith("measured on TPU v5e (record ")
    assert tp.tpu_sizes(figures) == [4096, 8192]
    rows = {r["blocks (bm, bk, bn)"]: r for r in tp.tpu_block_rows(figures, 4096)}
    # the skipped shape has no figure; the failed one keeps its error
    assert set(rows) == {"(128, 128, 128)", "(512, 1024, 1024)", "(1024, 1024, 1024)"}
    assert rows["(1024, 1024, 1024)"]["measured TFLOP/s"] is None
    assert rows["(1024, 1024, 1024)"]["status"] == "failed: VMEM exceeded"
    # measured: 2 N^3 / median seconds, as a share of the peak (closed form)
    for blocks, seconds in FIXTURE_SECONDS[4096].items():
        row = rows[f"({blocks[0]}, {blocks[1]}, {blocks[2]})"]
        expected = 100 * 2 * 4096**3 / float(np.median(seconds)) / FIXTURE_PEAK
        assert row["measured % of peak"] == pytest.approx(expected, rel=1e-4)
        assert row["status"] == "ran"
    # the roofline by hand: x read N/bn times, y N/bm times, out once, bf16
    ridge = tp.chip_info("v5e")["bf16_flops"] / tp.chip_info("v5e")["hbm_bytes_per_s"]
    intensity = 2 * 4096**3 / ((2 * 4096**3 / 128 + 4096**2) * 2)
    assert rows["(128, 128, 128)"]["roofline % (model)"] == pytest.approx(100 * intensity / ridge)
    assert rows["(512, 1024, 1024)"]["roofline % (model)"] == 100  # compute bound
    assert rows["(1024, 1024, 1024)"]["VMEM (MiB, 2 buffers)"] == 2 * 3 * 2 + 4  # bf16, f32 acc
    ordered = [r["pipeline % (model)"] for r in tp.tpu_block_rows(figures, 4096)]
    assert ordered == sorted(ordered)
    assert [r["blocks (bm, bk, bn)"] for r in tp.tpu_block_rows(figures, 8192)] == [
        "(512, 1024, 1024)"
    ]
    assert tp.tpu_block_rows(figures, 2048) == []
    assert tp.tpu_xla_percent(figures, 4096) == pytest.approx(
        100 * 2 * 4096**3 / 0.001 / FIXTURE_PEAK, rel=1e-4
    )
    assert tp.tpu_xla_percent(figures, 8192) is None
