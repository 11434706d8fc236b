"""Exercises of the phase "Performance diagnosis", one module per lesson (async_benchmarking,
hlo_roofline, remat_tradeoffs), in the order the lessons' apps ask them.

- ``performance.async_benchmarking.blocked_over_unblocked`` (predict): the blocked median over
  the unblocked one, for a step of known work and dispatch overhead.
- ``performance.async_benchmarking.time_step`` (code): a timer that waits for the step's
  output and keeps the compiling first call apart, graded on a deterministic stand-in step and
  clock (never wall time).
- ``performance.hlo_roofline.v5e_peak_fraction`` (predict): the share of a v5e's bf16 peak a
  matmul can reach, min(1, intensity / ridge point).
- ``performance.hlo_roofline.roofline_seconds`` (code): the roofline bound of a sequence of
  unfused matmuls and elementwise ops.
- ``performance.remat_tradeoffs.saved_activation_bytes`` (predict): the residual bytes a
  remat policy keeps for the backward pass of the lesson's MLP.
- ``performance.remat_tradeoffs.step_matmul_flops`` (code): a gradient step's matmul FLOPs
  under a policy: forward, backward, recomputation.

The assessment bank (core/assessment/bank/performance.py) asks one matmul's roofline time
and a host-sync diagnosis; these ask around them.
"""

from __future__ import annotations

from core.assessment.items import Item
from core.exercises.performance._shared import PHASE
from core.exercises.performance.async_benchmarking import BlockedOverUnblocked, TimeStep
from core.exercises.performance.hlo_roofline import RooflineSeconds, V5ePeakFraction
from core.exercises.performance.remat_tradeoffs import SavedActivationBytes, StepMatmulFlops

__all__ = ["ITEMS", "PHASE"]

ITEMS: tuple[Item, ...] = (
    BlockedOverUnblocked(),
    TimeStep(),
    V5ePeakFraction(),
    RooflineSeconds(),
    SavedActivationBytes(),
    StepMatmulFlops(),
)
