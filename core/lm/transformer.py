"""A pre-LayerNorm Transformer block and a tiny byte-level causal LM in Flax NNX.

Glossary: see core/lm/attention.py (B batch, T positions, S key positions, H heads, K head
dim, D width, F MLP width, V vocabulary, L layers).

    block(x) = h + mlp(LN(h)),  h = x + attention(LN(x))          (pre-LayerNorm)
    LM(tokens) = head(LN(blocks(embed[tokens] + pos_embed[positions])))

Precision is a policy, not a global switch (``Precision``): parameters are stored in
``params``, activations and matmul inputs are cast to ``compute``, and every sum that can be
long (matmul accumulators via ``preferred_element_type``, softmax and LayerNorm statistics,
the loss) runs in float32 (precision.py holds the policies and shows where bf16 loses
precision). The KV cache is a pytree (``KVCache``) passed in and returned.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from core.lm import attention, causal_blocked, tokenizer
from core.lm import positions as rotary
from core.lm.precision import F32, Precision

# the precision policies and bf16's accumulation limits live in precision.py; the lessons
# and the capstone still reach them here
from core.lm.precision import POLICIES as POLICIES
from core.lm.precision import dot_prefix_errors as dot_prefix_errors
from core.lm.precision import policy_tolerance as policy_tolerance
from core.lm.precision import running_sums as running_sums

# the independent NumPy float64 references live in reference.py; lessons reach them here too
from core.lm.reference import block_parameters as block_parameters
from core.lm.reference import block_reference as block_reference
from core.lm.reference import block_weights as block_weights
from core.lm.reference import lm_reference as lm_reference


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Shapes of the tiny LM (and of one block: width, num_heads, mlp_width)."""

    vocab_size: int = tokenizer.VOCAB_SIZE
    width: int = 64
    num_heads: int = 4
    num_layers: int = 2
    mlp_width: int | None = None  # None: 4 * width
    max_len: int = 128
    layer_norm_eps: float = 1e-5
    precision: Precision = Precision()
    dropout_rate: float = 0.0  # on the embeddings and each residual branch, training only
    # Grouped-query attention: G key/value heads shared by the H query heads (None: G = H).
    num_kv_heads: int | None = None
    # Rotary position embeddings on q and k (core/lm/positions.py) instead of the learned
    # position table: off by default, so the byte Transformer keeps its trained design.
    rope: bool = False

    def __post_init__(self):
        if self.width < 1 or self.num_heads < 1:
            raise ValueError(
                f"width D and num_heads H must be >= 1, got D={self.width}, H={self.num_heads}"
            )
        if self.width % self.num_heads:
            divisors = [h for h in range(1, self.width + 1) if self.width % h == 0]
            raise ValueError(
                f"num_heads H={self.num_heads} must divide width D={self.width}: each head gets "
                f"K = D / H channels (try H in {divisors[:8]})"
            )
        for name in ("vocab_size", "num_layers", "max_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.mlp_width is not None and self.mlp_width < 1:
            raise ValueError(f"mlp_width F must be >= 1, got {self.mlp_width}")
        if not 0.0 <= self.dropout_rate < 1.0:
            raise ValueError(f"dropout_rate must be in [0, 1), got {self.dropout_rate}")
        if self.num_kv_heads is not None and (
            self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads
        ):
            raise ValueError(
                f"num_kv_heads G={self.num_kv_heads} must divide num_heads H={self.num_heads}: "
                "each key/value head serves H / G query heads"
            )
        if self.rope and self.head_dim % 2:
            raise ValueError(
                f"RoPE rotates pairs of channels: head dim K = D / H = {self.head_dim} must be even"
            )
        if not isinstance(self.precision, Precision):
            raise TypeError(f"precision must be a Precision, got {type(self.precision).__name__}")

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads

    @property
    def kv_heads(self) -> int:
        """G, the key/value heads (H unless num_kv_heads is set)."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def hidden(self) -> int:
        return self.mlp_width or 4 * self.width


class NormalInit:
    """Initial weights ~ N(0, std^2), all drawn from one key as one stream
    (core.lm.attention.normal_draws: the random-number program compiles once, not once per
    parameter shape)."""

    def __init__(self, key: jax.Array):
        self.key = key
        self.used = 0  # draws handed out so far
        self.pool = np.zeros((0,), np.float32)  # drawn but not yet handed out

    def take(self, shape, std: float, dtype: str) -> nnx.Param:
        size = math.prod(shape)
        if self.pool.size < size:  # draw whole chunks: at most one call per NORMAL_CHUNK
            drawn = self.used + self.pool.size
            more = -(-(size - self.pool.size) // attention.NORMAL_CHUNK) * attention.NORMAL_CHUNK
            self.pool = np.concatenate(
                [self.pool, attention.normal_draws(self.key, more, start=drawn)]
            )
        draws, self.pool = self.pool[:size], self.pool[size:]
        self.used += size
        return nnx.Param(jnp.asarray(draws.reshape(shape) * np.float32(std), dtype=dtype))


def _init(key_or_init) -> NormalInit:
    return key_or_init if isinstance(key_or_init, NormalInit) else NormalInit(key_or_init)


def _dense(x, kernel, spec: str, compute: str):
    """x . kernel with inputs in the compute dtype and a float32 accumulator."""
    return jnp.einsum(
        spec, x.astype(compute), kernel[...].astype(compute), preferred_element_type=F32
    )


DROPOUT_LEVELS = 65536  # keep decisions are 16-bit: two per 32-bit random word
DROPOUT_SCOPE = "dropout"


def dropout_keep_probability(rate: float) -> float:
    """The keep probability ``dropout`` really uses: round((1 - rate) * 2^16) / 2^16
    (0.8999939 for rate 0.1; exact for rates that are multiples of 2^-16, such as 0.25)."""
    return round((1.0 - rate) * DROPOUT_LEVELS) / DROPOUT_LEVELS


def dropout(x, rate: float, key):
    """Inverted dropout: zero each entry with probability ~``rate``, scale the rest by
    1 / keep probability (so the expected value is exactly unchanged). ``key`` None or rate
    0: identity.

    Why 16-bit decisions: the random bits are the cost (threefry makes 32 bits per word, a
    visible share of the capstone's step in a CPU profile), so each 32-bit word gives two keep
    decisions, its low and high halves compared with a 16-bit threshold. The keep
    probability is rounded to a multiple of 2^-16 (``dropout_keep_probability``) and the
    masks differ from ``jax.random.bernoulli``'s: runs stay deterministic for a key."""
    if key is None or rate == 0.0:
        return x
    with jax.named_scope(DROPOUT_SCOPE):  # a profile finds the mask's ops by this name
        return _dropout_16bit(x, rate, key)


def _dropout_16bit(x, rate: float, key):
    threshold = round((1.0 - rate) * DROPOUT_LEVELS)
    if threshold >= DROPOUT_LEVELS:  # rate < 2^-17 rounds to keeping everything
        return x
    if threshold == 0:  # rate within 2^-17 of 1 rounds to dropping everything
        return jnp.zeros_like(x)
    width = x.shape[-1]
    words = jax.random.bits(key, (*x.shape[:-1], (width + 1) // 2), jnp.uint32)
    low_keeps = (words & jnp.uint32(DROPOUT_LEVELS - 1)) < jnp.uint32(threshold)
    high_keeps = words < jnp.uint32(threshold * DROPOUT_LEVELS)  # high half < threshold
    keep = jnp.concatenate([low_keeps, high_keeps], axis=-1)[..., :width]
    return jnp.where(keep, x * (DROPOUT_LEVELS / threshold), 0).astype(x.dtype)


def gelu(x):
    """GELU, tanh approximation (the formula the numpy reference spells out)."""
    return jax.nn.gelu(x, approximate=True)


class LayerNorm(nnx.Module):
    """(x - mean) / sqrt(var + eps) * scale + bias; statistics in float32."""

    def __init__(self, width: int, config: TransformerConfig):
        self.eps = config.layer_norm_eps
        self.compute = config.precision.compute
        self.scale = nnx.Param(jnp.ones((width,), config.precision.params))
        self.bias = nnx.Param(jnp.zeros((width,), config.precision.params))

    def __call__(self, x_BTD):
        x = x_BTD.astype(F32)
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(var + self.eps)
        return (y * self.scale[...].astype(F32) + self.bias[...].astype(F32)).astype(self.compute)


# An attention core: attention_fn(q_BTHK, k_BSHK, v_BSHK, mask) -> out_BTHK in q's dtype,
# mask broadcastable to (B, H, T, S), True where query t may attend to key s. Another core
# (a Pallas kernel, a blocked causal attention) must compute the same function on the masks
# it accepts and refuse (raise) the ones it cannot honour, never ignore them.
AttentionFn = Callable[[jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]


def _default_attention(q_BTHK, k_BSHK, v_BSHK, mask):
    return attention.dot_product_attention(q_BTHK, k_BSHK, v_BSHK, mask=mask)


class Attention(nnx.Module):
    """Multi-head self-attention: projections w_DHK (w_DGK for k and v with G key/value
    heads), output w_HKD, core.lm.attention inside; RoPE on q and k when config.rope."""

    def __init__(self, config: TransformerConfig, key):
        """key: a jax.random.key (or a NormalInit shared with the enclosing model)."""
        init = _init(key)
        d, h, k, g = config.width, config.num_heads, config.head_dim, config.kv_heads
        p = config.precision
        self.precision = p
        self.num_heads = h
        self.rope = config.rope
        self.wq = init.take((d, h, k), 1 / math.sqrt(d), p.params)
        self.wk = init.take((d, g, k), 1 / math.sqrt(d), p.params)
        self.wv = init.take((d, g, k), 1 / math.sqrt(d), p.params)
        self.wo = init.take((h, k, d), 1 / math.sqrt(d * 2 * config.num_layers), p.params)

    def __call__(self, x_BTD, mask, kv=None, index=None, attention_fn=None, positions_BT=None):
        """out_BTD, kv. Without a cache kv is None; with one, (k_BSGK, v_BSGK) gets the new
        keys/values written at slot ``index`` and the queries attend to the whole cache.
        With RoPE, ``positions_BT`` (default 0..T-1, after ``index`` with a cache) rotates q
        and k; the cache holds the rotated keys.

        ``attention_fn(q_BTHK, k_BSHK, v_BSHK, mask) -> out_BTHK`` replaces the attention
        core (default ``attention.dot_product_attention``); it must honour the mask it is
        given (see ``AttentionFn``). With G < H key/value heads it gets them repeated to H."""
        c = self.precision.compute
        q, k, v = (
            _dense(x_BTD, w, "btd,dhk->bthk", c).astype(c) for w in (self.wq, self.wk, self.wv)
        )
        if self.rope:
            if positions_BT is None:
                start = 0 if index is None else index
                positions_BT = jnp.broadcast_to(start + jnp.arange(q.shape[1]), q.shape[:2])
            q, k = (rotary.apply_rope(a, positions_BT) for a in (q, k))
        if kv is not None:
            k_cache, v_cache = (write_slots(kv[0], k, index), write_slots(kv[1], v, index))
            kv, k, v = (k_cache, v_cache), k_cache.astype(c), v_cache.astype(c)
        if k.shape[2] != self.num_heads:  # GQA: each K/V head serves H / G query heads
            k, v = (attention.repeat_kv_heads(a, self.num_heads) for a in (k, v))
        attend = attention_fn or _default_attention
        out = attend(q, k, v, mask)
        return _dense(out, self.wo, "bthk,hkd->btd", c).astype(c), kv


def write_slots(cache_BSHK, new_BTHK, index):
    """cache_BSHK with new_BTHK written at slots index .. index+T-1 (in the cache's dtype);
    unchanged when those slots do not all exist (index + T > S).

    Why the second case is needed: ``dynamic_update_slice`` clamps its start into
    [0, S - T], so a write that does not fit would silently land on EARLIER slots and
    overwrite keys still in use. Here the slots the clamped write would cover are read
    back and written again unchanged instead (dynamic_slice clamps the same way)."""
    new = new_BTHK.astype(cache_BSHK.dtype)
    fits = index + new.shape[1] <= cache_BSHK.shape[1]
    at = (0, index, 0, 0)
    current = jax.lax.dynamic_slice(cache_BSHK, at, new.shape)
    return jax.lax.dynamic_update_slice(cache_BSHK, jnp.where(fits, new, current), at)


class Block(nnx.Module):
    """Pre-LayerNorm Transformer block: h = x + attn(LN(x)); y = h + mlp(LN(h))."""

    def __init__(self, config: TransformerConfig, key):
        """key: a jax.random.key (or a NormalInit shared with the enclosing model)."""
        init = _init(key)
        d, f, p = config.width, config.hidden, config.precision
        self.precision = p
        self.norm_attn = LayerNorm(d, config)
        self.attn = Attention(config, init)
        self.norm_mlp = LayerNorm(d, config)
        self.w_in = init.take((d, f), 1 / math.sqrt(d), p.params)
        self.b_in = nnx.Param(jnp.zeros((f,), p.params))
        self.w_out = init.take((f, d), 1 / math.sqrt(f * 2 * config.num_layers), p.params)
        self.b_out = nnx.Param(jnp.zeros((d,), p.params))

    def mlp(self, x_BTD):
        c = self.precision.compute
        hidden = gelu(_dense(x_BTD, self.w_in, "btd,df->btf", c) + self.b_in[...].astype(F32))
        return (_dense(hidden, self.w_out, "btf,fd->btd", c) + self.b_out[...].astype(F32)).astype(
            c
        )

    def __call__(
        self,
        x_BTD,
        mask,
        kv=None,
        index=None,
        dropout_rate=0.0,
        dropout_key=None,
        attention_fn=None,
        positions_BT=None,
    ):
        """(y_BTD, kv). With ``dropout_key`` each residual branch (attention, MLP) is
        dropped out at ``dropout_rate`` before it is added. ``attention_fn``, ``positions_BT``
        (used with RoPE only): see Attention.__call__."""
        x = x_BTD.astype(self.precision.compute)
        keys = (None, None) if dropout_key is None else jax.random.split(dropout_key)
        attended, kv = self.attn(self.norm_attn(x), mask, kv, index, attention_fn, positions_BT)
        h = x + dropout(attended, dropout_rate, keys[0])
        return h + dropout(self.mlp(self.norm_mlp(h)), dropout_rate, keys[1]), kv


@nnx.jit(static_argnames="causal")
def block_forward(block: Block, x_BTD, positions_BT=None, causal: bool = True):
    """One block on x_BTD, under jit: y_BTD in the compute dtype. Causal unless ``causal`` is
    False (every position sees every other); ``positions_BT`` matter only with RoPE."""
    t = x_BTD.shape[1]
    allowed = jnp.tril(jnp.ones((t, t), bool)) if causal else jnp.ones((t, t), bool)
    return block(x_BTD, allowed[None, None], positions_BT=positions_BT)[0]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
    """Keys and values of every layer for slots 0 .. length-1 (a pytree: pass in, get back)."""

    k_LBSHK: jax.Array
    v_LBSHK: jax.Array
    length: jax.Array  # int32 scalar: how many slots are filled

    @property
    def capacity(self) -> int:
        return self.k_LBSHK.shape[2]


def init_cache(config: TransformerConfig, batch: int, capacity: int | None = None) -> KVCache:
    """An empty cache for ``batch`` rows of up to ``capacity`` (default max_len) positions."""
    capacity = config.max_len if capacity is None else capacity
    if batch < 1 or not 1 <= capacity <= config.max_len:
        raise ValueError(
            f"need batch >= 1 and 1 <= capacity <= max_len={config.max_len}, "
            f"got {batch}, {capacity}"
        )
    shape = (config.num_layers, batch, capacity, config.kv_heads, config.head_dim)
    dtype = config.precision.cache_dtype
    return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype), jnp.zeros((), jnp.int32))


class TinyLM(nnx.Module):
    """A byte-level causal language model: logits_BTV for the next token at every position."""

    def __init__(self, config: TransformerConfig, key):
        """key: a jax.random.key; every weight is drawn from it."""
        init = _init(key)
        p = config.precision
        self.config = config
        self.token_embed = init.take((config.vocab_size, config.width), 1.0, p.params)
        if not config.rope:  # with RoPE, positions enter attention instead (no table)
            self.pos_embed = init.take((config.max_len, config.width), 0.1, p.params)
        self.blocks = nnx.List([Block(config, init) for _ in range(config.num_layers)])
        self.final_norm = LayerNorm(config.width, config)
        self.head = init.take(
            (config.width, config.vocab_size), 1 / math.sqrt(config.width), p.params
        )

    def embed(self, tokens_BT, positions_BT):
        x = self.token_embed[...][tokens_BT]
        if not self.config.rope:
            x = x + self.pos_embed[...][positions_BT]
        return x.astype(self.config.precision.compute)

    def backbone(self, x_BTD, mask, dropout_key=None, attention_fn=None, positions_BT=None):
        """The blocks on embeddings x_BTD (for gradients with respect to the input);
        ``positions_BT`` (default 0..T-1) matter only with RoPE."""
        rate = self.config.dropout_rate
        for layer, block in enumerate(self.blocks):
            key = None if dropout_key is None else jax.random.fold_in(dropout_key, layer + 1)
            x_BTD, _ = block(
                x_BTD,
                mask,
                dropout_rate=rate,
                dropout_key=key,
                attention_fn=attention_fn,
                positions_BT=positions_BT,
            )
        return x_BTD

    def unembed(self, x_BTD):
        """Final LayerNorm and the vocabulary projection; logits in float32."""
        return _dense(
            self.final_norm(x_BTD), self.head, "btd,dv->btv", self.config.precision.compute
        )

    def __call__(
        self,
        tokens_BT,
        segment_ids_BT=None,
        positions_BT=None,
        dropout_key=None,
        attention_fn=None,
    ):
        """Full forward pass: logits_BTV (float32). Without segment ids the whole row is one
        document; without positions they count 0..T-1. ``dropout_key`` (training) applies
        dropout at config.dropout_rate to the embeddings and every residual branch.
        ``attention_fn`` replaces every layer's attention core (see AttentionFn); the mask
        it gets is causal (and separates documents when segment ids are given)."""
        tokens_BT = jnp.asarray(tokens_BT)
        b, t = tokens_BT.shape
        if segment_ids_BT is None:
            segment_ids_BT = jnp.ones((b, t), jnp.int32)
        if positions_BT is None:
            positions_BT = jnp.broadcast_to(jnp.arange(t), (b, t))
        mask = tokenizer.segment_mask_BTS(segment_ids_BT, causal=True)[:, None]
        x = self.embed(tokens_BT, positions_BT)
        if dropout_key is not None:
            x = dropout(x, self.config.dropout_rate, jax.random.fold_in(dropout_key, 0))
        return self.unembed(self.backbone(x, mask, dropout_key, attention_fn, positions_BT))

    def extend(self, tokens_BT, cache: KVCache):
        """Feed T new tokens after the cache's ``length`` slots: (logits_BTV, new cache).

        Prefill is one call with the prompt; decoding is one call per token (T = 1). The
        queries at slots length .. length+T-1 see every key at a slot <= their own.

        A cache never grows: length + T must be <= its capacity. Called eagerly (the length
        is a number) a call past the capacity raises ValueError. Under jit the length is
        traced and nothing can raise, so such a call returns the cache UNCHANGED (no slot
        written, same length) and logits that are all NaN: check ``jnp.isnan`` on the host,
        or size the cache for prompt + new tokens up front (as core.lm.generate does).
        """
        tokens_BT = jnp.asarray(tokens_BT)
        t = tokens_BT.shape[1]
        start = cache.length
        if t > cache.capacity:
            raise ValueError(
                f"{t} new tokens cannot fit a cache of capacity {cache.capacity}; make a "
                f"larger cache (init_cache, capacity <= max_len={self.config.max_len})"
            )
        if not isinstance(start, jax.core.Tracer) and int(start) + t > cache.capacity:
            raise ValueError(
                f"the cache is full: length {int(start)} + {t} new tokens exceeds its capacity "
                f"{cache.capacity}; make a larger cache (init_cache, capacity <= "
                f"max_len={self.config.max_len})"
            )
        overflow = start + t > cache.capacity  # traced under jit: poison instead of raising
        positions = jnp.broadcast_to(start + jnp.arange(t), tokens_BT.shape)
        slots = jnp.arange(cache.capacity)
        mask = (slots[None, :] <= (start + jnp.arange(t))[:, None])[None, None]  # (1,1,T,S)
        x = self.embed(tokens_BT, positions)
        ks, vs = [], []
        for layer, block in enumerate(self.blocks):
            x, (k, v) = block(
                x,
                mask,
                (cache.k_LBSHK[layer], cache.v_LBSHK[layer]),
                start,
                positions_BT=positions,
            )
            ks.append(k)
            vs.append(v)
        logits = jnp.where(overflow, jnp.nan, self.unembed(x))
        length = jnp.where(overflow, start, start + t)
        return logits, KVCache(jnp.stack(ks), jnp.stack(vs), length)


@nnx.jit
def forward(model: TinyLM, tokens_BT, segment_ids_BT=None, positions_BT=None):
    """model(tokens_BT, segment_ids_BT, positions_BT) under jit: logits_BTV (float32)."""
    return model(tokens_BT, segment_ids_BT, positions_BT)


def count_params(model: nnx.Module) -> int:
    return sum(int(np.prod(v.shape)) for v in jax.tree.leaves(nnx.state(model, nnx.Param)))


# --- loss and training -------------------------------------------------------------------


@jax.jit
def token_loss(logits_BTV, targets_BT, weights_BT):
    """(mean cross-entropy over the weighted tokens, their count), both float32.

    The mean divides by the number of valid targets, never by B*T: padding and document
    boundaries (weight 0) neither add loss nor dilute it.
    """
    logits = jnp.asarray(logits_BTV).astype(F32)
    if logits.shape[:2] != jnp.shape(targets_BT) or jnp.shape(targets_BT) != jnp.shape(weights_BT):
        raise ValueError(
            f"logits_BTV {logits.shape}, targets_BT {jnp.shape(targets_BT)} and weights_BT "
            f"{jnp.shape(weights_BT)} must share (B, T)"
        )
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(log_probs, jnp.asarray(targets_BT)[..., None], axis=-1)[..., 0]
    weights = jnp.asarray(weights_BT, F32)
    count = jnp.sum(weights)
    return jnp.sum(nll * weights) / jnp.maximum(count, 1.0), count


def batch_from_packed(packed: tokenizer.Packed) -> dict[str, np.ndarray]:
    """The arrays a training step takes: tokens, segment ids, positions, targets, weights."""
    targets, weights = tokenizer.next_token_targets(packed.tokens_BT, packed.segment_ids_BT)
    return {
        "tokens_BT": packed.tokens_BT,
        "segment_ids_BT": packed.segment_ids_BT,
        "positions_BT": packed.positions_BT,
        "targets_BT": targets,
        "weights_BT": weights,
    }


def loss_on_batch(model: TinyLM, batch: dict):
    """(mean valid-token loss, valid-token count) of the model on one packed batch; the
    attention core is the causal blocked one where the row length allows
    (causal_blocked.training_attention_fn: same function, fewer FLOPs)."""
    tokens = batch["tokens_BT"]
    attention_fn = causal_blocked.training_attention_fn(tokens.shape[1])
    logits = model(
        tokens, batch["segment_ids_BT"], batch["positions_BT"], attention_fn=attention_fn
    )
    return token_loss(logits, batch["targets_BT"], batch["weights_BT"])


def make_optimizer(
    model: TinyLM, learning_rate: float = 3e-3, clip_norm: float = 1.0, flatten: bool = False
) -> nnx.Optimizer:
    """AdamW on the model's nnx.Param variables, gradients clipped to a global norm.

    ``flatten`` runs the optimizer on one concatenated vector of all parameters
    (``optax.flatten``): the same updates with a few large ops instead of a few per
    parameter, which compiles about a second faster for a tiny model on a CPU. Leave it off
    for sharded parameters (concatenation would gather them onto every device).
    """
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
    tx = optax.chain(
        optax.clip_by_global_norm(clip_norm), optax.adamw(learning_rate, weight_decay=0.01)
    )
    return nnx.Optimizer(model, optax.flatten(tx) if flatten else tx, wrt=nnx.Param)


@nnx.jit
def train_step(model: TinyLM, optimizer: nnx.Optimizer, batch: dict) -> dict:
    """One AdamW step on the valid-token loss; updates model and optimizer in place."""

    def loss_fn(m):
        return loss_on_batch(m, batch)

    (loss, count), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    optimizer.update(model, grads)
    return {"loss": loss, "tokens": count, "grad_norm": optax.tree.norm(grads)}


@nnx.jit
def eval_step(model: TinyLM, batch: dict):
    """(summed loss, valid-token count): add these up over batches, then divide."""
    loss, count = loss_on_batch(model, batch)
    return loss * count, count


def heldout_loss(model: TinyLM, batch: dict) -> tuple[float, int]:
    """(mean valid-token loss, valid-token count) on a held-out batch, under jit."""
    total, count = eval_step(model, batch)
    return float(total) / max(float(count), 1.0), int(count)


def train_state(model: TinyLM, optimizer: nnx.Optimizer) -> dict:
    """Everything training needs to continue, as a plain pytree of arrays (checkpointable):
    the parameters and the optimizer state (Adam's two moments, its count, the step)."""
    return {
        "params": nnx.to_pure_dict(nnx.state(model, nnx.Param)),
        "optimizer": nnx.to_pure_dict(nnx.state(optimizer)),
    }


def load_train_state(model: TinyLM, optimizer: nnx.Optimizer, state: dict) -> None:
    """Put a ``train_state`` (e.g. restored from a checkpoint) into model and optimizer."""
    params = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(params, state["params"])
    nnx.update(model, params)
    optimizer_state = nnx.state(optimizer)
    nnx.replace_by_pure_dict(optimizer_state, state["optimizer"])
    nnx.update(optimizer, optimizer_state)


def train_loop(
    model: TinyLM,
    optimizer: nnx.Optimizer,
    batch_at,
    steps: int,
    heldout_batch: dict | None = None,
    eval_every: int = 10,
    start_step: int = 0,
    on_step=None,
) -> list[dict]:
    """Train steps start_step+1 .. start_step+steps; returns one record per step.

    ``batch_at(step)`` gives the batch of a step (so a resumed run sees the same data).
    Every ``eval_every`` steps (and at the last one) the held-out loss is measured.
    ``on_step(step, record)`` runs after each step (progress bars, checkpoints).
    """
    if steps < 0 or eval_every < 1:
        raise ValueError(f"need steps >= 0 and eval_every >= 1, got {steps}, {eval_every}")
    history = []
    for step in range(start_step + 1, start_step + steps + 1):
        metrics = train_step(model, optimizer, batch_at(step))
        record = {
            "step": step,
            "train loss": float(metrics["loss"]),
            "tokens": int(metrics["tokens"]),
        }
        if heldout_batch is not None and (step % eval_every == 0 or step == start_step + steps):
            record["held-out loss"] = heldout_loss(model, heldout_batch)[0]
        history.append(record)
        if on_step is not None:
            on_step(step, record)
    return history


def token_loss_reference(logits_BTV, packed: tokenizer.Packed) -> tuple[float, int]:
    """(mean loss, count) in numpy float64, walking the placed documents themselves: inside
    each placed piece, position i predicts the piece's token i + 1. Padding and the step from
    one document into the next are never visited, so only real tokens are counted."""
    logits = np.asarray(jnp.asarray(logits_BTV).astype(F32), np.float64)
    total, count = 0.0, 0
    for p in packed.placements:
        for i in range(p.start, p.start + p.length - 1):
            row = logits[p.row, i]
            log_norm = row.max() + np.log(np.sum(np.exp(row - row.max())))
            total += log_norm - row[packed.tokens_BT[p.row, i + 1]]
            count += 1
    return total / max(count, 1), count


def backbone_jacobian_norms_TS(
    model: TinyLM, tokens_T, segment_ids_T=None, positions_T=None
) -> np.ndarray:
    """(T, S) norms of d hidden[t] / d embedding[s] through all blocks of one packed row.

    Zero wherever position t may not see position s: later positions (causality) and other
    documents (packing). Uses core.lm.attention.jacobian under jit.
    """
    tokens = np.asarray(tokens_T, np.int32)
    t = tokens.shape[0]
    segments = (
        np.ones(t, np.int32) if segment_ids_T is None else np.asarray(segment_ids_T, np.int32)
    )
    positions = (
        np.arange(t, dtype=np.int32) if positions_T is None else np.asarray(positions_T, np.int32)
    )
    return attention.norms_of_jacobian_TS(_backbone_jacobian(model, tokens, segments, positions))


@nnx.jit
def _backbone_jacobian(model, tokens_T, segment_ids_T, positions_T):
    mask = tokenizer.segment_mask_BTS(segment_ids_T[None], causal=True)[:, None]
    x_TD = model.embed(tokens_T[None], positions_T[None])[0]

    def backbone(x_TD):
        return model.backbone(x_TD[None], mask, positions_BT=positions_T[None])[0].astype(F32)

    return attention.jacobian(backbone, x_TD)
