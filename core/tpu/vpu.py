"""The vector unit's (VPU) peak FLOP/s per TPU generation, derived from published parts.

Elementwise work (adds, multiplies, activations, reductions) runs on the VPU, not the MXU, so
an elementwise kernel sits under a much lower compute roof than a matmul. No table publishes
that roof; it follows from the VPU's parts, each with its source here:

    VPU FLOP/s per chip = sublanes x lanes x ALUs per (lane, sublane) x TensorCores x clock

counting one float32 operation per ALU per cycle. The scaling book works this out for v5p
("Calculating VPU throughput": 8 * 128 * 4 * 2 * 1.75e9, which it gives as 1.4e13 FLOP/s,
a 30th of the MXU's bf16 peak). A generation whose ALU count or clock no source gives (v6e,
TPU7x) has no VPU figure here: ``peak(generation)`` is None and the page says "not published".

Sources (keys of specs.SOURCES):
- sublanes 8, lanes 128 on every generation: JAX's tpu_info (num_sublanes, num_lanes);
- 4 ALUs per (lane, sublane) "on v5": the scaling book's appendix, whose figures are v5p's;
  read here for both v5 chips, v5e and v5p;
- clock: v5p "about 1.75GHz" (the appendix's pop quiz), v5e 1.5 GHz (the chapter's MXU
  figure, "5e13 bf16 FLOPs/s per MXU at 1.5GHz on TPU v5e");
- TensorCores per chip: specs.CHIPS (v5e 1, v5p 2).

Units: FLOP/s, Hz.
"""

from __future__ import annotations

import dataclasses

from core.tpu import specs


@dataclasses.dataclass(frozen=True)
class Part:
    """One published part of the VPU: its value and the specs.SOURCES key that states it."""

    value: float
    source: str

    def __post_init__(self):
        if self.source not in specs.SOURCES:
            raise ValueError(f"unknown source {self.source!r}: add it to specs.SOURCES")


@dataclasses.dataclass(frozen=True)
class VpuParts:
    """The parts of one generation's VPU; None where no source publishes the part."""

    generation: str
    sublanes: Part
    lanes: Part
    alus_per_lane_sublane: Part | None
    clock_hz: Part | None

    @property
    def tensorcores(self) -> int:
        return specs.chip(self.generation).tensorcores

    @property
    def peak_flops(self) -> float | None:
        """sublanes x lanes x ALUs x TensorCores x clock (FLOP/s per chip), or None."""
        if self.alus_per_lane_sublane is None or self.clock_hz is None:
            return None
        return (
            self.sublanes.value
            * self.lanes.value
            * self.alus_per_lane_sublane.value
            * self.tensorcores
            * self.clock_hz.value
        )


_SUBLANES = Part(8, "jax-tpu-info")
_LANES = Part(128, "jax-tpu-info")
_FOUR_ALUS = Part(4, "scaling-book-appendix")

PARTS: dict[str, VpuParts] = {
    "v5e": VpuParts("v5e", _SUBLANES, _LANES, _FOUR_ALUS, Part(1.5e9, "scaling-book-text")),
    "v5p": VpuParts("v5p", _SUBLANES, _LANES, _FOUR_ALUS, Part(1.75e9, "scaling-book-appendix")),
    "v6e": VpuParts("v6e", _SUBLANES, _LANES, None, None),
    "tpu7x": VpuParts("tpu7x", _SUBLANES, _LANES, None, None),
}


def parts(generation: str) -> VpuParts:
    specs.chip(generation)  # the same ValueError for an unknown generation
    return PARTS[generation]


def peak(generation: str) -> float | None:
    """The VPU's float32 peak FLOP/s per chip of ``generation``, or None (not published)."""
    return parts(generation).peak_flops


def generations_with_peak() -> tuple[str, ...]:
    """The generations whose VPU parts are all published (v5e and v5p)."""
    return tuple(g for g in specs.GENERATIONS if peak(g) is not None)


def rows() -> list[dict]:
    """One row per generation: each part with its source, and the peak (or "not published")."""

    def text(part: Part | None, fmt: str) -> str:
        return specs.NOT_PUBLISHED if part is None else f"{part.value:{fmt}} ({part.source})"

    out = []
    for generation in specs.GENERATIONS:
        p = parts(generation)
        vpu_peak = p.peak_flops
        mxu_peak = specs.chip(generation).bf16_flops.value
        out.append(
            {
                "generation": generation,
                "sublanes x lanes": f"{p.sublanes.value:.0f} x {p.lanes.value:.0f} (jax-tpu-info)",
                "ALUs per (lane, sublane)": text(p.alus_per_lane_sublane, ".0f"),
                "clock (GHz)": (
                    specs.NOT_PUBLISHED
                    if p.clock_hz is None
                    else f"{p.clock_hz.value / 1e9:.2f} ({p.clock_hz.source})"
                ),
                "TensorCores": p.tensorcores,
                "VPU f32 FLOP/s per chip": (
                    specs.NOT_PUBLISHED if vpu_peak is None else f"{vpu_peak:.3g}"
                ),
                "MXU bf16 / VPU": "" if vpu_peak is None else f"{mxu_peak / vpu_peak:.0f}x",
            }
        )
    return out
