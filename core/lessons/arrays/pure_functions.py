"""Side effects under jit, for the lesson "Pure functions and explicit inputs".

``jax.jit`` runs the Python body of a function once per new call signature (tracing: each
argument's shape, dtype, weak type and sharding, the pytree structure, the static arguments'
values) and replays the recorded computation afterwards. Whatever Python does besides
computing on its arguments (printing, counting, drawing numpy random numbers, reading a
global) happens only while tracing. These demos count it.

Dimension glossary: N elements of a vector.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import types

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics

PYTHON_PRINT = "python print"
DEBUG_PRINT = "jax.debug.print"


@dataclasses.dataclass(frozen=True)
class CallRecord:
    call: int  # 1-based
    shape: tuple[int, ...]
    python_prints: int  # cumulative: lines printed by Python's print (trace time)
    debug_prints: int  # cumulative: lines printed by jax.debug.print (every run)
    numpy_noise: float  # np.random drawn inside the function: baked in at trace time
    jax_noise: float  # jax.random.normal(key) with the key passed in: fresh every call


@dataclasses.dataclass(frozen=True)
class SideEffectsDemo:
    calls: tuple[CallRecord, ...]
    compiled: int  # entries in the jitted function's cache (one per traced shape)
    printed: str  # everything the function printed, in order

    @property
    def traces(self) -> int:
        return self.calls[-1].python_prints if self.calls else 0

    def rows(self) -> list[dict]:
        return [dataclasses.asdict(c) | {"shape": str(c.shape)} for c in self.calls]


def call_shapes(n_calls: int, distinct_shapes: int, size: int) -> list[tuple[int, ...]]:
    """The shape of x in each call: cycling through ``distinct_shapes`` vector lengths."""
    if n_calls < 1 or distinct_shapes < 1 or size < 1:
        raise ValueError(
            f"n_calls, distinct_shapes and size must be >= 1, got {n_calls}, {distinct_shapes}, "
            f"{size}"
        )
    return [(size + (i % distinct_shapes),) for i in range(n_calls)]


def side_effects_demo(n_calls: int, distinct_shapes: int, size: int, seed: int) -> SideEffectsDemo:
    """Call a jitted function with side effects ``n_calls`` times and count what ran.

    A fresh function is built per demo, so it starts untraced (jit caches per function).
    """
    rng = np.random.default_rng(seed)

    def step(x, key):
        print(f"{PYTHON_PRINT}: tracing step for x of shape {x.shape}")  # trace time only
        jax.debug.print(DEBUG_PRINT + ": running step, sum(x) = {s}", s=jnp.sum(x))  # every call
        numpy_noise = rng.normal()  # a Python float now: a constant in the compiled program
        jax_noise = jax.random.normal(key)  # computed from the key argument: fresh every call
        return jnp.sum(x) * 0 + numpy_noise, jax_noise

    jitted = jax.jit(step)
    key = jax.random.key(seed)
    buffer = io.StringIO()
    records = []
    with contextlib.redirect_stdout(buffer):
        for call, shape in enumerate(call_shapes(n_calls, distinct_shapes, size), start=1):
            key, subkey = jax.random.split(key)
            numpy_noise, jax_noise = jitted(jnp.ones(shape), subkey)
            jax.effects_barrier()  # debug prints run asynchronously: wait for them
            text = buffer.getvalue()
            records.append(
                CallRecord(
                    call=call,
                    shape=shape,
                    python_prints=text.count(PYTHON_PRINT + ":"),
                    debug_prints=text.count(DEBUG_PRINT + ":"),
                    numpy_noise=float(numpy_noise),
                    jax_noise=float(jax_noise),
                )
            )
    return SideEffectsDemo(
        calls=tuple(records), compiled=jitted._cache_size(), printed=buffer.getvalue()
    )


@functools.partial(jax.jit, static_argnums=1)
def example_vector(key: jax.Array, n: int) -> jax.Array:
    """(n,) float32 N(0, 1) values."""
    return jax.random.normal(key, (n,))


def _scaled_tanh(x):
    return SCALE * jnp.tanh(x)  # noqa: F821 (SCALE is a global of the demo's copy)


def scaled_tanh_pure(x, scale):
    """The pure rewrite: everything the result depends on is an argument."""
    return scale * jnp.tanh(x)


@dataclasses.dataclass(frozen=True)
class StaleGlobalDemo:
    old_scale: float
    new_scale: float
    first: np.ndarray  # jitted, global = old: old * tanh(x)
    after_change: np.ndarray  # jitted, global changed to new, same shape: STILL old * tanh(x)
    eager_after_change: np.ndarray  # without jit the global is read every call: new * tanh(x)
    new_shape_after_change: np.ndarray  # jitted, a new shape retraces: new * tanh(x[:-1])
    pure_old: np.ndarray  # pure jitted with scale=old
    pure_new: np.ndarray  # pure jitted with scale=new, same compiled program
    impure_traces: int
    pure_traces: int


def stale_global_demo(x_N: jax.Array, old_scale: float, new_scale: float) -> StaleGlobalDemo:
    """``SCALE * tanh(x)`` reading a global SCALE under jit, vs ``scale`` as an argument.

    The impure function is a fresh copy of ``_scaled_tanh`` with its own module globals
    ``{"SCALE": old_scale}``, so each demo starts untraced and changing SCALE really is
    assigning a global of that function.
    """
    if x_N.ndim != 1 or x_N.shape[0] < 2:
        raise ValueError(f"x_N must be a vector of length >= 2, got shape {tuple(x_N.shape)}")
    module_globals = {"SCALE": old_scale, "jnp": jnp}
    impure = types.FunctionType(_scaled_tanh.__code__, module_globals, "scaled_tanh")
    traces = {"impure": 0, "pure": 0}

    def counted(name, fn):
        def wrapper(*args):
            traces[name] += 1  # Python: runs once per trace
            return fn(*args)

        return wrapper

    impure_jit = jax.jit(counted("impure", impure))
    pure_jit = jax.jit(counted("pure", scaled_tanh_pure))
    first = impure_jit(x_N)
    module_globals["SCALE"] = new_scale  # `SCALE = new_scale` at module level
    after_change = impure_jit(x_N)
    eager = impure(x_N)
    new_shape = impure_jit(x_N[:-1])
    pure_old = pure_jit(x_N, old_scale)
    pure_new = pure_jit(x_N, new_scale)
    return StaleGlobalDemo(
        old_scale=old_scale,
        new_scale=new_scale,
        first=np.asarray(first),
        after_change=np.asarray(after_change),
        eager_after_change=np.asarray(eager),
        new_shape_after_change=np.asarray(new_shape),
        pure_old=np.asarray(pure_old),
        pure_new=np.asarray(pure_new),
        impure_traces=traces["impure"],
        pure_traces=traces["pure"],
    )


def scaled_tanh_reference(x_N, scale: float) -> np.ndarray:
    """numpy float64: scale * tanh(x), the independent reference."""
    return float(scale) * np.tanh(np.asarray(x_N, dtype=np.float64))


# scale * tanh(x) in float32 vs float64, element by element, on a CPU: tanh is correctly
# rounded to within a few float32 units (1e-6 relative), 1e-7 absolute near zero.
TANH_RTOL_CPU, TANH_ATOL_CPU = 1e-6, 1e-7


def tanh_tolerances(backend: str) -> tuple[float, float, str]:
    """(rtol, atol, reason) for float32 ``scale * tanh(x)`` against NumPy float64 on
    ``backend``. No matmul runs here, but a TPU's float32 tanh is an approximation: measured at
    4.4e-5 on a v5e, and 1.8e-5 relative in this lesson's test on the chip. It takes the course's
    float32 floor for elementwise functions on a TPU (core.numerics.TPU_FLOAT32, 5e-4, the
    bound at HIGHEST, where the elementwise functions set it); a CPU keeps 1e-6."""
    if backend != "tpu":
        return TANH_RTOL_CPU, TANH_ATOL_CPU, ""
    rtol = numerics.tolerance("float32", backend="tpu", precision="HIGHEST")
    atol = rtol * TANH_ATOL_CPU / TANH_RTOL_CPU
    return float(rtol), atol, "a TPU's float32 tanh (an approximation): " + rtol.reason
