"""A layer-by-layer activation diff between two runs of the same model.

A run is a list of (layer name, array) in forward order, as ``twins.NNXDigitsNet.activations``
and the torch twin's ``activations`` give them (conv maps in one layout). Each layer is measured
against the reference run with ``core.numerics``: its max abs error and its scaled error
(max |a - ref| / max(max |ref|, 1), the vocabulary's float32 check), judged against a
tolerance. The first layer whose scaled error passes the tolerance is where the two runs
diverge: every layer after it inherits the error, so the first one is where to look.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from core import numerics


@dataclasses.dataclass(frozen=True)
class LayerError:
    """One layer's error against the reference run."""

    layer: str
    max_abs: float
    scaled: float
    tolerance: float

    @property
    def agrees(self) -> bool:
        return self.scaled <= self.tolerance


@dataclasses.dataclass(frozen=True)
class Diff:
    """Every layer's error, in forward order, and the first layer that diverges (or None)."""

    layers: tuple[LayerError, ...]
    tolerance: float

    @property
    def first_divergent(self) -> str | None:
        return next((e.layer for e in self.layers if not e.agrees), None)

    @property
    def agrees(self) -> bool:
        return self.first_divergent is None

    def rows(self) -> list[dict]:
        """The diff as table rows (layer, max abs error, scaled error, tolerance, verdict)."""
        first = self.first_divergent
        return [
            {
                "layer": e.layer,
                "max abs error": e.max_abs,
                "scaled error": e.scaled,
                "tolerance": e.tolerance,
                "verdict": (
                    "agrees" if e.agrees else ("FIRST DIVERGENCE" if e.layer == first else "off")
                ),
            }
            for e in self.layers
        ]


Run = Sequence[tuple[str, object]]


def diff(run: Run, reference: Run, tolerance: float | None = None) -> Diff:
    """``run``'s error per layer against ``reference`` (default tolerance: float32's).

    The two runs must name the same layers in the same order with the same shapes (ValueError
    naming the first layer that does not match): a diff never aligns or broadcasts.
    """
    tolerance = numerics.tolerance("float32") if tolerance is None else float(tolerance)
    if not (tolerance >= 0 and np.isfinite(tolerance)):
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    run, reference = list(run), list(reference)
    if not reference:
        raise ValueError("the reference run has no layers")
    for index in range(max(len(run), len(reference))):
        mine = run[index][0] if index < len(run) else None
        theirs = reference[index][0] if index < len(reference) else None
        if mine != theirs:
            raise ValueError(
                f"layer {index} is {mine!r} in the run but {theirs!r} in the reference"
            )
    errors = []
    for (name, array), (_, ref) in zip(run, reference, strict=True):
        a, r = np.asarray(array), np.asarray(ref)
        if a.shape != r.shape:
            raise ValueError(
                f"layer {name!r}: shape {a.shape} in the run, {r.shape} in the reference"
            )
        errors.append(
            LayerError(
                name,
                numerics.max_abs_error(a, r),
                numerics.scaled_max_error(a, r),
                tolerance,
            )
        )
    return Diff(tuple(errors), tolerance)
