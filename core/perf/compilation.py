"""``jax.jit``: compile time, steady state, donation, tracing and recompilation.

For the lessons "Compile a function with jit" and "Tracing, static arguments, and
recompilation".

Timing follows the course rule: compile separately (``jit(f).lower(x).compile()``), warm up,
time steady state with ``block_until_ready``, report medians. Every measurement uses a fresh
Python function, because JAX caches compiled programs per function: timing the same
function twice would time a cache hit. Numbers are seconds on whatever backend JAX runs on;
label them with the machine.

Dimension glossary: N a sequence length, S a padded (bucket) length, R x C a matrix.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics
from core.perf import timing

# --------------------------------------------------------------------------- jit lesson


def _norm_gelu(x_RC):
    """Normalize each row (mean 0, variance 1), then GELU (tanh form): ~20 elementwise ops."""
    mean = jnp.mean(x_RC, axis=-1, keepdims=True)
    var = jnp.mean((x_RC - mean) ** 2, axis=-1, keepdims=True)
    y = (x_RC - mean) / jnp.sqrt(var + 1e-5)
    return 0.5 * y * (1 + jnp.tanh(0.7978845608 * (y + 0.044715 * y**3)))


def _norm_gelu_numpy(x_RC):
    x = np.asarray(x_RC, dtype=np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + 1e-5)
    return 0.5 * y * (1 + np.tanh(0.7978845608 * (y + 0.044715 * y**3)))


def _tanh_matmul(x_RC):
    """tanh(x @ x^T / C) @ x: two matmuls and one elementwise op; little to fuse."""
    return jnp.tanh(x_RC @ x_RC.T / x_RC.shape[1]) @ x_RC


def _tanh_matmul_numpy(x_RC):
    x = np.asarray(x_RC, dtype=np.float64)
    return np.tanh(x @ x.T / x.shape[1]) @ x


@dataclasses.dataclass(frozen=True)
class JitExample:
    name: str
    description: str
    make: Callable[[], Callable]  # a FRESH function each call (see module docstring)
    numpy_f: Callable[[np.ndarray], np.ndarray]


def _fresh(f):
    """A new function object with f's body: JAX's compile caches are keyed on the function."""

    def fresh(x):
        return f(x)

    fresh.__name__ = f.__name__.lstrip("_")
    return fresh


JIT_EXAMPLES: dict[str, JitExample] = {
    e.name: e
    for e in (
        JitExample(
            "norm_gelu",
            "gelu(normalize(x)): a chain of ~20 small elementwise ops and 2 reductions",
            lambda: _fresh(_norm_gelu),
            _norm_gelu_numpy,
        ),
        JitExample(
            "tanh_matmul",
            "tanh(x @ xᵀ / C) @ x: two matmuls; the work is in the matmuls",
            lambda: _fresh(_tanh_matmul),
            _tanh_matmul_numpy,
        ),
    )
}
JIT_NAMES = tuple(JIT_EXAMPLES)


def get_example(name: str) -> JitExample:
    if name not in JIT_EXAMPLES:
        raise ValueError(f"unknown function {name!r}: choose one of {', '.join(JIT_NAMES)}")
    return JIT_EXAMPLES[name]


def example_input(size: int, seed: int = 0) -> jax.Array:
    """A (size, size) float32 matrix, N(0, 1), from jax.random.key(seed)."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    return _normal(jax.random.key(seed), (size, size))


@functools.partial(jax.jit, static_argnums=1)
def _normal(key, shape):
    return jax.random.normal(key, shape)


def tolerance(size: int, *, backend: str | None = None) -> float:
    """float32 jit/eager vs NumPy float64 on a (size, size) input: float32 accumulation (the
    table's float32 tolerance grown with sqrt(reduction size): rounding errors of a sum of
    ``size`` terms add like a random walk) plus 1e-6 for the elementwise ops around the
    reductions. On a TPU at DEFAULT precision the matmuls' bfloat16 operands add their own
    relative error, which does not grow with the size: tolerance("float32") there, with its
    reason (not the table's value times sqrt(size), which would pass anything)."""
    accumulation = numerics.tolerance("float32", backend="cpu") * max(1, size) ** 0.5 + 1e-6
    operands = numerics.tolerance("float32", backend=backend)
    if not operands.reason:
        return numerics.Tolerance(accumulation)
    return numerics.Tolerance(
        accumulation + operands, f"{operands.reason}, plus float32 accumulation over {size} terms"
    )


def jit_eager_reference(name: str, x) -> dict[str, np.ndarray]:
    """The same function three ways: {"jit", "eager" (jax.disable_jit), "numpy float64"}."""
    example = get_example(name)
    f = example.make()
    jitted = np.asarray(jax.jit(f)(x))
    with jax.disable_jit():
        eager = np.asarray(f(x))
    return {"jit": jitted, "eager": eager, "numpy float64": example.numpy_f(np.asarray(x))}


def count_fusions(compiled_text: str) -> int:
    """Fused kernels XLA launches: ``fusion(`` calls in the ENTRY computation of compiled HLO."""
    entry = compiled_text[compiled_text.find("\nENTRY") :]
    return len(re.findall(r"\bfusion\(", entry))


def compile_and_steady(name: str, size: int, repeats: int = 5, seed: int = 0) -> dict:
    """Compile time, steady-state jit time and eager time for one input size.

    Returns {"function", "size", "repeats", "backend",
             "trace_lower_s": jit(f).lower(x) (trace to a jaxpr, lower to StableHLO),
             "compile_s":     .compile() (XLA optimizes and generates code),
             "first_call_s":  the first call of the compiled program,
             "jit_s":         median steady-state call of the compiled program,
             "eager_s":       median call without jit (one dispatch per op; warmed up),
             "speedup":       eager_s / jit_s,
             "break_even_calls": calls after which compiling has paid for itself
                                 ((trace_lower_s + compile_s) / (eager_s - jit_s)), or None,
             "jaxpr_ops":     equations in the jaxpr (what eager mode dispatches one by one),
             "fusions":       fused kernels in the compiled program}.
    """
    return timed_outputs(name, size, repeats, seed)[0]


def timed_outputs(name: str, size: int, repeats: int = 5, seed: int = 0) -> tuple[dict, dict]:
    """``compile_and_steady``'s dict, and the outputs it timed, for checking them:
    {"jit": compiled(x), "eager": f(x), "numpy float64": the NumPy formula on x}."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    example = get_example(name)
    x = example_input(size, seed)
    f = example.make()  # fresh: a cold compile cache
    ahead = timing.lower_and_compile(jax.jit(f), x)
    compiled, trace_lower_s, compile_s = ahead.executable, ahead.lower_s, ahead.compile_s
    jit_out, first_call_s = timing.timed_call(compiled, x)
    jit_s = timing.median_seconds(lambda: compiled(x), repeats)
    eager_out = jax.block_until_ready(f(x))  # eager warm-up: each op compiles once per signature
    eager_s = timing.median_seconds(lambda: f(x), repeats)
    saved_per_call = eager_s - jit_s
    figures = {
        "function": name,
        "size": size,
        "repeats": repeats,
        "backend": jax.default_backend(),
        "trace_lower_s": trace_lower_s,
        "compile_s": compile_s,
        "first_call_s": first_call_s,
        "jit_s": jit_s,
        "eager_s": eager_s,
        "speedup": eager_s / jit_s,
        "break_even_calls": (trace_lower_s + compile_s) / saved_per_call
        if saved_per_call > 0
        else None,
        "jaxpr_ops": len(jax.make_jaxpr(f)(x).jaxpr.eqns),
        "fusions": count_fusions(compiled.as_text()),
    }
    outputs = {
        "jit": np.asarray(jit_out),
        "eager": np.asarray(eager_out),
        "numpy float64": example.numpy_f(np.asarray(x)),
    }
    return figures, outputs


def jit_vs_eager(
    sizes: Sequence[int], name: str = "norm_gelu", repeats: int = 5, seed: int = 0
) -> list[dict]:
    """``compile_and_steady`` for each size (one dict per size, keys as documented there)."""
    return [compile_and_steady(name, size, repeats, seed) for size in sizes]


def donation_demo(size: int = 8, seed: int = 0) -> dict:
    """jit with donate_argnums: the donated input's buffer is reused for the output.

    ``step(x) = 0.9 * x + 1`` (the shape of a parameter update). Returns
    {"kept_deleted":     x.is_deleted() after a call WITHOUT donation (False),
     "donated_deleted":  x.is_deleted() after a call WITH donate_argnums=0 (True when the
                         backend reuses donated buffers),
     "use_after_donation": what JAX says when the donated array is used again (or None),
     "donation_warnings": warnings JAX raised (e.g. a donation it could not use),
     "result_error":     relative error of the donated call's result vs NumPy float64}.
    """
    x_host = np.asarray(example_input(size, seed))
    reference = 0.9 * x_host.astype(np.float64) + 1

    def step(x):
        return 0.9 * x + 1

    kept = jnp.asarray(x_host)
    jax.block_until_ready(jax.jit(step)(kept))
    donated = jnp.asarray(x_host)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = jax.block_until_ready(jax.jit(step, donate_argnums=0)(donated))
    use_after = None
    try:
        np.asarray(donated + 1)
    # "Array has been deleted" (RuntimeError) on the first use; once `+ 1` is compiled, the
    # cached dispatch path reports the donated buffer as INVALID_ARGUMENT (ValueError).
    except (RuntimeError, ValueError) as error:
        use_after = str(error).strip().splitlines()[0]
    return {
        "kept_deleted": kept.is_deleted(),
        "donated_deleted": donated.is_deleted(),
        "use_after_donation": use_after,
        "donation_warnings": [str(w.message).splitlines()[0] for w in caught],
        "result_error": numerics.scaled_max_error(result, reference),
    }


# ------------------------------------------------------------- tracing / recompilation

CENTER_PATTERNS = ("off", "on", "alternate")
BUCKETINGS = ("exact", "pow2")
MAX_LENGTH = 4096
MAX_CALLS = 32


def masked_moment(x_S, mask_S, center: bool):
    """Mean of x^2 (center=False) or the variance (center=True) over the entries where mask=1.

    ``center`` is a Python bool used in a Python ``if``: under jit it must be static.
    """
    count = jnp.sum(mask_S)
    mean = jnp.sum(x_S * mask_S) / count
    d_S = (x_S - mean) * mask_S if center else x_S * mask_S
    return jnp.sum(d_S * d_S) / count


def moment_reference(x_N, center: bool) -> float:
    """NumPy float64 on the unpadded data: np.var (center) or mean(x^2)."""
    x = np.asarray(x_N, dtype=np.float64)
    return float(np.var(x) if center else np.mean(x * x))


def parse_lengths(text: str) -> list[int]:
    """ "3, 5, 8" -> [3, 5, 8]; ValueError naming what is wrong."""
    parts = [p for p in re.split(r"[\s,]+", text.strip()) if p]
    if not parts:
        raise ValueError("give at least one length, e.g. 3, 5, 8")
    if len(parts) > MAX_CALLS:
        raise ValueError(f"at most {MAX_CALLS} calls, got {len(parts)}")
    lengths = []
    for part in parts:
        if not part.isdigit():
            raise ValueError(f"{part!r} is not a whole number")
        n = int(part)
        if not 1 <= n <= MAX_LENGTH:
            raise ValueError(f"lengths must be in 1..{MAX_LENGTH}, got {n}")
        lengths.append(n)
    return lengths


def centers_for(pattern: str, calls: int) -> list[bool]:
    """The static flag for each call: always off, always on, or alternating (off, on, ...)."""
    if pattern not in CENTER_PATTERNS:
        raise ValueError(f"pattern must be one of {CENTER_PATTERNS}, got {pattern!r}")
    return [pattern == "on" or (pattern == "alternate" and i % 2 == 1) for i in range(calls)]


def bucket_length(n: int, bucketing: str = "pow2", min_bucket: int = 1) -> int:
    """The padded length: n itself ("exact") or the next power of two >= max(n, min_bucket)."""
    if n < 1:
        raise ValueError(f"length must be >= 1, got {n}")
    if bucketing == "exact":
        return n
    if bucketing != "pow2":
        raise ValueError(f"bucketing must be one of {BUCKETINGS}, got {bucketing!r}")
    if min_bucket < 1 or min_bucket & (min_bucket - 1):
        raise ValueError(f"min_bucket must be a power of two, got {min_bucket}")
    return max(min_bucket, 1 << (n - 1).bit_length())


def pad_to(x_N, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(x padded with zeros to ``size``, mask with 1 on the real entries): both (size,)."""
    x = np.asarray(x_N)
    if size < x.shape[0]:
        raise ValueError(f"cannot pad length {x.shape[0]} down to {size}")
    padded = np.zeros(size, dtype=x.dtype)
    padded[: x.shape[0]] = x
    mask = np.zeros(size, dtype=x.dtype)
    mask[: x.shape[0]] = 1
    return padded, mask


def expected_compiles(
    lengths: Sequence[int], centers: Sequence[bool], bucketing: str, min_bucket: int = 1
) -> int:
    """Closed form: one compilation per distinct (padded length, static flag)."""
    return len(
        {
            (bucket_length(n, bucketing, min_bucket), c)
            for n, c in zip(lengths, centers, strict=True)
        }
    )


class CountingJit:
    """jit(masked_moment, static_argnames="center") with a trace counter.

    The Python body runs only when JAX traces, i.e. on a cache miss, so a side effect in it
    (appending to ``traces``) counts compilations. Each instance wraps a fresh function, so
    its cache starts empty.
    """

    def __init__(self):
        self.traces: list[tuple[tuple[int, ...], bool]] = []

        def counted(x_S, mask_S, center):
            self.traces.append((tuple(x_S.shape), center))  # runs at trace time only
            return masked_moment(x_S, mask_S, center)

        self.jitted = jax.jit(counted, static_argnames="center")

    def __call__(self, x_S, mask_S, center: bool):
        return self.jitted(x_S, mask_S, center=center)

    def cache_size(self) -> int | None:
        """JAX's own count of cached programs (a private API: None if it is gone)."""
        size = getattr(self.jitted, "_cache_size", None)
        return size() if callable(size) else None


@dataclasses.dataclass(frozen=True)
class CallRecord:
    call: int
    length: int
    padded: int
    center: bool
    traced: bool  # a cache miss: JAX traced and compiled
    reason: str  # why it missed, or "cache hit"
    cache_size: int | None
    result: float
    reference: float  # NumPy float64 on the unpadded data
    seconds: float  # wall time of this call, including any compile


def sequence_data(length: int, seed: int = 0) -> np.ndarray:
    """The float32 values every call reads a prefix of: N(0, 1) from jax.random.key(seed)."""
    return np.asarray(_normal(jax.random.key(seed), (length,)))


def run_calls(
    lengths: Sequence[int],
    centers: Sequence[bool],
    bucketing: str,
    min_bucket: int = 1,
    seed: int = 0,
) -> list[CallRecord]:
    """Call the counted jit once per length, padded by ``bucketing``.

    Call i reads the first lengths[i] values of ``sequence_data(max(lengths), seed)``.
    """
    if len(lengths) != len(centers):
        raise ValueError(f"one flag per call: {len(lengths)} lengths, {len(centers)} flags")
    counted = CountingJit()
    data = sequence_data(max(lengths), seed)
    records = []
    seen: set[tuple[int, bool]] = set()
    for i, (n, center) in enumerate(zip(lengths, centers, strict=True)):
        size = bucket_length(n, bucketing, min_bucket)
        x_S, mask_S = pad_to(data[:n], size)
        before = len(counted.traces)
        result, seconds = timing.timed_call(  # the host copies and the read-back included
            lambda x, mask, c: float(counted(jnp.asarray(x), jnp.asarray(mask), c)),
            x_S,
            mask_S,
            center,
        )
        traced = len(counted.traces) > before
        shapes = {s for s, _ in seen}
        flags = {c for _, c in seen}
        if not traced:
            reason = "cache hit"
        elif size not in shapes and center not in flags and seen:
            reason = f"new shape ({size},) and new center={center}"
        elif size not in shapes:
            reason = f"new shape ({size},)" if seen else f"first call: shape ({size},)"
        else:
            reason = f"new static center={center} for shape ({size},)"
        seen.add((size, center))
        records.append(
            CallRecord(
                i,
                n,
                size,
                center,
                traced,
                reason,
                counted.cache_size(),
                result,
                moment_reference(data[:n], center),
                seconds,
            )
        )
    return records


def jaxpr_text(length: int, center: bool) -> str:
    """The jaxpr JAX traces for one (padded) length and flag value: the program it compiles."""
    x = jax.ShapeDtypeStruct((length,), jnp.float32)
    return str(jax.make_jaxpr(functools.partial(masked_moment, center=center))(x, x))


def nonstatic_flag_error() -> str:
    """What JAX says when the Python ``if`` meets a traced (non-static) flag."""
    x = jnp.ones(4)
    try:
        jax.jit(masked_moment)(x, x, True)
    except jax.errors.TracerBoolConversionError as error:
        return str(error).strip().splitlines()[0]
    raise AssertionError("a traced bool was accepted")  # pragma: no cover
