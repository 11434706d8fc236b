"""The bench's decoding figures: greedy decoding with the capstone's KV cache (kv_cache.py),
one dispatch per token and as one on-device lax.scan loop, against recomputing a full
forward pass for every new token; both give the same tokens (checked)."""

from __future__ import annotations

import functools
import statistics

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from capstones.byte_transformer import args, kv_cache, training
from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer.bench.steppers import stderr_progress
from core.perf import timing


def decode_prompt(corpus, length: int) -> np.ndarray:
    """(1, length) int32: the first ``length`` bytes of the training documents."""
    tokens = np.concatenate([d.tokens for d in corpus.train])[:length]
    if len(tokens) < length:
        tokens = np.resize(tokens, length)  # a tiny corpus: repeat it
    return np.asarray(tokens, np.int32)[None]


# The on-device loop compiles without XLA:CPU's multi-threaded Eigen: faster in the bench's
# interleaved A/B (decode_ab=N), whose one kept run (benchmarks/records/
# byte_transformer_decode_ab/) was taken on a busy machine and is marked under load, so it is
# not cited: rerun decode_ab on a quiet machine to confirm. The reasoning: one token's small
# matmuls pay more in thread hand-offs than they gain from a second thread.
LOOP_COMPILER_OPTIONS = {"xla_cpu_multi_thread_eigen": False}


def _programs(graphdef, capacity: int, loop_options: dict | None = None) -> dict:
    """The jitted prefill, decode step, on-device decode loop and recompute step;
    ``loop_options``: XLA compiler options of the loop program only ({}: XLA's defaults;
    None: LOOP_COMPILER_OPTIONS)."""
    if loop_options is None:
        loop_options = LOOP_COMPILER_OPTIONS
    return {
        **_step_programs(graphdef, capacity),
        "decode_loop": _loop_program(graphdef, tuple(sorted(loop_options.items()))),
    }


# One jit per model structure and capacity (and loop options): decoders of the same model
# shape in one process (the decode A/B's two loop settings, a second benchmark) run the
# programs compiled once, not a copy compiled again per Decoders (jit caches by function).
@functools.lru_cache(maxsize=8)
def _step_programs(graphdef, capacity: int) -> dict:
    def prefill_fn(state, tokens, precision):
        m = nnx.merge(graphdef, state)
        lengths = jnp.full((tokens.shape[0],), tokens.shape[1], jnp.int32)
        logits_BV, cache = kv_cache.prefill_apply(m, tokens, lengths, precision, capacity)
        return jnp.argmax(logits_BV, -1).astype(jnp.int32), cache

    def decode_fn(state, token_B, cache):
        logits_BV, cache = kv_cache.decode_apply(nnx.merge(graphdef, state), token_B, cache)
        return jnp.argmax(logits_BV, -1).astype(jnp.int32), cache

    def recompute_fn(state, padded_1S, length):
        logits = nnx.merge(graphdef, state)(padded_1S)
        token = jnp.argmax(logits[0, length - 1], -1).astype(jnp.int32)
        return jax.lax.dynamic_update_slice(padded_1S, token[None, None], (0, length))

    return {
        "prefill": jax.jit(prefill_fn, static_argnums=2),
        "decode": jax.jit(decode_fn, donate_argnums=2),
        "recompute": jax.jit(recompute_fn, donate_argnums=1),
    }


@functools.lru_cache(maxsize=8)
def _loop_program(graphdef, loop_options: tuple):
    def decode_loop_fn(state, token_B, cache, steps):
        """``steps`` greedy decode steps in one program (lax.scan): no host round trip
        and no dispatch per token, the cache carried (and updated in place) on device."""
        m = nnx.merge(graphdef, state)

        def step(carry, _):
            token, cache = carry
            logits_BV, cache = kv_cache.decode_apply(m, token, cache)
            token = jnp.argmax(logits_BV, -1).astype(jnp.int32)
            return (token, cache), token

        (_, cache), tokens_NB = jax.lax.scan(step, (token_B, cache), None, length=steps)
        return tokens_NB, cache

    return jax.jit(
        decode_loop_fn,
        static_argnums=3,
        donate_argnums=2,
        compiler_options=dict(loop_options) or None,
    )


class Decoders:
    """Greedy decoding of ``new_tokens`` after ``prompt_1P``, three ways, each run blocked
    once at the end and timed; compile on the first call of each."""

    def __init__(
        self,
        config: config_lib.Config,
        params: dict,
        prompt_1P,
        new_tokens: int,
        loop_options: dict | None = None,
    ):
        graphdef, self.state = nnx.split(training.model_from_params(config, params))
        self.prompt_len = prompt_1P.shape[1]
        self.new_tokens = new_tokens
        self.capacity = self.prompt_len + new_tokens
        if self.capacity > config.max_len:
            raise args.UsageError(
                f"decode_context + decode_tokens = {self.capacity} exceeds max_len={config.max_len}"
            )
        self.jit = _programs(graphdef, self.capacity, loop_options)
        self.prompt = jnp.asarray(prompt_1P)

    def _prefill(self, precision):
        """((first new token, cache), seconds), blocked."""
        return timing.timed_call(self.jit["prefill"], self.state, self.prompt, precision)

    def _decode_steps(self, token, cache):
        tokens = [token]
        for _ in range(self.new_tokens - 1):
            token, cache = self.jit["decode"](self.state, token, cache)
            tokens.append(token)
        return tokens

    def _decode_loop(self, token, cache):
        tokens_NB, _ = self.jit["decode_loop"](self.state, token, cache, self.new_tokens - 1)
        return np.asarray(jax.block_until_ready(tokens_NB))

    def _recompute_steps(self, padded):
        for length in range(self.prompt_len, self.capacity):
            padded = self.jit["recompute"](self.state, padded, length)
        return np.asarray(jax.block_until_ready(padded))[0, self.prompt_len :]

    def cached(self, precision):
        """(greedy tokens, prefill seconds, decode seconds for the new_tokens - 1 steps)."""
        (token, cache), prefill_s = self._prefill(precision)
        tokens, decode_s = timing.timed_call(self._decode_steps, token, cache)
        return [int(t[0]) for t in tokens], prefill_s, decode_s

    def cached_loop(self, precision):
        """``cached`` with the decode steps in one on-device loop (decode_loop_fn)."""
        (token, cache), prefill_s = self._prefill(precision)
        tokens_NB, decode_s = timing.timed_call(self._decode_loop, token, cache)
        return [int(token[0])] + [int(t) for t in tokens_NB[:, 0]], prefill_s, decode_s

    def recompute(self):
        """(greedy tokens, seconds for new_tokens full forwards)."""
        padded = jnp.zeros((1, self.capacity), jnp.int32).at[:, : self.prompt_len].set(self.prompt)
        jax.block_until_ready(padded)
        tokens, seconds = timing.timed_call(self._recompute_steps, padded)
        return [int(t) for t in tokens], seconds


def _method(repeats: int) -> str:
    return (
        "greedy, batch 1, argmax on the device, compile excluded; median of "
        f"{repeats} blocked runs (cached) and {max(1, min(repeats, 2))} (recompute). cached: "
        "kv_cache prefill of the prompt (gives new token "
        "1, timed apart) then one jitted kv_cache.decode_apply per further token: "
        "tokens_per_s = (new_tokens - 1) / decode seconds. recompute: one jitted full "
        "forward over the row padded to capacity per new token: tokens_per_s = "
        "new_tokens / seconds. speedup = cached fp32 / recompute tokens_per_s; "
        "end_to_end_speedup = recompute seconds / (prefill + decode seconds)"
    )


def time_cached(decoders: Decoders, precisions, repeats: int, progress) -> dict:
    """Per precision: median prefill and decode seconds, decode tokens/s, the tokens."""
    decode_steps = decoders.new_tokens - 1  # the first new token comes from the prefill
    out = {}
    for precision in precisions:
        decoders.cached(precision)  # compile prefill and decode for this precision
        runs = [decoders.cached(precision) for _ in range(repeats)]
        seconds = statistics.median(r[2] for r in runs)
        out[precision] = {
            "prefill_s": statistics.median(r[1] for r in runs),
            "seconds": seconds,
            "tokens_per_s": decode_steps / seconds if decode_steps else None,
            "tokens": runs[0][0],
        }
        progress(f"  cached decode {precision}: {decode_steps / seconds:,.1f} tokens/s")
    return out


def time_cached_loop(decoders: Decoders, precisions, repeats: int, progress) -> dict:
    """Per precision: the decode steps as one on-device loop (none for a single token)."""
    decode_steps = decoders.new_tokens - 1
    out = {}
    for precision in precisions if decode_steps else ():
        decoders.cached_loop(precision)  # compile the loop for this precision
        runs = [decoders.cached_loop(precision) for _ in range(repeats)]
        seconds = statistics.median(r[2] for r in runs)
        out[precision] = {
            "seconds": seconds,
            "tokens_per_s": decode_steps / seconds,
            "tokens": runs[0][0],
        }
        progress(
            f"  cached decode {precision}, on-device loop: {decode_steps / seconds:,.1f} tokens/s"
        )
    return out


def time_recompute(decoders: Decoders, repeats: int, progress) -> dict:
    decoders.recompute()  # compile
    runs = [decoders.recompute() for _ in range(max(1, min(repeats, 2)))]  # the slow side
    seconds = statistics.median(r[1] for r in runs)
    progress(f"  recompute: {decoders.new_tokens / seconds:,.1f} tokens/s")
    return {
        "seconds": seconds,
        "tokens_per_s": decoders.new_tokens / seconds,
        "forward_len": decoders.capacity,
        "tokens": runs[0][0],
    }


def add_speedups(result: dict) -> None:
    """The fp32 figures on top (tokens, prefill), speed-ups vs recompute, token agreement."""
    recompute = result["recompute"]
    if "fp32" in result["cached"]:
        fp32 = result["cached"]["fp32"]
        result["prefill_s"] = fp32["prefill_s"]
        result["tokens"] = fp32["tokens"]
        result["greedy_tokens_identical"] = fp32["tokens"] == recompute["tokens"]
        if fp32["tokens_per_s"]:
            result["speedup"] = fp32["tokens_per_s"] / recompute["tokens_per_s"]
        result["end_to_end_speedup"] = recompute["seconds"] / (fp32["prefill_s"] + fp32["seconds"])
    loop = result["cached_device_loop"].get("fp32")
    if loop:
        result["greedy_tokens_identical"] = result.get("greedy_tokens_identical", True) and (
            loop["tokens"] == recompute["tokens"]
        )
        result["speedup_device_loop"] = loop["tokens_per_s"] / recompute["tokens_per_s"]


def decode_benchmark(
    config: config_lib.Config,
    params: dict,
    prompt_1P: np.ndarray,
    new_tokens: int,
    precisions=kv_cache.PRECISIONS,
    repeats: int = 5,
    progress=stderr_progress,
) -> dict:
    """Greedy decoding of ``new_tokens`` after the prompt: KV cache vs full recompute.

    Cached: kv_cache prefill (timed apart) then one jitted decode_apply per token (argmax
    on the device, the cache donated). Recompute: a jitted full forward over the row
    padded to capacity = P + new_tokens for every new token (causal, so the padding after
    the current length does not change the logits that pick the token; the cache attends
    over the same capacity slots, masked). Both loops block once at the end.
    """
    decoders = Decoders(config, params, prompt_1P, new_tokens)
    result = {
        "context": decoders.prompt_len,
        "new_tokens": new_tokens,
        "capacity": decoders.capacity,
        "method": _method(repeats),
        "cached": time_cached(decoders, precisions, repeats, progress),
        "cached_device_loop": time_cached_loop(decoders, precisions, repeats, progress),
        "recompute": time_recompute(decoders, repeats, progress),
    }
    add_speedups(result)
    return result
