"""What the lessons of the phase "JAX transformations" share: its title and two checks of a
learner's result (a float64 view of it, one error scale for a whole array)."""

from __future__ import annotations

import numpy as np

PHASE = "JAX transformations"


def _scaled_error(got: np.ndarray, expected: np.ndarray) -> float:
    """max |got - expected| / max(max |expected|, 1): one scale for the whole array."""
    scale = max(float(np.max(np.abs(expected), initial=0.0)), 1.0)
    return float(np.max(np.abs(got - expected), initial=0.0)) / scale


def _as_float64(value, name: str) -> tuple[np.ndarray | None, str]:
    """(array, "") or (None, why it is not a numeric array)."""
    try:
        array = np.asarray(value, np.float64)
    except (TypeError, ValueError) as error:
        return None, f"{name} is not a numeric array ({type(value).__name__}: {error})"
    return array, ""
