"""Precision policies for the byte Transformer: which dtype each kind of number lives in
(``Precision``: params, compute, accumulate, cache), the named policies and the tolerance a
block under each may show against float64, and where bf16 loses precision (a running sum or
a dot product accumulated in bf16 stalls once the increments fall below half its spacing).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics

DTYPES = ("float32", "bfloat16")
F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Precision:
    """Which dtype each kind of number lives in.

    params:     stored weights (what the optimizer updates);
    compute:    activations and matmul inputs (bf16 halves memory traffic; the TPU MXU
                multiplies bf16 natively);
    accumulate: matmul accumulators, softmax and LayerNorm statistics, the loss. Only float32
                is accepted: a long sum in bf16 stops growing once the increment falls
                below half a step of bf16's 8-bit mantissa (see ``running_sums``);
    cache:      storage of the KV cache (None: the compute dtype).
    """

    params: str = "float32"
    compute: str = "float32"
    accumulate: str = "float32"
    cache: str | None = None

    def __post_init__(self):
        for field in ("params", "compute"):
            if getattr(self, field) not in DTYPES:
                raise ValueError(
                    f"precision {field} must be one of {DTYPES}, got {getattr(self, field)!r}"
                )
        if self.accumulate != "float32":
            raise ValueError(
                f"accumulate must be float32, got {self.accumulate!r}: a bf16 accumulator "
                "loses every increment smaller than half its spacing"
            )
        if self.cache is not None and self.cache not in DTYPES:
            raise ValueError(f"cache dtype must be one of {DTYPES} or None, got {self.cache!r}")

    @property
    def cache_dtype(self) -> str:
        return self.cache or self.compute


POLICIES = {
    "f32": Precision(),
    "bf16 compute": Precision(compute="bfloat16"),
    "bf16 params + compute": Precision(params="bfloat16", compute="bfloat16"),
}


def policy_tolerance(precision: Precision) -> float:
    """Relative error (max |diff| / max(max |reference|, 1)) a block run under ``precision``
    may show against the same block in float64: float32's 1e-5 when weights and activations
    are float32, bf16's 2e-2 (a few roundings of unit roundoff 2^-8) when either is bf16."""
    coarsest = "bfloat16" if "bfloat16" in (precision.params, precision.compute) else "float32"
    return numerics.tolerance(coarsest)


def running_sums(values, dtype: str) -> np.ndarray:
    """Sequential running sum s_i = s_{i-1} + v_i with the accumulator in ``dtype``
    (lax.scan forces one rounding per addition, as a naive accumulator would)."""
    values = jnp.asarray(values, F32).astype(dtype)

    def add(total, value):
        total = (total + value).astype(dtype)
        return total, total

    _, sums = jax.lax.scan(add, jnp.zeros((), dtype), values)
    return np.asarray(sums.astype(F32), np.float64)


def dot_prefix_errors(key, length: int, dtype: str = "bfloat16") -> dict[str, np.ndarray]:
    """Relative error of the dot products a[:n] . b[:n] for every n <= length, of ``dtype``
    vectors with entries in [0, 1), accumulated sequentially in ``dtype`` and in float32,
    against float64 (the products of two bf16 numbers are exact in float32 and float64)."""
    a, b = jax.random.uniform(key, (2, length), F32).astype(dtype)
    products = np.asarray(a.astype(F32) * b.astype(F32), np.float64)
    exact = np.cumsum(products)
    return {
        accumulator: np.abs(running_sums(products, accumulator) - exact) / exact
        for accumulator in (dtype, "float32")
    }
