"""The course's byte Transformer (core.lm.transformer.TinyLM) as pure functions of its weights.

Post-training handles several copies of one model at once (the frozen reference, the policy
being trained, the behaviour policy that sampled a batch, LoRA adapters on a frozen base), so
a model here is a plain pytree of arrays: ``params`` is ``nnx.to_pure_dict`` of a TinyLM's
``nnx.Param`` state, and ``logits_BTV(params, tokens_BT)`` is the TinyLM's forward pass
(float32, causal, positions 0..T-1) written as one function, with an optional LoRA adapter on
every attention and MLP kernel (core.post_training.lora). ``model_test`` checks it equals
``TinyLM.__call__``.

Every identity carries a content hash (``content_hash``): sha256 over the canonical bytes of a
pytree (each leaf's path, dtype, shape and little-endian bytes, in sorted path order).

Glossary: B batch, T positions, V vocabulary (256 bytes), D width, H heads, K head dim,
F MLP width, R LoRA rank, S steps.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from core.lm import attention, transformer
from core.nn import chunked

F32 = jnp.float32
HASH_CHARS = 12  # hex characters of a sha256 shown in tables (48 bits: no accidental clash)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The tiny LM of the post-training lessons: a TinyLM of this width, depth and context."""

    width: int = 32
    num_heads: int = 2
    num_layers: int = 2
    max_len: int = 16

    def __post_init__(self):
        if self.width < 2 or self.num_layers < 1 or self.max_len < 2:
            raise ValueError(
                f"need width >= 2, num_layers >= 1, max_len >= 2; got {self.width}, "
                f"{self.num_layers}, {self.max_len}"
            )
        if self.width % self.num_heads:
            raise ValueError(f"num_heads {self.num_heads} must divide width {self.width}")

    def transformer_config(self) -> transformer.TransformerConfig:
        return transformer.TransformerConfig(
            width=self.width,
            num_heads=self.num_heads,
            num_layers=self.num_layers,
            max_len=self.max_len,
        )


def init_params(config: ModelConfig, key: jax.Array) -> dict:
    """A freshly initialised TinyLM's weights as a pure dict (TinyLM's own initialiser)."""
    return to_params(transformer.TinyLM(config.transformer_config(), key))


def to_params(model: transformer.TinyLM) -> dict:
    """The nnx.Param state of a TinyLM as a pure nested dict of arrays."""
    return nnx.to_pure_dict(nnx.state(model, nnx.Param))


def to_model(params: dict, config: ModelConfig) -> transformer.TinyLM:
    """A TinyLM holding ``params`` (for core.lm code: generation, references)."""
    model = transformer.TinyLM(config.transformer_config(), jax.random.key(0))
    state = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(state, params)
    nnx.update(model, state)
    return model


def num_layers(params: dict) -> int:
    return len(params["blocks"])


# --- the forward pass ------------------------------------------------------------------------


def _layer_norm(x, norm, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * norm["scale"] + norm["bias"]


def _dense(x, kernel, spec, adapter, scale):
    """x . kernel, plus the LoRA path scale * (x . A) . B when ``adapter`` is given (never
    merged: this is the 'base + adapter' forward)."""
    out = jnp.einsum(spec, x, kernel, preferred_element_type=F32)
    if adapter is None:
        return out
    low_BTR = x.reshape(*x.shape[:2], -1) @ adapter["a_IR"]
    return out + scale * (low_BTR @ adapter["b_RO"]).reshape(out.shape)


def _attention(q_BTHK, k_BSHK, v_BSHK, mask):
    """core.lm.attention.dot_product_attention for float32 inputs, written inline (one fused
    expression: a smaller program than the general, precision-aware version)."""
    scores = jnp.einsum("bthk,bshk->bhts", q_BTHK, k_BSHK) / math.sqrt(q_BTHK.shape[-1])
    probs = jax.nn.softmax(jnp.where(mask, scores, attention.MASK_VALUE), axis=-1)
    return jnp.einsum("bhts,bshk->bthk", probs, v_BSHK)


@jax.jit
def logits_BTV(params: dict, tokens_BT, lora: dict | None = None, lora_scale: float = 0.0):
    """TinyLM logits (float32) for every position of tokens_BT (causal, positions 0..T-1).

    ``lora``: {layer: {kernel name: {"a_IR", "b_RO"}}} adapters added as
    ``lora_scale * (x A) B`` beside their frozen kernels (core.post_training.lora).
    """
    tokens_BT = jnp.asarray(tokens_BT)
    t = tokens_BT.shape[1]
    x = params["token_embed"][tokens_BT] + params["pos_embed"][:t][None]
    mask = jnp.tril(jnp.ones((t, t), bool))[None, None]
    for layer in range(num_layers(params)):
        block = params["blocks"][layer]
        adapters = (lora or {}).get(layer, {})

        def dense(x, name, kernel, spec, adapters=adapters):
            return _dense(x, kernel, spec, adapters.get(name), lora_scale)

        a = _layer_norm(x, block["norm_attn"])
        attn = block["attn"]
        q, k, v = (dense(a, n, attn[n], "btd,dhk->bthk") for n in ("wq", "wk", "wv"))
        out = _attention(q, k, v, mask)
        h = x + dense(out, "wo", attn["wo"], "bthk,hkd->btd")
        m = _layer_norm(h, block["norm_mlp"])
        hidden = transformer.gelu(dense(m, "w_in", block["w_in"], "btd,df->btf") + block["b_in"])
        x = h + dense(hidden, "w_out", block["w_out"], "btf,fd->btd") + block["b_out"]
    return jnp.einsum("btd,dv->btv", _layer_norm(x, params["final_norm"]), params["head"])


@jax.jit
def hidden_BTD(params: dict, tokens_BT):
    """The final-LayerNorm features logits_BTV projects (for scalar heads: reward, value)."""
    head = jnp.eye(params["head"].shape[0], dtype=F32)
    return logits_BTV({**params, "head": head}, tokens_BT)


def gather_logprobs(logits_XV, ids_X):
    """log softmax(logits_XV)[..., ids_X]: the log-probability of each chosen id, for any
    leading shape X (the one place post-training gathers log-probs from logits: the
    sampler, the token loss, the sequence log-probs and PPO's reference pass use it)."""
    log_probs = jax.nn.log_softmax(logits_XV, axis=-1)
    return jnp.take_along_axis(log_probs, jnp.asarray(ids_X)[..., None], axis=-1)[..., 0]


@jax.jit
def next_token_logprobs_BT(logits_BTV, tokens_BT):
    """log softmax(logits[:, t])[tokens[:, t + 1]] at every position t (the last gets 0),
    from logits already computed."""
    taken = gather_logprobs(logits_BTV[:, :-1], jnp.asarray(tokens_BT)[:, 1:])
    return jnp.pad(taken, ((0, 0), (0, 1)))


@jax.jit
def token_logprobs_BT(params: dict, tokens_BT, lora=None, lora_scale=0.0):
    """log p(tokens[t+1] | tokens[:t+1]) at every position t (the last position gets 0)."""
    return next_token_logprobs_BT(logits_BTV(params, tokens_BT, lora, lora_scale), tokens_BT)


@jax.jit
def sequence_logprob_B(params: dict, tokens_BT, weights_BT, lora=None, lora_scale=0.0):
    """log pi(response | prompt) per row: token log-probs summed where weights_BT is 1
    (weights mark the positions whose NEXT token is a response token)."""
    return jnp.sum(token_logprobs_BT(params, tokens_BT, lora, lora_scale) * weights_BT, axis=1)


# --- identities ------------------------------------------------------------------------------


def content_hash(tree) -> str:
    """sha256 (hex) of a pytree's canonical bytes: every leaf's path, dtype, shape and
    little-endian bytes, in sorted path order. Equal weights give equal hashes on any
    machine; one changed bit changes the hash."""
    digest = hashlib.sha256()
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    for path, leaf in sorted(leaves, key=lambda item: jax.tree_util.keystr(item[0])):
        array = np.asarray(leaf)
        array = array.astype(array.dtype.newbyteorder("<"))
        digest.update(jax.tree_util.keystr(path).encode())
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def short_hash(tree) -> str:
    """The first HASH_CHARS hex characters of content_hash."""
    return content_hash(tree)[:HASH_CHARS]


# --- training --------------------------------------------------------------------------------


# Steps per call of the compiled training loop (core.nn.chunked: one program per (loss, shapes)
# for every step count the lessons' steps controls offer, as they move by 10; the same bits as one
# scan of the run, the trainable weights and Adam's state carried from chunk to chunk).
TRAIN_CHUNK = 10


def _optimizer(learning_rate) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adam(learning_rate))


@jax.jit
def _init_optimizer(learning_rate, trainable):
    return _optimizer(learning_rate).init(trainable)


def _train_step(carry, batch, learning_rate, frozen, *, loss_fn, has_aux):
    """One Adam step of ``carry`` = (trainable, opt_state) on ``batch``: (carry, loss value)."""
    trainable, opt_state = carry
    value, grads = jax.value_and_grad(loss_fn, has_aux=has_aux)(trainable, frozen, batch)
    updates, opt_state = _optimizer(learning_rate).update(grads, opt_state, trainable)
    return (optax.apply_updates(trainable, updates), opt_state), value


_train_chunk = chunked.ChunkedScan(_train_step, chunk=TRAIN_CHUNK)


def train(loss_fn, trainable, frozen, batches_S, learning_rate: float, has_aux: bool = False):
    """Adam (global norm clipped to 1) on ``loss_fn(trainable, frozen, batch)``, one step per
    leading entry of the pytree ``batches_S``; compiled lax.scan loops of TRAIN_CHUNK steps.

    ``loss_fn`` must be a module-level function (it is a static argument: one compile per
    function). Returns (trained pytree, losses_S as numpy); with ``has_aux`` the loss function
    returns (loss, aux) and the second value is ((losses_S, aux with a leading S axis))."""
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
    lr = jnp.asarray(learning_rate, F32)  # traced: a new learning rate does not recompile
    trainable = jax.device_put(trainable)  # host arrays, then the chunks' own: one cache entry
    opt_state = _init_optimizer(lr, trainable)
    (trainable, _), values = _train_chunk(
        (trainable, opt_state), lr, frozen, xs=batches_S, loss_fn=loss_fn, has_aux=has_aux
    )
    return trainable, values


def sequence_logprob_reference(params: dict, config: ModelConfig, tokens_BT, weights_BT):
    """sequence_logprob_B in NumPy float64, from core.lm's float64 forward pass
    (transformer.lm_reference on a TinyLM holding ``params``)."""
    logits = transformer.lm_reference(to_model(params, config), np.asarray(tokens_BT))
    log_norm = logits.max(-1) + np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1))
    tokens = np.asarray(tokens_BT)
    taken = np.take_along_axis(logits[:, :-1], tokens[:, 1:, None], -1)[..., 0]
    return ((taken - log_norm[:, :-1]) * np.asarray(weights_BT, np.float64)[:, :-1]).sum(1)
