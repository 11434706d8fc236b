"""KV caches in three precisions (fp32, bf16, int8) for core.lm.transformer.TinyLM.

Glossary: see core/lm/attention.py (B batch, P padded prompt length, S cache slots, H heads,
K head dim, D width, V vocabulary, L layers).

A cache stores, for every layer, the keys and values of slots 0 .. length-1:

    fp32   k, v float32                                  8 D bytes / token / layer
    bf16   k, v bfloat16                                 4 D bytes / token / layer
    int8   k, v int8 + a float32 scale per (layer, row,  2 D + 8 H bytes / token / layer
           slot, head): scale = max|x| over K / 127,
           q = round(x / scale), read back as q * scale  (|error| <= scale / 2 per element)

so int8 / fp32 = 1/4 + 1/K (0.266 at the default K = 64; the issue's target 0.27 needs K >= 50)
and bf16 / fp32 = 1/2.

``prefill`` and ``decode`` are functional: they run the model's own layers (block.norm_attn,
block.attn.wq/wk/wv/wo, block.norm_mlp, block.mlp, model.embed, model.unembed,
core.lm.attention.dot_product_attention) but write the new keys/values into the cache in its
precision and attend over what the cache gives back (dequantized), so the logits carry
exactly the cache's rounding. Prefill takes a fixed-shape padded prompt tokens_BP and each
row's true length: causal masking makes the padding after a prompt invisible to it, one
compiled program serves every prompt up to P, the cache length becomes the true length and
the next decode overwrites the first pad slot.

The command ``generate`` (text from a trained run) is here; cache_report.py compares the three
caches (``cache-report``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from capstones.byte_transformer import args
from capstones.byte_transformer import config as config_lib
from core.lm import attention, tokenizer, transformer
from core.lm import generate as generate_lib

PRECISIONS = config_lib.CACHE_PRECISIONS  # ("fp32", "bf16", "int8")
STORAGE_DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "int8": jnp.int8}
BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "int8": 1}
SCALE_BYTES = 4  # one float32 scale per (token, head) for each of k and v (int8 only)
TARGET_RATIOS = {"int8": 0.27, "bf16": 0.5}  # max bytes/token vs fp32 (the targets)
INT8_MAX = 127
F32 = jnp.float32
DEFAULT_PROMPTS = ("def ", "import ", "class ", "    return ")
GREEDY = generate_lib.SamplingConfig()


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"cache precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


# --- the cache --------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Cache:
    """Keys and values of every layer, slots 0 .. length_B[b]-1 of row b (a pytree).

    k/v are stored in the precision's dtype (float32, bfloat16 or int8); int8 caches also
    hold one float32 scale per (layer, row, slot, head), None otherwise.
    """

    k_LBSHK: jax.Array
    v_LBSHK: jax.Array
    k_scale_LBSH: jax.Array | None
    v_scale_LBSH: jax.Array | None
    length_B: jax.Array  # int32: filled slots of each row

    @property
    def precision(self) -> str:
        dtype = jnp.dtype(self.k_LBSHK.dtype)
        return {jnp.dtype(d): p for p, d in STORAGE_DTYPES.items()}[dtype]

    @property
    def capacity(self) -> int:
        return self.k_LBSHK.shape[2]

    @property
    def batch(self) -> int:
        return self.k_LBSHK.shape[1]

    def as_dict(self) -> dict[str, jax.Array]:
        """Plain {name: array} (what exported endpoints take and return)."""
        names = ("k_LBSHK", "v_LBSHK", "k_scale_LBSH", "v_scale_LBSH", "length_B")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    @classmethod
    def from_dict(cls, arrays: dict) -> Cache:
        return cls(
            arrays["k_LBSHK"],
            arrays["v_LBSHK"],
            arrays.get("k_scale_LBSH"),
            arrays.get("v_scale_LBSH"),
            arrays["length_B"],
        )

    def nbytes(self) -> int:
        return sum(
            int(np.prod(a.shape)) * jnp.dtype(a.dtype).itemsize for a in self.as_dict().values()
        )


def init_cache(
    config: transformer.TransformerConfig, batch: int, capacity: int, precision: str
) -> Cache:
    """An empty cache of ``batch`` rows and ``capacity`` slots in ``precision``."""
    check_precision(precision)
    if batch < 1 or not 1 <= capacity <= config.max_len:
        raise ValueError(
            f"need batch >= 1 and 1 <= capacity <= max_len={config.max_len}, "
            f"got batch={batch}, capacity={capacity}"
        )
    shape = (config.num_layers, batch, capacity, config.num_heads, config.head_dim)
    zeros = jnp.zeros(shape, STORAGE_DTYPES[precision])
    scales = jnp.zeros(shape[:-1], F32) if precision == "int8" else None
    return Cache(zeros, zeros, scales, scales, jnp.zeros((batch,), jnp.int32))


def bytes_per_token_per_layer(config, precision: str) -> int:
    """Cache bytes one token costs in one layer: k + v (+ their int8 scales).

    ``config``: a capstone Config or a core.lm.transformer.TransformerConfig."""
    check_precision(precision)
    width = getattr(config, "d_model", None) or config.width
    values = 2 * width * BYTES_PER_ELEMENT[precision]
    scales = 2 * config.num_heads * SCALE_BYTES if precision == "int8" else 0
    return values + scales


def bytes_ratio(config, precision: str) -> float:
    """bytes_per_token_per_layer(precision) / bytes_per_token_per_layer("fp32")."""
    return bytes_per_token_per_layer(config, precision) / bytes_per_token_per_layer(config, "fp32")


# --- int8 quantization ------------------------------------------------------------------


def quantize_int8(x_NK) -> tuple[jax.Array, jax.Array]:
    """Symmetric per-vector int8: (q_NK int8, scale_N float32) with scale = max|x| / 127
    over the last axis and q = round(x / scale) in [-127, 127] (an all-zero vector gets
    scale 0 and q 0)."""
    x = jnp.asarray(x_NK).astype(F32)
    scale = jnp.max(jnp.abs(x), axis=-1) / INT8_MAX
    safe = jnp.where(scale > 0, scale, 1.0)[..., None]  # 0 / 0 would be NaN
    q = jnp.clip(jnp.round(x / safe), -INT8_MAX, INT8_MAX).astype(jnp.int8)
    return q, scale


def dequantize_int8(q_NK, scale_N) -> jax.Array:
    """q * scale in float32 (the inverse of quantize_int8 up to scale / 2 per element)."""
    return jnp.asarray(q_NK).astype(F32) * jnp.asarray(scale_N, F32)[..., None]


def _store(x_BTHK, precision):
    """(stored values, scales or None) of new keys or values in the cache's precision."""
    if precision == "int8":
        return quantize_int8(x_BTHK)
    return x_BTHK.astype(STORAGE_DTYPES[precision]), None


def _load(values, scales, dtype):
    """What attention reads back from a cache layer, in the compute dtype."""
    if scales is None:
        return values.astype(dtype)
    return dequantize_int8(values, scales).astype(dtype)


# --- prefill and decode -----------------------------------------------------------------


def _dense(x, kernel, spec, compute):
    """x . kernel with inputs in the compute dtype and a float32 accumulator (as the model)."""
    return jnp.einsum(
        spec, x.astype(compute), kernel[...].astype(compute), preferred_element_type=F32
    )


def _block_step(block, x_BTD, write, read, mask):
    """One block where attention goes through the cache.

    ``write(k_BTHK, v_BTHK)`` stores the new keys/values and returns the updated layer
    state; ``read(state)`` gives (k_BSHK, v_BSHK) for attention in the compute dtype."""
    c = block.precision.compute
    x = x_BTD.astype(c)
    a = block.norm_attn(x)
    q, k, v = (
        _dense(a, w, "btd,dhk->bthk", c).astype(c)
        for w in (block.attn.wq, block.attn.wk, block.attn.wv)
    )
    layer = write(k, v)
    k_all, v_all = read(layer)
    out = attention.dot_product_attention(q, k_all, v_all, mask=mask)
    h = x + _dense(out, block.attn.wo, "bthk,hkd->btd", c).astype(c)
    return h + block.mlp(block.norm_mlp(h)), layer


def _stack(layers, lengths_B):
    ks, vs, kss, vss = zip(*layers, strict=True)
    scales = (jnp.stack(kss), jnp.stack(vss)) if kss[0] is not None else (None, None)
    return Cache(jnp.stack(ks), jnp.stack(vs), *scales, lengths_B)


def prefill_hidden(model, tokens_BP, lengths_B, precision: str, capacity: int):
    """(x_BPD after the last block, a new cache holding the prompt). Slots >= length of a
    row hold the padding's keys; they are masked until a decode overwrites them. Lengths
    are clipped to [1, P] here (inside jit nothing can raise: check_lengths on the host)."""
    check_precision(precision)
    tokens_BP = jnp.asarray(tokens_BP, jnp.int32)
    b, p = tokens_BP.shape
    if p > capacity:
        raise ValueError(f"prefill length P={p} exceeds the cache capacity S={capacity}")
    cache = init_cache(model.config, b, capacity, precision)
    positions = jnp.broadcast_to(jnp.arange(p), (b, p))
    causal = attention.causal_mask_TS(p)[None, None]  # (1, 1, P, P): slots 0..P-1 only
    dtype = model.config.precision.compute
    x = model.embed(tokens_BP, positions)
    layers = []
    for index, block in enumerate(model.blocks):

        def write(k, v, index=index):
            (k_q, k_s), (v_q, v_s) = _store(k, precision), _store(v, precision)
            k_layer = cache.k_LBSHK[index].at[:, :p].set(k_q)
            v_layer = cache.v_LBSHK[index].at[:, :p].set(v_q)
            if k_s is None:
                return k_layer, v_layer, None, None
            k_scale = cache.k_scale_LBSH[index].at[:, :p].set(k_s)
            v_scale = cache.v_scale_LBSH[index].at[:, :p].set(v_s)
            return k_layer, v_layer, k_scale, v_scale

        def read(layer):
            k_layer, v_layer, k_scale, v_scale = layer
            k_scale = None if k_scale is None else k_scale[:, :p]
            v_scale = None if v_scale is None else v_scale[:, :p]
            return _load(k_layer[:, :p], k_scale, dtype), _load(v_layer[:, :p], v_scale, dtype)

        x, layer = _block_step(block, x, write, read, causal)
        layers.append(layer)
    lengths = jnp.clip(jnp.broadcast_to(jnp.asarray(lengths_B, jnp.int32), (b,)), 1, p)
    return x, _stack(layers, lengths)


def prefill_apply(model, tokens_BP, lengths_B, precision: str, capacity: int):
    """(logits_BV at each row's last real prompt position (float32), cache)."""
    x_BPD, cache = prefill_hidden(model, tokens_BP, lengths_B, precision, capacity)
    rows = jnp.arange(x_BPD.shape[0])
    last_BD = x_BPD[rows, cache.length_B - 1]
    return model.unembed(last_BD[:, None])[:, 0], cache


def decode_apply(model, token_B, cache: Cache):
    """Feed one token per row at slot length_B[b]: (logits_BV float32, cache with
    length_B + 1).

    A full row (length_B[b] == capacity) cannot take another token. Called eagerly (lengths
    are numbers) that raises ValueError. Under jit nothing can raise, so the row's write is
    dropped, its length stays, and its logits are NaN (the host sees them); the other rows
    decode as usual. Size the cache for prompt + new tokens (check_lengths) to never get there.

    The new keys/values are scattered straight into the stacked (L, B, S, H, K) arrays, so
    under jit with the cache donated the update happens in place: no per-layer copy of the
    cache and no re-stacking (both cost more than the arithmetic of a decode step)."""
    token_B = jnp.asarray(token_B, jnp.int32)
    b, s = cache.batch, cache.capacity
    rows, at = jnp.arange(b), cache.length_B
    if not isinstance(at, jax.core.Tracer):
        full = np.flatnonzero(np.asarray(at) >= s).tolist()
        if full:
            raise ValueError(
                f"cache row(s) {full} are full (length {s} = capacity {s}): another token "
                "does not fit; make a larger cache (init_cache, capacity <= max_len)"
            )
    fits_B = at < s  # traced under jit: a full row is poisoned instead of raising
    mask = (jnp.arange(s)[None, :] <= at[:, None])[:, None, None, :]  # (B, 1, 1, S)
    dtype = model.config.precision.compute
    x = model.embed(token_B[:, None], at[:, None])
    stored = {
        "k": cache.k_LBSHK,
        "v": cache.v_LBSHK,
        "k_scale": cache.k_scale_LBSH,
        "v_scale": cache.v_scale_LBSH,
    }
    for index, block in enumerate(model.blocks):

        def write(k, v, index=index):
            for name, new in (("k", k), ("v", v)):
                values, scales = _store(new[:, 0], cache.precision)
                # slot ``at`` of a full row is out of range: mode="drop" skips that write
                stored[name] = stored[name].at[index, rows, at].set(values, mode="drop")
                if scales is not None:
                    stored[f"{name}_scale"] = (
                        stored[f"{name}_scale"].at[index, rows, at].set(scales, mode="drop")
                    )
            return index

        def read(index):
            scale = lambda name: None if stored[name] is None else stored[name][index]  # noqa: E731
            return (
                _load(stored["k"][index], scale("k_scale"), dtype),
                _load(stored["v"][index], scale("v_scale"), dtype),
            )

        x, _ = _block_step(block, x, write, read, mask)
    length_B = jnp.where(fits_B, at + 1, at)
    updated = Cache(stored["k"], stored["v"], stored["k_scale"], stored["v_scale"], length_B)
    return jnp.where(fits_B[:, None], model.unembed(x)[:, 0], jnp.nan), updated


@functools.partial(nnx.jit, static_argnames=("precision", "capacity"))
def prefill(model, tokens_BP, lengths_B, precision: str, capacity: int):
    """prefill_apply under jit: one program per (B, P, precision, capacity)."""
    return prefill_apply(model, tokens_BP, lengths_B, precision, capacity)


@nnx.jit
def decode(model, token_B, cache: Cache):
    """decode_apply under jit: one program per (B, precision, capacity)."""
    return decode_apply(model, token_B, cache)


@functools.partial(nnx.jit, static_argnames=("precision", "capacity"))
def prefill_sequence(model, tokens_BP, precision: str, capacity: int):
    """(logits_BPV at every prompt position, cache): prefill of full-length rows."""
    x_BPD, cache = prefill_hidden(model, tokens_BP, tokens_BP.shape[1], precision, capacity)
    return model.unembed(x_BPD), cache


# --- host-side helpers --------------------------------------------------------------------


def pad_prompts(prompts: Sequence, prefill_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(tokens_BP int32 padded with PAD_ID, lengths_B int32) from strings or token lists."""
    rows = [tokenizer.encode(p) if isinstance(p, str) else np.asarray(p, np.int32) for p in prompts]
    if not rows:
        raise ValueError("need at least one prompt")
    lengths = np.array([len(r) for r in rows], np.int32)
    if lengths.min() < 1:
        raise ValueError("every prompt needs at least one byte")
    for r in rows:
        if r.ndim != 1 or (r.size and (r.min() < 0 or r.max() >= tokenizer.VOCAB_SIZE)):
            raise ValueError(f"prompt tokens must be 1-D ints in [0, {tokenizer.VOCAB_SIZE})")
    p = int(lengths.max()) if prefill_len is None else prefill_len
    if lengths.max() > p:
        raise ValueError(f"prompt of {lengths.max()} bytes exceeds prefill_len={p}")
    tokens = np.full((len(rows), p), tokenizer.PAD_ID, np.int32)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = r
    return tokens, lengths


def check_lengths(lengths_B, prefill_len: int, capacity: int, max_new_tokens: int = 0) -> None:
    """ValueError unless 1 <= length <= prefill_len and length + max_new_tokens <= capacity
    (the cache holds the prompt and every generated byte)."""
    lengths = np.asarray(lengths_B)
    if lengths.ndim != 1 or lengths.size == 0:
        raise ValueError(f"lengths_B must be a non-empty 1-D array, got shape {lengths.shape}")
    if lengths.min() < 1 or lengths.max() > prefill_len:
        raise ValueError(
            f"prompt lengths must be in [1, prefill_len={prefill_len}], got {lengths.tolist()}"
        )
    if prefill_len > capacity or lengths.max() + max_new_tokens > capacity:
        raise ValueError(
            f"prompt ({lengths.max()}) + max_new_tokens ({max_new_tokens}) must fit the cache "
            f"capacity {capacity} (and prefill_len {prefill_len} <= capacity)"
        )
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")


_sample = jax.jit(generate_lib.sample_next_B, static_argnames="sampling")


@dataclasses.dataclass(frozen=True)
class Generated:
    new_tokens_BN: np.ndarray  # int32
    lengths_B: np.ndarray  # prompt lengths
    step_logits_BNV: np.ndarray  # the logits each new token was picked from

    def texts(self) -> list[str]:
        return [tokenizer.decode(row, errors="replace") for row in self.new_tokens_BN]


def generate_padded(
    model,
    tokens_BP,
    lengths_B,
    max_new_tokens: int,
    precision: str = "fp32",
    sampling: generate_lib.SamplingConfig = GREEDY,
    key: jax.Array | None = None,
    capacity: int | None = None,
) -> Generated:
    """Prefill padded prompts, then pick and feed one token per row at a time.

    New token i is drawn with ``fold_in(key, i)`` (as core.lm.generate.generate), so fp32 greedy
    equals core.lm.generate's greedy decoding. ``capacity`` default: P + max_new_tokens.
    """
    check_precision(precision)
    tokens_BP = np.asarray(tokens_BP, np.int32)
    lengths_B = np.asarray(lengths_B, np.int32)
    p = tokens_BP.shape[1]
    capacity = p + max_new_tokens if capacity is None else capacity
    check_lengths(lengths_B, p, capacity, max_new_tokens)
    if capacity > model.config.max_len:
        raise ValueError(f"capacity {capacity} exceeds max_len={model.config.max_len}")
    key = jax.random.key(0) if key is None else key
    logits, cache = prefill(model, tokens_BP, lengths_B, precision, capacity)
    tokens, step_logits = [], []
    for i in range(max_new_tokens):
        step_logits.append(np.asarray(logits))
        token = _sample(logits, jax.random.fold_in(key, i), sampling)
        tokens.append(np.asarray(token))
        if i + 1 < max_new_tokens:
            # The host copy, as teacher_forced_logits_BTV feeds its tokens: a device array
            # (committed) would make jit lower and compile decode a second time, unchanged.
            logits, cache = decode(model, tokens[-1], cache)
    b, v = tokens_BP.shape[0], model.config.vocab_size
    return Generated(
        np.stack(tokens, 1) if tokens else np.zeros((b, 0), np.int32),
        lengths_B,
        np.stack(step_logits, 1) if step_logits else np.zeros((b, 0, v), np.float32),
    )


def prompt_list(prompt) -> list:
    """[prompt] for one prompt (a str or a 1-D token sequence), else the prompts given."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, np.ndarray):
        return [prompt] if prompt.ndim == 1 else list(prompt)
    items = list(prompt)
    if items and all(isinstance(p, str | list | tuple | np.ndarray) for p in items):
        return items
    return [np.asarray(items, np.int32)]


def generate(
    model,
    prompt,
    max_new_tokens: int,
    precision: str = "fp32",
    sampling: generate_lib.SamplingConfig = GREEDY,
    key: jax.Array | None = None,
) -> Generated:
    """Generate from one prompt (str or tokens) or a list of them (padded to the longest)."""
    tokens, lengths = pad_prompts(prompt_list(prompt))
    return generate_padded(model, tokens, lengths, max_new_tokens, precision, sampling, key)


def teacher_forced_logits_BTV(
    model, tokens_BT, precision: str, prefill_len: int, capacity: int | None = None
) -> np.ndarray:
    """Logits at every position of tokens_BT through the cache: the first ``prefill_len``
    in one prefill, the rest fed one by one through decode (teacher forcing)."""
    tokens = np.asarray(tokens_BT, np.int32)
    t = tokens.shape[1]
    if not 1 <= prefill_len <= t:
        raise ValueError(f"prefill_len must be in [1, T={t}], got {prefill_len}")
    capacity = t if capacity is None else capacity
    logits, cache = prefill_sequence(model, tokens[:, :prefill_len], precision, capacity)
    pieces = [np.asarray(logits)]
    for i in range(prefill_len, t):
        logits, cache = decode(model, tokens[:, i], cache)
        pieces.append(np.asarray(logits)[:, None])
    return np.concatenate(pieces, axis=1)


def mean_next_token_loss(logits_BTV, tokens_BT) -> float:
    """Mean cross-entropy (nats/byte) of position t predicting token t+1, in float64."""
    logits = np.asarray(logits_BTV, np.float64)[:, :-1]
    targets = np.asarray(tokens_BT)[:, 1:]
    shifted = logits - logits.max(-1, keepdims=True)
    log_norm = np.log(np.exp(shifted).sum(-1))
    picked = np.take_along_axis(shifted, targets[..., None], -1)[..., 0]
    return float(np.mean(log_norm - picked))


# --- commands ------------------------------------------------------------------------------


def _load_model(run_dir: str):
    """(Config, TinyLM) of a run directory (training.load_model; imported here because it
    loads the checkpoint machinery)."""
    from capstones.byte_transformer import training

    try:
        return training.load_model(run_dir)
    except FileNotFoundError as exc:  # no run there: one line, not a traceback
        raise args.UsageError(str(exc)) from None


def _sampling(parsed) -> generate_lib.SamplingConfig:
    try:
        return generate_lib.SamplingConfig(
            method=args.choice("method", parsed["method"], generate_lib.METHODS),
            temperature=parsed["temperature"],
            top_k=parsed["top_k"],
        )
    except ValueError as exc:
        raise args.UsageError(str(exc)) from None


def run_generate(parsed: args.Parsed) -> int:
    precision = args.choice("cache", parsed["cache"], PRECISIONS)
    sampling = _sampling(parsed)
    if not parsed["prompt"]:
        raise args.UsageError("prompt must be at least one character")
    if parsed["max_new_tokens"] < 0:
        raise args.UsageError(f"max_new_tokens must be >= 0, got {parsed['max_new_tokens']}")
    _, model = _load_model(parsed["run_dir"])
    prompt_len = len(parsed["prompt"].encode())
    if prompt_len + parsed["max_new_tokens"] > model.config.max_len:
        raise args.UsageError(
            f"prompt ({prompt_len} bytes) + max_new_tokens ({parsed['max_new_tokens']}) exceeds "
            f"max_len={model.config.max_len}"
        )
    result = generate(
        model,
        parsed["prompt"],
        parsed["max_new_tokens"],
        precision,
        sampling,
        jax.random.key(parsed["seed"]),
    )
    print(parsed["prompt"] + result.texts()[0])
    return 0


RUN_DIR = args.Option(str, args.REQUIRED, "a training run directory (training.load_model)")

COMMANDS = {
    "generate": args.Command(
        "generate bytes from a trained run with an fp32, bf16 or int8 KV cache",
        {
            "run_dir": RUN_DIR,
            "prompt": args.Option(str, "def ", "the text to continue"),
            "max_new_tokens": args.Option(int, 64, "bytes to generate"),
            "cache": args.Option(str, "fp32", "KV cache precision: fp32, bf16 or int8"),
            "method": args.Option(str, "greedy", "greedy, temperature or top-k"),
            "temperature": args.Option(float, 1.0, "softmax temperature (sampling methods)"),
            "top_k": args.Option(int, 8, "k of top-k sampling"),
            "seed": args.Option(int, 0, "sampling seed (new token i uses fold_in(key, i))"),
        },
        run_generate,
        config_overrides=False,
    ),
}
