"""Attention references for the flash kernels (core/kernels/flash_attention.py): in jnp,
differentiable (``mha_reference``: jax.grad of it is a reference for the gradients, jax's
pallas/ops/tpu pattern), and in NumPy float64, the closed forms (``attention_numpy``: O =
softmax(Q K^T / sqrt(D) + mask) V and L, ``attention_grad_numpy``: its gradient).

Shapes: q, k, v, do (B, H, T, D); segment ids (B, T) ints (query t sees key s only where
their ids are equal). flash_attention re-exports these names.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

# A masked score: finite (exp of it minus any row max is exactly 0) so no inf - inf is NaN.
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


def mha_reference(
    q_BHTD, k_BHTD, v_BHTD, causal: bool = False, precision="highest", segment_ids_BT=None
):
    """Attention in jnp (differentiable), the whole T x T score matrix at once, f32 math.

    ``precision``: of the two matmuls; "highest" by default since a TPU's default f32 matmul
    is one bf16 pass; None (XLA's default) for the memory comparison, where the TPU compiler
    takes several times longer on the multi-pass f32 matmuls and the bytes are the same.
    """
    d = q_BHTD.shape[-1]
    s = jnp.einsum(
        "bhqd,bhkd->bhqk", q_BHTD, k_BHTD, precision=precision, preferred_element_type=jnp.float32
    ) / math.sqrt(d)
    if causal:
        t = q_BHTD.shape[2]
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, MASK_VALUE)
    if segment_ids_BT is not None:
        ids = jnp.asarray(segment_ids_BT)
        s = jnp.where((ids[:, :, None] == ids[:, None, :])[:, None], s, MASK_VALUE)
    p = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bhqk,bhkd->bhqd", p, v_BHTD.astype(jnp.float32), precision=precision)
    return o.astype(q_BHTD.dtype)


def _scores_numpy(q, k, causal, segment_ids_BT=None):
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        t = s.shape[-1]
        s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    if segment_ids_BT is not None:
        ids = np.asarray(segment_ids_BT)
        s = np.where((ids[:, :, None] == ids[:, None, :])[:, None], s, -np.inf)
    return s


def _as64(x):
    from core import numerics

    return numerics.as_float64(x)


def attention_numpy(q_BHTD, k_BHTD, v_BHTD, causal: bool = False, segment_ids_BT=None):
    """NumPy float64: (O = softmax(Q K^T / sqrt(D) + mask) V, L = logsumexp of the scores);
    the mask: causal, and equal segment ids where given."""
    s = _scores_numpy(_as64(q_BHTD), _as64(k_BHTD), causal, segment_ids_BT)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    total = e.sum(axis=-1, keepdims=True)
    return (e / total) @ _as64(v_BHTD), (m + np.log(total))[..., 0]


def attention_grad_numpy(
    q_BHTD, k_BHTD, v_BHTD, do_BHTD, causal: bool = False, segment_ids_BT=None
):
    """NumPy float64 closed form of attention's gradient: (dQ, dK, dV) for upstream dO.

    With P = softmax(S), S = Q K^T / sqrt(D): dV = P^T dO; dP = dO V^T;
    dS = P * (dP - rowsum(dP * P)) (the softmax Jacobian); dQ = dS K / sqrt(D),
    dK = dS^T Q / sqrt(D).
    """
    q, k, v, do = (_as64(x) for x in (q_BHTD, k_BHTD, v_BHTD, do_BHTD))
    s = _scores_numpy(q, k, causal, segment_ids_BT)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    scale = 1.0 / math.sqrt(q.shape[-1])
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    return ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, dv
