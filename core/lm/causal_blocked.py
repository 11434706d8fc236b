"""Causal attention in query blocks, with a hand-written backward pass (the training path).

The byte Transformer's training mask is causal (plus document separation), so for a query
block i (rows i*tb .. (i+1)*tb - 1, tb = T / num_blocks) every key after (i+1)*tb is masked:
those key blocks are skipped instead of scored, masked and multiplied by zero weights. Within
the kept keys the mask the caller gives is applied as in core.lm.attention, so the function
is the same as ``attention.dot_product_attention(q, k, v, mask)`` for every mask that is
causal (key s <= query t) and leaves every row at least one key (tokenizer.segment_mask_BTS
always keeps the diagonal).

    forward, per query block i, keys 0 .. (i+1)*tb - 1:
        s = q_i . k^T / sqrt(K) (masked), m = max_s s, p = exp(s - m), l = sum_s p
        o_i = (p . v) / l,    lse_i = m + log(l)                 (saved for the backward)
    backward (the flash-attention identity; P is recomputed from lse, never stored):
        p = exp(s - lse_i), delta_i = rowsum(do_i * o_i)
        dv += p^T do_i,   dp = do_i . v^T,   ds = p * (dp - delta_i)
        dq_i = ds . k / sqrt(K),   dk += ds^T q_i / sqrt(K)

Skipped work: of the T x T scores, (num_blocks - 1) / (2 * num_blocks) are never computed
(3/8 with 4 blocks). MFU elsewhere counts the formula's full T x T FLOPs, so a figure built
on it names the skipped part (``skipped_fraction``).

Layout: the model passes (B, T, H, K); the blocks work in (B, H, T, K) so each block's
matmuls are batched over (B, H) with contiguous (T, K) rows. Scores, softmax and every
accumulation are float32; outputs come back in q's dtype.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from core.lm import attention

# the fastest of dense, 2, 4 and 8 blocks for the capstone's train step at T=256 on XLA:CPU
# in the bench's interleaved sweep (block_sweep=dense,2,4,8). The one sweep kept so far ran on
# a busy machine and is marked under load, so nothing cites it yet: the next citable record in
# benchmarks/records/byte_transformer_block_sweep/ decides (core.perf.records.cite; the test
# checks that the newest citable record agrees)
DEFAULT_BLOCKS = 4
SCOPE = "causal_blocked_attention"  # in every op's name: what a profile groups as attention
MIN_BLOCK = 32  # shorter blocks cost more in per-block overhead than the skipped work saves


def check_blocks(seq_len: int, num_blocks: int) -> None:
    """ValueError unless T splits into ``num_blocks`` equal query blocks."""
    if num_blocks < 1 or seq_len % num_blocks:
        raise ValueError(
            f"causal blocked attention needs T={seq_len} to split into {num_blocks} equal "
            f"blocks (num_blocks >= 1 dividing T)"
        )


def check_causal(mask_BHTS) -> None:
    """ValueError unless a concrete (B, H, T, T) mask is causal and leaves every row a key.

    The blocked path skips the keys above each query block, so a mask that lets a query see
    a later key (a full mask, a bidirectional one) would give wrong results without a word;
    so would a row with no key (the dense core averages all keys there, this one the kept
    ones). A traced mask (built inside ``jit`` from the batch, as training does) has no values
    to inspect: it is taken to be causal, and where it is not the result is the attention
    under ``mask & block-lower-triangular``. Check such a mask outside ``jit`` when in doubt.
    """
    if isinstance(mask_BHTS, jax.core.Tracer):
        return
    mask = np.asarray(mask_BHTS, bool)
    t = mask.shape[-1]
    above = mask & ~np.tril(np.ones((t, t), bool))
    if above.any():
        batch, head, query, key = (int(i) for i in np.argwhere(above)[0])
        raise ValueError(
            f"causal blocked attention needs a causal mask, this one is not causal: query "
            f"{query} sees key {key} (batch {batch}, head {head}); use "
            "attention.dot_product_attention for non-causal masks"
        )
    empty = ~mask.any(axis=-1)
    if empty.any():
        batch, head, query = (int(i) for i in np.argwhere(empty)[0])
        raise ValueError(
            f"causal blocked attention needs every row to see a key: query {query} sees no "
            f"key (batch {batch}, head {head}); keep the diagonal (tokenizer.segment_mask_BTS)"
        )


def skipped_fraction(num_blocks: int) -> float:
    """Share of the T x T score entries never computed: (n - 1) / (2 n) for n blocks."""
    return (num_blocks - 1) / (2 * num_blocks)


def _pad_keys(x_BHSK, seq_len: int):
    """x for keys 0 .. S-1 as (B, H, T, K) with zeros after: an add XLA fuses (a static
    ``.at[:, :, :S].add`` becomes a scatter-add on CPU)."""
    return jnp.pad(x_BHSK, ((0, 0), (0, 0), (0, seq_len - x_BHSK.shape[2]), (0, 0)))


def _bounds(seq_len: int, num_blocks: int) -> list[tuple[int, int]]:
    block = seq_len // num_blocks
    return [(i * block, (i + 1) * block) for i in range(num_blocks)]


def _scores(q_i, k_keys, mask_i, scale):
    """Masked, scaled scores (B, H, tb, S_i) in float32."""
    s = jnp.einsum("bhtk,bhsk->bhts", q_i, k_keys, preferred_element_type=jnp.float32) * scale
    return jnp.where(mask_i, s, attention.MASK_VALUE)


def _forward(q, k, v, mask, num_blocks):
    """(o_BHTK in q's dtype, lse_BHT float32) of the blocked causal attention."""
    with jax.named_scope(SCOPE):
        return _forward_blocks(q, k, v, mask, num_blocks)


def _forward_blocks(q, k, v, mask, num_blocks):
    t, scale = q.shape[2], 1.0 / math.sqrt(q.shape[-1])
    outs, lses = [], []
    for start, stop in _bounds(t, num_blocks):
        s = _scores(q[:, :, start:stop], k[:, :, :stop], mask[:, :, start:stop, :stop], scale)
        m = jnp.max(s, axis=-1, keepdims=True)
        p = jnp.exp(s - m)
        l = jnp.sum(p, axis=-1, keepdims=True)  # noqa: E741 - the softmax's l, as in the papers
        o = jnp.einsum(
            "bhts,bhsk->bhtk", p.astype(v.dtype), v[:, :, :stop], preferred_element_type=jnp.float32
        )
        outs.append((o / l).astype(q.dtype))
        lses.append((m + jnp.log(l))[..., 0])
    return jnp.concatenate(outs, axis=2), jnp.concatenate(lses, axis=2)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _attention_BHTK(q, k, v, mask, num_blocks):
    return _forward(q, k, v, mask, num_blocks)[0]


def _attention_fwd(q, k, v, mask, num_blocks):
    o, lse = _forward(q, k, v, mask, num_blocks)
    return o, (q, k, v, mask, o, lse)


def _attention_bwd(num_blocks, residuals, do):
    with jax.named_scope(SCOPE):
        return _backward_blocks(num_blocks, residuals, do)


def _backward_blocks(num_blocks, residuals, do):
    q, k, v, mask, o, lse = residuals
    t, scale = q.shape[2], 1.0 / math.sqrt(q.shape[-1])
    f32 = jnp.float32
    do32 = do.astype(f32)
    delta = jnp.sum(do32 * o.astype(f32), axis=-1)  # (B, H, T)
    dq_blocks = []
    dk = jnp.zeros(k.shape, f32)
    dv = jnp.zeros(v.shape, f32)
    for start, stop in _bounds(t, num_blocks):
        q_i, do_i = q[:, :, start:stop], do32[:, :, start:stop]
        k_keys, v_keys = k[:, :, :stop], v[:, :, :stop]
        s = _scores(q_i, k_keys, mask[:, :, start:stop, :stop], scale)
        p = jnp.exp(s - lse[:, :, start:stop, None])  # masked entries: exactly 0
        dv = dv + _pad_keys(jnp.einsum("bhts,bhtk->bhsk", p, do_i, preferred_element_type=f32), t)
        dp = jnp.einsum("bhtk,bhsk->bhts", do_i, v_keys, preferred_element_type=f32)
        ds = p * (dp - delta[:, :, start:stop, None]) * scale
        dq_blocks.append(jnp.einsum("bhts,bhsk->bhtk", ds, k_keys, preferred_element_type=f32))
        dk = dk + _pad_keys(jnp.einsum("bhts,bhtk->bhsk", ds, q_i, preferred_element_type=f32), t)
    dq = jnp.concatenate(dq_blocks, axis=2)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None


_attention_BHTK.defvjp(_attention_fwd, _attention_bwd)


def causal_blocked_attention(q_BTHK, k_BSHK, v_BSHK, mask, num_blocks: int = DEFAULT_BLOCKS):
    """out_BTHK (q's dtype) = attention.dot_product_attention(q, k, v, mask) for a causal
    ``mask`` (broadcastable to (B, H, T, T), True where key s <= query t may be seen), with
    the key blocks above the diagonal skipped and the backward pass written by hand.

    Self-attention only (S == T): a KV cache (S > T, queries at the end) keeps the dense
    path. ValueError for S != T, a T that ``num_blocks`` does not divide, or a concrete mask
    that is not causal or leaves a row no key (``check_causal``; a traced mask is taken as
    causal, see there)."""
    b, t, h, _ = q_BTHK.shape
    if k_BSHK.shape[1] != t or v_BSHK.shape[1] != t:
        raise ValueError(
            f"causal blocked attention is self-attention: keys S={k_BSHK.shape[1]} must equal "
            f"queries T={t} (a KV cache uses attention.dot_product_attention)"
        )
    check_blocks(t, num_blocks)
    mask = jnp.asarray(mask, bool)
    mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    if mask.shape[0] not in (1, b) or mask.shape[1] not in (1, h) or mask.shape[2:] != (t, t):
        raise ValueError(
            f"mask {tuple(mask.shape)} must broadcast to (B={b}, H={h}, T={t}, S={t}) with "
            f"its own batch and head dims 1 or full"
        )
    check_causal(mask)
    to_bhtk = functools.partial(jnp.transpose, axes=(0, 2, 1, 3))
    out = _attention_BHTK(to_bhtk(q_BTHK), to_bhtk(k_BSHK), to_bhtk(v_BSHK), mask, num_blocks)
    return to_bhtk(out)


def training_attention_fn(seq_len: int):
    """The attention core a causal training step uses at row length T: the blocked one
    (DEFAULT_BLOCKS query blocks) when T splits into blocks of >= MIN_BLOCK positions, else
    None (the model's dense default)."""
    if seq_len % DEFAULT_BLOCKS or seq_len // DEFAULT_BLOCKS < MIN_BLOCK:
        return None
    return functools.partial(causal_blocked_attention, num_blocks=DEFAULT_BLOCKS)
