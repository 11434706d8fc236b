"""``jax.vmap`` with in_axes/out_axes, for the lesson "Batch a function with vmap".

Two per-example functions, each written for ONE example and checking its own shapes:

- ``affine``: M_RC @ v_C + b_R -> (R,); the data holds B matrices M_BRC, B vectors v_BC and
  one shared bias b_R, so the natural ``in_axes`` is (0, 0, None);
- ``squared_error``: (x_C . w_C - y)^2 -> (); the data holds B inputs x_BC, B targets y_B and
  one shared weight vector w_C: again (0, 0, None).

The independent reference is a Python loop over NumPy float64 (``np.take`` each mapped
argument, call the per-example NumPy function, ``np.stack`` on out_axes). ``problem``
predicts, without JAX, which in_axes/out_axes cannot work and why.

Dimension glossary: B batch (the mapped axis), R rows, C columns/features.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from core.perf import timing

AXIS_CHOICES = ("0", "1", "2", "None")  # what a learner can pick for each in_axes entry
OUT_AXIS_CHOICES = ("0", "1")


def parse_axis(text: str) -> int | None:
    """ "0" -> 0, "None" -> None."""
    if text == "None":
        return None
    if text not in AXIS_CHOICES:
        raise ValueError(f"an axis is one of {', '.join(AXIS_CHOICES)}, got {text!r}")
    return int(text)


def _affine_jax(m_RC, v_C, b_R):
    _require_affine_shapes(m_RC.shape, v_C.shape, b_R.shape)
    return m_RC @ v_C + b_R


def _affine_numpy(m_RC, v_C, b_R):
    _require_affine_shapes(m_RC.shape, v_C.shape, b_R.shape)
    return m_RC @ v_C + b_R


def _affine_problem(m_shape, v_shape, b_shape) -> str | None:
    if len(m_shape) == 2 and v_shape == (m_shape[1],) and b_shape == (m_shape[0],):
        return None
    return (
        "M @ v + b is written for one example: M (r, c), v (c,), b (r,); per example this "
        f"gets M {tuple(m_shape)}, v {tuple(v_shape)}, b {tuple(b_shape)}"
    )


def _require_affine_shapes(m_shape, v_shape, b_shape):
    if reason := _affine_problem(m_shape, v_shape, b_shape):
        raise ValueError(reason)


def _squared_error_jax(x_C, y, w_C):
    _require_squared_error_shapes(x_C.shape, jnp.shape(y), w_C.shape)
    return (x_C @ w_C - y) ** 2


def _squared_error_numpy(x_C, y, w_C):
    _require_squared_error_shapes(x_C.shape, np.shape(y), w_C.shape)
    return np.asarray((x_C @ w_C - y) ** 2)


def _squared_error_problem(x_shape, y_shape, w_shape) -> str | None:
    if len(x_shape) == 1 and tuple(y_shape) == () and tuple(w_shape) == tuple(x_shape):
        return None
    return (
        "(x . w - y)^2 is written for one example: x (c,), y a scalar (), w (c,); per example "
        f"this gets x {tuple(x_shape)}, y {tuple(y_shape)}, w {tuple(w_shape)}"
    )


def _require_squared_error_shapes(x_shape, y_shape, w_shape):
    if reason := _squared_error_problem(x_shape, y_shape, w_shape):
        raise ValueError(reason)


@dataclasses.dataclass(frozen=True)
class Example:
    """A per-example function, its NumPy twin, and how to build a batch of data for it."""

    name: str
    arg_names: tuple[str, ...]
    jax_f: Callable
    numpy_f: Callable
    shape_problem: Callable[..., str | None]  # per-example shapes -> reason or None
    data_shapes: Callable[[int, int, int], tuple[tuple[int, ...], ...]]  # (B, R, C) -> shapes
    output_rank: int  # rank of one example's output
    formula: str


EXAMPLES: dict[str, Example] = {
    e.name: e
    for e in (
        Example(
            "affine",
            ("M", "v", "b"),
            _affine_jax,
            _affine_numpy,
            _affine_problem,
            lambda b, r, c: ((b, r, c), (b, c), (r,)),
            1,
            "f(M, v, b) = M @ v + b",
        ),
        Example(
            "squared_error",
            ("x", "y", "w"),
            _squared_error_jax,
            _squared_error_numpy,
            _squared_error_problem,
            lambda b, r, c: ((b, c), (b,), (c,)),
            0,
            "f(x, y, w) = (x · w - y)²",
        ),
    )
}
NAMES = tuple(EXAMPLES)
NATURAL_IN_AXES = (0, 0, None)  # both examples: batch the first two, share the third


def get(name: str) -> Example:
    if name not in EXAMPLES:
        raise ValueError(f"unknown example {name!r}: choose one of {', '.join(NAMES)}")
    return EXAMPLES[name]


def example_data(
    key: jax.Array, name: str, batch: int, rows: int, cols: int
) -> tuple[jax.Array, ...]:
    """Random float32 arguments for ``name``, batched along axis 0 (the shared one unbatched)."""
    if min(batch, rows, cols) < 1:
        raise ValueError(f"batch, rows, cols must be >= 1, got {batch}, {rows}, {cols}")
    return _normal_arrays(key, get(name).data_shapes(batch, rows, cols))


@functools.partial(jax.jit, static_argnames="shapes")
def _normal_arrays(key, shapes):
    # One compiled program and one random draw, sliced per argument: eager jax.random would
    # compile each op separately, and every random op adds to the compile time.
    sizes = [int(np.prod(s)) for s in shapes]
    z = jax.random.normal(key, (sum(sizes),))
    return tuple(
        part.reshape(s) for part, s in zip(jnp.split(z, np.cumsum(sizes)[:-1]), shapes, strict=True)
    )


def per_example_shape(shape: tuple[int, ...], axis: int | None) -> tuple[int, ...]:
    """What one example of an argument looks like: the shape without the mapped axis."""
    return tuple(shape) if axis is None else tuple(shape[:axis]) + tuple(shape[axis + 1 :])


def problem(name: str, shapes, in_axes, out_axes: int) -> str | None:
    """Why ``vmap(f, in_axes, out_axes)`` cannot run on arguments of ``shapes``, or None.

    Checked in the order a learner should think about it: something must be mapped; each
    mapped axis must exist; all mapped axes must have the same size (that size is the batch);
    each example must fit the function; out_axes must fit one example's output.
    """
    example = get(name)
    in_axes = tuple(in_axes)
    arity = len(example.arg_names)
    if len(shapes) != arity or len(in_axes) != arity:
        raise ValueError(
            f"{name} takes {arity} arguments {example.arg_names}: in_axes needs one entry per "
            f"argument, got {len(in_axes)} axes for {len(shapes)} shapes"
        )
    if all(axis is None for axis in in_axes):
        return "in_axes maps no argument: at least one entry must be an axis, not None"
    for arg, shape, axis in zip(example.arg_names, shapes, in_axes, strict=True):
        if axis is not None and axis >= len(shape):
            return (
                f"in_axes asks for axis {axis} of {arg}, but {arg} has shape {tuple(shape)}: "
                f"only {len(shape)} axes"
            )
    mapped = {
        arg: shape[axis]
        for arg, shape, axis in zip(example.arg_names, shapes, in_axes, strict=True)
        if axis is not None
    }
    if len(set(mapped.values())) > 1:
        sizes = ", ".join(
            f"{arg} axis {in_axes[example.arg_names.index(arg)]} has {size}"
            for arg, size in mapped.items()
        )
        return f"the mapped axes disagree on the batch size ({sizes}): vmap needs one size for all"
    per_example = [per_example_shape(s, a) for s, a in zip(shapes, in_axes, strict=True)]
    if reason := example.shape_problem(*per_example):
        return reason
    out_rank = example.output_rank
    if out_axes > out_rank:
        return (
            f"out_axes={out_axes}, but one example's output has {out_rank} axes: the batch axis "
            f"can go at positions 0..{out_rank} only"
        )
    return None


def batched(name: str, in_axes, out_axes: int) -> Callable:
    """jax.vmap of the per-example function (not jitted: the lesson looks at vmap alone)."""
    return jax.vmap(get(name).jax_f, in_axes=tuple(in_axes), out_axes=out_axes)


def jax_error(name: str, args, in_axes, out_axes: int) -> str | None:
    """The first line of what JAX raises for this vmap, or None when it runs."""
    try:
        jax.eval_shape(batched(name, in_axes, out_axes), *args)
    except (ValueError, TypeError) as error:
        return str(error).strip().splitlines()[0]
    return None


def loop_reference(name: str, args, in_axes, out_axes: int) -> np.ndarray:
    """The Python loop vmap stands for, in NumPy float64.

    for i in range(batch): take example i of every mapped argument, call f; then stack the
    results along ``out_axes``.
    """
    example = get(name)
    arrays = [np.asarray(a, dtype=np.float64) for a in args]
    sizes = {a.shape[axis] for a, axis in zip(arrays, in_axes, strict=True) if axis is not None}
    if len(sizes) != 1:
        raise ValueError(f"mapped axes must share one size, got {sorted(sizes)}")
    (batch,) = sizes
    outputs = []
    for i in range(batch):
        example_args = [
            a if axis is None else np.take(a, i, axis=axis)
            for a, axis in zip(arrays, in_axes, strict=True)
        ]
        outputs.append(example.numpy_f(*example_args))
    return np.stack(outputs, axis=out_axes)


_affine_per_example = jax.jit(_affine_jax)
_affine_vmapped = jax.jit(jax.vmap(_affine_jax, in_axes=(0, 0, None)))


def loop_vs_vmap(
    batch: int = 64, rows: int = 32, cols: int = 32, repeats: int = 7, seed: int = 0
) -> dict:
    """Time a Python loop over examples against one vmapped call, for ``affine``.

    Both sides are compiled (jit) and warmed up first, then timed with block_until_ready;
    figures are medians over ``repeats``, in seconds, on whatever backend JAX runs on.

    Returns {"batch", "rows", "cols", "repeats", "backend",
             "loop_s":  Python loop calling jit(f) once per (pre-sliced) example, then jnp.stack,
             "vmap_s":  jit(vmap(f)) called once on the whole batch,
             "speedup": loop_s / vmap_s,
             "max_abs_difference": |loop - vmap| (float32, should be ~0)}.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    # Timing inputs from NumPy's generator: their values do not change the timing, and a
    # jax.random draw would compile once per batch size.
    rng = np.random.default_rng(seed)
    m_BRC, v_BC, b_R = (
        jnp.asarray(rng.standard_normal(shape, dtype=np.float32))
        for shape in get("affine").data_shapes(batch, rows, cols)
    )
    examples = [(m_BRC[i], v_BC[i]) for i in range(batch)]  # sliced once, outside the timing

    def loop():
        return jnp.stack([_affine_per_example(m_RC, v_C, b_R) for m_RC, v_C in examples])

    def one_call():
        return _affine_vmapped(m_BRC, v_BC, b_R)

    looped, mapped = jax.block_until_ready((loop(), one_call()))  # warm-up: compile both
    loop_s = timing.median_seconds(loop, repeats)
    vmap_s = timing.median_seconds(one_call, repeats)
    return {
        "batch": batch,
        "rows": rows,
        "cols": cols,
        "repeats": repeats,
        "backend": jax.default_backend(),
        "loop_s": loop_s,
        "vmap_s": vmap_s,
        "speedup": loop_s / vmap_s,
        "max_abs_difference": float(jnp.max(jnp.abs(looped - mapped))),
    }
