"""NumPy and jax.numpy side by side, for the lesson "From NumPy to jax.numpy".

The same source computes a row normalization with ``xp=np`` or ``xp=jnp``; the lesson then
shows where the two libraries part ways: immutability, float32 by default, async dispatch.

Dimension glossary: R rows, C columns, N size of a square matrix.
"""

from __future__ import annotations

import dataclasses
import functools
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics, runtime
from core.perf import timing

NORMALIZATIONS = ("softmax", "standardize")
STANDARDIZE_EPS = 1e-6  # keeps a constant row (or a single column) finite: 0 / sqrt(eps) = 0

# Offsets added to every element for the float32-vs-float64 sweep: a row of N(offset, 1)
# values; float32 carries ~7 significant digits, so the bigger the offset, the fewer remain
# for the part of x that matters.
PRECISION_OFFSETS = (0.0, 1.0, 10.0, 1e2, 1e3, 1e4, 1e5, 1e6)


def normalize_rows(xp: ModuleType, x_RC, kind: str):
    """Normalize each row of ``x_RC`` with array module ``xp`` (numpy or jax.numpy): (R, C).

    softmax: exp(x - max) / sum(exp(x - max)); standardize: (x - mean) / sqrt(var + eps).
    The code is the same for both libraries: jax.numpy mirrors the NumPy API.
    """
    if kind == "softmax":
        shifted = x_RC - xp.max(x_RC, axis=1, keepdims=True)  # exp never overflows
        exps = xp.exp(shifted)
        return exps / xp.sum(exps, axis=1, keepdims=True)
    if kind == "standardize":
        centered = x_RC - xp.mean(x_RC, axis=1, keepdims=True)
        variance = xp.mean(centered * centered, axis=1, keepdims=True)
        return centered / xp.sqrt(variance + STANDARDIZE_EPS)
    raise ValueError(f"kind must be one of {NORMALIZATIONS}, got {kind!r}")


@functools.partial(jax.jit, static_argnames="kind")
def normalize_rows_jnp(x_RC: jax.Array, kind: str) -> jax.Array:
    """normalize_rows(jnp, ...) compiled with jit: (R, C) in x's dtype."""
    return normalize_rows(jnp, x_RC, kind)


def normalize_rows_jnp_x64(x_RC: np.ndarray, kind: str) -> jax.Array:
    """The jnp computation in float64, with x64 switched on only inside this call.

    ``jax.enable_x64`` is a context manager: the process-wide default (float32) is untouched,
    so other cells and lessons are not affected. On a TPU (no float64 hardware) it runs on the
    host's CPU backend (``runtime.enable_float64``).
    """
    with runtime.enable_float64():
        x64 = jnp.asarray(np.asarray(x_RC, dtype=np.float64))
        return normalize_rows_jnp(x64, kind).block_until_ready()


def normalize_rows_reference(x_RC: np.ndarray, kind: str) -> np.ndarray:
    """The independent reference: numpy float64 via log-sum-exp / np.std."""
    x = np.asarray(x_RC, dtype=np.float64)
    if kind == "softmax":
        shifted = x - x.max(axis=1, keepdims=True)  # exact for float32 inputs held in float64
        return np.exp(shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True)))
    if kind == "standardize":
        return (x - x.mean(axis=1, keepdims=True)) / np.sqrt(
            x.std(axis=1, keepdims=True) ** 2 + STANDARDIZE_EPS
        )
    raise ValueError(f"kind must be one of {NORMALIZATIONS}, got {kind!r}")


def example_rows(key: jax.Array, rows: int, cols: int, offset: float = 0.0) -> np.ndarray:
    """(rows, cols) float32 values N(offset, 1) on the host, so both libraries see the same bits."""
    if rows < 1 or cols < 1:
        raise ValueError(f"shape must be positive, got ({rows}, {cols})")
    normal = np.asarray(_standard_normal(key, rows, cols))
    return (normal + np.float32(offset)).astype(np.float32)


@functools.partial(jax.jit, static_argnums=(1, 2))  # one compile per shape and static values
def _standard_normal(key: jax.Array, rows: int, cols: int) -> jax.Array:
    return jax.random.normal(key, (rows, cols), dtype=jnp.float32)


@dataclasses.dataclass(frozen=True)
class SideBySide:
    """One normalization computed four ways, each with its error vs numpy float64."""

    kind: str
    results: dict[str, np.ndarray]  # label -> (R, C) result
    dtypes: dict[str, str]  # label -> result dtype
    errors: dict[str, float]  # label -> numerics.scaled_max_error vs the float64 reference
    reference: np.ndarray  # (R, C) float64

    def rows(self) -> list[dict]:
        return [
            {
                "computed with": label,
                "result dtype": self.dtypes[label],
                "max rel. error": f"{err:.3g}",
            }
            for label, err in self.errors.items()
        ]


def side_by_side(x_RC: np.ndarray, kind: str) -> SideBySide:
    """normalize_rows with numpy (float32, float64) and jnp (float32, x64) on the same x."""
    x32 = np.asarray(x_RC, dtype=np.float32)
    results = {
        "numpy, float32 input": normalize_rows(np, x32, kind),
        "numpy, float64 input": normalize_rows(np, x32.astype(np.float64), kind),
        "jax.numpy (default float32)": normalize_rows_jnp(jnp.asarray(x32), kind),
        "jax.numpy inside jax.enable_x64()": normalize_rows_jnp_x64(x32, kind),
    }
    reference = normalize_rows_reference(x32, kind)
    return SideBySide(
        kind=kind,
        results={k: np.asarray(v) for k, v in results.items()},
        dtypes={k: str(v.dtype) for k, v in results.items()},
        errors={k: numerics.scaled_max_error(v, reference) for k, v in results.items()},
        reference=reference,
    )


def precision_sweep(key: jax.Array, rows: int, cols: int, kind: str) -> list[dict]:
    """Error vs numpy float64 of jnp float32 and jnp x64 as the rows' offset grows."""
    points = []
    for offset in PRECISION_OFFSETS:
        x = example_rows(key, rows, cols, offset)
        reference = normalize_rows_reference(x, kind)
        for label, result in (
            ("jax.numpy float32", normalize_rows_jnp(jnp.asarray(x), kind)),
            ("jax.numpy x64", normalize_rows_jnp_x64(x, kind)),
        ):
            points.append(
                {
                    "offset": offset,
                    "computed with": label,
                    "error": numerics.scaled_max_error(result, reference),
                }
            )
    return points


@dataclasses.dataclass(frozen=True)
class InPlaceDemo:
    numpy_after: np.ndarray  # numpy changed x[row, col] in place
    jax_error: str  # the TypeError jax raised for the same statement
    jax_at_result: np.ndarray  # x.at[row, col].set(value): a new array
    jax_original_unchanged: bool  # the jax array itself kept its old value


def inplace_assignment(x_RC: np.ndarray, row: int, col: int, value: float) -> InPlaceDemo:
    """``x[row, col] = value`` in numpy (works, mutates) and in jax.numpy (TypeError)."""
    host = np.array(x_RC, copy=True)
    host[row, col] = value
    device = jnp.asarray(x_RC)
    try:
        device[row, col] = value
        error = ""
    except TypeError as exc:
        error = str(exc)
    updated = device.at[row, col].set(value)
    return InPlaceDemo(
        numpy_after=host,
        jax_error=error,
        jax_at_result=np.asarray(updated),
        jax_original_unchanged=bool(np.array_equal(np.asarray(device), np.asarray(x_RC))),
    )


# What each library builds from the same Python expression (evaluated, not hard-coded).
DEFAULT_DTYPE_EXPRESSIONS = (
    ("array([1.0, 2.0])", lambda xp: xp.array([1.0, 2.0])),
    ("array([1, 2])", lambda xp: xp.array([1, 2])),
    ("zeros(3)", lambda xp: xp.zeros(3)),
    ("arange(3) / 2", lambda xp: xp.arange(3) / 2),
    ("asarray(np.ones(3))  (a float64 NumPy array)", lambda xp: xp.asarray(np.ones(3))),
)


def default_dtypes() -> list[dict]:
    """Rows: expression, numpy dtype, jnp dtype, jnp dtype inside ``jax.enable_x64()``."""
    rows = []
    for text, build in DEFAULT_DTYPE_EXPRESSIONS:
        with runtime.enable_float64():
            x64_dtype = str(build(jnp).dtype)
        rows.append(
            {
                "expression": f"`{text}`",
                "numpy": str(build(np).dtype),
                "jax.numpy": str(build(jnp).dtype),
                "jax.numpy in enable_x64": x64_dtype,
            }
        )
    return rows


def lost_increment() -> dict[str, float]:
    """(1e8 + 1) - 1e8 in each default: float32 has no room for the 1 next to 1e8."""
    with runtime.enable_float64():
        x64 = float((jnp.asarray(1e8) + 1.0) - 1e8)
    return {
        "numpy (float64)": float((np.asarray(1e8) + 1.0) - 1e8),
        "jax.numpy (float32)": float((jnp.asarray(1e8) + 1.0) - 1e8),
        "jax.numpy in enable_x64": x64,
    }


def dispatch_work(a_NN):
    """Work to time: tanh(a @ a) @ a, (N, N); about 4 N^3 flops."""
    return jnp.tanh(a_NN @ a_NN) @ a_NN


_dispatch_work_jit = jax.jit(dispatch_work)


@dataclasses.dataclass(frozen=True)
class DispatchTiming:
    """Median seconds over ``repeats`` steady-state calls (compiled first)."""

    size: int
    numpy_s: float  # numpy (float32, same work) returns when the work is done
    jax_return_s: float  # the jitted call returns: work queued, not finished
    jax_ready_s: float  # ... until block_until_ready(): the work is done
    compile_s: float  # the first call: trace + compile + run
    jax_result: np.ndarray
    reference: np.ndarray  # the same work in numpy float64

    def rows(self) -> list[dict]:
        return [
            {"what": "numpy: call returns (work done)", "ms": self.numpy_s * 1e3},
            {"what": "jax: call returns (work queued)", "ms": self.jax_return_s * 1e3},
            {"what": "jax: block_until_ready (work done)", "ms": self.jax_ready_s * 1e3},
        ]


def dispatch_timing(key: jax.Array, size: int, repeats: int = 5) -> DispatchTiming:
    """Time to return vs time to finish for jnp (async dispatch) and numpy (synchronous)."""
    if size < 1 or repeats < 1:
        raise ValueError(f"size and repeats must be >= 1, got {size}, {repeats}")
    a = jax.random.normal(key, (size, size), dtype=jnp.float32) / np.float32(size**0.5)
    a.block_until_ready()
    compile_s = timing.time_first_call(_dispatch_work_jit, a)  # trace + compile + run
    # Steady state (one more untimed call first): until the call returns, until it is ready.
    jax_times = timing.dispatch_and_compute(_dispatch_work_jit, a, repeats=repeats)
    result = _dispatch_work_jit(a)
    host = np.asarray(a)  # float32: the same work as jax
    numpy_s = timing.median_seconds(lambda: np.tanh(host @ host) @ host, repeats)
    host64 = host.astype(np.float64)
    return DispatchTiming(
        size=size,
        numpy_s=numpy_s,
        jax_return_s=jax_times["dispatch (returned)"].median,
        jax_ready_s=jax_times["total (ready)"].median,
        compile_s=compile_s,
        jax_result=np.asarray(result),
        reference=np.tanh(host64 @ host64) @ host64,
    )
