"""category_table against closed forms, and on the v5e profile of the capstone's train step."""

from __future__ import annotations

import json

import pytest

from core.curriculum import REPO_ROOT
from core.perf import profile_categories, records, trace

V5E_TRACE = REPO_ROOT / "tests/fixtures/tpu_v5e/byte_transformer_train_step.trace.json.gz"
MFU_RECORD = REPO_ROOT / "benchmarks/records/byte_transformer_mfu"
# The record of the run the trace was taken in (the day's first, "BHTD"; the record file in
# benchmarks/ now holds the day's second run, and git history this one, commit 46be1fb).
TRACE_RUN_RECORD = (
    REPO_ROOT / "tests/fixtures/tpu_v5e/byte_transformer_mfu"
    / "2026-12-06_tpu-v5-lite-x1-unknown-13core-tpu.json"
)  # fmt: skip


def _op(category: str, dur_us: float, flops: float = 0.0, thread: str = "XLA Ops") -> dict:
    return {
        "process": "/device:TPU:0",
        "thread": thread,
        "dur": dur_us,
        "args": {"hlo_category": category, "model_flops": str(flops)},
    }


def test_time_share_and_rate_per_category_follow_the_closed_form():
    # 2 steps: two 10 ms matmul fusions of 1e12 FLOPs each, two 5 ms Pallas calls, one 2.5 ms
    # elementwise op; a host event and a module span that must not count.
    events = [_op("convolution fusion", 10_000, 1e12)] * 2 + [_op("custom-call", 5_000)] * 2
    events += [_op("loop fusion", 2_500), _op("loop fusion", 99_000, thread="XLA Modules")]
    events += [{"process": "/host:CPU", "thread": "python", "dur": 50_000, "args": {}}]
    rows = profile_categories.category_table(
        events, steps=2, peak_flops=200e12, attributed_flops={"custom-call": 0.25e12}
    )
    by = {row["category"]: row for row in rows}
    assert [row["category"] for row in rows] == ["convolution fusion", "custom-call", "loop fusion"]
    busy_s = 0.0325
    assert by["convolution fusion"]["ms_per_step"] == pytest.approx(10.0)
    assert by["convolution fusion"]["share"] == pytest.approx(0.020 / busy_s)
    assert by["convolution fusion"]["tflops_per_s"] == pytest.approx(100.0)  # 2e12 / 0.02 s
    assert by["convolution fusion"]["fraction_of_peak"] == pytest.approx(0.5)
    assert by["custom-call"]["tflops_per_s"] == pytest.approx(50.0)  # 0.5e12 / 0.01 s
    assert by["loop fusion"]["ops"] == 0.5 and by["loop fusion"]["tflops_per_s"] == 0.0
    assert "| convolution fusion | 10.00 |" in profile_categories.format_table(rows)


def test_a_trace_without_device_ops_is_refused():
    with pytest.raises(ValueError, match="not a TPU profile"):
        profile_categories.category_table(
            [{"process": "/host:CPU", "thread": "python", "dur": 1.0}], steps=1, peak_flops=1.0
        )
    with pytest.raises(ValueError, match="steps"):
        profile_categories.category_table([], steps=0, peak_flops=1.0)


def test_the_v5e_train_step_profile_explains_the_recorded_mfu():
    """The committed v5e trace (3 steps of preset tpu-v5e) read here: its matmul fusions and
    its attention calls account for the step the MFU record of its run timed."""
    figures = records.load(TRACE_RUN_RECORD).figures
    rows = profile_categories.category_table(
        trace.trace_json_events(V5E_TRACE), steps=3, peak_flops=197e12
    )
    by = {row["category"]: row for row in rows}
    busy_ms = sum(row["ms_per_step"] for row in rows)
    # The device was busy for the step the record timed (within 2%: the profile's 3 steps)
    assert busy_ms == pytest.approx(figures["tpu_v5e_step_ms"], rel=0.02)
    # The matmuls are most of the step and run below the peak but far above the MFU
    conv = by["convolution fusion"]
    assert conv["share"] > 0.6 and figures["tpu_v5e_mfu"] < conv["fraction_of_peak"] < 1.0
    assert conv["fraction_of_peak"] == pytest.approx(figures["profile_matmul_fraction_of_peak"],
                                                     abs=1e-3)  # fmt: skip
    assert by["custom-call"]["share"] == pytest.approx(figures["profile_attention_share"],
                                                       abs=1e-3)  # fmt: skip
    assert json.loads(json.dumps(rows))  # plain numbers, as a record keeps them


def test_each_kept_v5e_mfu_record_s_profile_accounts_for_its_step():
    """The profile's busy time per step is the step the record timed (within 2%), and the
    categories' shares it keeps are parts of that time, for every kept record with a profile."""
    paths = sorted(MFU_RECORD.glob("*tpu*.json")) + [TRACE_RUN_RECORD]
    checked = 0
    for path in paths:
        figures = records.load(path).figures
        if "profile_busy_ms_per_step" not in figures:
            continue
        checked += 1
        busy = figures["profile_busy_ms_per_step"]
        assert busy == pytest.approx(figures["tpu_v5e_step_ms"], rel=0.02), path.name
        parts = ("matmul", "attention", "elementwise", "data_formatting")
        shares = [figures[f"profile_{part}_share"] for part in parts]
        assert all(0 < share < 1 for share in shares) and sum(shares) < 1.0
        attention_ms = figures["profile_attention_ms_per_step"]
        assert attention_ms == pytest.approx(figures["profile_attention_share"] * busy, rel=1e-3)
    assert checked >= 2
