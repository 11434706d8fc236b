"""Independent NumPy float64 references of core/lm/transformer.py's block and LM, computed
from a model's own weights (the checks compare the Flax NNX code with these)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from core.lm import positions as rotary
from core.lm.precision import F32


def block_parameters(block: Any) -> dict[str, Any]:
    """A block's parameters (the nnx.Param variables), keyed by short names."""
    return {
        "ln1_scale": block.norm_attn.scale,
        "ln1_bias": block.norm_attn.bias,
        "wq": block.attn.wq,
        "wk": block.attn.wk,
        "wv": block.attn.wv,
        "wo": block.attn.wo,
        "ln2_scale": block.norm_mlp.scale,
        "ln2_bias": block.norm_mlp.bias,
        "w_in": block.w_in,
        "b_in": block.b_in,
        "w_out": block.w_out,
        "b_out": block.b_out,
    }


def block_weights(block: Any) -> dict[str, np.ndarray]:
    """A block's parameters as float64 numpy arrays, keyed by name."""
    return {
        k: np.asarray(v[...].astype(F32), np.float64) for k, v in block_parameters(block).items()
    }


def _layer_norm_np(x, scale, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def block_reference(
    weights: dict, x_BTD, mask_BTS=None, eps: float = 1e-5, rope_positions_BT=None
) -> np.ndarray:
    """The same pre-LN block written out in numpy float64 (causal when mask_BTS is None).
    K/V weights with G < H heads are repeated to H; ``rope_positions_BT`` (not None: RoPE)
    rotates q and k with the float64 reference of core/lm/positions.py."""
    x = np.asarray(jnp.asarray(x_BTD).astype(F32), np.float64)
    t = x.shape[1]
    allowed = (
        np.tril(np.ones((t, t), bool))[None] if mask_BTS is None else np.asarray(mask_BTS, bool)
    )
    a = _layer_norm_np(x, weights["ln1_scale"], weights["ln1_bias"], eps)
    q, k, v = (np.einsum("btd,dhk->bthk", a, weights[w]) for w in ("wq", "wk", "wv"))
    if rope_positions_BT is not None:
        q, k = (rotary.rope_reference(r, rope_positions_BT) for r in (q, k))
    k, v = (np.repeat(r, q.shape[2] // r.shape[2], axis=2) for r in (k, v))
    scores = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(q.shape[-1])
    scores = np.where(allowed[:, None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    h = x + np.einsum("bthk,hkd->btd", np.einsum("bhts,bshk->bthk", probs, v), weights["wo"])
    m = _layer_norm_np(h, weights["ln2_scale"], weights["ln2_bias"], eps)
    pre = m @ weights["w_in"] + weights["b_in"]
    hidden = 0.5 * pre * (1 + np.tanh(np.sqrt(2 / np.pi) * (pre + 0.044715 * pre**3)))
    return h + hidden @ weights["w_out"] + weights["b_out"]


def lm_reference(model: Any, tokens_BT, segment_ids_BT=None, positions_BT=None) -> np.ndarray:
    """logits_BTV of the whole LM in numpy float64, from the model's weights."""
    tokens = np.asarray(tokens_BT)
    b, t = tokens.shape
    segments = np.ones((b, t), int) if segment_ids_BT is None else np.asarray(segment_ids_BT)
    positions = (
        np.broadcast_to(np.arange(t), (b, t)) if positions_BT is None else np.asarray(positions_BT)
    )
    mask = (segments[:, :, None] == segments[:, None, :]) & np.tril(np.ones((t, t), bool))[None]
    as64 = lambda v: np.asarray(v[...].astype(F32), np.float64)  # noqa: E731
    rope = model.config.rope
    x = as64(model.token_embed)[tokens]
    if not rope:
        x = x + as64(model.pos_embed)[positions]
    eps = model.config.layer_norm_eps
    for block in model.blocks:
        x = block_reference(block_weights(block), x, mask, eps, positions if rope else None)
    x = _layer_norm_np(x, as64(model.final_norm.scale), as64(model.final_norm.bias), eps)
    return x @ as64(model.head)
