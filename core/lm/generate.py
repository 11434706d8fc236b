"""Generate bytes from a TinyLM: greedy, temperature and top-k sampling with a KV cache.

Glossary: see core/lm/attention.py. Decoding is prefill (the prompt in one call, filling the
cache) and then one call per new token, each attending to the cached keys and values of
every earlier position. The cache is a pytree passed in and returned (core.lm.transformer.KVCache).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.lm import transformer

METHODS = ("greedy", "temperature", "top-k")
# The smallest temperature SamplingConfig accepts. Below it sampling is greedy for any
# logits a model produces (a runner-up 1e-5 behind the best has probability < exp(-10)),
# and T -> 0 is where float32 breaks: 1e-40 is subnormal and 1e-310 is 0.0, so logits / T
# overflows to inf and the draw is garbage. The traced rule (_sample_B) treats a smaller T
# as greedy instead of dividing by it.
MIN_TEMPERATURE = 1e-6


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """How to pick the next token from logits_BV.

    greedy: argmax; temperature: sample softmax(logits / temperature); top-k: the same,
    restricted to the k largest logits.
    """

    method: str = "greedy"
    temperature: float = 1.0
    top_k: int = 8

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if not MIN_TEMPERATURE <= self.temperature < math.inf:
            raise ValueError(
                f"temperature must be a finite number >= {MIN_TEMPERATURE} (below that, "
                f"sampling is greedy: use method='greedy' for argmax), got {self.temperature}"
            )
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")

    def as_arrays(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(method index, temperature, top_k) as arrays, to pass into jitted code."""
        return (
            jnp.asarray(METHODS.index(self.method), jnp.int32),
            jnp.asarray(self.temperature, jnp.float32),
            jnp.asarray(self.top_k, jnp.int32),
        )


def sample_next_B(logits_BV: jax.Array, key: jax.Array, sampling: SamplingConfig) -> jax.Array:
    """The next token (int32) for each row of logits_BV."""
    if sampling.method == "top-k" and sampling.top_k > logits_BV.shape[-1]:
        raise ValueError(f"top_k={sampling.top_k} exceeds the vocabulary V={logits_BV.shape[-1]}")
    return _sample_B(logits_BV, key, *sampling.as_arrays())


def _sample_B(logits_BV, key, method, temperature, top_k):
    """sample_next_B with the rule as traced numbers: one compiled program serves every
    method, temperature and k (changing them never recompiles).

    Overflow-free in float32: the logits are shifted so the largest is 0 before dividing by
    the temperature (every scaled logit is <= 0, the best exactly 0, so exp never overflows
    and a huge T gives 0, uniform), the top-k mask is applied after the division
    (-inf / inf would be NaN), and a temperature below MIN_TEMPERATURE (or 0.0, what 1e-310
    becomes in float32) is greedy rather than a division by ~0."""
    logits = jnp.asarray(logits_BV, jnp.float32)
    vocab = logits.shape[-1]
    greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    # top-k: keep logits >= the k-th largest (the k-th of the ascending sort from the end)
    kth_index = jnp.full(logits.shape[:-1] + (1,), vocab - jnp.clip(top_k, 1, vocab))
    kth_largest = jnp.take_along_axis(jnp.sort(logits, axis=-1), kth_index, axis=-1)
    keep = jnp.logical_or(method != METHODS.index("top-k"), logits >= kth_largest)
    as_greedy = jnp.logical_or(method == METHODS.index("greedy"), ~(temperature >= MIN_TEMPERATURE))
    safe_temperature = jnp.where(as_greedy, 1.0, temperature)
    shifted = logits - jnp.max(logits, axis=-1, keepdims=True)
    scaled = jnp.where(keep, shifted / safe_temperature, -jnp.inf)
    sampled = jax.random.categorical(key, scaled, axis=-1)
    return jnp.where(as_greedy, greedy, sampled.astype(jnp.int32))


def sampling_probs_BV(logits_BV, sampling: SamplingConfig) -> np.ndarray:
    """The distribution sample_next_B draws from, in numpy float64 (a reference)."""
    logits = np.asarray(logits_BV, np.float64)
    if sampling.method == "greedy":
        probs = np.zeros_like(logits)
        np.put_along_axis(probs, logits.argmax(-1)[..., None], 1.0, -1)
        return probs
    if sampling.method == "top-k":
        kth = np.sort(logits, axis=-1)[..., -sampling.top_k][..., None]
        logits = np.where(logits >= kth, logits, -np.inf)
    scaled = logits / sampling.temperature
    weights = np.exp(scaled - scaled.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True)


@nnx.jit
def _extend_and_sample(model, tokens_BT, cache, key, index, rule):
    """Feed tokens through the cache; pick the next token from the last position's logits
    with key fold_in(key, index) and the sampling ``rule`` (SamplingConfig.as_arrays()).
    One compiled program per token count T serves prefill, decoding, every sampling rule
    and the teacher-forced check alike."""
    logits_BTV, cache = model.extend(tokens_BT, cache)
    token_B = _sample_B(logits_BTV[:, -1], jax.random.fold_in(key, index), *rule)
    return logits_BTV, token_B, cache


@dataclasses.dataclass(frozen=True)
class Generation:
    tokens_BT: np.ndarray  # prompt followed by the new tokens
    prompt_len: int
    step_logits_BNV: np.ndarray  # the logits that chose each of the N new tokens
    # the KV cache after the last step (capacity prompt + N slots; the last new token is never
    # fed, so length is prompt + N - 1): what decoding held in memory
    cache: transformer.KVCache | None = None


def _check_lengths(model, prompt, num_new):
    if prompt.ndim != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt_BT must be (B, T) with T >= 1, got shape {prompt.shape}")
    total = prompt.shape[1] + num_new
    if num_new < 0 or total > model.config.max_len:
        raise ValueError(
            f"prompt T={prompt.shape[1]} + num_new={num_new} = {total} must be <= "
            f"max_len={model.config.max_len} (the position table)"
        )
    return total


def generate(
    model: transformer.TinyLM,
    prompt_BT,
    num_new: int,
    key: jax.Array,
    sampling: SamplingConfig = SamplingConfig(),
    progress=None,
) -> Generation:
    """Prefill the prompt, then sample ``num_new`` tokens one at a time with the KV cache.

    New token i is drawn with ``fold_in(key, i)``. ``progress``: an optional callable
    ``progress(i)`` after each token (for a progress bar).
    """
    prompt = np.asarray(prompt_BT, np.int32)
    total = _check_lengths(model, prompt, num_new)
    if sampling.method == "top-k" and sampling.top_k > model.config.vocab_size:
        raise ValueError(
            f"top_k={sampling.top_k} exceeds the vocabulary V={model.config.vocab_size}"
        )
    cache = transformer.init_cache(model.config, prompt.shape[0], total)
    rule = sampling.as_arrays()
    tokens, step_logits = [prompt], []
    feed = prompt  # the prompt first (prefill), then each new token (decode)
    for i in range(num_new):
        logits_BTV, token_B, cache = _extend_and_sample(model, feed, cache, key, i, rule)
        step_logits.append(np.asarray(logits_BTV)[:, -1])
        tokens.append(np.asarray(token_B)[:, None])
        feed = tokens[-1]
        if progress is not None:
            progress(i)
    shape = (prompt.shape[0], 0, model.config.vocab_size)
    new_logits = np.stack(step_logits, 1) if step_logits else np.zeros(shape, np.float32)
    return Generation(np.concatenate(tokens, axis=1), prompt.shape[1], new_logits, cache)


def greedy_without_cache(model: transformer.TinyLM, prompt_BT, num_new: int) -> np.ndarray:
    """Greedy decoding by a full forward pass over the whole sequence for every new token:
    the slow reference the cached decoder must agree with. Rows are padded to the final
    length so every step reuses one compiled program."""
    tokens = np.asarray(prompt_BT, np.int32)
    total = _check_lengths(model, tokens, num_new)
    padded = np.zeros((tokens.shape[0], total), np.int32)
    padded[:, : tokens.shape[1]] = tokens
    for length in range(tokens.shape[1], total):
        # causal: the padding after ``length`` does not change the logits before it
        logits_BTV = np.asarray(transformer.forward(model, padded))
        padded[:, length] = np.argmax(logits_BTV[:, length - 1], axis=-1)
    return padded


def incremental_logits_BTV(
    model: transformer.TinyLM, tokens_BT, prefill_len: int, capacity: int | None = None
) -> np.ndarray:
    """Logits for every position of tokens_BT computed with the KV cache: prefill the first
    ``prefill_len`` tokens in one call, then feed the rest one at a time (teacher forcing).
    Equals the full forward pass model(tokens_BT) up to float rounding. ``capacity``: cache
    slots (default T, which is what ``generate`` uses for a sequence of this length)."""
    tokens = np.asarray(tokens_BT, np.int32)
    t = tokens.shape[1]
    if not 1 <= prefill_len <= t:
        raise ValueError(f"prefill_len must be in [1, T={t}], got {prefill_len}")
    if capacity is not None and capacity < t:
        raise ValueError(f"capacity {capacity} cannot hold the T={t} tokens fed through it")
    cache = transformer.init_cache(model.config, tokens.shape[0], capacity or t)
    key, rule = jax.random.key(0), SamplingConfig().as_arrays()  # sampled tokens unused
    logits, _, cache = _extend_and_sample(model, tokens[:, :prefill_len], cache, key, 0, rule)
    pieces = [np.asarray(logits)]
    for i in range(prefill_len, t):
        logits, _, cache = _extend_and_sample(model, tokens[:, i : i + 1], cache, key, i, rule)
        pieces.append(np.asarray(logits))
    return np.concatenate(pieces, axis=1)
