from __future__ import annotations

import numpy as np
import pytest

from core.kernels import flash_attention
from core.lessons.pallas import kernel_iteration
from core.tpu import topology_compile


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((256, 64, 96, 64, "float32", 1), "does not divide"),
        ((256, 64, 4, 64, "bfloat16", 1), "not divisible by 8 (sublanes)"),
        ((256, 64, 12, 64, "float32", 1), "does not divide"),
        ((512, 64, 16, 64, "float32", 1), "too slow"),
    ],
)
def test_problem_explains_refusals(args, words):
    assert words in kernel_iteration.problem(*args)


def test_the_long_t_check_stands_alone():
    # the app checks the TPU compile's T in that compile's cell, apart from the kernel's
    assert kernel_iteration.problem(240, 64, 48, 48, "float32", 1) is None
    assert "must divide the TPU compile's T = 4096" in kernel_iteration.long_t_problem(48, 48, 4096)
    assert kernel_iteration.long_t_problem(64, 128, 1024) is None


def test_defaults_and_whole_dims_are_allowed():
    assert kernel_iteration.problem(256, 64, 64, 64, "float32", 1) is None
    assert kernel_iteration.long_t_problem(64, 64, 4096) is None
    # a block equal to T is allowed by the tiling rule even when it is not a multiple of 8
    assert kernel_iteration.problem(16, 8, 16, 16, "bfloat16", 4) is None


def test_block_status_of_a_causal_grid():
    rows = kernel_iteration.block_status(64, 16, 32, causal=True)
    status = {(r["q block"], r["k block"]): r["status"] for r in rows}
    assert status == {
        (0, 0): "computed, masked",  # keys 0..31 for queries 0..15: partly above the diagonal
        (0, 1): "skipped",
        (1, 0): "computed, masked",
        (1, 1): "skipped",
        (2, 0): "computed",  # queries 32..47 see all of keys 0..31
        (2, 1): "computed, masked",
        (3, 0): "computed",
        (3, 1): "computed, masked",
    }
    # the kernel's own rule (pl.when) agrees with the table on every block
    for (i, j), what in status.items():
        assert bool(flash_attention._needed(i, j, 16, 32)) == (what != "skipped")
    full = kernel_iteration.block_status(64, 16, 32, causal=False)
    assert {r["status"] for r in full} == {"computed"}


def test_forward_cost_counts_the_blocks():
    n, t, d, b = 2, 256, 64, 64
    full = kernel_iteration.forward_cost(n, t, d, b, b, "float32", causal=False)
    assert full["FLOPs"] == 4 * n * t * t * d  # QK^T and PV, every block
    assert full["HBM bytes"] == 4 * (2 * n * t * d * (t // b) + 2 * n * t * d + n * t)
    causal = kernel_iteration.forward_cost(n, t, d, b, b, "float32", causal=True)
    blocks = t // b
    assert causal["blocks run"] == n * blocks * (blocks + 1) // 2
    assert causal["blocks skipped"] == n * blocks * (blocks - 1) // 2
    assert causal["FLOPs"] == full["FLOPs"] * (blocks + 1) / (2 * blocks)


def test_block_size_rows_skip_what_the_tiling_rule_refuses():
    rows = kernel_iteration.block_size_rows(1, 256, 64, "bfloat16", causal=False)
    # 8 rows pass Pallas's TPU rule for bfloat16 too (divisible by 8; bf16's native (16, 128)
    # tile is a layout, not a rule); 4 is refused
    assert [r["block (bq = bk)"] for r in rows] == [8, 16, 32, 64, 128, 256]
    intensities = [r["intensity (FLOP/byte)"] for r in rows]
    assert intensities == sorted(intensities)
    assert all(r["v5e roofline (us)"] > 0 for r in rows)


def test_model_bytes_grow_linearly_vs_quadratically():
    small, big = (kernel_iteration.model_bytes(2, t, 64, "float32") for t in (1024, 4096))
    assert big["flash kernel"] == 4 * small["flash kernel"]
    scores = {t: 2 * t * t * 4 for t in (1024, 4096)}
    assert big["XLA attention"] - scores[4096] == 4 * (small["XLA attention"] - scores[1024])


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
def test_compile_rows_kernel_memory_below_xla():
    kernel, xla = kernel_iteration.compile_rows(1, (1024,), 64, 128, 128, "bfloat16", True)
    assert kernel["Mosaic kernel in HLO"] == "yes" and xla["Mosaic kernel in HLO"] == "-"
    assert kernel["arguments (MiB)"] == xla["arguments (MiB)"] == 3 * 1024 * 64 * 2 / 2**20
    # XLA holds the 1024 x 1024 f32 scores at its peak (a TPU compile may report its
    # temporaries as 0); the kernel never does
    assert xla["peak (MiB)"] >= 1024 * 1024 * 4 / 2**20 + xla["arguments (MiB)"]
    assert kernel["peak (MiB)"] < xla["peak (MiB)"]
    assert np.isfinite(kernel["model, at least (MiB)"])


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
def test_block_compile_rows_per_block_from_the_mosaic_compile():
    n, t, d = 2, 1024, 128
    rows = kernel_iteration.block_compile_rows(n, t, d, "bfloat16", True, blocks=(128, 512, 384))
    assert [r["block (bq = bk)"] for r in rows] == [128, 512]  # 384 does not divide 1024
    q_k_v = 3 * n * t * d * 2  # bf16 operands, a closed form
    for row in rows:
        assert row["Mosaic kernel in HLO"] == "yes"
        assert row["HBM arguments (MiB), compiled"] * 2**20 == q_k_v
        assert row["generated code (KiB), compiled"] > 0
    # the block-spec VMEM model grows with the block (double-buffered q, k, v, O blocks)
    assert rows[1]["VMEM (KiB), block-spec model"] > rows[0]["VMEM (KiB), block-spec model"]


def test_the_chips_square_block_curve_sits_above_the_roofline_model():
    """The v5e record's measured forward times, beside the cost model's roofline bound for the
    same shape: no measured time may beat the bound (a bound it beat would mean the model
    counts work the kernel does not do), and bigger blocks come closer to it."""
    from core.perf import records

    figures = records.latest("flash_vs_jax").figures
    rows = kernel_iteration.tpu_block_curve(figures, 8192)
    assert {row["kernel"] for row in rows} == {"this kernel", "JAX Pallas flash", "splash"}
    assert all(row["measured / roofline"] > 1.0 for row in rows)
    ours = {row["block (bq = bk)"]: row["measured / roofline"] for row in rows
            if row["kernel"] == "this kernel"}  # fmt: skip
    assert ours[1024] < ours[128]
    assert kernel_iteration.tpu_block_curve(figures, 12345) == []
