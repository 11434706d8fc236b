"""Matmuls in float32, bfloat16, float8 e4m3 and int8, and their worst-case rounding bounds.

Promoted from the precision_xprof lesson (core/lessons/tpu_systems/precision_xprof.py, which
explains them) because the decision dossier (tpu_scripts/artifacts) measures the same
errors: bfloat16 keeps 8 significant bits (unit roundoff 2^-8); TPU MXUs multiply bf16
inputs and accumulate in float32. int8 maps a tensor to [-127, 127] with a scale (one per
tensor or one per output channel), multiplies exactly and accumulates in int32. float8 e4m3
keeps 4 significant bits under one per-tensor scale.

Dimension glossary: M rows of x, K contraction, N output channels.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

SCHEMES = ("per-tensor", "per-channel")
MATMUL_KINDS = (
    "float32",
    "bf16 inputs, f32 accumulate",
    "bf16 accumulate",
    "int8 per-tensor",
    "int8 per-channel",
    "fp8 e4m3 inputs, f32 accumulate",
)
INT8_MAX = 127
FP8 = jnp.float8_e4m3fn
FP8_MAX = 448.0  # float8_e4m3fn's largest finite value (jnp.finfo(FP8).max)
FP8_UNIT_ROUNDOFF = 2.0**-4  # e4m3 keeps 4 significant bits (eps 2^-3)


# bf16 keeps 8 significant bits (7 stored): round to nearest is within 2^-8 relative (1 + 2^-8
# lies halfway between 1 and 1 + 2^-7), as float32's 24 bits give 2^-24
BF16_UNIT_ROUNDOFF = 2.0**-8
F32_UNIT_ROUNDOFF = 2.0**-24

# The check's bounds, not the dtype table: the int8 matmul's integer product is exact, so
# against NumPy's int64 product of the same codes only the float32 rescale rounds (~1e-7,
# Frobenius-relative); a float product within its worst-case rounding bound has
# bound_ratio <= 1 whatever the sizes and the seed.
INT8_PRODUCT_TOLERANCE = 1e-6
BOUND_RATIO_LIMIT = 1.0


def rounding_bound_MN(x_MK, w_KN, input_unit_roundoff: float) -> np.ndarray:
    """The classical worst-case bound on |computed - exact| of each entry of x @ w when every
    input is rounded with relative error <= u (``input_unit_roundoff``; 0 for exact inputs)
    and the products are summed in float32, in any order (Higham, *Accuracy and Stability of
    Numerical Algorithms*, section 3.1): (2u + u^2 + gamma_K (1 + u)^2) * (|x| @ |w|), with
    gamma_K = K u32 / (1 - K u32). Unlike a relative error, it does not blow up when an
    entry of x @ w cancels to nearly zero."""
    x = np.abs(np.asarray(x_MK, np.float64))
    w = np.abs(np.asarray(w_KN, np.float64))
    u, gamma = float(input_unit_roundoff), accumulation_gamma(x.shape[1])
    return (2 * u + u * u + gamma * (1 + u) ** 2) * (x @ w)


def bound_ratio(result_MN, x_MK, w_KN, input_unit_roundoff: float) -> float:
    """max over entries of |result - x @ w (float64)| / rounding_bound_MN: at most 1 for
    any correctly rounded computation, whatever the sizes and the seed."""
    return worst_ratio(result_MN, x_MK, w_KN, rounding_bound_MN(x_MK, w_KN, input_unit_roundoff))


def worst_ratio(result_MN, x_MK, w_KN, bound_MN) -> float:
    """max over entries of |result - x @ w (float64)| / bound (inf where a 0 bound is missed)."""
    exact = np.asarray(x_MK, np.float64) @ np.asarray(w_KN, np.float64)
    error = np.abs(np.asarray(result_MN, np.float64) - exact)
    ratio = np.divide(error, bound_MN, out=np.where(error > 0, np.inf, 0.0), where=bound_MN > 0)
    return float(np.max(ratio))


def accumulation_gamma(k: int) -> float:
    """gamma_K = K u32 / (1 - K u32): the relative error bound of a float32 sum of K terms."""
    return k * F32_UNIT_ROUNDOFF / (1 - k * F32_UNIT_ROUNDOFF)


def worst_column_error(result_MN, reference_MN) -> float:
    """The largest per-column relative error: how badly the worst output channel fares."""
    result = np.asarray(result_MN, dtype=np.float64)
    reference = np.asarray(reference_MN, dtype=np.float64)
    norms = np.linalg.norm(reference, axis=0)
    errors = np.linalg.norm(result - reference, axis=0) / np.where(norms > 0, norms, 1.0)
    return float(errors.max())


@functools.partial(jax.jit, static_argnames=("scheme", "axis"))
def quantize(
    x: jax.Array, scheme: str = "per-tensor", axis: int = 0
) -> tuple[jax.Array, jax.Array]:
    """Symmetric int8 quantization: (q int8, scale float32) with x ~ q * scale.

    ``per-channel`` keeps one scale per slice along every axis except ``axis`` (the axis that
    is reduced over), e.g. ``axis=0`` of a (K, N) weight gives one scale per column N.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    x = x.astype(jnp.float32)
    if scheme == "per-tensor":
        amax = jnp.max(jnp.abs(x))
    else:
        amax = jnp.max(jnp.abs(x), axis=axis, keepdims=True)
    scale = jnp.where(amax > 0, amax / INT8_MAX, 1.0)
    q = jnp.clip(jnp.round(x / scale), -INT8_MAX, INT8_MAX).astype(jnp.int8)
    return q, scale.astype(jnp.float32)


def dequantize(q: jax.Array, scale: jax.Array) -> jax.Array:
    return q.astype(jnp.float32) * scale


@jax.jit
def _int8_dot(qx_MK, qw_KN):
    return jax.lax.dot(qx_MK, qw_KN, preferred_element_type=jnp.int32)


def fp8_quantize(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-tensor scaled float8 e4m3: (codes float8_e4m3fn, scale float32), x ~ codes * scale.

    The scale maps the largest |x| to FP8_MAX, so nothing overflows and the data use the
    format's whole exponent range; each value then keeps 4 significant bits (relative
    rounding <= 2^-4), where int8's error is one fixed step set by the largest value.
    """
    x = x.astype(jnp.float32)
    amax = jnp.max(jnp.abs(x))
    scale = jnp.where(amax > 0, amax / FP8_MAX, 1.0).astype(jnp.float32)
    return (x / scale).astype(FP8), scale


def fp8_matmul(x_MK: jax.Array, w_KN: jax.Array) -> jax.Array:
    """x @ w with both inputs in scaled float8 e4m3, products summed in float32.

    A product of two 4-bit significands is exact in float32, so besides the inputs' rounding
    only the float32 sum and the final rescale round (checked against NumPy float64).

    The codes are made by one compiled call and multiplied by another, so they exist as
    float8 arrays: in a single jit a TPU's fusion may drop the convert to float8 when the
    dot converts the codes on to bfloat16 (XLA's excess precision; seen on a v5e, where a
    subnormal code came back unrounded)."""
    qx, sx, qw, sw = _fp8_codes(x_MK, w_KN)
    return _fp8_dot(qx, qw, sx * sw)


@jax.jit
def _fp8_codes(x_MK, w_KN):
    return (*fp8_quantize(x_MK), *fp8_quantize(w_KN))


@jax.jit
def _fp8_dot(qx_MK, qw_KN, scale):
    return jax.lax.dot(qx_MK, qw_KN, preferred_element_type=jnp.float32) * scale


# Below e4m3's normal range (2^-6 in code units) values are subnormal: a fixed step of 2^-9,
# so rounding errs by up to half of it however small the value (a 1000x narrower column of w
# lands there under one per-tensor scale).
FP8_SUBNORMAL_HALF_STEP = 2.0**-10


def fp8_rounding_bound_MN(x_MK, w_KN) -> np.ndarray:
    """The worst-case |fp8_matmul - exact| of each entry: every input, scaled and rounded to
    e4m3, errs by at most max(u |v|, 2^-10 scale) (u = 2^-4, plus the float32 division),
    the products of codes are exact, the float32 sum adds gamma_K and the rescale 3 u32."""
    _, sx = fp8_quantize(jnp.asarray(x_MK))
    _, sw = fp8_quantize(jnp.asarray(w_KN))
    x = np.abs(np.asarray(x_MK, np.float64))
    w = np.abs(np.asarray(w_KN, np.float64))
    u = FP8_UNIT_ROUNDOFF + 2 * F32_UNIT_ROUNDOFF
    dx = np.maximum(u * x, FP8_SUBNORMAL_HALF_STEP * float(sx))
    dw = np.maximum(u * w, FP8_SUBNORMAL_HALF_STEP * float(sw))
    gamma = accumulation_gamma(x.shape[1])
    rounded = (x + dx) @ (w + dw)
    return dx @ w + x @ dw + dx @ dw + (gamma + 3 * F32_UNIT_ROUNDOFF) * rounded


def fp8_bound_ratio(result_MN, x_MK, w_KN) -> float:
    """max over entries of |result - x @ w (float64)| / fp8_rounding_bound_MN (<= 1)."""
    return worst_ratio(result_MN, x_MK, w_KN, fp8_rounding_bound_MN(x_MK, w_KN))


@functools.partial(jax.jit, static_argnames=("scheme",))
def int8_matmul(x_MK: jax.Array, w_KN: jax.Array, scheme: str = "per-channel") -> jax.Array:
    """x @ w through int8: x quantized per row (per-tensor scheme: one scale), w per scheme.

    The integer product is exact (int32 accumulation); the scales are applied afterwards,
    so the only error is the rounding of x and w to int8.
    """
    qx, sx = quantize(x_MK, scheme, axis=1)  # per-channel: one scale per row of x
    qw, sw = quantize(w_KN, scheme, axis=0)  # per-channel: one scale per column of w
    return _int8_dot(qx, qw).astype(jnp.float32) * sx * sw


@jax.jit
def _bf16_f32_accumulate(x_MK, w_KN):
    return jax.lax.dot(
        x_MK.astype(jnp.bfloat16), w_KN.astype(jnp.bfloat16), preferred_element_type=jnp.float32
    )


@jax.jit
def _bf16_accumulate(x_MK, w_KN):
    """A running sum over K kept in bf16: rounded after every one of the K additions.

    (A plain bf16 ``x @ w`` does not show this on CPU or TPU: both accumulate in f32
    internally. This is what a naive bf16 accumulator would do.)
    """

    def add_rank_one(acc_MN, x_k_w_k):
        x_M, w_N = x_k_w_k
        return (acc_MN + x_M[:, None] * w_N[None, :]).astype(jnp.bfloat16), None

    start = jnp.zeros((x_MK.shape[0], w_KN.shape[1]), jnp.bfloat16)
    pairs = (x_MK.astype(jnp.bfloat16).T, w_KN.astype(jnp.bfloat16))
    acc_MN, _ = jax.lax.scan(add_rank_one, start, pairs)
    return acc_MN.astype(jnp.float32)


# A float32 matmul as a TPU's MXU computes it at each lax.Precision (JAX's docs: DEFAULT one
# bfloat16 pass, HIGH three, "bf16_3x"; HIGHEST six, "bf16_6x"): each operand split into
# bfloat16 terms (hi, mid, lo), the products of these term pairs accumulated in float32.
MXU_PASSES: dict[str, tuple[tuple[int, int], ...]] = {
    "DEFAULT": ((0, 0),),
    "HIGH": ((0, 0), (0, 1), (1, 0)),
    "HIGHEST": ((0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (2, 0)),
}
# The input unit roundoff each split implies, for rounding_bound_MN (whose product term is
# 2u): one term keeps an operand within 2^-8; two terms leave 2^-16 of each operand and drop
# lo*lo (2^-16), 3 x 2^-16 in all, within 2u for u = 2^-15; three terms leave 2^-24 and drop
# three products of 2^-24 or less, within 2u for u = 4 x 2^-24.
MXU_UNIT_ROUNDOFF = {"DEFAULT": BF16_UNIT_ROUNDOFF, "HIGH": 2.0**-15, "HIGHEST": 4 * 2.0**-24}


def bfloat16_terms(x: jax.Array, count: int) -> list[jax.Array]:
    """``x`` (float32) as ``count`` bfloat16 terms, largest first: x ~ sum of the terms.

    Each term is rounded by ``lax.reduce_precision`` (8 exponent, 7 mantissa bits: bfloat16's
    values, kept in float32), not by a float32 -> bfloat16 -> float32 round trip: under jit a
    TPU may skip such a round trip inside a fusion (XLA's excess precision), which left the
    remainder x - hi at 0 and made the HIGH and HIGHEST emulations one pass on a v5e. XLA
    keeps a reduce_precision on every backend."""
    terms, rest = [], x.astype(jnp.float32)
    for _ in range(count):
        term = jax.lax.reduce_precision(rest, exponent_bits=8, mantissa_bits=7)
        terms.append(term.astype(jnp.bfloat16))  # exact: term holds a bfloat16 value
        rest = rest - term
    return terms


@functools.partial(jax.jit, static_argnums=2)
def mxu_matmul(x_MK: jax.Array, w_KN: jax.Array, precision: str = "DEFAULT") -> jax.Array:
    """x @ w (float32, (M, N)) as a TPU's MXU computes it at lax.Precision ``precision``
    ("DEFAULT", "HIGH", "HIGHEST"), emulated with bfloat16 products accumulated in float32,
    on any backend: what a TPU gives, shown on a CPU.

    A product of two bfloat16 terms (8 significant bits each) is exact in float32 whatever
    the backend's matmul precision, so only the float32 accumulation rounds, as on an MXU."""
    pairs = MXU_PASSES[precision]
    count = 1 + max(max(pair) for pair in pairs)
    xs, ws = bfloat16_terms(x_MK, count), bfloat16_terms(w_KN, count)
    out = jnp.zeros((x_MK.shape[0], w_KN.shape[1]), jnp.float32)
    for i, j in reversed(pairs):  # the smallest products first, as a careful sum adds them
        out = out + jax.lax.dot(xs[i], ws[j], preferred_element_type=jnp.float32)
    return out


@jax.jit
def _f32(x_MK, w_KN):
    return jax.lax.dot(x_MK, w_KN, precision=jax.lax.Precision.HIGHEST)


def matmul(kind: str, x_MK: jax.Array, w_KN: jax.Array) -> jax.Array:
    """x @ w computed one of MATMUL_KINDS ways; the result in float32."""
    if kind == "float32":
        return _f32(x_MK, w_KN)
    if kind == "bf16 inputs, f32 accumulate":
        return _bf16_f32_accumulate(x_MK, w_KN)
    if kind == "bf16 accumulate":
        return _bf16_accumulate(x_MK, w_KN)
    if kind == "int8 per-tensor":
        return int8_matmul(x_MK, w_KN, "per-tensor")
    if kind == "int8 per-channel":
        return int8_matmul(x_MK, w_KN, "per-channel")
    if kind == "fp8 e4m3 inputs, f32 accumulate":
        return fp8_matmul(x_MK, w_KN)
    raise ValueError(f"kind must be one of {MATMUL_KINDS}, got {kind!r}")


def example_operands(key: jax.Array, m: int, k: int, n: int, channel_spread: float = 1.0):
    """x (M, K) ~ N(0, 1) and w (K, N) whose column scales span ``channel_spread`` (>= 1).

    Column j of w is scaled by spread ** (j / (N - 1)): with spread 100 the largest column
    is 100x the smallest, the situation where per-channel quantization pays.
    """
    if min(m, k, n) < 1 or channel_spread < 1:
        raise ValueError(
            f"sizes must be >= 1 and channel_spread >= 1, got {(m, k, n)}, {channel_spread}"
        )
    return _example_operands(key, m, k, n, jnp.float32(channel_spread))


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _example_operands(key, m, k, n, channel_spread):
    key_x, key_w = jax.random.split(key)
    x = jax.random.normal(key_x, (m, k), jnp.float32)
    column_scale = channel_spread ** (jnp.arange(n) / max(n - 1, 1))
    w = jax.random.normal(key_w, (k, n), jnp.float32) * column_scale / np.sqrt(k)
    return x, w
