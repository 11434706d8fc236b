"""Shapes, broadcasting and dtype promotion, for the lesson "Shapes, broadcasting, and dtypes".

The broadcasting rule is written out here (so the lesson can say *which* axis fails and why)
and checked against ``np.broadcast_shapes``; JAX's dtype promotion is written out as the
lattice from the JAX documentation and checked against ``jnp.promote_types``.

Dimension glossary: N examples; a shape is a tuple of sizes, compared from the right.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np

MAX_RANK = 4
MAX_SIZE = 64


def parse_shape(text: str) -> tuple[int, ...]:
    """'8, 1, 6' or '(8,1,6)' or '8 1 6' -> (8, 1, 6); '' or '()' -> () (a scalar).

    Bounded: at most MAX_RANK axes, each size in [0, MAX_SIZE]. ValueError says what is wrong.
    """
    body = text.strip()
    if body.startswith("(") and body.endswith(")"):
        body = body[1:-1]
    parts = [p for p in re.split(r"[,\s]+", body) if p]
    sizes = []
    for part in parts:
        if not re.fullmatch(r"\d+", part):
            raise ValueError(
                f"cannot read {text!r} as a shape: {part!r} is not a whole number >= 0"
            )
        sizes.append(int(part))
    if len(sizes) > MAX_RANK:
        raise ValueError(
            f"shape {text!r} has {len(sizes)} axes; this lesson allows at most {MAX_RANK}"
        )
    if any(size > MAX_SIZE for size in sizes):
        raise ValueError(
            f"shape {text!r} has a size above {MAX_SIZE}; keep each size in 0..{MAX_SIZE}"
        )
    return tuple(sizes)


@dataclasses.dataclass(frozen=True)
class Broadcast:
    """The broadcast of two shapes: the result, or the reason it fails, and each axis."""

    a: tuple[int, ...]
    b: tuple[int, ...]
    shape: tuple[int, ...] | None  # None when the shapes do not broadcast
    reason: str | None  # why not, naming the axis
    axes: tuple[dict, ...]  # per axis from the left of the result: sizes and what happened


def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> Broadcast:
    """NumPy's rule: align shapes on the right; two sizes match if equal or if one is 1.

    A missing axis counts as size 1 (rank promotion); a size-1 axis is stretched.
    """
    rank = max(len(a), len(b))
    padded_a = (None,) * (rank - len(a)) + tuple(a)
    padded_b = (None,) * (rank - len(b)) + tuple(b)
    axes, result, clashes = [], [], []
    for position, (size_a, size_b) in enumerate(zip(padded_a, padded_b, strict=True)):
        axis = position - rank  # negative: counted from the right, as the rule reads them
        eff_a = 1 if size_a is None else size_a
        eff_b = 1 if size_b is None else size_b
        if eff_a == eff_b:
            size, what = eff_a, "match"
        elif eff_a == 1:
            size, what = eff_b, "a stretched" if size_a is not None else "a gets a new axis"
        elif eff_b == 1:
            size, what = eff_a, "b stretched" if size_b is not None else "b gets a new axis"
        else:
            size, what = None, "clash"
            clashes.append((axis, eff_a, eff_b))
        axes.append({"axis": axis, "a": size_a, "b": size_b, "result": size, "what": what})
        result.append(size)
    reason = None
    if clashes:
        axis, eff_a, eff_b = clashes[-1]  # the rule walks from the right: it meets this one first
        others = (
            f" ({len(clashes) - 1} more clashing axis further left)" if len(clashes) > 1 else ""
        )
        reason = (
            f"axis {axis} (counting from the right): a has size {eff_a}, b has size {eff_b}. "
            f"Sizes must be equal, or one of them must be 1{others}."
        )
    ok = reason is None
    return Broadcast(
        a=tuple(a),
        b=tuple(b),
        shape=tuple(result) if ok else None,
        reason=reason,
        axes=tuple(axes),
    )


def numpy_broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...] | None, str]:
    """The reference: np.broadcast_shapes -> (shape, '') or (None, numpy's message)."""
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b))), ""
    except ValueError as exc:
        return None, str(exc)


def jax_broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...] | None, str]:
    """What jnp.add makes of arrays of these shapes (traced abstractly: no memory, no compute)."""
    try:
        out = jax.eval_shape(
            jnp.add,
            jax.ShapeDtypeStruct(tuple(a), jnp.float32),
            jax.ShapeDtypeStruct(tuple(b), jnp.float32),
        )
        return tuple(out.shape), ""
    except (ValueError, TypeError) as exc:
        return None, str(exc).splitlines()[0]


# ---- dtype promotion ---------------------------------------------------------------------

PROMOTION_DTYPES = ("bool", "int8", "uint8", "int32", "float16", "bfloat16", "float32")
PYTHON_SCALARS = ("python int", "python float")
NUMPY_MISSING = "n/a"  # bfloat16 is not a NumPy dtype

# JAX's type-promotion lattice, as drawn in the JAX docs ("Type promotion semantics"):
# each type -> the types directly above it. i* and f* are *weak* types: Python ints and
# floats, which take the other operand's type instead of imposing their own.
JAX_LATTICE = {
    "b1": ("i*",),
    "u1": ("i2", "u2"),
    "u2": ("i4", "u4"),
    "u4": ("i8", "u8"),
    "u8": ("f*",),
    "i*": ("u1", "i1"),
    "i1": ("i2",),
    "i2": ("i4",),
    "i4": ("i8",),
    "i8": ("f*",),
    "f*": ("c*", "f2", "bf"),
    "bf": ("f4",),
    "f2": ("f4",),
    "f4": ("f8", "c4"),
    "f8": ("c8",),
    "c*": ("c4",),
    "c4": ("c8",),
    "c8": (),
}
_LATTICE_CODE = {
    "bool": "b1",
    "int8": "i1",
    "uint8": "u1",
    "int32": "i4",
    "float16": "f2",
    "bfloat16": "bf",
    "float32": "f4",
    "python int": "i*",
    "python float": "f*",
}
# Without x64 JAX stores 64-bit results in 32 bits; a weak type alone becomes the default.
_LATTICE_DTYPE = {
    "b1": "bool",
    "u1": "uint8",
    "u2": "uint16",
    "u4": "uint32",
    "u8": "uint32",
    "i1": "int8",
    "i2": "int16",
    "i4": "int32",
    "i8": "int32",
    "i*": "int32",
    "bf": "bfloat16",
    "f2": "float16",
    "f4": "float32",
    "f8": "float32",
    "f*": "float32",
    "c4": "complex64",
    "c8": "complex64",
    "c*": "complex64",
}


def _above(code: str) -> set[str]:
    """Every lattice type reachable upward from ``code``, itself included."""
    seen, todo = {code}, [code]
    while todo:
        for parent in JAX_LATTICE[todo.pop()]:
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


def lattice_join(a: str, b: str) -> str:
    """The least upper bound of a and b in JAX's lattice, as a dtype name (x64 off)."""
    for name in (a, b):
        if name not in _LATTICE_CODE:
            raise ValueError(f"unknown type {name!r}; pick one of {tuple(_LATTICE_CODE)}")
    upper = _above(_LATTICE_CODE[a]) & _above(_LATTICE_CODE[b])
    least = [u for u in upper if _above(u) >= upper]
    return _LATTICE_DTYPE[least[0]]


def _python_value(name: str):
    return {"python int": 1, "python float": 1.0}[name]


def jnp_result(a: str, b: str) -> str:
    """The dtype jax.numpy gives a op b: jnp.promote_types, or jnp.result_type for a Python
    scalar b (which is weakly typed)."""
    if b in PYTHON_SCALARS:
        return str(jnp.result_type(jnp.dtype(a), _python_value(b)))
    return str(jnp.promote_types(a, b))


def numpy_result(a: str, b: str) -> str:
    """The dtype NumPy gives a op b: np.promote_types, or arithmetic for Python scalars."""
    if "bfloat16" in (a, b):
        return NUMPY_MISSING
    if b in PYTHON_SCALARS:
        return str((np.zeros(2, a) + _python_value(b)).dtype)
    return str(np.promote_types(a, b))


def promotion_table(
    a_names: tuple[str, ...] = PROMOTION_DTYPES,
    b_names: tuple[str, ...] = PROMOTION_DTYPES + PYTHON_SCALARS,
) -> list[dict]:
    """One row per pair: jnp's result, NumPy's, the lattice's, and whether jnp and NumPy differ."""
    rows = []
    for a in a_names:
        for b in b_names:
            jax_dtype, numpy_dtype = jnp_result(a, b), numpy_result(a, b)
            rows.append(
                {
                    "a": a,
                    "b": b,
                    "jax.numpy": jax_dtype,
                    "numpy": numpy_dtype,
                    "lattice": lattice_join(a, b),
                    "differs": numpy_dtype != NUMPY_MISSING and numpy_dtype != jax_dtype,
                }
            )
    return rows


# ---- mistakes that still return plausible numbers -----------------------------------------


def example_regression(key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    """A (n,) prediction and a (n, 1) target that it fits well (noise 0.1): float32."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return _example_regression(key, n)


@functools.partial(jax.jit, static_argnums=1)  # one compile per n, not one per random op
def _example_regression(key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    key_x, key_noise = jax.random.split(key)
    inputs = jax.random.uniform(key_x, (n,), minval=-3.0, maxval=3.0)
    target_N1 = jnp.sin(inputs)[:, None]  # a column, as data loaders often return
    prediction_N = jnp.sin(inputs) + 0.1 * jax.random.normal(key_noise, (n,))
    return prediction_N, target_N1


@jax.jit
def mse_unchecked(prediction, target) -> jax.Array:
    """mean((prediction - target)^2) exactly as written: whatever the shapes broadcast to."""
    return jnp.mean((prediction - target) ** 2)


def require_same_shape(prediction, target) -> None:
    """The shape contract of a loss: ValueError naming both shapes unless they are equal."""
    if tuple(prediction.shape) != tuple(target.shape):
        raise ValueError(
            f"prediction has shape {tuple(prediction.shape)} but target has shape "
            f"{tuple(target.shape)}; a loss over matching examples needs equal shapes. "
            f"Reshape one of them, e.g. target[:, 0] or prediction[:, None]."
        )


def mse(prediction, target) -> jax.Array:
    """Mean squared error with its shape contract checked first."""
    require_same_shape(prediction, target)
    return mse_unchecked(prediction, target)


def mse_reference(prediction_N, target_N) -> float:
    """Correct MSE in numpy float64 over matching examples."""
    p = np.asarray(prediction_N, np.float64).reshape(-1)
    t = np.asarray(target_N, np.float64).reshape(-1)
    return float(np.mean((p - t) ** 2))


def broadcast_mse_closed_form(prediction_N, target_N) -> float:
    """What mean((p[None, :] - t[:, None])^2) over the N x N matrix equals, in float64:
    mean_i mean_j (p_j - t_i)^2 = mean(p^2) + mean(t^2) - 2 mean(p) mean(t)."""
    p = np.asarray(prediction_N, np.float64).reshape(-1)
    t = np.asarray(target_N, np.float64).reshape(-1)
    return float(np.mean(p**2) + np.mean(t**2) - 2 * np.mean(p) * np.mean(t))


@dataclasses.dataclass(frozen=True)
class ShapeMistake:
    """A mistake that returns a plausible number, and what catches it."""

    name: str
    intermediate_shape: tuple[int, ...]  # what the broadcast silently built
    wrong: float  # the number the mistaken code returns
    right: float  # the number it should return
    rank_promotion_error: str | None  # the message under jax.numpy_rank_promotion("raise")
    contract_error: str | None  # the message of an explicit shape check (if any)


def caught_by_rank_promotion(fn, *args) -> str | None:
    """Run fn(*args) with jax.numpy_rank_promotion('raise'); the error's first line, or None."""
    with jax.numpy_rank_promotion("raise"):
        try:
            jax.block_until_ready(fn(*args))
        except ValueError as exc:
            return str(exc).splitlines()[0]
    return None


def mse_mistake(prediction_N, target_N1) -> ShapeMistake:
    """(N,) prediction minus (N, 1) target broadcasts to (N, N): the MSE of every pair."""
    try:
        mse(prediction_N, target_N1)
        contract = None
    except ValueError as exc:
        contract = str(exc)
    return ShapeMistake(
        name="MSE of a (N,) prediction against a (N, 1) target",
        intermediate_shape=tuple(jnp.broadcast_shapes(prediction_N.shape, target_N1.shape)),
        wrong=float(mse_unchecked(prediction_N, target_N1)),
        right=float(mse(prediction_N, target_N1.reshape(prediction_N.shape))),
        rank_promotion_error=caught_by_rank_promotion(mse_unchecked, prediction_N, target_N1),
        contract_error=contract,
    )


@jax.jit
def center_rows_forgot_keepdims(x_NN: jax.Array) -> jax.Array:
    """x - x.mean(axis=1): the (N,) means broadcast along the wrong axis (subtracts col-wise)."""
    return x_NN - jnp.mean(x_NN, axis=1)


@jax.jit
def center_rows(x_NN: jax.Array) -> jax.Array:
    """x - x.mean(axis=1, keepdims=True): each row minus its own mean."""
    return x_NN - jnp.mean(x_NN, axis=1, keepdims=True)


@functools.partial(jax.jit, static_argnums=1)
def example_square(key: jax.Array, n: int) -> jax.Array:
    """(n, n) float32: N(0, 1) plus the row number, so every row has a different mean."""
    return jax.random.normal(key, (n, n)) + jnp.arange(n, dtype=jnp.float32)[:, None]


def centering_mistake(x_NN: jax.Array) -> ShapeMistake:
    """Row-centering without keepdims on a square matrix: runs, and returns wrong numbers.

    Reported numbers: the largest |row mean| after centering (0 when it is right).
    """
    wrong = np.asarray(center_rows_forgot_keepdims(x_NN), np.float64)
    right = np.asarray(center_rows(x_NN), np.float64)
    return ShapeMistake(
        name="center the rows of a square matrix without keepdims",
        intermediate_shape=tuple(wrong.shape),
        wrong=float(np.abs(wrong.mean(axis=1)).max()),
        right=float(np.abs(right.mean(axis=1)).max()),
        rank_promotion_error=caught_by_rank_promotion(center_rows_forgot_keepdims, x_NN),
        contract_error=None,
    )
