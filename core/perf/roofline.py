"""The roofline model: FLOPs and bytes from the compiler, arithmetic intensity, bounds.

A kernel doing F floating-point operations while moving B bytes to and from memory takes
at least ``max(F / peak_flops, B / bandwidth)`` seconds. Its arithmetic intensity I = F / B
(FLOP per byte) decides which term wins: below the ridge point ``peak / bandwidth`` it is
memory-bound, above it compute-bound. ``compiled.cost_analysis()`` reports the compiler's
own F ("flops") and B ("bytes accessed") for a compiled program.

Closed forms for the lesson's two kernels:
- matmul (M, K) @ (K, N): 2*M*N*K FLOPs; at least (M*K + K*N + M*N) * itemsize bytes;
- elementwise unary op on n elements: n FLOPs (or n transcendentals), 2 * n * itemsize bytes.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics, runtime
from core.tpu import topology_compile


@dataclasses.dataclass(frozen=True)
class Cost:
    """What a kernel does and moves: FLOPs, transcendentals, bytes."""

    flops: float
    bytes: float
    transcendentals: float = 0.0

    @property
    def intensity(self) -> float:
        """FLOP (plus transcendentals) per byte moved."""
        return (self.flops + self.transcendentals) / self.bytes if self.bytes else float("inf")


def cost_from_compiled(compiled) -> Cost:
    """The compiler's cost_analysis() of a compiled program as a Cost."""
    cost = topology_compile.cost_dict(compiled)
    return Cost(
        cost.get("flops", 0.0), cost.get("bytes accessed", 0.0), cost.get("transcendentals", 0.0)
    )


def matmul_cost(m: int, n: int, k: int, itemsize: int) -> Cost:
    """Closed form for (M, K) @ (K, N): 2MNK FLOPs, each operand and the result moved once."""
    if min(m, n, k, itemsize) < 1:
        raise ValueError(f"matmul sizes and itemsize must be positive, got {(m, n, k, itemsize)}")
    return Cost(2.0 * m * n * k, float((m * k + k * n + m * n) * itemsize))


ELEMENTWISE_OPS = ("add", "multiply", "tanh", "exp")


def elementwise_fn(op: str):
    """The unary function the lesson times: x + 1, x * x, tanh(x), exp(x)."""
    functions = {
        "add": lambda x: x + 1,
        "multiply": lambda x: x * x,
        "tanh": jnp.tanh,
        "exp": jnp.exp,
    }
    if op not in functions:
        raise ValueError(f"op must be one of {ELEMENTWISE_OPS}, got {op!r}")
    return functions[op]


def elementwise_cost(op: str, n: int, itemsize: int) -> Cost:
    """Closed form for a unary op on n elements: one FLOP (or transcendental) each; read + write."""
    elementwise_fn(op)
    if n < 1:
        raise ValueError(f"element count must be positive, got {n}")
    transcendental = op in ("tanh", "exp")
    return Cost(
        0.0 if transcendental else float(n), 2.0 * n * itemsize, float(n) if transcendental else 0.0
    )


def compile_matmul(m: int, n: int, k: int, dtype: str, device=None):
    """Compile ``a @ b`` for (M, K) x (K, N) inputs on ``device`` (default: the first device)."""
    shapes = (jax.ShapeDtypeStruct((m, k), dtype), jax.ShapeDtypeStruct((k, n), dtype))
    return _compile(lambda a, b: a @ b, shapes, device)


def compile_elementwise(op: str, n: int, dtype: str, device=None):
    return _compile(elementwise_fn(op), (jax.ShapeDtypeStruct((n,), dtype),), device)


def _compile(fn, shapes, device):
    if device is None:
        return jax.jit(fn).lower(*shapes).compile()
    sharding = jax.sharding.SingleDeviceSharding(device)
    jitted = jax.jit(fn, in_shardings=(sharding,) * len(shapes), out_shardings=sharding)
    return jitted.lower(*shapes).compile()


def cpu_float32_errors(
    kernel: str, m: int = 0, n: int = 0, k: int = 0, op: str = "add", elements: int = 0
) -> dict[str, float]:
    """The CPU compiler's cost_analysis() of the kernel in float32 vs its closed form: relative
    errors of the operations and of the bytes ("matmul" (M, K) @ (K, N), or "elementwise" ``op``
    on ``elements``). The closed form's bytes are what XLA:CPU moves; a TPU's compiler pads and
    tiles and counts more, so the kernel is compiled for the host's CPU whatever JAX's default
    backend is (on a TPU host too)."""
    device = runtime.cpu_device()
    if kernel == "matmul":
        compiled = compile_matmul(m, n, k, "float32", device)
        closed = matmul_cost(m, n, k, 4)
    elif kernel == "elementwise":
        compiled = compile_elementwise(op, elements, "float32", device)
        closed = elementwise_cost(op, elements, 4)
    else:
        raise ValueError(f"kernel is 'matmul' or 'elementwise', got {kernel!r}")
    cost = cost_from_compiled(compiled)
    operations = cost.flops + cost.transcendentals
    return {
        "CPU f32 FLOPs + transcendentals vs closed form": numerics.norm_relative_error(
            operations, closed.flops + closed.transcendentals
        ),
        "CPU f32 bytes vs closed form": numerics.norm_relative_error(cost.bytes, closed.bytes),
    }


def roofline_seconds(cost: Cost, peak_flops: float, bandwidth: float) -> float:
    """Lower bound on run time: the slower of computing and moving the bytes."""
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError("peak FLOP/s and bandwidth must be positive")
    return max((cost.flops + cost.transcendentals) / peak_flops, cost.bytes / bandwidth)


def attainable_flops(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """The roof: min(peak, intensity * bandwidth) FLOP/s."""
    return min(peak_flops, intensity * bandwidth)


def bound(intensity: float, peak_flops: float, bandwidth: float) -> str:
    return "compute-bound" if intensity >= peak_flops / bandwidth else "memory-bound"


def roof_rows(
    name: str,
    peak_flops: float,
    bandwidth: float,
    lo: float = 0.01,
    hi: float = 1e4,
    points: int = 60,
) -> list[dict]:
    """Points of one roofline for a log-log chart: intensity (FLOP/byte) -> attainable FLOP/s."""
    ridge = peak_flops / bandwidth
    intensities = sorted(
        {*np.geomspace(lo, hi, points).tolist(), *([ridge] if lo < ridge < hi else [])}
    )
    return [
        {"machine": name, "intensity": i, "FLOP/s": attainable_flops(i, peak_flops, bandwidth)}
        for i in intensities
    ]
