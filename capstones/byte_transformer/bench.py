"""Measure the capstone: the ``bench`` and ``profile`` commands.

    python -m capstones.byte_transformer bench [out=bench/bench.json] [steps=10 warmup=2 ...]
    python -m capstones.byte_transformer profile [run_dir=DIR] [out=bench/profile] [...]

``bench`` measures, in ONE process on one machine (every figure labelled with it):

1. the JAX train step (training.make_train_step, as ``train`` runs it): lower and compile
   time (``jit(...).lower(state, batch)`` then ``.compile()``, timed separately), then the
   steady-state step time, and where its op time goes (a 2-step profiler trace, by
   category); also "JAX tuned": the same train_step with the changes that measured faster
   on XLA:CPU without touching the math (TUNED_CHANGES: rbg dropout bits, donated state);
2. the PyTorch twin (torch_twin.py: the same model, loss, dropout placement, clipping and
   AdamW) eager and under ``torch.compile`` (its first step, which compiles, is reported
   apart) on the same batch, ``torch.set_num_threads(os.cpu_count())``;
   all are timed in interleaved rounds (one step of each per round, a 50 ms pause before
   each so another framework's spinning worker threads go idle), so a change of machine
   load hits all alike; every sample is blocked on
   (``block_until_ready`` / a host read of the loss) and the median is reported;
3. MFU: model FLOPs per step (``flops_per_step``: 6 * N_matmul * B * T for the weight
   matmuls + 12 * L * B * T^2 * D for attention's two T x T matmuls, forward and backward,
   causal half NOT discounted; elementwise work, softmax, LayerNorm and the optimizer are
   not counted) / step time / this machine's sustained float32 matmul FLOP/s
   (core.perf.machine.measure_matmul at ``matmul_n``, measured in the same run);
4. KV-cache decoding vs recomputing: greedy decoding of ``decode_tokens`` new tokens after a
   ``decode_context``-byte prompt (batch 1) with the capstone's KV cache (kv_cache.py) vs a
   jitted full forward pass over the whole (padded) row for every new token; both produce
   the same tokens (checked) so the speed-up compares equal work;
5. KV-cache bytes per token per layer in fp32, bf16 and int8 (closed form from the shapes,
   cross-checked against the nbytes of real cache arrays).

bench.json schema (keys):
    {"format": "byte_transformer bench", "version": 1,
     "command": str, "machine": str, "cpu_model": str, "cores": int,
     "load_average": {"start": [1m, 5m, 15m], "end": [...] (includes this run's own load),
                      "other_processes_cores": float|null (average cores busy with OTHER
                      processes during the run, from /proc/stat minus this process)},
     "versions": {python, jax, jaxlib, flax, optax, numpy, torch}, "xla_flags": str,
     "torch_threads": int, "jax_devices": [str], "config": Config.to_dict(),
     "batch": {"batch_size", "seq_len", "tokens_per_step" (B*T), "valid_tokens_per_step"},
     "timing": {"method": str, "rounds": int, "warmup": int},
     "peak": {"kernel", "flops", "seconds", "flop_per_s", "method"},
     "flops": {"formula": str, "matmul_params": int, "matmul": float, "attention": float,
               "total": float, "xla_cost_analysis_flops": float|null},
     "jax": {"lower_s", "compile_s", "step": STEP, "mfu": float,
             "breakdown": {"method", "wall_step_s", "categories": [{"category", "ms_per_step",
                           "share"}]}},
     "jax_tuned": {"changes": [str], "lower_s", "compile_s", "step": STEP, "mfu": float}
                  (the same train_step with the measured XLA:CPU improvements),
     "torch_eager": {"step": STEP, "mfu": float},
     "torch_compile": {"first_step_s": float (includes compiling, inductor caches off),
                       "caches": str, "compile_s_estimate":
                       float (first step - median step), "step": STEP, "mfu": float}
                      or {"error": str} (torch.compile failed; the error is recorded),
     "jax_vs_torch": {"speedup": float (best torch median / JAX median = JAX tokens/s /
                      best torch tokens/s), "faster_torch": "torch_eager"|"torch_compile",
                      "tuned_speedup": float (the same with jax_tuned)},
     "decode": {"context": int, "new_tokens": int, "capacity": int, "method": str,
                "prefill_s": float, "cached": {"fp32"|"bf16"|"int8": {"prefill_s", "seconds",
                "tokens_per_s", "tokens"}}, "recompute": {"seconds", "tokens_per_s",
                "forward_len": int, "tokens"}, "speedup": float (fp32 cached / recompute
                tokens/s), "cached_device_loop": {precision: {"seconds", "tokens_per_s",
                "tokens"}} (the decode steps in one lax.scan program),
                "speedup_device_loop": float (its fp32 tokens/s / recompute; the
                decode_speedup target takes the faster of the two decoders), "end_to_end_speedup": float, "greedy_tokens_identical": bool,
                "tokens": [int]},
     "cache_bytes": {"fp32"|"bf16"|"int8": {"closed_form", "measured", "ratio_vs_fp32"},
                     "formula": str},
     "targets": {name: {"value", "target", "op": ">="|"<=", "pass": bool}},
     "defects": [str], "warnings": [str] (e.g. a shared machine), "total_s": float}
    STEP = {"median_s", "p10_s", "p90_s", "min_s", "samples_s": [..], "cpu_median_s",
            "tokens_per_s" (B*T / median), "valid_tokens_per_s", "mfu"}

profile.json schema (keys):
    {"format": "byte_transformer profile", "version": 1, "machine": str, "config": {...},
     "trace_dir": str, "steps": int, "wall_step_s": [float], "wall_total_s": float,
     "module": str, "threads": int,
     "op_time_total_s": float (sum of op durations over all threads and traced steps),
     "op_busy_s": float (time at least one op was running: union of op intervals),
     "op_table": [{"op", "count", "total_ms", "ms_per_step", "share", "hlo", "source"}],
     "by_source": [{"source" (the JAX primitive an op came from), "ms_per_step", "share"}],
     "by_category": [{"category": one of CATEGORIES, "ms_per_step", "share"}] (an op
                     fused with dropout's random bits counts as dropout),
     "by_phase": [{"phase": "forward"|"backward"|"dropout RNG"|"optimizer & other"|
                   "unattributed", "ms_per_step", "share"}]}
Op events of XLA:CPU are leaf thunks (no nesting), so each op's duration is its self time.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from capstones.byte_transformer import args, data, kv_cache, torch_twin, training
from capstones.byte_transformer import config as config_lib
from core import checkpoint
from core.perf import machine

BENCH_FORMAT = "byte_transformer bench"
PROFILE_FORMAT = "byte_transformer profile"
TARGETS = {  # name: (op, threshold) from the issue
    "jax_vs_torch_speedup": (">=", 1.15),
    "mfu": (">=", 0.45),
    "decode_speedup": (">=", 20.0),
    "int8_cache_ratio": ("<=", 0.27),
    "bf16_cache_ratio": ("<=", 0.5),
}
PAUSE_S = 0.05  # before each timed sample: lets the other framework's spinning threads sleep
FLOP_FORMULA = (
    "6 * N_matmul * B * T + 12 * L * B * T^2 * D; N_matmul = L * (4 D^2 + 2 D F) + D V "
    "(q, k, v, o, MLP in/out, head; embeddings, biases, LayerNorms excluded); a multiply-add "
    "is 2 FLOPs; forward + backward (backward = 2 x forward); attention's QK^T and PV over "
    "the full T x T (causal half not discounted); elementwise, softmax, LayerNorm, loss and "
    "optimizer FLOPs not counted"
)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --- FLOPs and MFU ---------------------------------------------------------------------------


def matmul_params(config: config_lib.Config) -> int:
    """Parameters that take part in a matmul: L * (4 D^2 + 2 D F) + D V."""
    d, f, v = config.d_model, config.hidden, config.model_config().vocab_size
    return config.num_layers * (4 * d * d + 2 * d * f) + d * v


def flops_per_step(config: config_lib.Config) -> dict:
    """Model FLOPs of one training step (forward + backward) at (batch_size, seq_len)."""
    b, t, d, layers = config.batch_size, config.seq_len, config.d_model, config.num_layers
    n = matmul_params(config)
    matmul = 6.0 * n * b * t
    attention = 12.0 * layers * b * t * t * d
    return {
        "formula": FLOP_FORMULA,
        "matmul_params": n,
        "matmul": matmul,
        "attention": attention,
        "total": matmul + attention,
    }


def mfu(flops: float, seconds: float, peak_flop_per_s: float) -> float:
    """Model FLOPs utilization: (flops / seconds) / peak_flop_per_s."""
    if seconds <= 0 or peak_flop_per_s <= 0:
        raise ValueError(f"seconds and peak must be > 0, got {seconds}, {peak_flop_per_s}")
    return flops / seconds / peak_flop_per_s


# --- timing --------------------------------------------------------------------------------


def step_summary(samples: list[float], cpu: list[float], tokens: int, valid: float) -> dict:
    ordered = sorted(samples)
    median = statistics.median(ordered)

    def quantile(q):
        return float(np.quantile(ordered, q))

    return {
        "median_s": median,
        "p10_s": quantile(0.1),
        "p90_s": quantile(0.9),
        "min_s": ordered[0],
        "samples_s": list(samples),
        "cpu_median_s": statistics.median(cpu),
        "tokens_per_s": tokens / median,
        "valid_tokens_per_s": valid / median,
    }


def interleaved(
    steppers: dict[str, Callable[[], None]], rounds: int, warmup: int, progress=_progress
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU (process) seconds of each blocked stepper, one sample each per round."""
    for name, step in steppers.items():
        for _ in range(warmup):
            step()
        progress(f"  warmed {name}")
    wall = {name: [] for name in steppers}
    cpu = {name: [] for name in steppers}
    for number in range(rounds):
        for name, step in steppers.items():
            time.sleep(PAUSE_S)
            cpu_start, start = time.process_time(), time.perf_counter()
            step()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - cpu_start)
        progress(
            f"  round {number + 1}/{rounds}: "
            + ", ".join(f"{n} {wall[n][-1]:.3f}s" for n in steppers)
        )
    return wall, cpu


# --- the JAX and torch steps ----------------------------------------------------------------


def jax_stepper(
    config: config_lib.Config, state: dict, batch: dict, step_fn=None
) -> tuple[Callable, dict]:
    """(step(): one blocked training step that advances the state, compile figures).
    ``step_fn``: a jitted (state, batch) -> (state, metrics), default the capstone's own
    training.make_train_step(config). figures["compiled"] is the executable."""
    step_fn = step_fn or training.make_train_step(config)
    batch = jax.device_put(batch)
    start = time.perf_counter()
    lowered = step_fn.lower(state, batch)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    cost = None
    with contextlib.suppress(Exception):  # cost_analysis is best effort on some backends
        analysis = compiled.cost_analysis()
        analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
        cost = float(analysis.get("flops")) if analysis and "flops" in analysis else None
    holder = {"state": state}

    def step():
        new_state, metrics = compiled(holder["state"], batch)
        jax.block_until_ready((new_state, metrics))
        holder["state"] = new_state

    figures = {
        "lower_s": lowered_at - start,
        "compile_s": compiled_at - lowered_at,
        "xla_cost_analysis_flops": cost,
        "compiled": compiled,
        "batch": batch,
        "holder": holder,
    }
    return step, figures


TUNED_CHANGES = (
    "dropout bits from the 'rbg' PRNG (XLA RngBitGenerator) instead of threefry2x32: "
    "same Bernoulli(1 - rate) masks in distribution, other bits",
    "training state donated (donate_argnums=0): parameters and Adam moments updated in "
    "place instead of into fresh buffers",
)


def jax_tuned_stepper(config: config_lib.Config, params: dict, batch: dict):
    """The same train step (training.train_step, same math) with the changes that measured
    faster on XLA:CPU (TUNED_CHANGES); (step, compile figures). The PRNG choice is made
    while the dropout key is created and the step traced, then restored."""
    previous = jax.config.jax_default_prng_impl
    jax.config.update("jax_default_prng_impl", "rbg")
    try:
        state = training.init_state(config)
        state["params"] = jax.tree.map(jnp.copy, params)  # donated: never the caller's
        training.make_train_step(config)  # builds the model structure outside the trace
        step_fn = jax.jit(functools.partial(training.train_step, config), donate_argnums=0)
        return jax_stepper(config, state, batch, step_fn)
    finally:
        jax.config.update("jax_default_prng_impl", previous)


def torch_stepper(config: config_lib.Config, params: dict, batch: dict, compile_: bool):
    """step(): one twin training step (eager or torch.compile'd), waited for."""
    import torch

    model = torch_twin.from_jax_params(config, params)
    model.train()
    optimizer = torch_twin.make_optimizer(config, model)
    torch_batch = torch_twin.batch_to_torch(batch)
    loss_fn = torch.compile(model.loss) if compile_ else model.loss

    def step():
        metrics = torch_twin.train_step(model, optimizer, torch_batch, config.clip_norm, loss_fn)
        float(metrics["loss"])  # CPU tensors: a host read waits for the step

    return step


def step_breakdown(figures: dict, steps: int = 2) -> dict:
    """ms per step by category (CATEGORIES) of the compiled JAX step, from a profiler
    trace of ``steps`` blocked steps (in a temporary directory, deleted after)."""
    import tempfile

    from core.perf import trace

    compiled, batch, holder = figures["compiled"], figures["batch"], figures["holder"]
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as tmp:
        rows, _, wall, _, _, state = traced_op_rows(
            compiled, holder["state"], batch, pathlib.Path(tmp), steps
        )
    holder["state"] = state
    hlo_text = compiled.as_text()
    definitions = trace.hlo_definitions(hlo_text, [r["op"] for r in rows])
    return {
        "method": f"jax.profiler trace of {steps} steps; XLA op self time by category "
        "(core.perf.trace + the HLO's op_name metadata); op time sums over threads",
        "wall_step_s": statistics.median(wall),
        "categories": categorize(rows, definitions, op_sources(hlo_text), steps),
    }


def torch_compile_stepper(config: config_lib.Config, params: dict, batch: dict):
    """(stepper, {"first_step_s", "caches"}) after one compiling step, or (None, {"error":
    str}) when torch.compile fails (e.g. no C++ compiler): the error is a result, not a
    crash. Inductor's caches are disabled for the first step, so its time is a cold compile
    (what a fresh machine pays), not a cache hit from an earlier run."""
    try:
        import torch._inductor.config as inductor_config

        step = torch_stepper(config, params, batch, True)
        with inductor_config.patch(force_disable_caches=True):
            start = time.perf_counter()
            step()
            first = time.perf_counter() - start
        return step, {"first_step_s": first, "caches": "disabled for the first step (cold)"}
    except Exception as exc:  # noqa: BLE001 - any failure of the compiler stack is recorded
        message = " ".join(f"{type(exc).__name__}: {exc}".split())
        return None, {"error": message[:2000]}


# --- decoding: KV cache vs recompute ------------------------------------------------------


def decode_prompt(corpus, length: int) -> np.ndarray:
    """(1, length) int32: the first ``length`` bytes of the training documents."""
    tokens = np.concatenate([d.tokens for d in corpus.train])[:length]
    if len(tokens) < length:
        tokens = np.resize(tokens, length)  # a tiny corpus: repeat it
    return np.asarray(tokens, np.int32)[None]


def decode_benchmark(
    config: config_lib.Config,
    params: dict,
    prompt_1P: np.ndarray,
    new_tokens: int,
    precisions=kv_cache.PRECISIONS,
    repeats: int = 5,
) -> dict:
    """Greedy decoding of ``new_tokens`` after the prompt: KV cache vs full recompute.

    Cached: kv_cache prefill (timed apart) then one jitted decode_apply per token (argmax
    on the device, the cache donated). Recompute: a jitted full forward over the row
    padded to capacity = P + new_tokens for every new token (causal, so the padding after
    the current length does not change the logits that pick the token; the cache attends
    over the same capacity slots, masked). Both loops block once at the end.
    """
    model = training.model_from_params(config, params)
    graphdef, state = nnx.split(model)
    prompt_len = prompt_1P.shape[1]
    capacity = prompt_len + new_tokens
    if capacity > config.max_len:
        raise args.UsageError(
            f"decode_context + decode_tokens = {capacity} exceeds max_len={config.max_len}"
        )

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

    prefill_jit = jax.jit(prefill_fn, static_argnums=2)
    decode_jit = jax.jit(decode_fn, donate_argnums=2)
    decode_loop_jit = jax.jit(decode_loop_fn, static_argnums=3, donate_argnums=2)
    recompute_jit = jax.jit(recompute_fn, donate_argnums=1)
    prompt = jnp.asarray(prompt_1P)

    def cached_run(precision):
        """(greedy tokens, prefill seconds, decode seconds for the new_tokens - 1 steps)."""
        start = time.perf_counter()
        token, cache = jax.block_until_ready(prefill_jit(state, prompt, precision))
        prefilled = time.perf_counter()
        tokens = [token]
        for _ in range(new_tokens - 1):
            token, cache = decode_jit(state, token, cache)
            tokens.append(token)
        jax.block_until_ready(tokens)
        done = time.perf_counter()
        return [int(t[0]) for t in tokens], prefilled - start, done - prefilled

    def cached_loop_run(precision):
        """cached_run with the decode steps in one on-device loop (decode_loop_fn)."""
        start = time.perf_counter()
        token, cache = jax.block_until_ready(prefill_jit(state, prompt, precision))
        prefilled = time.perf_counter()
        tokens_NB, cache = decode_loop_jit(state, token, cache, new_tokens - 1)
        tokens_NB = np.asarray(jax.block_until_ready(tokens_NB))
        done = time.perf_counter()
        return (
            [int(token[0])] + [int(t) for t in tokens_NB[:, 0]],
            prefilled - start,
            done - prefilled,
        )

    def recompute_run():
        """(greedy tokens, seconds for new_tokens full forwards)."""
        padded = jnp.zeros((1, capacity), jnp.int32).at[:, :prompt_len].set(prompt)
        jax.block_until_ready(padded)
        start = time.perf_counter()
        for length in range(prompt_len, capacity):
            padded = recompute_jit(state, padded, length)
        tokens = np.asarray(jax.block_until_ready(padded))[0, prompt_len:]
        return [int(t) for t in tokens], time.perf_counter() - start

    decode_steps = new_tokens - 1  # the first new token comes from the prefill
    result = {
        "context": prompt_len,
        "new_tokens": new_tokens,
        "capacity": capacity,
        "method": (
            "greedy, batch 1, argmax on the device, compile excluded; median of "
            f"{repeats} blocked runs (cached) and {max(1, min(repeats, 2))} (recompute). cached: kv_cache prefill of the prompt (gives new token "
            "1, timed apart) then one jitted kv_cache.decode_apply per further token: "
            "tokens_per_s = (new_tokens - 1) / decode seconds. recompute: one jitted full "
            "forward over the row padded to capacity per new token: tokens_per_s = "
            "new_tokens / seconds. speedup = cached fp32 / recompute tokens_per_s; "
            "end_to_end_speedup = recompute seconds / (prefill + decode seconds)"
        ),
        "cached": {},
    }
    for precision in precisions:
        cached_run(precision)  # compile prefill and decode for this precision
        runs = [cached_run(precision) for _ in range(repeats)]
        prefill_s = statistics.median(r[1] for r in runs)
        seconds = statistics.median(r[2] for r in runs)
        result["cached"][precision] = {
            "prefill_s": prefill_s,
            "seconds": seconds,
            "tokens_per_s": decode_steps / seconds if decode_steps else None,
            "tokens": runs[0][0],
        }
        _progress(f"  cached decode {precision}: {decode_steps / seconds:,.1f} tokens/s")
    result["cached_device_loop"] = {}
    if decode_steps:
        for precision in precisions:
            cached_loop_run(precision)  # compile the loop for this precision
            runs = [cached_loop_run(precision) for _ in range(repeats)]
            seconds = statistics.median(r[2] for r in runs)
            result["cached_device_loop"][precision] = {
                "seconds": seconds,
                "tokens_per_s": decode_steps / seconds,
                "tokens": runs[0][0],
            }
            _progress(
                f"  cached decode {precision}, on-device loop: {decode_steps / seconds:,.1f} tokens/s"
            )
    recompute_run()  # compile
    runs = [recompute_run() for _ in range(max(1, min(repeats, 2)))]  # ~1 s each
    seconds = statistics.median(r[1] for r in runs)
    result["recompute"] = {
        "seconds": seconds,
        "tokens_per_s": new_tokens / seconds,
        "forward_len": capacity,
        "tokens": runs[0][0],
    }
    _progress(f"  recompute: {new_tokens / seconds:,.1f} tokens/s")
    if "fp32" in result["cached"]:
        fp32 = result["cached"]["fp32"]
        result["prefill_s"] = fp32["prefill_s"]
        result["tokens"] = fp32["tokens"]
        result["greedy_tokens_identical"] = fp32["tokens"] == result["recompute"]["tokens"]
        if fp32["tokens_per_s"]:
            result["speedup"] = fp32["tokens_per_s"] / result["recompute"]["tokens_per_s"]
        result["end_to_end_speedup"] = seconds / (fp32["prefill_s"] + fp32["seconds"])
    loop = result["cached_device_loop"].get("fp32")
    if loop:
        result["greedy_tokens_identical"] = result.get("greedy_tokens_identical", True) and (
            loop["tokens"] == result["recompute"]["tokens"]
        )
        result["speedup_device_loop"] = loop["tokens_per_s"] / result["recompute"]["tokens_per_s"]
    return result


# --- cache bytes ----------------------------------------------------------------------------

CACHE_FORMULA = (
    "k and v per token per layer: fp32 2 * D * 4, bf16 2 * D * 2, int8 2 * D * 1 + "
    "2 * H * 4 (a float32 scale per (token, head) for each of k and v)"
)


def cache_bytes_closed_form(config: config_lib.Config, precision: str) -> int:
    d, h = config.d_model, config.num_heads
    per_element = {"fp32": 4, "bf16": 2, "int8": 1}[precision]
    return 2 * d * per_element + (2 * h * 4 if precision == "int8" else 0)


def cache_bytes(config: config_lib.Config, slots: int = 16) -> dict:
    """Closed form vs measured (array nbytes of a real kv_cache cache, per token per layer)."""
    model_config = config.model_config()
    slots = min(slots, config.max_len)
    out: dict = {"formula": CACHE_FORMULA}
    for precision in kv_cache.PRECISIONS:
        cache = kv_cache.init_cache(model_config, 1, slots, precision)
        arrays = [cache.k_LBSHK, cache.v_LBSHK, cache.k_scale_LBSH, cache.v_scale_LBSH]
        stored = sum(a.nbytes for a in arrays if a is not None)  # length_B is per row
        out[precision] = {
            "closed_form": cache_bytes_closed_form(config, precision),
            "measured": stored / (config.num_layers * slots),
        }
    for precision in kv_cache.PRECISIONS:
        out[precision]["ratio_vs_fp32"] = out[precision]["closed_form"] / out["fp32"]["closed_form"]
    return out


# --- the bench command ------------------------------------------------------------------------


def versions() -> dict:
    import flax
    import jaxlib
    import optax

    found = {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "flax": flax.__version__,
        "optax": optax.__version__,
        "numpy": np.__version__,
    }
    try:
        import torch

        found["torch"] = torch.__version__
    except ImportError:
        found["torch"] = None
    return found


def target_rows(values: dict) -> dict:
    rows = {}
    for name, (op, threshold) in TARGETS.items():
        value = values.get(name)
        if value is None:
            rows[name] = {"value": None, "target": threshold, "op": op, "pass": False}
            continue
        passed = value >= threshold if op == ">=" else value <= threshold
        rows[name] = {"value": value, "target": threshold, "op": op, "pass": bool(passed)}
    return rows


def run_bench(
    config: config_lib.Config,
    params: dict | None = None,
    steps: int = 10,
    warmup: int = 2,
    torch_compile: bool = True,
    decode_context: int = 512,
    decode_tokens: int = 32,
    matmul_n: int = 2048,
    command: str = "",
    progress=_progress,
) -> dict:
    """Every figure of bench.json (see the module docstring); ``params`` default: fresh."""
    import torch

    began = time.perf_counter()
    load_start = list(os.getloadavg())
    counters_start = cpu_counters()
    torch.set_num_threads(os.cpu_count() or 1)
    progress(f"bench on {machine.machine_label()}, load average {load_start}")
    corpus = data.load_corpus(config)
    batch = data.training_stream(config, corpus).next_batch()
    tokens = config.batch_size * config.seq_len
    valid = float(batch["weights_BT"].sum())

    progress(f"peak: float32 matmul {matmul_n}x{matmul_n}")
    peak = machine.measure_matmul(matmul_n, "float32", repeats=5)
    peak["method"] = "core.perf.machine.measure_matmul: jit(jnp.matmul), median of 5, 2 n^3 FLOPs"

    state = training.init_state(config)
    if params is not None:
        state["params"] = params
    progress("JAX: lowering and compiling the train step")
    jax_step, compile_figures = jax_stepper(config, state, batch)
    progress(
        f"  lower {compile_figures['lower_s']:.2f}s, compile {compile_figures['compile_s']:.2f}s"
    )
    progress("JAX tuned (rbg dropout bits, donated state): lowering and compiling")
    tuned_step, tuned_figures = jax_tuned_stepper(config, state["params"], batch)
    steppers = {
        "jax": jax_step,
        "jax_tuned": tuned_step,
        "torch_eager": torch_stepper(config, state["params"], batch, False),
    }
    if torch_compile:
        progress("torch.compile: first step (compiles forward and backward)")
        compiled_step, torch_compile_figures = torch_compile_stepper(config, state["params"], batch)
        if compiled_step is not None:
            steppers["torch_compile"] = compiled_step
            progress(f"  first step {torch_compile_figures['first_step_s']:.1f}s")
        else:
            progress(f"  torch.compile failed: {torch_compile_figures['error'][:200]}")
    else:
        torch_compile_figures = {"error": "skipped (torch_compile=false)"}

    progress(f"timing {steps} interleaved rounds of {', '.join(steppers)}")
    wall, cpu = interleaved(steppers, steps, warmup, progress)
    progress("JAX: where the step's time goes (2 traced steps)")
    breakdown = step_breakdown(compile_figures)
    flops = flops_per_step(config)
    flops["xla_cost_analysis_flops"] = compile_figures.pop("xla_cost_analysis_flops")
    for figures in (compile_figures, tuned_figures):
        for key in ("compiled", "batch", "holder", "xla_cost_analysis_flops"):
            figures.pop(key, None)
    summaries = {n: step_summary(wall[n], cpu[n], tokens, valid) for n in steppers}
    for summary in summaries.values():
        summary_mfu = mfu(flops["total"], summary["median_s"], peak["flop_per_s"])
        summary["mfu"] = summary_mfu
    jax_figures = {
        **compile_figures,
        "step": summaries["jax"],
        "mfu": summaries["jax"]["mfu"],
        "breakdown": breakdown,
    }
    tuned = {
        "changes": list(TUNED_CHANGES),
        **tuned_figures,
        "step": summaries["jax_tuned"],
        "mfu": summaries["jax_tuned"]["mfu"],
    }
    eager = {"step": summaries["torch_eager"], "mfu": summaries["torch_eager"]["mfu"]}
    if "torch_compile" in summaries:
        median = summaries["torch_compile"]["median_s"]
        torch_compile_figures.update(
            compile_s_estimate=torch_compile_figures["first_step_s"] - median,
            step=summaries["torch_compile"],
            mfu=summaries["torch_compile"]["mfu"],
        )
    torch_names = [n for n in ("torch_eager", "torch_compile") if n in summaries]
    faster = min(torch_names, key=lambda n: summaries[n]["median_s"])
    speedup = summaries[faster]["median_s"] / summaries["jax"]["median_s"]
    tuned_speedup = summaries[faster]["median_s"] / summaries["jax_tuned"]["median_s"]

    progress(f"decode: {decode_context}-byte prompt, {decode_tokens} new tokens, batch 1")
    decode = decode_benchmark(
        config, state["params"], decode_prompt(corpus, decode_context), decode_tokens
    )
    cache = cache_bytes(config)

    values = {
        "jax_vs_torch_speedup": speedup,
        "mfu": jax_figures["mfu"],
        # the faster of the two cached decoders (per-token dispatch, on-device loop)
        "decode_speedup": max(
            (v for v in (decode.get("speedup"), decode.get("speedup_device_loop")) if v),
            default=None,
        ),
        "int8_cache_ratio": cache["int8"]["ratio_vs_fp32"],
        "bf16_cache_ratio": cache["bf16"]["ratio_vs_fp32"],
    }
    defects = []
    if speedup < 1.0:
        parts = sorted(breakdown["categories"], key=lambda row: -row["ms_per_step"])
        defects.append(
            f"JAX train step is slower than {faster} ({speedup:.2f}x; tuned "
            f"{tuned_speedup:.2f}x). Where the JAX step's op time goes: "
            + ", ".join(f"{row['category']} {row['ms_per_step']:.0f} ms" for row in parts)
            + " (jax.breakdown; `profile` for the op table)"
        )
    if not decode.get("greedy_tokens_identical", False):
        defects.append(
            "cached and recomputed greedy tokens differ: the speed-up is not like for like"
        )
    report = {
        "format": BENCH_FORMAT,
        "version": 1,
        "command": command,
        "machine": machine.machine_label(),
        "cpu_model": machine.cpu_model(),
        "cores": machine.core_count(),
        "load_average": {"start": load_start},
        "versions": versions(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "torch_threads": torch.get_num_threads(),
        "jax_devices": [str(d) for d in jax.devices()],
        "config": config.to_dict(),
        "batch": {
            "batch_size": config.batch_size,
            "seq_len": config.seq_len,
            "tokens_per_step": tokens,
            "valid_tokens_per_step": valid,
        },
        "timing": {
            "method": (
                "one batch from the training stream, reused; each step advances its own "
                "state; interleaved rounds (jax, jax tuned, torch eager, torch compile), a "
                f"{PAUSE_S * 1e3:.0f} ms pause before each blocked sample; median; "
                "cpu_median_s = process CPU seconds per step (all threads)"
            ),
            "rounds": steps,
            "warmup": warmup,
        },
        "peak": peak,
        "flops": flops,
        "jax": jax_figures,
        "jax_tuned": tuned,
        "torch_eager": eager,
        "torch_compile": torch_compile_figures,
        "jax_vs_torch": {
            "speedup": speedup,
            "faster_torch": faster,
            "tuned_speedup": tuned_speedup,
        },
        "decode": decode,
        "cache_bytes": cache,
        "targets": target_rows(values),
        "defects": defects,
    }
    report["load_average"]["end"] = list(os.getloadavg())
    report["load_average"]["other_processes_cores"] = other_processes_cores(
        counters_start, cpu_counters()
    )
    report["warnings"] = load_warnings(report)
    report["total_s"] = time.perf_counter() - began
    return report


def cpu_counters() -> dict:
    """Busy CPU seconds of the whole machine (/proc/stat; None elsewhere), this process's
    and its children's CPU seconds, and the wall clock: two readings give how many cores
    OTHER processes kept busy in between (the load average also counts this process)."""
    busy = None
    try:
        fields = [int(v) for v in pathlib.Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        busy = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    own = os.times()
    return {
        "machine_busy_s": busy,
        "own_s": own.user + own.system + own.children_user + own.children_system,
        "wall_s": time.perf_counter(),
    }


def other_processes_cores(start: dict, end: dict) -> float | None:
    """Average cores other processes used between two cpu_counters() readings."""
    if start["machine_busy_s"] is None or end["machine_busy_s"] is None:
        return None
    wall = end["wall_s"] - start["wall_s"]
    others = (end["machine_busy_s"] - start["machine_busy_s"]) - (end["own_s"] - start["own_s"])
    return max(0.0, others / wall) if wall > 0 else None


def load_warnings(report: dict) -> list[str]:
    """A warning when other processes shared the cores during the run: the figures then
    measure the frameworks under contention, not the machine."""
    cores = report["cores"]
    others = report["load_average"].get("other_processes_cores")
    start = report["load_average"]["start"][0]
    if (others is None and start <= 0.5 * cores) or (others is not None and others <= 0.25):
        return []
    measured = (
        f"other processes kept {others:.2f} of {cores} cores busy on average"
        if others is not None
        else f"1-minute load average {start:.2f} on {cores} cores at the start"
    )
    return [
        f"the machine was shared: {measured}. Under contention a framework whose worker threads wait for each other at barriers "
        "(torch's OpenMP) loses more than one whose threads take independent work (XLA), "
        "so the JAX/torch ratio and the peak differ from a quiet machine's; compare "
        "cpu_median_s (process CPU seconds per step) and rerun on an idle machine"
    ]


def format_bench(report: dict) -> str:
    """The readable table of a bench report."""
    load = report["load_average"]
    others = load.get("other_processes_cores")
    lines = [
        f"machine: {report['machine']}  (load average start {load['start'][0]:.2f}, end "
        f"{load['end'][0]:.2f}; other processes used "
        + ("n/a" if others is None else f"{others:.2f}")
        + " cores on average during the run)"
    ]
    config = report["config"]
    lines.append(
        f"config: d_model {config['d_model']}, layers {config['num_layers']}, heads "
        f"{config['num_heads']}, seq {config['seq_len']}, batch {config['batch_size']}, "
        f"dropout {config['dropout']}; {report['batch']['tokens_per_step']} tokens/step "
        f"({report['batch']['valid_tokens_per_step']:.0f} valid)"
    )
    peak = report["peak"]
    lines.append(f"peak: {peak['kernel']} {peak['flop_per_s'] / 1e9:.1f} GFLOP/s")
    flops = report["flops"]
    lines.append(
        f"model FLOPs/step: {flops['total'] / 1e9:.2f} G (matmul {flops['matmul'] / 1e9:.2f} G, "
        f"attention {flops['attention'] / 1e9:.2f} G)"
    )
    jax_fig = report["jax"]
    lines.append(
        f"JAX compile: lower {jax_fig['lower_s']:.2f}s + compile {jax_fig['compile_s']:.2f}s"
    )
    tc = report["torch_compile"]
    if "error" in tc:
        lines.append(f"torch.compile: {tc['error'][:160]}")
    else:
        lines.append(
            f"torch.compile: first step {tc['first_step_s']:.1f}s "
            f"(~{tc['compile_s_estimate']:.1f}s compiling)"
        )
    lines.append("")
    lines.append(
        f"{'train step':<14} {'median s':>9} {'p10-p90 s':>13} {'cpu s':>7} {'tokens/s':>10} {'MFU':>6}"
    )
    for name, label in (
        ("jax", "JAX"),
        ("jax_tuned", "JAX tuned"),
        ("torch_eager", "torch eager"),
        ("torch_compile", "torch.compile"),
    ):
        part = report[name]
        if "step" not in part:
            continue
        s = part["step"]
        lines.append(
            f"{label:<14} {s['median_s']:>9.3f} {s['p10_s']:>6.3f}-{s['p90_s']:<6.3f} "
            f"{s['cpu_median_s']:>7.2f} {s['tokens_per_s']:>10,.0f} {part['mfu']:>6.1%}"
        )
    speed = report["jax_vs_torch"]
    lines.append(
        f"JAX vs faster torch ({speed['faster_torch']}): {speed['speedup']:.2f}x; "
        f"JAX tuned: {speed['tuned_speedup']:.2f}x  (tuned = "
        + "; ".join(c.split(":")[0] for c in report["jax_tuned"]["changes"])
        + ")"
    )
    breakdown = report["jax"]["breakdown"]
    lines.append(
        f"JAX step by category (traced, {breakdown['wall_step_s']:.3f}s/step on the wall clock):"
    )
    for row in breakdown["categories"]:
        lines.append(f"  {row['category']:<58} {row['ms_per_step']:>8.1f} ms {row['share']:>6.1%}")
    decode = report["decode"]
    lines.append("")
    lines.append(
        f"decode ({decode['context']}-byte prompt, {decode['new_tokens']} new tokens, batch 1): "
        + ", ".join(
            f"{p} cache {v['tokens_per_s']:,.1f} tok/s" for p, v in decode["cached"].items()
        )
        + f"; recompute {decode['recompute']['tokens_per_s']:,.1f} tok/s; "
        f"greedy tokens identical: {decode.get('greedy_tokens_identical')}"
    )
    cache = report["cache_bytes"]
    lines.append(
        "cache bytes/token/layer: "
        + ", ".join(
            f"{p} {cache[p]['closed_form']} (measured {cache[p]['measured']:.0f}, "
            f"{cache[p]['ratio_vs_fp32']:.3f} of fp32)"
            for p in kv_cache.PRECISIONS
        )
    )
    lines.append("")
    lines.append(f"{'target':<22} {'value':>9} {'goal':>9}  result")
    for name, row in report["targets"].items():
        value = "n/a" if row["value"] is None else f"{row['value']:.3f}"
        lines.append(
            f"{name:<22} {value:>9} {row['op'] + ' ' + str(row['target']):>9}  "
            f"{'PASS' if row['pass'] else 'FAIL'}"
        )
    for defect in report["defects"]:
        lines.append(f"DEFECT: {defect}")
    for warning in report["warnings"]:
        lines.append(f"WARNING: {warning}")
    return "\n".join(lines)


def _config_and_params(parsed: args.Parsed) -> tuple[config_lib.Config, dict | None]:
    """The run's config and trained params (run_dir given), else the overridden defaults."""
    run_dir = parsed["run_dir"]
    if not run_dir:
        try:
            return parsed.config(), None
        except ValueError as exc:
            raise args.UsageError(str(exc)) from None
    config = training.run_config(pathlib.Path(run_dir), parsed.overrides)
    try:
        _, restored = training.load_state(run_dir)
    except FileNotFoundError as exc:
        raise args.UsageError(str(exc)) from None
    return config, restored.state["params"]


def _out_path(parsed: args.Parsed, name: str) -> pathlib.Path:
    if parsed["out"]:
        return pathlib.Path(parsed["out"])
    base = pathlib.Path(parsed["run_dir"]) if parsed["run_dir"] else pathlib.Path("bench")
    return base / name


def bench_command(parsed: args.Parsed) -> int:
    for name in ("steps", "decode_tokens", "matmul_n"):
        if parsed[name] < 1:
            raise args.UsageError(f"{name} must be >= 1, got {parsed[name]}")
    if parsed["warmup"] < 0 or parsed["decode_context"] < 1 or parsed["decode_tokens"] < 2:
        raise args.UsageError("need warmup >= 0, decode_context >= 1 and decode_tokens >= 2")
    config, params = _config_and_params(parsed)
    out = _out_path(parsed, "bench.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    given = {**parsed.options, **parsed.overrides}
    command = "python -m capstones.byte_transformer bench " + " ".join(
        f"{key}={value}" for key, value in given.items()
    )
    report = run_bench(
        config,
        params,
        steps=parsed["steps"],
        warmup=parsed["warmup"],
        torch_compile=parsed["torch_compile"],
        decode_context=parsed["decode_context"],
        decode_tokens=parsed["decode_tokens"],
        matmul_n=parsed["matmul_n"],
        command=command,
    )
    checkpoint.write_json_atomic(out, report)
    print(format_bench(report))
    print(f"\nwrote {out}")
    return 0


# --- the profile command ------------------------------------------------------------------------


def _union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals (microseconds in, seconds out)."""
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total / 1e6


PHASES = (  # (phase, substrings of an op's JAX source path), first match wins
    ("dropout RNG", ("_bernoulli", "_uniform", "threefry", "random_bits", "random_split")),
    ("backward", ("transpose(",)),
    ("forward", ("jvp(",)),
)
RNG_MARKS = PHASES[0][1]
CATEGORIES = (
    "weight matmuls",
    "attention matmuls",
    "attention: scale, mask, softmax",
    "dropout: RNG bits, masks (and what fused with them)",
    "other: LayerNorm, GELU, residuals, loss, optimizer, copies",
)


def phase_of(source: str) -> str:
    """Which part of the step an op's JAX source path (its op_name metadata) belongs to."""
    for phase, needles in PHASES:
        if any(needle in source for needle in needles):
            return phase
    return "optimizer & other" if source else "unattributed"


_COMPUTATION = re.compile(r"^(?:ENTRY )?%([\w.\-]+) ")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = ")
_CALLED = re.compile(r"(?:calls|to_apply|body|condition)=%([\w.\-]+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def op_sources(hlo_text: str) -> dict[str, list[str]]:
    """For each HLO instruction: the JAX source paths (op_name metadata) of it and of every
    instruction in the computations it calls (a fusion's body, a while loop's body...)."""
    own: dict[str, str] = {}
    calls: dict[str, list[str]] = {}
    body: dict[str, list[str]] = {}  # computation -> its instructions
    current = None
    for line in hlo_text.splitlines():
        match = _COMPUTATION.match(line)
        if match and line.rstrip().endswith("{"):
            current = match.group(1)
            body[current] = []
            continue
        match = _INSTRUCTION.match(line)
        if match and current is not None:
            name = match.group(1)
            body[current].append(name)
            source = _OP_NAME.search(line)
            own[name] = source.group(1) if source else ""
            calls[name] = _CALLED.findall(line)
    memo: dict[str, list[str]] = {}

    def sources(name: str, depth: int = 0) -> list[str]:
        if name in memo:
            return memo[name]
        found = [own.get(name, "")]
        if depth < 32:
            for computation in calls.get(name, []):
                for inner in body.get(computation, []):
                    found.extend(sources(inner, depth + 1))
        memo[name] = [s for s in found if s]
        return memo[name]

    return {name: sources(name) for name in own}


def category_of(op_source: str, inner_sources: list[str]) -> str:
    """One of CATEGORIES for an op: its own source path and those of what it fuses."""
    if any(mark in s for s in inner_sources for mark in RNG_MARKS):
        return CATEGORIES[3]
    if op_source.endswith("dot_general"):
        return CATEGORIES[1] if "attention_pieces" in op_source else CATEGORIES[0]
    if any("attention_pieces" in s for s in inner_sources):
        return CATEGORIES[2]
    return CATEGORIES[4]


def categorize(rows: list[dict], definitions: dict, sources: dict, steps: int) -> list[dict]:
    """ms per step and share of op time per category, from trace.op_table rows."""
    totals = dict.fromkeys(CATEGORIES, 0.0)
    for row in rows:
        source = definitions.get(row["op"], ("", ""))[1]
        totals[category_of(source, sources.get(row["op"], [source]))] += row["total (us)"]
    grand = sum(totals.values()) or 1.0
    return [
        {"category": name, "ms_per_step": total / 1e3 / steps, "share": total / grand}
        for name, total in totals.items()
    ]


def traced_op_rows(compiled, state, batch, trace_dir: pathlib.Path, steps: int):
    """Trace ``steps`` blocked steps of a compiled train step: (op_table rows of its
    module, events, per-step wall seconds, xplane path, final state)."""
    from core.perf import trace

    wall = []
    with jax.profiler.trace(str(trace_dir)):
        for number in range(steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=number):
                start = time.perf_counter()
                state = jax.block_until_ready(compiled(state, batch))[0]
                wall.append(time.perf_counter() - start)
    xplanes = sorted(trace_dir.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not xplanes:
        raise RuntimeError(f"the profiler wrote no .xplane.pb under {trace_dir}")
    events = trace.xplane_op_events(xplanes[-1])
    module = trace.modules(events)[0] if events else ""
    events = [e for e in events if e.module == module]
    return trace.op_table(events), events, wall, xplanes[-1], module, state


def run_profile(
    config: config_lib.Config,
    out_dir: pathlib.Path,
    params: dict | None = None,
    steps: int = 3,
    warmup: int = 2,
    top: int = 25,
    progress=_progress,
) -> dict:
    """Warm the train step (compile excluded), trace ``steps`` blocked steps, summarize."""
    from core.perf import trace

    corpus = data.load_corpus(config)
    batch = jax.device_put(data.training_stream(config, corpus).next_batch())
    state = training.init_state(config)
    if params is not None:
        state["params"] = params
    compiled = training.make_train_step(config).lower(state, batch).compile()
    progress(f"profile: compiled; {warmup} warm-up steps, then {steps} traced steps")
    for _ in range(warmup):
        state = jax.block_until_ready(compiled(state, batch))[0]
    trace_dir = out_dir / "trace"
    rows, events, wall, xplane, module, state = traced_op_rows(
        compiled, state, batch, trace_dir, steps
    )
    hlo_text = compiled.as_text()
    definitions = trace.hlo_definitions(hlo_text, [r["op"] for r in rows])
    sources = op_sources(hlo_text)
    by_source: dict[str, float] = {}
    by_phase: dict[str, float] = {}
    table = []
    for row in rows:
        hlo, source = definitions.get(row["op"], ("", ""))
        primitive = source.rsplit("/", 1)[-1] if source else "?"
        by_source[primitive] = by_source.get(primitive, 0.0) + row["total (us)"]
        by_phase[phase_of(source)] = by_phase.get(phase_of(source), 0.0) + row["total (us)"]
        table.append(
            {
                "op": row["op"],
                "count": row["count"],
                "total_ms": row["total (us)"] / 1e3,
                "ms_per_step": row["total (us)"] / 1e3 / steps,
                "share": row["share"],
                "hlo": hlo,
                "source": source,
            }
        )
    op_total = sum(r["total (us)"] for r in rows) / 1e6
    report = {
        "format": PROFILE_FORMAT,
        "version": 1,
        "machine": machine.machine_label(),
        "config": config.to_dict(),
        "trace_dir": str(trace_dir),
        "xplane": str(xplane),
        "steps": steps,
        "wall_step_s": wall,
        "wall_total_s": sum(wall),
        "module": module,
        "threads": len({e.thread for e in events}),
        "op_time_total_s": op_total,
        "op_busy_s": _union_seconds([(e.start_us, e.start_us + e.duration_us) for e in events]),
        "op_table": table[:top],
        "ops": len(table),
        "by_source": [
            {"source": name, "ms_per_step": total / 1e3 / steps, "share": total / 1e6 / op_total}
            for name, total in sorted(by_source.items(), key=lambda kv: -kv[1])
        ],
        "by_category": categorize(rows, definitions, sources, steps),
        "by_phase": [
            {"phase": name, "ms_per_step": total / 1e3 / steps, "share": total / 1e6 / op_total}
            for name, total in sorted(by_phase.items(), key=lambda kv: -kv[1])
        ],
    }
    return report


def format_profile(report: dict) -> str:
    lines = [
        f"profile of {report['module']} on {report['machine']}: {report['steps']} traced steps",
        f"wall per step: {statistics.median(report['wall_step_s']):.3f}s (median); op time "
        f"{report['op_time_total_s'] / report['steps']:.3f}s/step summed over "
        f"{report['threads']} threads; some op running {report['op_busy_s'] / report['steps']:.3f}s/step",
        "",
        f"{'op':<28} {'count':>5} {'ms/step':>9} {'share':>6}  source",
    ]
    for row in report["op_table"]:
        lines.append(
            f"{row['op'][:28]:<28} {row['count']:>5} {row['ms_per_step']:>9.2f} "
            f"{row['share']:>6.1%}  {row['source'][-70:]}"
        )
    lines += ["", f"{'by JAX primitive':<28} {'ms/step':>9} {'share':>6}"]
    for row in report["by_source"][:12]:
        lines.append(f"{row['source'][:28]:<28} {row['ms_per_step']:>9.2f} {row['share']:>6.1%}")
    lines += ["", f"{'by category':<58} {'ms/step':>9} {'share':>6}"]
    for row in report["by_category"]:
        lines.append(f"{row['category']:<58} {row['ms_per_step']:>9.2f} {row['share']:>6.1%}")
    lines += ["", f"{'by phase':<28} {'ms/step':>9} {'share':>6}"]
    for row in report["by_phase"]:
        lines.append(f"{row['phase']:<28} {row['ms_per_step']:>9.2f} {row['share']:>6.1%}")
    lines.append(f"\ntrace: {report['trace_dir']}")
    return "\n".join(lines)


def profile_command(parsed: args.Parsed) -> int:
    if parsed["steps"] < 1 or parsed["warmup"] < 0 or parsed["top"] < 1:
        raise args.UsageError("need steps >= 1, warmup >= 0, top >= 1")
    config, params = _config_and_params(parsed)
    out = _out_path(parsed, "profile")
    out.mkdir(parents=True, exist_ok=True)
    report = run_profile(config, out, params, parsed["steps"], parsed["warmup"], parsed["top"])
    checkpoint.write_json_atomic(out / "profile.json", report)
    print(format_profile(report))
    print(f"wrote {out / 'profile.json'}")
    return 0


RUN_DIR = args.Option(str, "", "a trained run: its config and newest checkpoint's weights")
COMMANDS = {
    "bench": args.Command(
        "Measure the JAX train step (compile, step time, tokens/s, MFU) against the PyTorch "
        "twin (eager and torch.compile) in one run, KV-cache decoding vs recomputing, and "
        "cache bytes per token; writes bench.json and prints a table.",
        {
            "out": args.Option(
                str, "", "JSON path (default RUN_DIR/bench.json or bench/bench.json)"
            ),
            "run_dir": RUN_DIR,
            "steps": args.Option(int, 10, "timed rounds (one step of each method per round)"),
            "warmup": args.Option(int, 2, "untimed steps of each method first"),
            "torch_compile": args.Option(bool, True, "also time the torch.compile'd twin"),
            "decode_context": args.Option(int, 512, "prompt bytes before decoding"),
            "decode_tokens": args.Option(int, 32, "new tokens decoded (greedy)"),
            "matmul_n": args.Option(int, 2048, "n of the n x n float32 matmul peak"),
        },
        bench_command,
    ),
    "profile": args.Command(
        "Warm the train step (compile excluded), capture a jax.profiler trace of a few steps "
        "and print its top ops by self time; writes DIR/profile.json and the trace.",
        {
            "out": args.Option(str, "", "directory (default RUN_DIR/profile or bench/profile)"),
            "run_dir": RUN_DIR,
            "steps": args.Option(int, 3, "traced steps"),
            "warmup": args.Option(int, 2, "untimed steps before the trace"),
            "top": args.Option(int, 25, "ops in the table"),
        },
        profile_command,
    ),
}
