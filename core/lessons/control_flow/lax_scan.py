"""One recurrence, three loops, for the lesson "Compiled loops with lax.scan".

The recurrence is a tiny RNN: h_t = tanh(W h_{t-1} + x_t), t = 1 .. T. Written as a Python
``for`` loop under ``jit`` it is *unrolled*: tracing records every step, so the program, and
the compiler's work, grow with T. ``lax.scan`` and ``lax.fori_loop`` trace the body once and
keep a loop in the program, so their size does not depend on T.

Dimension glossary: T sequence length (steps), H hidden units.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core.perf import timing


def example_inputs(key: jax.Array, length: int, hidden: int):
    """W (H, H) with spectral scale ~0.9, h0 (H,) and xs (T, H), all float32."""
    if length < 1 or hidden < 1:
        raise ValueError(f"length and hidden must be >= 1, got length={length}, hidden={hidden}")
    return _example_inputs(key, int(length), int(hidden))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _example_inputs(key, length, hidden):
    # One normal draw cut in three: one small compiled program per (length, hidden).
    z = jax.random.normal(key, ((hidden + 1 + length) * hidden,))
    w_HH = 0.9 * z[: hidden * hidden].reshape(hidden, hidden) / math.sqrt(hidden)
    h0_H = 0.5 * z[hidden * hidden : hidden * (hidden + 1)]
    xs_TH = 0.5 * z[hidden * (hidden + 1) :].reshape(length, hidden)
    return w_HH, h0_H, xs_TH


def rnn_scan(w_HH, h0_H, xs_TH):
    """lax.scan: the body is traced once; returns (h_T (H,), hs (T, H))."""

    def step(h_H, x_H):
        h_H = jnp.tanh(w_HH @ h_H + x_H)
        return h_H, h_H

    return jax.lax.scan(step, h0_H, xs_TH)


def rnn_fori(w_HH, h0_H, xs_TH):
    """lax.fori_loop: the body is traced once; the carry holds h and the output buffer."""

    def body(t, carry):
        h_H, hs_TH = carry
        h_H = jnp.tanh(w_HH @ h_H + xs_TH[t])
        return h_H, hs_TH.at[t].set(h_H)

    return jax.lax.fori_loop(0, xs_TH.shape[0], body, (h0_H, jnp.zeros_like(xs_TH)))


def rnn_python(w_HH, h0_H, xs_TH):
    """A Python for loop: under jit, tracing unrolls it into T copies of the body."""
    h_H, hs = h0_H, []
    for t in range(xs_TH.shape[0]):
        h_H = jnp.tanh(w_HH @ h_H + xs_TH[t])
        hs.append(h_H)
    return h_H, jnp.stack(hs)


def rnn_reference(w_HH, h0_H, xs_TH):
    """The same recurrence in numpy float64, step by step: (h_T (H,), hs (T, H))."""
    w = np.asarray(w_HH, dtype=np.float64)
    h = np.asarray(h0_H, dtype=np.float64)
    hs = []
    for x in np.asarray(xs_TH, dtype=np.float64):
        h = np.tanh(w @ h + x)
        hs.append(h)
    return h, np.stack(hs)


IMPLEMENTATIONS: dict[str, Callable] = {
    "lax.scan": rnn_scan,
    "lax.fori_loop": rnn_fori,
    "Python loop (unrolled)": rnn_python,
}

# Jitted once at import: moving a seed slider reuses the executable for the same shapes.
JITTED: dict[str, Callable] = {name: jax.jit(fn) for name, fn in IMPLEMENTATIONS.items()}


def sweep_lengths(max_length: int, start: int = 4) -> list[int]:
    """Powers of two from ``start`` up to ``max_length`` (inclusive): the lengths to time."""
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    lengths, length = [], min(start, max_length)
    while length <= max_length:
        lengths.append(length)
        length *= 2
    return lengths


def jaxpr_equation_count(fn: Callable, *args) -> int:
    """Top-level equations in ``jax.make_jaxpr(fn)(*args)``: a deterministic stand-in for
    how much the compiler has to chew on (a scan is one equation, whatever its length)."""
    return len(jax.make_jaxpr(fn)(*args).jaxpr.eqns)


@dataclasses.dataclass(frozen=True)
class Timing:
    """Costs of one implementation at one length, in seconds (compile: trace + lower + compile)."""

    implementation: str
    length: int
    equations: int
    trace_lower_s: float
    compile_s: float
    run_s: float  # median steady-state call, after compiling

    @property
    def total_compile_s(self) -> float:
        return self.trace_lower_s + self.compile_s


def measure(implementation: str, w_HH, h0_H, xs_TH, repeats: int = 5) -> Timing:
    """Time tracing+lowering, compiling and running one implementation on these inputs.

    A fresh function object each call, so neither JAX's trace cache nor its compile cache
    can hand back earlier work. Timings are wall-clock on this machine: compare them with
    each other, not with another machine's.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"implementation must be one of {tuple(IMPLEMENTATIONS)}, got {implementation!r}"
        )
    body = IMPLEMENTATIONS[implementation]

    def fresh(w, h, xs):  # a new function object: no cached trace or executable
        return body(w, h, xs)

    equations = jaxpr_equation_count(fresh, w_HH, h0_H, xs_TH)
    jitted = jax.jit(fresh)
    stages = timing.time_compile(jitted, w_HH, h0_H, xs_TH)  # lower and compile, apart
    # Steady state: the first call (untimed) reuses the executable compiled above.
    run_s = timing.median_seconds(lambda: jitted(w_HH, h0_H, xs_TH), max(1, repeats), warmup=1)
    return Timing(
        implementation,
        int(xs_TH.shape[0]),
        equations,
        stages["trace + lower (s)"],
        stages["compile (s)"],
        run_s,
    )


def sweep_inputs(key: jax.Array, lengths: Sequence[int], hidden: int) -> list[tuple]:
    """Inputs for each length: one draw at the longest length, xs cut to each length on the
    host (so drawing costs one compile, not one per length)."""
    if not lengths:
        return []
    w_HH, h0_H, xs_TH = example_inputs(key, max(lengths), hidden)
    xs_host = np.asarray(xs_TH)
    return [(w_HH, h0_H, jnp.asarray(xs_host[: int(n)])) for n in lengths]


def scan_vs_unrolled_compile(lengths: Sequence[int], hidden: int = 8, seed: int = 0) -> list[dict]:
    """Measured compile seconds (trace + lower + compile) per length, lax.scan vs the
    unrolled Python loop: [{"length", "scan_compile_s", "unrolled_compile_s",
    "scan_equations", "unrolled_equations"}, ...].

    The unrolled compile grows faster than linearly with length on XLA:CPU (this sweep
    measures by how much on the machine it runs on); keep lengths modest.
    """
    rows = []
    for length, (w_HH, h0_H, xs_TH) in zip(
        lengths, sweep_inputs(jax.random.key(seed), lengths, hidden), strict=True
    ):
        scan = measure("lax.scan", w_HH, h0_H, xs_TH, repeats=1)
        unrolled = measure("Python loop (unrolled)", w_HH, h0_H, xs_TH, repeats=1)
        rows.append(
            {
                "length": int(length),
                "scan_compile_s": scan.total_compile_s,
                "unrolled_compile_s": unrolled.total_compile_s,
                "scan_equations": scan.equations,
                "unrolled_equations": unrolled.equations,
            }
        )
    return rows
