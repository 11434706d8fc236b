"""What the lessons of the phase "Data & checkpoint recovery" share: the phase's title, the
sampler's epoch order written out in NumPy (the independent reference of the input pipeline's
and the resume lesson's hidden tests), and a check that a learner's result is an integer array
of the expected shape."""

from __future__ import annotations

import numpy as np

from core.assessment.items import HiddenTest

PHASE = "Data & checkpoint recovery"


def reference_order(count: int, seed: int, epoch: int) -> np.ndarray:
    """The example order of one epoch, as the stubs define it: a permutation of range(count)
    drawn from NumPy's PCG64 seeded by (seed, epoch), int64. Written here, not imported: the
    hidden tests' reference does not call the course's data.epoch_order."""
    return np.random.default_rng([int(seed), int(epoch)]).permutation(int(count)).astype(np.int64)


def as_int_array(value, name: str, shape: tuple[int, ...]) -> tuple[np.ndarray | None, str]:
    """(int64 array, "") when ``value`` is an integer (or bool) array of ``shape``, else
    (None, what is wrong). Floats are refused: an index that is 3.0 is a sign of arithmetic
    gone through floats, and one that is 3.5 indexes nothing."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        return None, f"{name} is not an array ({type(value).__name__}: {error})"
    if array.dtype == object or not (
        np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_
    ):
        return None, f"{name} has dtype {array.dtype}; expected integers"
    if array.shape != shape:
        return None, f"{name} has shape {array.shape}; expected {shape}"
    return array.astype(np.int64), ""


def first_difference(got: np.ndarray, expected: np.ndarray) -> str:
    """Where two equal-shaped integer arrays first differ, in words."""
    where = np.argwhere(got != expected)
    if not len(where):
        return "equal"
    at = tuple(int(i) for i in where[0])
    place = at[0] if len(at) == 1 else at
    return (
        f"{len(where)} of {got.size} entries differ; first at {place}: {int(got[at])}, "
        f"reference {int(expected[at])}"
    )


def equal_test(name: str, got, expected: np.ndarray, what: str) -> HiddenTest:
    """Exact comparison of an integer array with its reference (indices have no rounding)."""
    array, why = as_int_array(got, what, expected.shape)
    if array is None:
        return HiddenTest(name, False, why)
    passed = bool(np.array_equal(array, expected))
    return HiddenTest(
        name, passed, "exactly equal" if passed else first_difference(array, expected)
    )
