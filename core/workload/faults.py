"""Faults injected into a real training job (core.workload.job), for the recovery lessons.

STUB written by the session owner so the job can call its hooks; the failure-recovery helper
replaces the bodies (keep the names and signatures). ``--fault KIND@STEP`` on the job's
command line, repeatable; KIND is one of KINDS.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

KINDS = ("nan", "hang", "disk-full")


@dataclasses.dataclass(frozen=True)
class FaultPlan:
    faults: tuple[tuple[str, int], ...] = ()  # (kind, step)

    @classmethod
    def parse(cls, specs: Sequence[str]) -> FaultPlan:
        """``["nan@12", "hang@20"]`` -> a plan; a bad spec is a ValueError naming it."""
        faults = []
        for spec in specs:
            kind, _, step = spec.partition("@")
            if kind not in KINDS or not step.isdigit() or int(step) < 1:
                raise ValueError(
                    f"--fault {spec!r}: expected KIND@STEP with KIND one of {', '.join(KINDS)} "
                    "and STEP >= 1"
                )
            faults.append((kind, int(step)))
        return cls(tuple(faults))

    def at(self, kind: str, step: int) -> bool:
        return (kind, step) in self.faults

    def before_step(self, step: int) -> None:
        """Called before step ``step``'s update ("hang" never returns: the job stalls)."""

    def loss(self, step: int, loss: float) -> float:
        """Called with step ``step``'s loss; "nan" makes it non-finite."""
        return float("nan") if self.at("nan", step) else loss

    def before_save(self, step: int, checkpoint_dir: str | os.PathLike) -> None:
        """Called before step ``step``'s checkpoint save ("disk-full" makes the save fail)."""
