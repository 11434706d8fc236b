"""Where a TPU step's device time goes, by HLO category, and how fast each category computes.

A TPU profile's "XLA Ops" line names every op the chip ran, and (in its trace-event export,
``core.perf.trace.trace_json_events``) gives each one ``args.hlo_category`` ("convolution
fusion": the MXU's matmuls; "loop fusion": elementwise work; "custom-call": Pallas kernels;
"data formatting": transposes and copies, ...) and ``args.model_flops``, the FLOPs the
compiler counts for it. Summed per category over the traced steps, that says what bounds an
MFU figure: the share of the step each category takes, and the rate it reaches there. A Pallas
kernel is opaque to the compiler (its ``model_flops`` is 0): its FLOPs come from the model's
own accounting (``attributed_flops``).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping

from core.perf.trace import DEVICE_PLANE_PREFIX, XLA_OPS_LINE

UNCATEGORIZED = "(no category)"


def category_table(
    events: Iterable[dict],
    steps: int,
    peak_flops: float,
    attributed_flops: Mapping[str, float] | None = None,
) -> list[dict]:
    """One row per HLO category of the device's "XLA Ops" events, most time first.

    events: ``trace_json_events`` of a profile of ``steps`` steps. ``attributed_flops``:
    FLOPs per step to credit to a category whose ops the compiler does not count (e.g.
    ``{"custom-call": attention_flops}``). Each row: category, ops (count per step),
    ms_per_step, share (of the busy device time), flops_per_step, tflops_per_s and
    fraction_of_peak (of ``peak_flops``, FLOP/s). Raises ValueError without device events.
    """
    if steps < 1 or peak_flops <= 0:
        raise ValueError(f"steps must be >= 1 and peak_flops > 0, got {steps}, {peak_flops}")
    seconds: dict[str, float] = collections.defaultdict(float)
    flops: dict[str, float] = collections.defaultdict(float)
    count: dict[str, int] = collections.defaultdict(int)
    for event in events:
        if not event.get("process", "").startswith(DEVICE_PLANE_PREFIX):
            continue
        if event.get("thread") != XLA_OPS_LINE:
            continue
        args = event.get("args") or {}
        category = args.get("hlo_category") or UNCATEGORIZED
        seconds[category] += float(event.get("dur", 0.0)) * 1e-6  # trace events are in us
        flops[category] += float(args.get("model_flops") or 0.0)
        count[category] += 1
    if not seconds:
        raise ValueError("no device 'XLA Ops' events: not a TPU profile's trace")
    for category, per_step in (attributed_flops or {}).items():
        flops[category] = max(flops[category], per_step * steps)
    busy = sum(seconds.values())
    rows = []
    for category in sorted(seconds, key=seconds.get, reverse=True):
        rate = flops[category] / seconds[category] if seconds[category] > 0 else 0.0
        rows.append(
            {
                "category": category,
                "ops": count[category] / steps,
                "ms_per_step": seconds[category] / steps * 1e3,
                "share": seconds[category] / busy,
                "flops_per_step": flops[category] / steps,
                "tflops_per_s": rate / 1e12,
                "fraction_of_peak": rate / peak_flops,
            }
        )
    return rows


def format_table(rows: list[dict]) -> str:
    """The rows as a markdown table (for a log or a README)."""
    lines = [
        "| category | ms/step | share | TFLOP/s | of peak |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['category']} | {row['ms_per_step']:.2f} | {row['share']:.1%} "
            f"| {row['tflops_per_s']:.1f} | {row['fraction_of_peak']:.1%} |"
        )
    return "\n".join(lines)
