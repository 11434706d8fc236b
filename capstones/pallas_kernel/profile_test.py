"""The profile of the byte Transformer's train step: Amdahl's law, the attention core's
share from a real trace, compiled memory beside the closed-form score bytes."""

from __future__ import annotations

import dataclasses

import pytest

from capstones.pallas_kernel import profile

TINY = dataclasses.replace(
    profile.SMALL, d_model=32, num_layers=1, num_heads=2, seq_len=64, batch_size=2,
    max_files=4, max_bytes=4096, max_len=64,
)  # fmt: skip


@pytest.fixture(scope="module")
def section(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile")
    return profile.measure(TINY, out, steps=2, warmup=1, trace_steps=1)


def test_amdahl_closed_forms():
    assert profile.amdahl(0.5) == 2.0
    assert profile.amdahl(0.5, 2.0) == pytest.approx(4 / 3)
    assert profile.amdahl(0.0, 100.0) == 1.0
    assert profile.amdahl(1.0) == float("inf")
    rows = profile.amdahl_rows(0.25, (2.0, 4.0))
    assert [r["whole-step speed-up"] for r in rows] == pytest.approx([1 / 0.875, 1 / 0.8125, 4 / 3])
    for bad in ((-0.1, None), (1.5, None), (0.5, 0.0)):
        with pytest.raises(ValueError):
            profile.amdahl(*bad)


def test_attention_core_share_from_the_trace(section):
    categories = {c["category"]: c["share"] for c in section["trace"]["by_category"]}
    assert sum(categories.values()) == pytest.approx(1.0)
    share = section["attention_share"]
    assert share == pytest.approx(sum(categories[c] for c in profile.ATTENTION_CORE))
    assert 0.0 < share < 1.0  # the trace found attention ops, and others
    assert categories[profile.bench_profile.CATEGORIES[0]] > 0  # weight matmuls
    assert section["amdahl"]["bound"] == pytest.approx(1 / (1 - share))
    speedups = [r["whole-step speed-up"] for r in section["amdahl"]["rows"]]
    assert speedups == sorted(speedups) and speedups[-1] == pytest.approx(1 / (1 - share))
    tops = section["trace"]["top_ops"]
    assert tops and all(op["category"] in profile.bench_profile.CATEGORIES for op in tops)


def test_synchronized_timing_and_memory(section):
    timing = section["timing"]
    assert timing["lower_s"] > 0 and timing["compile_s"] > 0
    assert len(timing["step_s"]) == 2 and timing["median_step_s"] > 0
    closed = section["memory"]["attention_closed_form"]
    assert closed["scores per layer"] == 2 * 2 * 64 * 64 * 4  # B * H * T * T * 4
    assert section["memory"]["compiled"]["temp"] > 0
    assert "not of wall time" in section["caveat"]


def test_profiler_inflation_is_this_runs_measurement_not_a_quoted_range(section):
    # the caveat quotes the run's own traced / untraced ratio, never a range without a record
    timing = section["timing"]
    measured = timing["traced_median_step_s"] / timing["median_step_s"] - 1
    assert timing["profiler_inflation"] == pytest.approx(measured)
    assert f"{measured:+.0%}" in section["caveat"]
    assert "25-60" not in section["caveat"] and not hasattr(profile, "PROFILER_INFLATION")
