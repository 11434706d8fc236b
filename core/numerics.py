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

Float32 on a TPU: a float32 matmul runs on the MXU in bfloat16 passes, as many as the matmul
precision asks (``lax.Precision``: DEFAULT 1 pass, HIGH 3, HIGHEST 6). ``tolerance("float32")``
knows the backend the process computed on and the matmul precision in force
(``jax.default_matmul_precision``), and returns a ``Tolerance``: the bound and the reason for
it, which a check prints. On a CPU (and with no JAX computation yet) it is the table's float32
value, unchanged. Float64 has no TPU hardware: a reference is computed in NumPy or on
``jax.devices("cpu")``, and ``tolerance("float64", backend="tpu")`` refuses.
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


# Float32 on a TPU, by matmul precision: (bfloat16 passes per product, tolerance). Measured on
# a v5e (benchmarks/records/float32_precision/, TPU v5 lite, worst of 3 seeds vs float64):
# - DEFAULT, one pass (every operand rounded to bfloat16's 8 significant bits): matmul 3.0e-3,
#   dense + tanh 1.1e-2, attention 2.9e-3, a layer's gradient 3.4e-3. A float32 computation at
#   DEFAULT is judged like a bfloat16 one: the bfloat16 tolerance, 2e-2.
# - HIGH (3 passes) and HIGHEST (6, a float32 product): matmul 1.5e-5 and 1.7e-7, but dense +
#   tanh 5.4e-5 and 4.4e-5, and the TPU's float32 log 1.1e-4 and tanh 4.4e-5 on their own: the
#   elementwise functions, not the MXU, set the floor. 5e-4 holds them with a margin of ~5x
#   and is still 1/40 of DEFAULT's, so a wrong transpose, sign or mask (errors of order 1)
#   fails at every precision (core/numerics_test.py, on an emulated MXU).
TPU_FLOAT32: dict[str, tuple[int, float]] = {
    "DEFAULT": (1, TOLERANCE["bfloat16"]),
    "HIGH": (3, 5e-4),
    "HIGHEST": (6, 5e-4),
}
# jax_default_matmul_precision's accepted values -> lax.Precision's names (None: not set).
MATMUL_PRECISION_NAMES = {
    None: "DEFAULT",
    "default": "DEFAULT",
    "fastest": "DEFAULT",
    "bfloat16": "DEFAULT",
    "high": "HIGH",
    "bfloat16_3x": "HIGH",
    "tensorfloat32": "HIGH",
    "highest": "HIGHEST",
    "float32": "HIGHEST",
}


class Tolerance(float):
    """A tolerance (a float) with ``reason``: why it has this value where it is not the
    dtype table's (empty otherwise). ``lab.Check`` prints the reason in its line."""

    reason: str

    def __new__(cls, value: float, reason: str = ""):
        bound = super().__new__(cls, value)
        bound.reason = reason
        return bound


def computed_backend() -> str | None:
    """The JAX backend this process computed on ("cpu", "tpu", "gpu"), or None when no JAX
    backend has started yet (asking would start one, before a lesson sets its device count)."""
    import sys

    if "jax" not in sys.modules:
        return None
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized():
        return None
    import jax

    return jax.default_backend()


def matmul_precision(precision=None) -> str:
    """lax.Precision's name ("DEFAULT", "HIGH", "HIGHEST") for ``precision`` (a
    ``lax.Precision`` or a value ``jax.default_matmul_precision`` accepts), or for the one in
    force when None."""
    if precision is None:
        import jax

        precision = jax.config.jax_default_matmul_precision
    precision = getattr(precision, "name", precision)  # a lax.Precision member
    if isinstance(precision, str) and precision.upper() in TPU_FLOAT32:
        return precision.upper()
    if precision not in MATMUL_PRECISION_NAMES:
        known = ", ".join(str(k) for k in MATMUL_PRECISION_NAMES if k)
        raise ValueError(f"unknown matmul precision {precision!r}; known: {known}")
    return MATMUL_PRECISION_NAMES[precision]


def tolerance(
    dtype: Any, *, backend: str | None = None, precision=None, matmul: bool = True
) -> Tolerance:
    """The tolerance for results computed in ``dtype`` ("bfloat16", jnp.float32, ...) against
    a float64 reference, on ``backend`` (default: the one this process computed on) at matmul
    ``precision`` (default: the one in force). Float32 on a TPU follows TPU_FLOAT32, with the
    reason; everything else is the TOLERANCE table. ``matmul=False``: the computation holds no
    matmul or convolution, only adds, multiplies and reductions, which a TPU does in float32 on
    its vector unit, so the table holds there too (not for transcendentals: TPU_FLOAT32's
    record measured log at 1.1e-4)."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name not in TOLERANCE:
        raise ValueError(f"no tolerance for dtype {name!r}; known: {', '.join(TOLERANCE)}")
    backend = computed_backend() if backend is None else backend
    if backend == "tpu" and name == "float64":
        raise ValueError(
            "a TPU has no float64: compute the float64 reference in NumPy or on "
            'jax.devices("cpu"), and judge the TPU result at its own dtype'
        )
    if backend == "tpu" and name == "float32" and matmul:
        level = matmul_precision(precision)
        passes, value = TPU_FLOAT32[level]
        reason = f"float32 on a TPU at {level} matmul precision ({passes} bfloat16 pass"
        reason += "es)" if passes > 1 else ": 8-bit operands, the bfloat16 tolerance)"
        return Tolerance(value, reason)
    return Tolerance(TOLERANCE[name])


def scaled_tolerance(cpu_bound: float, *, backend: str | None = None, precision=None):
    """A check's own float32 bound, set and measured on a CPU (two float32 computations of the
    same numbers in different orders, say), carried to ``backend``: ``cpu_bound`` times
    tolerance("float32") there over the table's float32 value, with the reason. On a CPU it is
    ``cpu_bound`` unchanged."""
    here = tolerance("float32", backend=backend, precision=precision)
    if not here.reason:
        return Tolerance(cpu_bound)
    factor = here / TOLERANCE["float32"]
    return Tolerance(cpu_bound * factor, f"the CPU's {cpu_bound:g} x {factor:g}: {here.reason}")


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
