"""What the lessons of the phase "Reinforcement learning" share: the phase's title, and the
comparison of a (T, N) array with its float64 reference (GAE's and the returns' hidden tests)."""

from __future__ import annotations

import numpy as np

from core.assessment.items import HiddenTest

PHASE = "Reinforcement learning"


def _scaled_error(got, expected) -> float:
    """max |got - expected| / max(1, max |expected|): float32 rounding follows the values'
    size, and values of order 1 are judged absolutely."""
    return float(np.max(np.abs(got - expected))) / max(1.0, float(np.max(np.abs(expected))))


def _array_test(name: str, got, expected, tolerance: float, what: str) -> HiddenTest:
    """Compare a (T, N) array with its float64 reference; say where the first wrong step is."""
    got = np.asarray(got, np.float64)
    if got.shape != expected.shape:
        return HiddenTest(name, False, f"returned shape {got.shape}; expected {expected.shape}")
    if not np.isfinite(got).all():
        return HiddenTest(name, False, f"the {what} hold NaN or inf")
    error = _scaled_error(got, expected)
    detail = f"max error / scale = {error:.1e} (tolerance {tolerance:g})"
    if error > tolerance:
        scale = max(1.0, float(np.max(np.abs(expected))))
        t, n = (int(i[0]) for i in np.nonzero(np.abs(got - expected) > tolerance * scale))
        detail += (
            f"; first wrong: step t={t} of env n={n}: {got[t, n]:.5g}, reference "
            f"{expected[t, n]:.5g}"
        )
    return HiddenTest(name, error <= tolerance, detail)
