"""Branches in traced code, for the lesson "Branches with lax.cond".

Under ``jit`` a Python ``if`` on a traced value is an error: the value is not known yet.
Three ways out, with different costs:

- ``jnp.where(pred, a, b)`` computes *both* a and b, then selects elementwise. A NaN or inf
  in the unused side still reaches the gradient: the classic NaN of
  ``grad(lambda x: jnp.where(x > 0, jnp.sqrt(x), 0.0))`` at x <= 0, fixed by a second where
  that keeps the unused side's *input* safe.
- ``lax.cond(pred, f, g, x)`` traces both branches (both must give the same shapes) but runs
  only the one chosen; its gradient is the chosen branch's gradient. Under ``vmap`` with a
  batched predicate it becomes a select, and then both branches run.
- ``lax.switch(index, branches, x)``: the same with n branches.

Dimension glossary: N points.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics

# ---- sqrt for x > 0, else 0: the NaN-gradient story ---------------------------------------


def sqrt_where_naive(x):
    """where(x > 0, sqrt(x), 0): right values, NaN gradient at x <= 0."""
    return jnp.where(x > 0, jnp.sqrt(x), 0.0)


def sqrt_where_safe(x):
    """The double where: feed sqrt a harmless 1.0 where its result is not used."""
    positive = x > 0
    safe_x = jnp.where(positive, x, 1.0)
    return jnp.where(positive, jnp.sqrt(safe_x), 0.0)


def sqrt_cond(x):
    """lax.cond on a scalar: only the chosen branch runs, and only it is differentiated."""
    return jax.lax.cond(x > 0, jnp.sqrt, jnp.zeros_like, x)


def sqrt_reference(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return np.where(x > 0, np.sqrt(np.maximum(x, 0.0)), 0.0)


def sqrt_derivative_reference(x) -> np.ndarray:
    """d/dx: 1 / (2 sqrt(x)) for x > 0, 0 elsewhere (the zero branch is flat)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x > 0, 0.5 / np.sqrt(np.where(x > 0, x, 1.0)), 0.0)


# ---- a three-piece function: lax.switch ---------------------------------------------------
#   x < -1: sin(x)      -1 <= x < 1: x^2      x >= 1: exp(x - 1)

PIECE_NAMES = ("sin(x)", "x^2", "exp(x - 1)")
PIECES: tuple[Callable, ...] = (jnp.sin, jnp.square, lambda x: jnp.exp(x - 1.0))


def segment(name: str, x) -> np.ndarray:
    """Which smooth piece of function ``name`` each x lies on (for drawing lines that break
    at the jumps): the piece index, or x > 0 for the sqrt functions."""
    x = np.asarray(x)
    if name.startswith("sqrt"):
        return (x > 0).astype(np.int32)
    return piece_index(x)  # in NumPy: eager jnp ops would each compile (seconds on 2 cores)


def piece_index(x):
    """Which piece applies: 0 for x < -1, 1 for -1 <= x < 1, 2 for x >= 1 (int32)."""
    return (x >= -1.0).astype(jnp.int32) + (x >= 1.0).astype(jnp.int32)


def piecewise_switch(x):
    """lax.switch on a scalar: one of three branches by index."""
    return jax.lax.switch(piece_index(x), PIECES, x)


def piecewise_cond(x):
    """The same with two nested lax.cond."""
    return jax.lax.cond(
        x < -1.0, PIECES[0], lambda x: jax.lax.cond(x < 1.0, PIECES[1], PIECES[2], x), x
    )


def piecewise_where(x):
    """The same with jnp.where: all three pieces are computed everywhere."""
    return jnp.where(x < -1.0, PIECES[0](x), jnp.where(x < 1.0, PIECES[1](x), PIECES[2](x)))


def piecewise_reference(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return np.select([x < -1.0, x < 1.0], [np.sin(x), x**2], np.exp(x - 1.0))


def piecewise_derivative_reference(x) -> np.ndarray:
    """cos(x), 2x, exp(x - 1) on the three pieces."""
    x = np.asarray(x, dtype=np.float64)
    return np.select([x < -1.0, x < 1.0], [np.cos(x), 2 * x], np.exp(x - 1.0))


# Scalar functions of the lesson, by name: (function, value reference, derivative reference).
FUNCTIONS: dict[str, tuple[Callable, Callable, Callable]] = {
    "sqrt: where (naive)": (sqrt_where_naive, sqrt_reference, sqrt_derivative_reference),
    "sqrt: where (double where)": (sqrt_where_safe, sqrt_reference, sqrt_derivative_reference),
    "sqrt: lax.cond": (sqrt_cond, sqrt_reference, sqrt_derivative_reference),
    "pieces: jnp.where": (piecewise_where, piecewise_reference, piecewise_derivative_reference),
    "pieces: nested lax.cond": (
        piecewise_cond,
        piecewise_reference,
        piecewise_derivative_reference,
    ),
    "pieces: lax.switch": (piecewise_switch, piecewise_reference, piecewise_derivative_reference),
}


@jax.jit
def _values_and_grads(xs_N):
    return {
        name: (jax.vmap(fn)(xs_N), jax.vmap(jax.grad(fn))(xs_N))
        for name, (fn, _, _) in FUNCTIONS.items()
    }


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One function on a grid: values and gradients (float32), with float64 references."""

    name: str
    x: np.ndarray
    value: np.ndarray
    grad: np.ndarray
    value_reference: np.ndarray
    grad_reference: np.ndarray

    @property
    def nan_grads(self) -> int:
        return int(np.sum(~np.isfinite(self.grad)))

    # Each point on its own (numerics.elementwise_relative_error): the functions jump and
    # have zeros, so one scale for the whole grid would hide a bad point near a small value.
    @property
    def value_error(self) -> float:
        return numerics.elementwise_relative_error(self.value, self.value_reference)

    @property
    def grad_error(self) -> float:
        """inf when any gradient is NaN or inf (the references are finite everywhere)."""
        return numerics.elementwise_relative_error(self.grad, self.grad_reference)


def evaluate(xs_N) -> dict[str, Evaluation]:
    """Every function of FUNCTIONS, and its gradient (vmap of grad), on the points xs (N,)."""
    xs = np.asarray(xs_N, dtype=np.float32)
    if xs.ndim != 1 or xs.size == 0:
        raise ValueError(f"xs must be a non-empty 1-D array of points, got shape {xs.shape}")
    # Pad to a power of two (at least 64): a points slider then compiles once per bucket.
    bucket = max(64, 1 << (xs.size - 1).bit_length())
    out = _values_and_grads(jnp.asarray(np.pad(xs, (0, bucket - xs.size), constant_values=1.0)))
    return {
        name: Evaluation(
            name,
            xs,
            np.asarray(out[name][0])[: xs.size],
            np.asarray(out[name][1])[: xs.size],
            FUNCTIONS[name][1](xs),
            FUNCTIONS[name][2](xs),
        )
        for name in FUNCTIONS
    }


def grid(x_min: float, x_max: float, points: int) -> np.ndarray:
    """``points`` evenly spaced float32 values from x_min to x_max, with x = 0 exactly when
    the range contains it (the point where sqrt's gradient goes wrong)."""
    if not x_min < x_max:
        raise ValueError(f"the range is empty: x_min ({x_min}) must be below x_max ({x_max})")
    if points < 2:
        raise ValueError(f"need at least 2 points, got {points}")
    xs = np.linspace(x_min, x_max, points)
    if x_min <= 0 <= x_max:
        xs[np.argmin(np.abs(xs))] = 0.0
    return xs.astype(np.float32)


# ---- what runs when: trace time vs run time -----------------------------------------------


@dataclasses.dataclass(frozen=True)
class BranchLog:
    """What a Python side effect saw while tracing, and what a runtime callback saw."""

    construct: str
    value: float
    traced: tuple[str, ...]  # Python code run while tracing (once, when the program was built)
    ran: tuple[str, ...]  # jax.debug.callback calls while the compiled program ran this time
    traced_now: bool  # whether this call traced (False: jit reused the compiled program)


CONSTRUCTS = ("cond", "where", "switch", "vmap(cond)")
_PROGRAMS: dict[str, tuple[Callable, list[str], list[str]]] = {}


def _build(construct: str) -> tuple[Callable, list[str], list[str]]:
    """A jitted program for ``construct`` and the two logs its branches write to."""
    traced: list[str] = []
    ran: list[str] = []

    def branch(name: str, fn: Callable) -> Callable:
        def run(v):
            traced.append(name)  # Python: happens at trace time only
            jax.debug.callback(lambda: ran.append(name))  # staged: happens at run time
            return fn(v)

        return run

    positive, negative = branch("sqrt branch", jnp.sqrt), branch("zero branch", jnp.zeros_like)
    if construct == "cond":

        def program(v):
            return jax.lax.cond(v > 0, positive, negative, v)
    elif construct == "where":

        def program(v):
            return jnp.where(v > 0, positive(v), negative(v))
    elif construct == "switch":
        pieces = [branch(n, f) for n, f in zip(PIECE_NAMES, PIECES, strict=True)]

        def program(v):
            return jax.lax.switch(piece_index(v), pieces, v)
    else:  # vmap(cond)

        def program(v):
            batch = jnp.stack([v, -v])  # two points, one on each side: a batched predicate
            return jax.vmap(lambda u: jax.lax.cond(u > 0, positive, negative, u))(batch)[0]

    return jax.jit(program), traced, ran


def branch_log(construct: str, x: float, fresh: bool = False) -> BranchLog:
    """Run ``cond``, ``where``, ``switch`` or ``vmap(cond)`` on the float32 scalar x.

    Each branch appends to ``traced`` when Python executes it (tracing) and registers a
    ``jax.debug.callback`` that appends to ``ran`` when the compiled program executes it.
    The program is built and traced on first use (or when ``fresh``), then reused: later
    calls only run it, as jit does with any function called again on the same shapes.
    """
    if construct not in CONSTRUCTS:
        raise ValueError(f"construct must be one of {CONSTRUCTS}, got {construct!r}")
    if fresh or construct not in _PROGRAMS:
        _PROGRAMS[construct] = _build(construct)
    program, traced, ran = _PROGRAMS[construct]
    traces_before = len(traced)
    ran.clear()
    value = program(jnp.float32(x))
    jax.effects_barrier()  # wait for every callback before reading the log
    return BranchLog(
        construct, float(value), tuple(traced), tuple(ran), len(traced) > traces_before
    )


def primitive_names(fn: Callable, *args) -> list[str]:
    """Names of the primitives in ``jax.make_jaxpr(fn)(*args)``, in order, looking inside
    nested ``jit`` calls (jnp.where is one) but not inside a cond's branches."""

    def names(jaxpr) -> list[str]:
        out = []
        for eqn in jaxpr.eqns:
            if eqn.primitive.name in ("jit", "pjit"):
                out += names(eqn.params["jaxpr"].jaxpr)
            else:
                out.append(eqn.primitive.name)
        return out

    return names(jax.make_jaxpr(fn)(*args).jaxpr)


def python_if_error() -> str:
    """The first line of what JAX says when a Python ``if`` meets a traced value under jit."""

    def relu_sqrt(x):
        if x > 0:  # a tracer has no True/False yet
            return jnp.sqrt(x)
        return jnp.zeros_like(x)

    try:
        jax.jit(relu_sqrt)(jnp.float32(1.0))
    except jax.errors.TracerBoolConversionError as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0]}"
    raise RuntimeError("a Python if on a traced value traced without error: JAX changed")
