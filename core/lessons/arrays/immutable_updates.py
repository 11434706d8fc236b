"""Functional updates and indexing, for the lesson "Immutable updates and indexing".

``x.at[idx].op(values)`` returns a new array; duplicates in ``idx`` accumulate for add /
multiply / min / max (like ``np.add.at``), and out-of-bounds indices never raise: a gather
clamps (or fills), a scatter drops (or clamps). The NumPy references here spell those
semantics out independently: normalize negative indices, then clip or drop, then ``ufunc.at``.

Dimension glossary: N length of x, K number of indices (and of update values).
"""

from __future__ import annotations

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics

OPS = ("set", "add", "multiply", "min", "max")
UPDATE_MODES = ("default", "drop", "clip")  # default = promise_in_bounds: drops out-of-bounds
GET_MODES = ("default", "clip", "fill")  # default = promise_in_bounds: clamps out-of-bounds
MAX_INDICES = 32
MAX_ABS_INDEX = 64
GET_FILL_VALUE = -1.0  # what mode="fill" returns for an out-of-bounds gather in this lesson

_NUMPY_UFUNC = {"add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}


def parse_indices(text: str) -> tuple[int, ...]:
    """'0, 2, 2, 5, -1, 9' -> (0, 2, 2, 5, -1, 9); at most MAX_INDICES, each
    |i| <= MAX_ABS_INDEX."""
    parts = [p for p in re.split(r"[,\s]+", text.strip().strip("[]()")) if p]
    if not parts:
        raise ValueError("type at least one index, e.g. 0, 2, 2, 5, -1, 9")
    indices = []
    for part in parts:
        if not re.fullmatch(r"[+-]?\d+", part):
            raise ValueError(f"cannot read {part!r} as an index: use whole numbers like 3 or -1")
        indices.append(int(part))
    if len(indices) > MAX_INDICES:
        raise ValueError(f"{len(indices)} indices; this lesson takes at most {MAX_INDICES}")
    if any(abs(i) > MAX_ABS_INDEX for i in indices):
        raise ValueError(f"keep indices within -{MAX_ABS_INDEX}..{MAX_ABS_INDEX}")
    return tuple(indices)


def example_arrays(key: jax.Array, n: int, k: int) -> tuple[jax.Array, jax.Array]:
    """x: (N,) whole numbers 0..9 and values: (K,) whole numbers 1..5, float32 (easy to read)."""
    if n < 1 or k < 1:
        raise ValueError(f"n and k must be >= 1, got {n}, {k}")
    return _example_arrays(key, n, k)


@functools.partial(jax.jit, static_argnums=(1, 2))  # one compile per (n, k)
def _example_arrays(key: jax.Array, n: int, k: int) -> tuple[jax.Array, jax.Array]:
    key_x, key_v = jax.random.split(key)
    x_N = jax.random.randint(key_x, (n,), 0, 10).astype(jnp.float32)
    values_K = jax.random.randint(key_v, (k,), 1, 6).astype(jnp.float32)
    return x_N, values_K


def _mode_argument(mode: str) -> str | None:
    return None if mode == "default" else mode


def at_update(x_N: jax.Array, indices_K, values_K: jax.Array, op: str, mode: str) -> jax.Array:
    """``x.at[indices].<op>(values, mode=...)``: a new (N,) array; x is unchanged."""
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if mode not in UPDATE_MODES:
        raise ValueError(f"update mode must be one of {UPDATE_MODES}, got {mode!r}")
    ref = x_N.at[jnp.asarray(indices_K, dtype=jnp.int32)]
    return getattr(ref, op)(values_K, mode=_mode_argument(mode))


def gather(x_N: jax.Array, indices_K, mode: str) -> jax.Array:
    """``x[indices]`` (default) or ``x.at[indices].get(mode=...)``: (K,)."""
    if mode not in GET_MODES:
        raise ValueError(f"get mode must be one of {GET_MODES}, got {mode!r}")
    idx = jnp.asarray(indices_K, dtype=jnp.int32)
    if mode == "default":
        return x_N[idx]
    return x_N.at[idx].get(mode=mode, fill_value=GET_FILL_VALUE if mode == "fill" else None)


# ---- NumPy references ----------------------------------------------------------------------


def normalized(indices_K, n: int) -> np.ndarray:
    """Python/NumPy negative indices count from the end: i < 0 means n + i."""
    idx = np.asarray(indices_K, dtype=np.int64)
    return np.where(idx < 0, idx + n, idx)


def in_bounds(indices_K, n: int) -> np.ndarray:
    idx = normalized(indices_K, n)
    return (idx >= 0) & (idx < n)


def update_targets(indices_K, n: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(positions, which update each comes from) after JAX's documented out-of-bounds rule:
    drop (default, "drop") or clamp into [0, n-1] ("clip")."""
    idx = normalized(indices_K, n)
    source = np.arange(len(idx))
    if mode == "clip":
        return np.clip(idx, 0, n - 1), source
    keep = in_bounds(indices_K, n)
    return idx[keep], source[keep]


def reference_spelling(op: str) -> str:
    """How update_reference spells ``op`` in NumPy: 'np.add.at(x, idx, v)', ..."""
    if op == "set":
        return "for i, v: x[i] = v (in order)"
    return f"np.{_NUMPY_UFUNC[op].__name__}.at(x, idx, v)"


def update_reference(x_N, indices_K, values_K, op: str, mode: str) -> np.ndarray:
    """NumPy float64: ``ufunc.at`` (unbuffered: every duplicate counts); set is last-wins."""
    out = np.array(x_N, dtype=np.float64)
    values = np.asarray(values_K, dtype=np.float64)
    positions, source = update_targets(indices_K, out.shape[0], mode)
    if op == "set":
        for position, s in zip(positions, source, strict=True):  # in order: the last write wins
            out[position] = values[s]
        return out
    _NUMPY_UFUNC[op].at(out, positions, values[source])
    return out


def set_candidates(indices_K, values_K, n: int, mode: str) -> dict[int, list[float]]:
    """position -> every value a set() writes there, in order (more than one: a duplicate)."""
    positions, source = update_targets(indices_K, n, mode)
    values = np.asarray(values_K, dtype=np.float64)
    candidates: dict[int, list[float]] = {}
    for position, s in zip(positions, source, strict=True):
        candidates.setdefault(int(position), []).append(float(values[s]))
    return candidates


def gather_reference(x_N, indices_K, mode: str) -> np.ndarray:
    """NumPy float64: clamp into [0, n-1] (default, "clip") or GET_FILL_VALUE ("fill")."""
    x = np.asarray(x_N, dtype=np.float64)
    n = x.shape[0]
    clamped = x[np.clip(normalized(indices_K, n), 0, n - 1)]
    if mode == "fill":
        return np.where(in_bounds(indices_K, n), clamped, GET_FILL_VALUE)
    return clamped


_NUMPY_SPELLING = {
    "set": "x[idx] = v",
    "add": "x[idx] += v",
    "multiply": "x[idx] *= v",
    "min": "x[idx] = np.minimum(x[idx], v)",
    "max": "x[idx] = np.maximum(x[idx], v)",
}


def numpy_fancy_update(x_N, indices_K, values_K, op: str) -> tuple[np.ndarray | None, str, str]:
    """What the plain NumPy statement does: (result or None, the statement, IndexError text).

    ``x[idx] += v`` is buffered: it reads x[idx] once, adds, writes back, so a duplicated
    index gets ONE of its updates, not their sum. Out-of-bounds raises IndexError.
    """
    x = np.array(x_N, dtype=np.float64)
    idx = np.asarray(indices_K, dtype=np.int64)
    v = np.asarray(values_K, dtype=np.float64)
    try:
        if op == "set":
            x[idx] = v
        elif op == "add":
            x[idx] += v
        elif op == "multiply":
            x[idx] *= v
        elif op == "min":
            x[idx] = np.minimum(x[idx], v)
        else:
            x[idx] = np.maximum(x[idx], v)
    except IndexError as exc:
        return None, _NUMPY_SPELLING[op], str(exc)
    return x, _NUMPY_SPELLING[op], ""


def numpy_gather(x_N, indices_K) -> tuple[np.ndarray | None, str]:
    """NumPy's ``x[idx]``: the values, or the IndexError it raises."""
    try:
        return np.asarray(x_N)[np.asarray(indices_K, dtype=np.int64)], ""
    except IndexError as exc:
        return None, str(exc)


@dataclasses.dataclass(frozen=True)
class UpdateCheck:
    """jnp .at[] result vs the NumPy reference, honest about set() with duplicates."""

    max_error: float  # max |result - reference| over positions with one well-defined answer
    scaled_error: float  # the same positions, numerics.scaled_max_error
    ambiguous_positions: tuple[int, ...]  # set() wrote several values there
    ambiguous_ok: bool  # jnp's value there is one of the values written


def compare_update(result_N, x_N, indices_K, values_K, op: str, mode: str) -> UpdateCheck:
    """Compare an ``.at[]`` result with update_reference; duplicates under set() are
    implementation-defined in JAX, so there the result need only be one of the candidates."""
    result = np.asarray(result_N, dtype=np.float64)
    reference = update_reference(x_N, indices_K, values_K, op, mode)
    ambiguous: tuple[int, ...] = ()
    ambiguous_ok = True
    if op == "set":
        candidates = set_candidates(indices_K, values_K, result.shape[0], mode)
        ambiguous = tuple(sorted(p for p, vals in candidates.items() if len(set(vals)) > 1))
        ambiguous_ok = all(result[p] in candidates[p] for p in ambiguous)
    clear = np.ones(result.shape[0], dtype=bool)
    clear[list(ambiguous)] = False
    return UpdateCheck(
        max_error=numerics.max_abs_error(result[clear], reference[clear]),
        scaled_error=numerics.scaled_max_error(result[clear], reference[clear]),
        ambiguous_positions=ambiguous,
        ambiguous_ok=ambiguous_ok,
    )
