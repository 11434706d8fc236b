"""Recompilation and host synchronization: the two silent costs of a JAX training loop.

Recompilation. ``jax.jit`` caches one compiled program per *signature* of its arguments:
shapes, dtypes, weak types (Python scalars are weakly typed), shardings, and the values of
static arguments. A new signature means a new trace and compile (padding to a few bucket
shapes, the fix for varying lengths, is in core/perf/compilation.py: lesson "Tracing, static
arguments, and recompilation"). Here compiles are counted
two ways: the "Compiling ..." messages ``jax.log_compiles()`` emits (captured from the
``jax`` logger), and the jitted function's cache size.

Host synchronization. JAX returns control before the device has finished. Anything that
needs a *value* on the host (``float(loss)``, ``if loss < best``, printing, ``np.asarray``)
waits for the device, and a Python number used in a JAX operation is copied to the device.
``jax.transfer_guard("disallow")`` turns such implicit transfers into errors; explicit ones
(``jax.device_put``, ``jax.device_get``) stay allowed.

On a CPU backend the device *is* host memory: reading an array is not a transfer, so the
device-to-host half of the guard has nothing to catch there (measured by
:func:`guard_catches`); the host-to-device half does fire. On TPU both fire.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import time

import jax
import jax.numpy as jnp
import numpy as np


def signature(value) -> tuple:
    """What jit keys its cache on for one argument: (kind, shape, dtype, weak type)."""
    if isinstance(value, (bool, int, float, complex)):
        return ("python scalar", (), type(value).__name__, True)
    array = np.asarray(value) if not isinstance(value, jax.Array) else value
    weak = bool(getattr(value, "weak_type", False))
    return ("array", tuple(array.shape), str(array.dtype), weak)


def describe(value) -> str:
    kind, shape, dtype, weak = signature(value)
    if kind == "python scalar":
        return f"Python {dtype} {value!r}"
    origin = "jax" if isinstance(value, jax.Array) else "numpy"
    return f"{origin} {dtype}{list(shape)}" + (" (weak)" if weak else "")


@dataclasses.dataclass(frozen=True)
class CallRecord:
    argument: str
    compiled: bool  # a "Compiling" message was logged for this call
    cache_size: int  # entries in the jitted function's cache after the call
    message: str  # the first "Compiling ..." line, shortened


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.stream = io.StringIO()

    def emit(self, record):
        self.stream.write(record.getMessage() + "\n")


def count_compiles(fn, arguments, static_argnums=()) -> list[CallRecord]:
    """Call a fresh ``jax.jit(fn)`` on each argument in turn; record which calls compiled."""
    jitted = jax.jit(fn, static_argnums=static_argnums)
    logger = logging.getLogger("jax")
    handler = _Capture()
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False  # keep the messages off stderr
    records = []
    try:
        for argument in arguments:
            start = handler.stream.tell()
            with jax.log_compiles(True):
                jax.block_until_ready(jitted(argument))
            handler.stream.seek(start)
            lines = [
                line for line in handler.stream.read().splitlines() if line.startswith("Compiling")
            ]
            handler.stream.seek(0, io.SEEK_END)
            records.append(
                CallRecord(
                    describe(argument),
                    bool(lines),
                    jitted._cache_size(),
                    lines[0][:140] if lines else "",
                )
            )
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
    return records


# --- host synchronization in a training loop ----------------------------------------------

LOOPS = ("python compare each step", "float(loss) each step", "on device, fetch once")


def regression_problem(key: jax.Array, examples: int = 256, features: int = 16):
    """(w0, x, y) for least squares: y = x @ w_true + noise; w0 zeros."""
    key_x, key_w, key_n = jax.random.split(key, 3)
    x = jax.random.normal(key_x, (examples, features), jnp.float32)
    w_true = jax.random.normal(key_w, (features,), jnp.float32)
    y = x @ w_true + 0.01 * jax.random.normal(key_n, (examples,), jnp.float32)
    return jnp.zeros((features,), jnp.float32), x, y


LEARNING_RATE = 0.1

# The lowest loss of a float32 loop vs the same steps in float64, relative: not the float32
# table's 1e-5. The loss is a mean of squared residuals x @ w - y that cancel (y has std ~4,
# the residuals' RMS falls to ~0.05 in 20 steps), so its relative error is about
# eps * |y| / |residual| ~ 5e-6 (measured up to 5.2e-6 over seeds 0..299 at 20 steps).
BEST_LOSS_TOLERANCE = 1e-4


@jax.jit
def sgd_step(w, x, y):
    """One gradient step on mean squared error; returns (w, loss before the step).

    The learning rate is a constant of the program: passed as a Python float argument it
    would be copied to the device on every call (an implicit transfer the guard reports).
    """
    loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return w - LEARNING_RATE * grad, loss


def run_loop(kind: str, w, x, y, steps: int):
    """Train ``steps`` steps the ``kind`` way; returns (w, best loss as a Python float).

    - "python compare each step": ``if loss < best`` with ``best`` a Python float: each step
      copies ``best`` to the device and waits for ``loss`` on the host;
    - "float(loss) each step": logs every loss as a Python float: waits every step;
    - "on device, fetch once": ``best = jnp.minimum(best, loss)`` stays on the device; one
      explicit ``jax.device_get`` at the end.
    """
    if kind not in LOOPS:
        raise ValueError(f"loop kind must be one of {LOOPS}, got {kind!r}")
    if kind == "on device, fetch once":
        best = jax.device_put(np.float32(np.inf))  # explicit: allowed under the guard
        for _ in range(steps):
            w, loss = sgd_step(w, x, y)
            best = jnp.minimum(best, loss)
        return w, float(jax.device_get(best))
    best = float("inf")
    for _ in range(steps):
        w, loss = sgd_step(w, x, y)
        if kind == "python compare each step":
            if loss < best:
                best = loss
        else:
            best = min(best, float(loss))
    return w, float(best)


def guarded(kind: str, w, x, y, steps: int = 3, guard: str = "transfer_guard") -> str | None:
    """Run the loop under ``jax.<guard>("disallow")``: the error message, or None if it ran."""
    context = getattr(jax, guard)("disallow")
    try:
        with context:
            jax.block_until_ready(run_loop(kind, w, x, y, steps)[0])
    except Exception as error:  # JaxRuntimeError: INVALID_ARGUMENT: Disallowed ... transfer
        return str(error).splitlines()[0]
    return None


def guard_catches(direction: str) -> bool:
    """Whether this backend's guard fires for an implicit transfer in ``direction``.

    "device-to-host": ``float(array)``; "host-to-device": ``array + 1.0``.
    """
    array = jax.device_put(jnp.arange(4.0))
    guards = {
        "device-to-host": jax.transfer_guard_device_to_host,
        "host-to-device": jax.transfer_guard_host_to_device,
    }
    if direction not in guards:
        raise ValueError(f"direction must be one of {tuple(guards)}, got {direction!r}")
    try:
        with guards[direction]("disallow"):
            if direction == "device-to-host":
                float(array[0])
            else:
                jax.block_until_ready(array + np.float32(1.0))
    except Exception:
        return True
    return False


def time_loop(
    kind: str, w, x, y, steps: int, repeats: int = 5, clock=time.perf_counter
) -> list[float]:
    """Seconds per run of ``steps`` steps, ``repeats`` times, after one warm-up run."""
    jax.block_until_ready(run_loop(kind, w, x, y, steps)[0])
    samples = []
    for _ in range(repeats):
        start = clock()
        w_out, _best = run_loop(kind, w, x, y, steps)
        jax.block_until_ready(w_out)
        samples.append(clock() - start)
    return samples
