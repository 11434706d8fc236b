"""The one vocabulary for comparing a result with its reference: error measures, tolerances.

Every measure works in float64 on NumPy copies (bfloat16 and float16 inputs are widened first),
refuses arrays of different shapes, and returns inf when the result holds a NaN or an inf the
reference does not have at that place: a non-finite result never passes a check.

    scaled_max_error(r, ref)       max |r - ref| / max(max |ref|, 1)       most lesson checks
    max_abs_error(r, ref)          max |r - ref|                           exact or integer work
    elementwise_relative_error     max over elements of |r - ref| / max(|ref|, 1)
    norm_relative_error(r, ref)    ||r - ref||_F / ||ref||_F               matrices, quantization
    tree_scaled_max_error          scaled_max_error of two pytrees, worst leaf
    tree_normwise_max_error        max |r - ref| over a pytree / max |ref| over it (no floor)

``TOLERANCE`` is the table by dtype for a float computation compared with a float64 reference
(``tolerance(dtype)`` reads it); a check that needs another bound states it with its reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Relative to the reference's scale, for results computed in this dtype vs a float64 reference
# (a float32 matmul or reduction of a few thousand terms stays well inside 1e-5; bfloat16 keeps
# 8 significant bits, ~4e-3 per rounding, so accumulated work needs 2e-2).
TOLERANCE: dict[str, float] = {
    "float64": 1e-12,
    "float32": 1e-5,
    "float16": 3e-3,
    "bfloat16": 2e-2,
    "int32": 0.0,
    "int8": 0.0,
}


def tolerance(dtype: Any) -> float:
    """The tolerance for results computed in ``dtype`` ("bfloat16", jnp.float32, ...)."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name not in TOLERANCE:
        raise ValueError(f"no tolerance for dtype {name!r}; known: {', '.join(TOLERANCE)}")
    return TOLERANCE[name]


def as_float64(x) -> np.ndarray:
    """``x`` (NumPy, JAX, Python numbers; any float dtype incl. bfloat16) as a float64 array."""
    array = np.asarray(x)
    if array.dtype.kind not in "biuf":  # ml_dtypes' bfloat16 reports kind "V" in some versions
        array = array.astype(np.float32)
    return array.astype(np.float64)


def _pair(result, reference) -> tuple[np.ndarray, np.ndarray] | None:
    """Both as float64, with the non-finite values they share (same inf, both NaN) zeroed;
    None when any other non-finite value is left (the measure is then inf)."""
    result, reference = as_float64(result), as_float64(reference)
    if result.shape != reference.shape:
        raise ValueError(f"result shape {result.shape} differs from reference {reference.shape}")
    same = (result == reference) | (np.isnan(result) & np.isnan(reference))
    shared = ~np.isfinite(reference) & same
    result, reference = np.where(shared, 0.0, result), np.where(shared, 0.0, reference)
    if not (np.all(np.isfinite(result)) and np.all(np.isfinite(reference))):
        return None
    return result, reference


def max_abs_error(result, reference) -> float:
    """max |result - reference| (0 for empty arrays)."""
    pair = _pair(result, reference)
    if pair is None:
        return float("inf")
    result, reference = pair
    return float(np.max(np.abs(result - reference), initial=0.0))


def scaled_max_error(result, reference) -> float:
    """max |result - reference| / max(max |reference|, 1): relative to the reference's scale.

    One scale for the whole array, so an element near zero is not judged on its own relative
    error (which float rounding makes large); below magnitude 1 it is the absolute error.
    """
    pair = _pair(result, reference)
    if pair is None:
        return float("inf")
    result, reference = pair
    scale = max(float(np.max(np.abs(reference), initial=0.0)), 1.0)
    return float(np.max(np.abs(result - reference), initial=0.0)) / scale


def elementwise_relative_error(result, reference) -> float:
    """max over elements of |result - reference| / max(|reference|, 1): each point on its own."""
    pair = _pair(result, reference)
    if pair is None:
        return float("inf")
    result, reference = pair
    relative = np.abs(result - reference) / np.maximum(np.abs(reference), 1.0)
    return float(np.max(relative, initial=0.0))


def norm_relative_error(result, reference) -> float:
    """||result - reference||_F / ||reference||_F (the absolute norm when the reference is 0)."""
    pair = _pair(result, reference)
    if pair is None:
        return float("inf")
    result, reference = pair
    norm = float(np.linalg.norm(reference))
    return float(np.linalg.norm(result - reference)) / (norm if norm > 0 else 1.0)


def tree_scaled_max_error(result, reference) -> float:
    """``scaled_max_error`` of the worst leaf of two pytrees with the same structure."""
    import jax

    result_leaves, result_tree = jax.tree.flatten(result)
    reference_leaves, reference_tree = jax.tree.flatten(reference)
    if result_tree != reference_tree:
        raise ValueError(f"pytree structures differ: {result_tree} vs {reference_tree}")
    pairs = zip(result_leaves, reference_leaves, strict=True)
    return max((scaled_max_error(r, ref) for r, ref in pairs), default=0.0)


def tree_normwise_max_error(result, reference) -> float:
    """max |result - reference| over every leaf / max |reference| over every leaf.

    One scale for the whole tree and no floor at 1: for quantities far below 1 (a gradient, an
    update) where ``tree_scaled_max_error`` would be an absolute error and pass anything small.
    A zero reference gives 0 for an exact result and a huge error otherwise.
    """
    import jax

    result_leaves, result_tree = jax.tree.flatten(result)
    reference_leaves, reference_tree = jax.tree.flatten(reference)
    if result_tree != reference_tree:
        raise ValueError(f"pytree structures differ: {result_tree} vs {reference_tree}")
    worst, scale = 0.0, 0.0
    for r, ref in zip(result_leaves, reference_leaves, strict=True):
        worst = max(worst, max_abs_error(r, ref))
        scale = max(scale, float(np.max(np.abs(as_float64(ref)), initial=0.0)))
    return worst / max(scale, 1e-30)
