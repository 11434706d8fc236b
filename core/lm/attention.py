"""Scaled dot-product attention from small pieces, with the precision policy of the course.

Dimension glossary (shared by core/lm/tokenizer.py, core/lm/transformer.py, core/lm/generate.py):
B batch, T query positions, S key positions, H heads, K head dim, D model width (H * K),
V vocabulary, L layers.

    scores_BHTS = q_BTHK . k_BSHK / sqrt(K)          (accumulated in float32)
    probs_BHTS  = softmax over S of scores, masked    (computed in float32)
    out_BTHK    = probs_BHTS . v_BSHK                 (accumulated in float32, cast back)

A mask is boolean, True where query t may look at key s, broadcastable to (B, H, T, S).
Masked scores become MASK_VALUE, a large *finite* negative number: exp() of it is exactly 0,
so a masked key gets exactly zero weight and exactly zero gradient, and a row that is
masked everywhere gives a uniform average instead of NaN.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

DTYPES = ("float32", "bfloat16")

MASK_VALUE = -1e30  # finite: exp(MASK_VALUE - max) == 0.0 in float32, never NaN


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """Shapes of a multi-head self-attention: width D = num_heads * head_dim."""

    seq_len: int = 8
    num_heads: int = 2
    head_dim: int = 4
    dtype: str = "float32"
    causal: bool = True

    def __post_init__(self):
        if self.seq_len < 1:
            raise ValueError(f"seq_len T must be >= 1, got {self.seq_len}")
        if self.num_heads < 1 or self.head_dim < 1:
            raise ValueError(
                f"num_heads H and head_dim K must be >= 1, "
                f"got H={self.num_heads}, K={self.head_dim}"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")

    @property
    def width(self) -> int:
        return self.num_heads * self.head_dim


def causal_mask_TS(seq_len: int, key_len: int | None = None) -> jax.Array:
    """(T, S) bool, True where key s <= query t (queries are the LAST T of S positions).

    With key_len S > T the queries sit at positions S-T .. S-1, as when new tokens attend to
    a cache of earlier ones.
    """
    key_len = seq_len if key_len is None else key_len
    if key_len < seq_len:
        raise ValueError(f"key_len S={key_len} must be >= seq_len T={seq_len}")
    t = jnp.arange(seq_len)[:, None] + (key_len - seq_len)
    s = jnp.arange(key_len)[None, :]
    return s <= t


def scores_BHTS(q_BTHK: jax.Array, k_BSHK: jax.Array) -> jax.Array:
    """Scaled dot products q.k / sqrt(K), accumulated and returned in float32."""
    _check_qk(q_BTHK, k_BSHK)
    scale = 1.0 / math.sqrt(q_BTHK.shape[-1])
    logits = jnp.einsum("bthk,bshk->bhts", q_BTHK, k_BSHK, preferred_element_type=jnp.float32)
    return logits * scale


def mask_scores(scores_BHTS: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Scores where the mask allows, MASK_VALUE elsewhere (mask broadcasts to B H T S)."""
    if mask is None:
        return scores_BHTS
    return jnp.where(mask, scores_BHTS, MASK_VALUE)


def softmax_BHTS(scores_BHTS: jax.Array) -> jax.Array:
    """Row-wise softmax over keys S in float32, shifted by the row max for stability."""
    scores = scores_BHTS.astype(jnp.float32)
    shifted = scores - jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True))
    weights = jnp.exp(shifted)
    return weights / jnp.sum(weights, axis=-1, keepdims=True)


def weighted_values_BTHK(probs_BHTS: jax.Array, v_BSHK: jax.Array) -> jax.Array:
    """sum_s probs[t, s] v[s]: probabilities cast to v's dtype, accumulated in float32."""
    return jnp.einsum(
        "bhts,bshk->bthk",
        probs_BHTS.astype(v_BSHK.dtype),
        v_BSHK,
        preferred_element_type=jnp.float32,
    )


def combine_masks(mask: jax.Array | None, causal: bool, seq_len: int, key_len: int):
    """The mask to apply: ``mask`` and/or the causal mask, or None when there is neither."""
    if causal:
        causal_TS = causal_mask_TS(seq_len, key_len)
        return causal_TS if mask is None else jnp.logical_and(mask, causal_TS)
    return mask


def dot_product_attention(
    q_BTHK: jax.Array,
    k_BSHK: jax.Array,
    v_BSHK: jax.Array,
    mask: jax.Array | None = None,
    causal: bool = False,
) -> jax.Array:
    """Multi-head attention out_BTHK in q's dtype; scores, softmax and sums in float32."""
    return attention_pieces(q_BTHK, k_BSHK, v_BSHK, mask, causal).out_BTHK


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AttentionPieces:
    """Every intermediate of one attention call, for looking at."""

    scores_BHTS: jax.Array  # scaled q.k, before masking (float32)
    masked_scores_BHTS: jax.Array  # after masking (MASK_VALUE where not allowed)
    probs_BHTS: jax.Array  # softmax rows (float32), each sums to 1
    out_BTHK: jax.Array  # in q's dtype


@functools.partial(jax.jit, static_argnames="causal")
def attention_pieces(q_BTHK, k_BSHK, v_BSHK, mask=None, causal=False) -> AttentionPieces:
    """dot_product_attention, keeping the scores and probabilities it went through."""
    if v_BSHK.shape[:3] != k_BSHK.shape[:3]:
        raise ValueError(
            f"v_BSHK {tuple(v_BSHK.shape)} must match k_BSHK {tuple(k_BSHK.shape)} in B, S, H"
        )
    scores = scores_BHTS(q_BTHK, k_BSHK)
    masked = mask_scores(scores, combine_masks(mask, causal, q_BTHK.shape[1], k_BSHK.shape[1]))
    probs = softmax_BHTS(masked)
    out = weighted_values_BTHK(probs, v_BSHK).astype(q_BTHK.dtype)
    return AttentionPieces(scores, masked, probs, out)


def _check_qk(q_BTHK, k_BSHK):
    if q_BTHK.ndim != 4 or k_BSHK.ndim != 4:
        raise ValueError(
            f"q and k must be (B, T, H, K) and (B, S, H, K), got {tuple(q_BTHK.shape)} and "
            f"{tuple(k_BSHK.shape)}"
        )
    (b, _, h, k), (b2, _, h2, k2) = q_BTHK.shape, k_BSHK.shape
    if (b, h, k) != (b2, h2, k2):
        raise ValueError(
            f"q_BTHK {tuple(q_BTHK.shape)} and k_BSHK {tuple(k_BSHK.shape)} must agree in B, H, K"
        )


# --- grouped-query attention: H query heads share G key/value heads -----------------------


def _check_groups(q_BTHK, k_BSGK, v_BSGK) -> int:
    """H / G, the query heads per key/value head (ValueError when G does not divide H)."""
    h, g = q_BTHK.shape[2], k_BSGK.shape[2]
    if v_BSGK.shape != k_BSGK.shape:
        raise ValueError(f"v {tuple(v_BSGK.shape)} must have k's shape {tuple(k_BSGK.shape)}")
    if g < 1 or h % g:
        raise ValueError(
            f"grouped-query attention needs the {g} key/value heads G to divide the {h} query "
            "heads H: each K/V head serves H / G query heads"
        )
    if q_BTHK.shape[0] != k_BSGK.shape[0] or q_BTHK.shape[-1] != k_BSGK.shape[-1]:
        raise ValueError(
            f"q {tuple(q_BTHK.shape)} and k {tuple(k_BSGK.shape)} must agree in B and K"
        )
    return h // g


@functools.partial(jax.jit, static_argnames="causal")
def grouped_query_attention(q_BTHK, k_BSGK, v_BSGK, mask=None, causal=False) -> jax.Array:
    """Attention where query head h reads key/value head h // (H / G) (GQA; G = H is
    multi-head attention, G = 1 multi-query). The K/V heads are never copied: queries are
    grouped as (G, H / G) and each group meets its one K/V head. out_BTHK in q's dtype.

    A cache then holds G heads instead of H: H / G times fewer bytes per token."""
    per_group = _check_groups(q_BTHK, k_BSGK, v_BSGK)
    b, t, h, k = q_BTHK.shape
    g, s = k_BSGK.shape[2], k_BSGK.shape[1]
    q_BTGRK = q_BTHK.reshape(b, t, g, per_group, k)
    scores = jnp.einsum(
        "btgrk,bsgk->bgrts", q_BTGRK, k_BSGK, preferred_element_type=jnp.float32
    ) / math.sqrt(k)
    allowed = combine_masks(mask, causal, t, s)
    if allowed is not None:  # a mask broadcasts to (B, H, T, S): split H into (G, H / G)
        allowed = jnp.broadcast_to(allowed, (b, h, t, s)).reshape(b, g, per_group, t, s)
        scores = jnp.where(allowed, scores, MASK_VALUE)
    probs = softmax_BHTS(scores)
    out = jnp.einsum(
        "bgrts,bsgk->btgrk", probs.astype(v_BSGK.dtype), v_BSGK, preferred_element_type=jnp.float32
    )
    return out.reshape(b, t, h, k).astype(q_BTHK.dtype)


def repeat_kv_heads(kv_BSGK, num_heads: int) -> jax.Array:
    """(B, S, G, K) -> (B, S, H, K): K/V head g copied to query heads g*H/G .. (g+1)*H/G - 1."""
    g = kv_BSGK.shape[2]
    if g < 1 or num_heads % g:
        raise ValueError(f"{g} key/value heads do not divide {num_heads} query heads")
    return jnp.repeat(kv_BSGK, num_heads // g, axis=2)


def kv_cache_bytes_per_token(
    num_layers: int, num_kv_heads: int, head_dim: int, itemsize: int
) -> int:
    """The closed form: a key and a value (2) per layer, K/V head and channel."""
    return 2 * num_layers * num_kv_heads * head_dim * itemsize


# --- a self-attention layer from the pieces: x -> q, k, v -> attention -------------------

NORMAL_CHUNK = 1 << 14


def normal_draws(key: jax.Array, count: int, start: int = 0) -> np.ndarray:
    """Samples start .. start+count-1 of an endless N(0, 1) float32 stream from ``key``,
    drawn in fixed chunks of NORMAL_CHUNK (chunk i from ``fold_in(key, i)``).

    A ``jax.random.normal`` per shape would compile the random-number program for each new shape
    (a noticeable pause each on a CPU); fixed-size chunks compile it once per process, so changing a
    shape control stays instant. Same key, same numbers, on every run and device.
    """
    if count < 0 or start < 0:
        raise ValueError(f"count and start must be >= 0, got {count}, {start}")
    first, stop = start // NORMAL_CHUNK, -(-(start + count) // NORMAL_CHUNK)
    chunks = [
        np.asarray(jax.random.normal(jax.random.fold_in(key, i), (NORMAL_CHUNK,), jnp.float32))
        for i in range(first, stop)
    ]
    offset = start - first * NORMAL_CHUNK
    return np.concatenate(chunks)[offset : offset + count] if chunks else np.zeros((0,), np.float32)


def init_projections(key: jax.Array, config: AttentionConfig) -> dict[str, jax.Array]:
    """Query/key/value projections w_DHK ~ N(0, 1/D), in the config's dtype."""
    d, h, k = config.width, config.num_heads, config.head_dim
    draws = normal_draws(key, 3 * d * h * k).reshape(3, d, h, k) / np.float32(math.sqrt(d))
    return {
        name: jnp.asarray(w, config.dtype)
        for name, w in zip(("wq", "wk", "wv"), draws, strict=True)
    }


def example_inputs_BTD(key: jax.Array, config: AttentionConfig, batch: int = 1) -> jax.Array:
    """Token vectors x_BTD ~ N(0, 1) in the config's dtype."""
    if batch < 1:
        raise ValueError(f"batch B must be >= 1, got {batch}")
    shape = (batch, config.seq_len, config.width)
    return jnp.asarray(normal_draws(key, math.prod(shape)).reshape(shape), config.dtype)


def project_qkv(projections: dict[str, jax.Array], x_BTD: jax.Array):
    """q_BTHK, k_BTHK, v_BTHK = x @ w (accumulated in float32, returned in x's dtype)."""
    d = x_BTD.shape[-1]
    if projections["wq"].shape[0] != d:
        raise ValueError(f"x_BTD width {d} != projection width {projections['wq'].shape[0]}")
    return tuple(
        jnp.einsum(
            "btd,dhk->bthk", x_BTD, projections[name], preferred_element_type=jnp.float32
        ).astype(x_BTD.dtype)
        for name in ("wq", "wk", "wv")
    )


def self_attention_BTHK(projections, x_BTD, mask=None, causal=False) -> jax.Array:
    """Every position of x attends to the positions of x that the mask allows."""
    q, k, v = project_qkv(projections, x_BTD)
    return dot_product_attention(q, k, v, mask, causal)


def jacobian(fn: Callable[[jax.Array], jax.Array], x: jax.Array) -> jax.Array:
    """d fn(x) / d x, shaped fn(x).shape + x.shape, one vector-Jacobian product per output
    element (``lax.map``), each an ordinary backward pass.

    Why not ``jax.jacrev``: it pushes all cotangents through one vmapped backward pass, and
    on jaxlib 0.10.2's CPU backend XLA miscompiles such batched programs (a fused
    multiply-reduce over a broadcast operand, "__ynn_fusion", returns wrong sums once the
    batch is large enough: see attention_test.test_jacobian_of_a_row_sum_product), which would
    show dependencies that do not exist. A sequential map has no such batch. (The bug and its
    narrow guard, ``core.perf.xla_cpu.jit_without_ynn_fusion``, are pinned in
    core/perf/xla_cpu.py.)
    """
    out, pullback = jax.vjp(fn, x)

    def row(index):
        cotangent = jax.nn.one_hot(index, out.size, dtype=out.dtype).reshape(out.shape)
        return pullback(cotangent)[0]

    rows = jax.lax.map(row, jnp.arange(out.size))
    return rows.reshape(out.shape + x.shape)


def jacobian_norms_TS(fn: Callable[[jax.Array], jax.Array], x_TD: jax.Array) -> np.ndarray:
    """(T, S) Frobenius norms of d fn(x)[t] / d x[s] for fn: (S, D_in) -> (T, ...), float64.

    Entry (t, s) is exactly 0 when output position t does not depend on input position s:
    the causality (and document-separation) test by gradients. Wrap ``jacobian`` in jax.jit
    yourself to compute it faster (see core.lm.transformer.backbone_jacobian_norms_TS).
    """
    if x_TD.ndim != 2:
        raise ValueError(f"x_TD must be (T, D), got {tuple(x_TD.shape)}")
    return norms_of_jacobian_TS(jacobian(fn, x_TD))


def norms_of_jacobian_TS(jacobian) -> np.ndarray:
    """(T, S) norms of a Jacobian shaped (T, ..., S, D_in) (as ``jacobian`` returns it for a
    function of x_SD), summed over every axis but the output and input positions."""
    jacobian = np.asarray(jnp.asarray(jacobian).astype(jnp.float32), dtype=np.float64)
    if jacobian.ndim < 3:
        raise ValueError(
            f"a Jacobian (T, ..., S, D_in) needs >= 3 axes, got shape {jacobian.shape}"
        )
    t, s, d = jacobian.shape[0], jacobian.shape[-2], jacobian.shape[-1]
    jacobian = jacobian.reshape(t, -1, s, d)
    return np.sqrt(np.sum(jacobian**2, axis=(1, 3)))


# --- independent references -------------------------------------------------------------


def reference_float64(q_BTHK, k_BSHK, v_BSHK, mask=None, causal=False) -> np.ndarray:
    """The textbook formula in numpy float64 (masked entries removed with -inf)."""
    q, k, v = (
        np.asarray(jnp.asarray(a).astype(jnp.float32), np.float64) for a in (q_BTHK, k_BSHK, v_BSHK)
    )
    scores = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(q.shape[-1])
    allowed = np.ones(scores.shape, bool)
    if mask is not None:
        allowed &= np.broadcast_to(np.asarray(mask), scores.shape)
    if causal:
        t, s = scores.shape[-2:]
        allowed &= np.tril(np.ones((t, s), bool), k=s - t)
    scores = np.where(allowed, scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    probs = weights / weights.sum(axis=-1, keepdims=True)
    return np.einsum("bhts,bshk->bthk", probs, v)


def gqa_reference_float64(q_BTHK, k_BSGK, v_BSGK, mask=None, causal=False) -> np.ndarray:
    """GQA the plain way, in NumPy float64: copy every K/V head to the H / G query heads it
    serves (np.repeat), then ordinary multi-head attention (``reference_float64``)."""
    h, g = q_BTHK.shape[2], k_BSGK.shape[2]
    if g < 1 or h % g:
        raise ValueError(f"{g} key/value heads do not divide {h} query heads")
    k, v = (
        np.repeat(np.asarray(jnp.asarray(a).astype(jnp.float32), np.float64), h // g, axis=2)
        for a in (k_BSGK, v_BSGK)
    )
    return reference_float64(q_BTHK, k, v, mask, causal)


def jax_nn_reference(q_BTHK, k_BSHK, v_BSHK, causal=False) -> jax.Array:
    """jax.nn.dot_product_attention (XLA's implementation) in the inputs' own dtype."""
    try:
        return _jax_nn_jitted(q_BTHK, k_BSHK, v_BSHK, causal=causal)
    except jax.errors.JaxRuntimeError:
        # jaxlib 0.10.2's CPU compiler rejects this bf16 program when a dimension is 1
        # ("ALG_DOT_BF16_BF16_F32" unsupported by its elemental emitter); op by op it runs.
        return jax.nn.dot_product_attention(q_BTHK, k_BSHK, v_BSHK, is_causal=causal)


@functools.partial(jax.jit, static_argnames="causal")
def _jax_nn_jitted(q_BTHK, k_BSHK, v_BSHK, causal=False):
    return jax.nn.dot_product_attention(q_BTHK, k_BSHK, v_BSHK, is_causal=causal)
