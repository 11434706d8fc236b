"""Greedy generation from a trained model two ways, each ONE compiled program whose loop over
the new tokens runs on the device (lax.fori_loop), timed and compared token by token:

- ``cached``: kv_cache.prefill_apply over the P-byte prompt, then kv_cache.decode_apply per new
  token (the KV cache in ``cache`` precision, capacity P + N);
- ``recompute``: the full forward pass (the model's own __call__, causal) over a fixed
  (1, P + N) buffer for every new token, reading the logits at the last filled position; the
  bytes after it are padding the causal mask hides, so one program serves every length.

Both pick argmax of float32 logits and return (tokens_N, logits_NV): the logits each token was
chosen from, so a difference can be explained (``first_difference``: where, and the top-1 vs
top-2 margin of each path's logits there). Timing (``time_program``): compiled ahead of time,
``warmup`` calls, then ``repeats`` calls each ended by block_until_ready; the median.
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from capstones.byte_transformer import data, kv_cache, training


def _check(config, prompt_len: int, new_tokens: int) -> None:
    if prompt_len < 1 or new_tokens < 1:
        raise ValueError(
            f"need prompt_len >= 1 and new_tokens >= 1, got {prompt_len}, {new_tokens}"
        )
    if prompt_len + new_tokens > config.max_len:
        raise ValueError(
            f"prompt {prompt_len} + new tokens {new_tokens} exceed max_len={config.max_len} "
            "(the position table): train with a larger max_len"
        )


def cached_program(config, prompt_len: int, new_tokens: int, cache: str = "fp32"):
    """jit(params, prompt_1P int32) -> (tokens_N, logits_NV): greedy with the KV cache."""
    _check(config, prompt_len, new_tokens)
    training.make_train_step(config)  # the model structure, built eagerly (never under trace)
    capacity = prompt_len + new_tokens

    def generate(params, prompt_1P):
        model = training.model_from_params(config, params)
        lengths = jnp.full((1,), prompt_len, jnp.int32)
        logits_1V, state = kv_cache.prefill_apply(model, prompt_1P, lengths, cache, capacity)
        tokens = jnp.zeros((new_tokens,), jnp.int32)
        logits_NV = jnp.zeros((new_tokens, logits_1V.shape[-1]), jnp.float32)

        def pick(i, logits_1V, tokens, logits_NV):
            token = jnp.argmax(logits_1V[0]).astype(jnp.int32)
            return tokens.at[i].set(token), logits_NV.at[i].set(logits_1V[0])

        tokens, logits_NV = pick(0, logits_1V, tokens, logits_NV)

        def body(i, carry):
            tokens, logits_NV, state = carry
            inner = training.model_from_params(config, params)
            logits_1V, state = kv_cache.decode_apply(inner, tokens[i - 1][None], state)
            tokens, logits_NV = pick(i, logits_1V, tokens, logits_NV)
            return tokens, logits_NV, state

        tokens, logits_NV, _ = jax.lax.fori_loop(1, new_tokens, body, (tokens, logits_NV, state))
        return tokens, logits_NV

    return jax.jit(generate)


def recompute_program(config, prompt_len: int, new_tokens: int):
    """jit(params, prompt_1P int32) -> (tokens_N, logits_NV): greedy by a full forward pass
    over the fixed (1, P + N) buffer for every new token (no cache)."""
    _check(config, prompt_len, new_tokens)
    training.make_train_step(config)
    total = prompt_len + new_tokens

    def generate(params, prompt_1P):
        buffer = jnp.zeros((1, total), jnp.int32).at[:, :prompt_len].set(prompt_1P)
        tokens = jnp.zeros((new_tokens,), jnp.int32)
        logits_NV = jnp.zeros((new_tokens, config.model_config().vocab_size), jnp.float32)

        def body(i, carry):
            buffer, tokens, logits_NV = carry
            model = training.model_from_params(config, params)
            logits_TV = model(buffer)[0]  # causal: the padding after position P + i is unseen
            last_V = jax.lax.dynamic_index_in_dim(logits_TV, prompt_len + i - 1, keepdims=False)
            token = jnp.argmax(last_V).astype(jnp.int32)
            buffer = jax.lax.dynamic_update_slice(buffer, token[None, None], (0, prompt_len + i))
            return buffer, tokens.at[i].set(token), logits_NV.at[i].set(last_V)

        _, tokens, logits_NV = jax.lax.fori_loop(0, new_tokens, body, (buffer, tokens, logits_NV))
        return tokens, logits_NV

    return jax.jit(generate)


def margin(logits_V) -> float:
    """The top-1 logit minus the top-2 (how far greedy's choice was from flipping)."""
    top = np.sort(np.asarray(logits_V, np.float64))[-2:]
    return float(top[1] - top[0])


def first_difference(cached: tuple, recomputed: tuple) -> dict:
    """Whether two greedy outputs ((tokens_N, logits_NV) each) are identical; if not, the first
    index where they differ, each path's token and top-1 vs top-2 margin there, and the
    largest |logit difference| at that step (after it the two continue from other bytes, so
    only the first difference says anything about the arithmetic)."""
    tokens_a, logits_a = (np.asarray(x) for x in cached)
    tokens_b, logits_b = (np.asarray(x) for x in recomputed)
    if tokens_a.shape != tokens_b.shape:
        raise ValueError(f"token counts differ: {tokens_a.shape} vs {tokens_b.shape}")
    # before the first difference both read the same bytes: their logits are comparable
    differ = np.flatnonzero(tokens_a != tokens_b)
    same = len(tokens_a) if differ.size == 0 else int(differ[0])
    gap = np.abs(logits_a[: same + 1].astype(np.float64) - logits_b[: same + 1])
    found = {
        "identical": differ.size == 0,
        "tokens": len(tokens_a),
        "max_abs_logit_difference_while_identical": float(gap[:same].max()) if same else 0.0,
    }
    if differ.size:
        found.update(
            first_difference_index=same,
            cached_token=int(tokens_a[same]),
            recompute_token=int(tokens_b[same]),
            cached_margin=margin(logits_a[same]),
            recompute_margin=margin(logits_b[same]),
            max_abs_logit_difference_there=float(gap[same].max()),
        )
    return found


def time_program(program, args: tuple, repeats: int, warmup: int = 1) -> dict:
    """Compile ``program`` for ``args`` ahead of time, call it ``warmup`` times, then
    ``repeats`` times blocked: compile seconds, each call's seconds, their median, and the
    last call's outputs (as NumPy)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
    start = time.perf_counter()
    compiled = program.lower(*args).compile()
    compile_s = time.perf_counter() - start
    out = None
    for _ in range(warmup):
        out = jax.block_until_ready(compiled(*args))
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        seconds.append(time.perf_counter() - start)
    return {
        "compile_s": compile_s,
        "seconds": seconds,
        "median_s": statistics.median(seconds),
        "outputs": jax.tree.map(np.asarray, out),
    }


def heldout_prompt(config, length: int) -> np.ndarray:
    """The first ``length`` bytes of the held-out files (never trained on), in name order,
    repeated if they are shorter: (1, length) int32."""
    corpus = data.load_corpus(config)
    text = np.concatenate([np.asarray(d.tokens, np.int32) for d in corpus.heldout])
    return np.resize(text, length)[None].astype(np.int32)


def compare_at(config, params, prompt_len: int, new_tokens: int, repeats: int, cache="fp32"):
    """Both programs at one context: tokens/s of each (N new tokens over the median call; the
    cached path's call includes its prefill), compile seconds, speedup and the greedy
    comparison (first_difference)."""
    args = (params, heldout_prompt(config, prompt_len))
    timed = {
        "cached": time_program(
            cached_program(config, prompt_len, new_tokens, cache), args, repeats
        ),
        "recompute": time_program(recompute_program(config, prompt_len, new_tokens), args, repeats),
    }
    result = {"prompt_len": prompt_len, "new_tokens": new_tokens, "cache": cache}
    for name, figures in timed.items():
        result[name] = {
            "compile_s": figures["compile_s"],
            "median_s": figures["median_s"],
            "seconds": figures["seconds"],
            "tokens_per_s": new_tokens / figures["median_s"],
        }
    result["speedup"] = result["cached"]["tokens_per_s"] / result["recompute"]["tokens_per_s"]
    result["greedy"] = first_difference(timed["cached"]["outputs"], timed["recompute"]["outputs"])
    return result


def greedy_identity(config, params, prompt_len: int, new_tokens: int, cache: str = "fp32"):
    """first_difference of one untimed call of each program (traced at the matmul precision
    in force: the chip's HIGHEST recheck of a DEFAULT difference)."""
    args = (params, heldout_prompt(config, prompt_len))
    cached = cached_program(config, prompt_len, new_tokens, cache)(*args)
    recomputed = recompute_program(config, prompt_len, new_tokens)(*args)
    return first_difference(jax.device_get(cached), jax.device_get(recomputed))
