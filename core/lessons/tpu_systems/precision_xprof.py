"""bfloat16 and int8 matmuls, and how far they land from float32 and float64.

bfloat16 keeps float32's 8-bit exponent but only 8 significant bits (unit roundoff 2^-8,
spacing 2^-7 just above 1): rounding the inputs costs a few 1e-3 of relative error whatever the
contraction size K, while a running sum kept in bf16 loses more with every addition, so its
error grows with K. TPU MXUs multiply bf16 inputs and accumulate in float32
(``preferred_element_type=jnp.float32`` says so explicitly).

int8 quantization maps a float tensor to integers in [-127, 127] with a scale:
``q = round(x / s)``, ``x ~ q * s``, symmetric (zero maps to zero). One scale for the whole
tensor (per-tensor) is hurt by the largest value anywhere; one scale per output channel
(per-channel: a column of a weight matrix) adapts to each column's range. The int8 matmul
multiplies the integers exactly, accumulates in int32, and rescales once at the end.

Dimension glossary: M rows of x, K contraction, N output channels.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics
from core.perf import precision

# The matmuls, quantizers and rounding bounds were promoted to core.perf.precision (the
# decision dossier uses them too); the app and the tests read them here by their old names.
BF16_UNIT_ROUNDOFF = precision.BF16_UNIT_ROUNDOFF
BOUND_RATIO_LIMIT = precision.BOUND_RATIO_LIMIT
F32_UNIT_ROUNDOFF = precision.F32_UNIT_ROUNDOFF
FP8 = precision.FP8
FP8_MAX = precision.FP8_MAX
FP8_SUBNORMAL_HALF_STEP = precision.FP8_SUBNORMAL_HALF_STEP
FP8_UNIT_ROUNDOFF = precision.FP8_UNIT_ROUNDOFF
INT8_MAX = precision.INT8_MAX
INT8_PRODUCT_TOLERANCE = precision.INT8_PRODUCT_TOLERANCE
MATMUL_KINDS = precision.MATMUL_KINDS
SCHEMES = precision.SCHEMES
accumulation_gamma = precision.accumulation_gamma
MXU_PASSES = precision.MXU_PASSES
MXU_UNIT_ROUNDOFF = precision.MXU_UNIT_ROUNDOFF
mxu_matmul = precision.mxu_matmul
bound_ratio = precision.bound_ratio
dequantize = precision.dequantize
example_operands = precision.example_operands
fp8_bound_ratio = precision.fp8_bound_ratio
fp8_matmul = precision.fp8_matmul
fp8_quantize = precision.fp8_quantize
fp8_rounding_bound_MN = precision.fp8_rounding_bound_MN
int8_matmul = precision.int8_matmul
matmul = precision.matmul
quantize = precision.quantize
rounding_bound_MN = precision.rounding_bound_MN
worst_column_error = precision.worst_column_error
worst_ratio = precision.worst_ratio


# Columns of w whose scales spread at least this much: per-channel's median column error is
# at least PER_CHANNEL_MIN_GAIN times smaller than per-tensor's (measured over seeds and sizes
# in precision_xprof_test). With columns nearly alike the two schemes nearly coincide, and with a
# single column they are the same scheme.
PER_CHANNEL_CLEAR_SPREAD = 5.0
PER_CHANNEL_MIN_GAIN = 1.5


def column_round_trip_errors(w_KN) -> dict[str, np.ndarray]:
    """{scheme: relative int8 round-trip error of every column j of w (float64)}:
    ||dequantize(quantize(w))[:, j] - w[:, j]|| / ||w[:, j]|| (per-channel: a scale per column)."""
    w = np.asarray(w_KN, np.float64)
    norms = np.linalg.norm(w, axis=0)
    errors = {}
    for scheme in SCHEMES:
        codes, scale = quantize(jnp.asarray(w_KN), scheme, axis=0)
        restored = np.asarray(dequantize(codes, scale), np.float64)
        errors[scheme] = np.linalg.norm(restored - w, axis=0) / np.where(norms > 0, norms, 1.0)
    return errors


def per_channel_gain(errors: dict[str, np.ndarray]) -> float:
    """Median per-tensor column error / median per-channel column error (1: no gain)."""
    per_channel = float(np.median(errors["per-channel"]))
    return float(np.median(errors["per-tensor"])) / per_channel if per_channel > 0 else 1.0


def error_sweep(
    key: jax.Array, m: int, n: int, ks, kinds=MATMUL_KINDS, channel_spread: float = 1.0
) -> list[dict]:
    """Relative error of each kind vs float32 and vs numpy float64, for each contraction size K.

    The operands are drawn once at the largest K; size K uses their first K columns of x and
    rows of w, the rest set to zero. Adding exact zeros changes no sum (in any precision),
    so every K runs through one compiled program per kind instead of one per (kind, K).
    """
    ks = sorted(int(k) for k in ks)
    x_max, w_max = (np.asarray(a) for a in example_operands(key, m, ks[-1], n, channel_spread))
    rows = []
    for k in ks:
        x, w = x_max.copy(), w_max.copy()
        x[:, k:], w[k:] = 0.0, 0.0  # numpy: no new JAX program per K
        exact = x_max[:, :k].astype(np.float64) @ w_max[:k].astype(np.float64)
        f32 = matmul("float32", x, w)
        for kind in kinds:
            result = matmul(kind, x, w)
            rows.append(
                {
                    "K": k,
                    "kind": kind,
                    "error vs float64": numerics.norm_relative_error(result, exact),
                    "error vs float32": numerics.norm_relative_error(result, f32),
                    "worst column vs float64": worst_column_error(result, exact),
                }
            )
    return rows


def fp8_support_rows() -> list[dict]:
    """Which generations multiply fp8 natively: the published fp8 rate against the bf16 one."""
    from core.tpu import specs

    rows = []
    for generation in specs.GENERATIONS:
        spec = specs.chip(generation)
        bf16, fp8 = spec.bf16_flops.value, spec.fp8_flops
        if fp8 is None:
            verdict = "no fp8 figure published"
        elif fp8.value >= 1.5 * bf16:  # sources round differently: 918 vs 920 is one rate
            verdict = f"native fp8: {fp8.value / bf16:.0f}x the bf16 rate"
        else:
            verdict = "fp8 runs at the bf16 rate (no fp8 speed-up)"
        rows.append(
            {
                "generation": generation,
                "bf16 TFLOP/s": f"{bf16 / 1e12:.0f}",
                "fp8 TFLOP/s": specs.NOT_PUBLISHED if fp8 is None else f"{fp8.value / 1e12:.0f}",
                "fp8": verdict,
                "source": specs.NOT_PUBLISHED if fp8 is None else fp8.source,
            }
        )
    return rows


def tpu_float32_record() -> dict:
    """The newest float32-precision record measured on a TPU (benchmarks/float32_precision.py):
    {"figures", "device", "cite"}; without one, empty figures and a line saying how to make it."""
    from core.perf import records

    try:
        record = records.latest("float32_precision")
    except FileNotFoundError:
        return {
            "figures": {},
            "device": "no TPU yet",
            "cite": "run benchmarks/float32_precision.py on a TPU",
        }
    return {
        "figures": record.figures,
        "device": record.figures.get("device_kind", record.machine.label),
        "cite": records.cite("float32_precision"),
    }
