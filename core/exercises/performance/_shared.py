"""What the lessons of the phase "Performance diagnosis" share: the phase title and the check
of a learner's number against a float64 reference."""

from __future__ import annotations

import math

PHASE = "Performance diagnosis"


def _relative_error(got, expected: float) -> tuple[float | None, str]:
    """(|got - expected| / max(|expected|, tiny), "") or (None, why ``got`` is no number);
    0 when both are exactly 0 (an empty op list takes no time)."""
    try:
        value = float(got)
    except (TypeError, ValueError) as error:
        return None, f"returned {type(got).__name__}, not a number ({error})"
    if not math.isfinite(value):
        return None, f"returned {value}, not a finite number"
    if value == expected:
        return 0.0, ""
    return abs(value - expected) / max(abs(expected), 1e-300), ""
