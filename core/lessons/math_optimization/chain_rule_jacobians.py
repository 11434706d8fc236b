"""Jacobians forward and reverse, for the lesson "The chain rule, Jacobians, and directions".

The function is a small network f(x) = W2 tanh(W1 x + b): R^N -> R^M. Its Jacobian J (M x N)
is the chain rule's product W2 diag(1 - tanh^2) W1. ``jax.jacfwd`` builds J from N
Jacobian-vector products (one per input direction: a column each), ``jax.jacrev`` from M
vector-Jacobian products (one per output: a row each); each product costs about one
evaluation of f, so forward mode wins when N < M and reverse mode when N > M (a loss, M = 1,
is why training uses reverse mode). ``jax.jvp(f, x, v)`` = J v is the directional derivative
along v; ``jax.vjp`` gives u^T J. References: NumPy float64 central differences of a NumPy
twin of f (columns of J, and the directional derivative along v).

Dimension glossary: N inputs, M outputs, H hidden units, S sizes swept.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from core.optim import gradcheck
from core.perf import roofline, timing

HIDDEN = 16  # the lesson's f
TIMING_HIDDEN = 256  # the cost sweep's f: enough work per product to rise above call overhead
TIMING_SIZES = (1, 4, 16, 64, 256)  # inputs N swept, the outputs M held at the control's value


@functools.partial(jax.jit, static_argnames=("inputs", "outputs", "hidden"))
def problem_data(key: jax.Array, inputs: int, outputs: int, hidden: int = HIDDEN):
    """(params, x_N, v_N, u_M): random weights {w1 (H, N), b (H,), w2 (M, H)}, a point x,
    an input direction v and an output weighting u, float32."""
    # One random draw, sliced: every jax.random op adds to the compile time.
    shapes = [(hidden, inputs), (hidden,), (outputs, hidden), (inputs,), (inputs,), (outputs,)]
    sizes = [int(np.prod(shape)) for shape in shapes]
    z = jax.random.normal(key, (sum(sizes),))
    w1, b, w2, x, v, u = (
        part.reshape(shape)
        for part, shape in zip(jnp.split(z, np.cumsum(sizes)[:-1]), shapes, strict=True)
    )
    params = {"w1": w1 / np.sqrt(inputs), "b": 0.1 * b, "w2": w2 / np.sqrt(hidden)}
    return params, x, v, u


def _timing_data(inputs: int, outputs: int, hidden: int, seed: int):
    # Timing inputs from NumPy's generator: their values do not change the cost, and a
    # jax.random draw would compile once per size.
    rng = np.random.default_rng(seed)
    params = {
        "w1": jnp.asarray(rng.standard_normal((hidden, inputs), np.float32) / np.sqrt(inputs)),
        "b": jnp.asarray(0.1 * rng.standard_normal(hidden, np.float32)),
        "w2": jnp.asarray(rng.standard_normal((outputs, hidden), np.float32) / np.sqrt(hidden)),
    }
    return params, jnp.asarray(rng.standard_normal(inputs, np.float32))


def f(params, x_N):
    """W2 tanh(W1 x + b): R^N -> R^M."""
    return params["w2"] @ jnp.tanh(params["w1"] @ x_N + params["b"])


def f_numpy(params, x_N) -> np.ndarray:
    """The same function in NumPy float64."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    return p["w2"] @ np.tanh(p["w1"] @ np.asarray(x_N, np.float64) + p["b"])


@jax.jit
def derivatives(params, x_N, v_N, u_M):
    """(jacfwd J, jacrev J, jvp J v, vjp u^T J), float32."""
    g = functools.partial(f, params)
    _, jv = jax.jvp(g, (x_N,), (v_N,))
    _, pullback = jax.vjp(g, x_N)
    (uj,) = pullback(u_M)
    return jax.jacfwd(g)(x_N), jax.jacrev(g)(x_N), jv, uj


def jacobian_reference(params, x_N) -> np.ndarray:
    """J by central differences in NumPy float64, one column per input (step eps^(1/3))."""
    x = np.asarray(x_N, np.float64)
    h_N = gradcheck.central_step(x)
    columns = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h_N[i]
        columns.append((f_numpy(params, x + e) - f_numpy(params, x - e)) / (2 * h_N[i]))
    return np.stack(columns, axis=1)


def directional_reference(params, x_N, v_N) -> np.ndarray:
    """The derivative of f along v, (f(x + h v) - f(x - h v)) / 2h, NumPy float64."""
    x, v = np.asarray(x_N, np.float64), np.asarray(v_N, np.float64)
    h = np.cbrt(gradcheck.EPS64) * max(1.0, float(np.max(np.abs(x)))) / float(np.max(np.abs(v)))
    return (f_numpy(params, x + h * v) - f_numpy(params, x - h * v)) / (2 * h)


def _jacobian_fn(mode: str):
    transform = {"jacfwd": jax.jacfwd, "jacrev": jax.jacrev}[mode]
    return jax.jit(lambda params, x: transform(functools.partial(f, params))(x))


def cost(mode: str, inputs: int, outputs: int, hidden: int, repeats: int, seed: int = 0) -> dict:
    """Compile and time the ``mode`` Jacobian of an N -> M function with H hidden units.

    Returns {mode, inputs, outputs, flops (the compiler's cost_analysis), compile_s,
    median_s (steady state, timing.median_seconds after a warm-up call)}.
    """
    if mode not in ("jacfwd", "jacrev"):
        raise ValueError(f"mode is jacfwd or jacrev, got {mode!r}")
    params, x = _timing_data(inputs, outputs, hidden, seed)
    compiled = timing.lower_and_compile(_jacobian_fn(mode), params, x)
    jax.block_until_ready(compiled.executable(params, x))
    seconds = timing.median_seconds(lambda: compiled.executable(params, x), repeats)
    return {
        "mode": mode,
        "inputs": inputs,
        "outputs": outputs,
        "flops": roofline.cost_from_compiled(compiled.executable).flops,
        "compile_s": compiled.total_s,
        "median_s": seconds,
    }


def cost_sweep(
    outputs: int,
    sizes=TIMING_SIZES,
    hidden: int = TIMING_HIDDEN,
    repeats: int = 5,
    seed: int = 0,
    progress=lambda items: items,
) -> list[dict]:
    """``cost`` of both modes for every input size in ``sizes`` (outputs fixed)."""
    return [
        cost(mode, n, outputs, hidden, repeats, seed)
        for n in progress(list(sizes))
        for mode in ("jacfwd", "jacrev")
    ]


def predicted_products(mode: str, inputs: int, outputs: int) -> int:
    """How many JVPs (jacfwd: N) or VJPs (jacrev: M) build the M x N Jacobian."""
    return {"jacfwd": inputs, "jacrev": outputs}[mode]
