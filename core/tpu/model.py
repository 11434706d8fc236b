"""The decoder-only transformer that core.tpu.budget describes, as a JAX training step.

Parameters follow :class:`core.tpu.budget.TransformerShape` exactly (norm kind, biases, tied
embeddings, learned positions, GQA, gelu or swiglu MLP), so the analytic parameter count
can be checked against a real parameter tree, and the step can be compiled for a TPU
topology to compare the compiler's memory_analysis() with the analytic budget.

Dimension glossary: B batch, T sequence, D d_model, F d_ff, V vocab, H heads, K kv heads,
E head dim.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import optax

from core.tpu import budget


def init_params(key: jax.Array, shape: budget.TransformerShape, dtype: str = "float32") -> dict:
    """A parameter tree for ``shape``: N(0, 0.02) matrices, unit norm scales, zero biases."""
    d, f, e = shape.d_model, shape.d_ff, shape.hd
    q_width, kv_width = shape.heads * e, shape.hkv * e
    keys = iter(jax.random.split(key, 4 + 8 * shape.layers))

    def normal(*dims):
        return (0.02 * jax.random.normal(next(keys), dims, jnp.float32)).astype(dtype)

    def norm():
        scale = {"scale": jnp.ones((d,), dtype)}
        return scale | ({"bias": jnp.zeros((d,), dtype)} if shape.norm == "layer" else {})

    def bias(n):
        return {"bias": jnp.zeros((n,), dtype)} if shape.bias else {}

    params: dict = {"embed_VD": normal(shape.vocab, d)}
    if shape.learned_positions:
        params["positions_TD"] = normal(shape.learned_positions, d)
    layers = []
    for _ in range(shape.layers):
        layer = {
            "norm1": norm(),
            "qkv": {"w_DQ": normal(d, q_width + 2 * kv_width)} | bias(q_width + 2 * kv_width),
            "out": {"w_QD": normal(q_width, d)} | bias(d),
            "norm2": norm(),
            "up": {"w_DF": normal(d, f * (shape.mlp_matrices - 1))}
            | bias(f * (shape.mlp_matrices - 1)),
            "down": {"w_FD": normal(f, d)} | bias(d),
        }
        layers.append(layer)
    params["layers"] = layers
    params["final_norm"] = norm()
    if not shape.tied_embeddings:
        params["unembed_DV"] = normal(d, shape.vocab)
    return params


def count_params(params) -> int:
    """Elements in a parameter tree (arrays or jax.ShapeDtypeStruct leaves)."""
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(params))


def param_shapes(shape: budget.TransformerShape, dtype: str = "float32"):
    """The parameter tree as jax.ShapeDtypeStruct leaves: no memory, no computation."""
    return jax.eval_shape(lambda: init_params(jax.random.key(0), shape, dtype))


def _norm(p, x, kind):
    x32 = x.astype(jnp.float32)
    if kind == "layer":
        x32 = x32 - x32.mean(-1, keepdims=True)
    y = (
        x32
        * jax.lax.rsqrt((x32 * x32).mean(-1, keepdims=True) + 1e-6)
        * p["scale"].astype(jnp.float32)
    )
    if "bias" in p:
        y = y + p["bias"].astype(jnp.float32)
    return y.astype(x.dtype)


def _dense(p, x, name):
    y = x @ p[name].astype(x.dtype)
    return y + p["bias"].astype(x.dtype) if "bias" in p else y


def _block(layer, x_BTD, shape: budget.TransformerShape):
    b, t, _ = x_BTD.shape
    e, h, k = shape.hd, shape.heads, shape.hkv
    qkv = _dense(layer["qkv"], _norm(layer["norm1"], x_BTD, shape.norm), "w_DQ")
    q_BTHE = qkv[..., : h * e].reshape(b, t, h, e)
    k_BTKE = qkv[..., h * e : (h + k) * e].reshape(b, t, k, e)
    v_BTKE = qkv[..., (h + k) * e :].reshape(b, t, k, e)
    k_BTHE = jnp.repeat(k_BTKE, h // k, axis=2)
    v_BTHE = jnp.repeat(v_BTKE, h // k, axis=2)
    scores_BHTT = jnp.einsum("bqhe,bkhe->bhqk", q_BTHE, k_BTHE) / jnp.sqrt(e).astype(x_BTD.dtype)
    causal = jnp.tril(jnp.ones((t, t), bool))
    scores_BHTT = jnp.where(causal, scores_BHTT, jnp.finfo(scores_BHTT.dtype).min)
    probs_BHTT = jax.nn.softmax(scores_BHTT.astype(jnp.float32), axis=-1).astype(x_BTD.dtype)
    attn_BTHE = jnp.einsum("bhqk,bkhe->bqhe", probs_BHTT, v_BTHE)
    x_BTD = x_BTD + _dense(layer["out"], attn_BTHE.reshape(b, t, h * e), "w_QD")
    up = _dense(layer["up"], _norm(layer["norm2"], x_BTD, shape.norm), "w_DF")
    if shape.mlp == "swiglu":
        gate, up = jnp.split(up, 2, axis=-1)
        hidden = jax.nn.silu(gate) * up
    else:
        hidden = jax.nn.gelu(up)
    return x_BTD + _dense(layer["down"], hidden, "w_FD")


def forward(
    params, tokens_BT, shape: budget.TransformerShape, compute_dtype="float32", remat=False
):
    """Logits (B, T, V) in float32; activations in ``compute_dtype``."""
    x_BTD = params["embed_VD"][tokens_BT].astype(compute_dtype)
    if shape.learned_positions:
        x_BTD = x_BTD + params["positions_TD"][: tokens_BT.shape[1]].astype(compute_dtype)
    block = functools.partial(_block, shape=shape)
    if remat:
        block = jax.checkpoint(block)  # save only each layer's input; recompute the rest
    for layer in params["layers"]:
        x_BTD = block(layer, x_BTD)
    x_BTD = _norm(params["final_norm"], x_BTD, shape.norm)
    unembed_DV = params["embed_VD"].T if shape.tied_embeddings else params["unembed_DV"]
    return (x_BTD @ unembed_DV.astype(compute_dtype)).astype(jnp.float32)


def loss_fn(params, tokens_BT, targets_BT, shape, compute_dtype="float32", remat=False):
    """Mean next-token cross-entropy."""
    logits_BTV = forward(params, tokens_BT, shape, compute_dtype, remat)
    return optax.softmax_cross_entropy_with_integer_labels(logits_BTV, targets_BT).mean()


def make_train_step(
    shape: budget.TransformerShape, compute_dtype="float32", remat=False, learning_rate=1e-3
):
    """(step, optimizer): ``step(params, opt_state, tokens, targets)`` ->
    ``(params, opt_state, loss)``."""
    optimizer = optax.adam(learning_rate)

    def step(params, opt_state, tokens_BT, targets_BT):
        loss, grads = jax.value_and_grad(loss_fn)(
            params, tokens_BT, targets_BT, shape, compute_dtype, remat
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step, optimizer
