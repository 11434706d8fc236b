"""Measure the capstone: the ``bench`` and ``profile`` commands.

    python -m capstones.byte_transformer bench [out=bench/bench.json] [steps=10 warmup=2 ...]
    python -m capstones.byte_transformer profile [run_dir=DIR] [out=bench/profile] [...]

``bench`` measures, in ONE process on one machine (every figure labelled with it):

1. the JAX train step (training.make_train_step, as ``train`` runs it): lower and compile
   time (``jit(...).lower(state, batch)`` then ``.compile()``, timed separately), then the
   steady-state step time, and where its op time goes (a 2-step profiler trace, by
   category; the profiler slows the traced steps, by how much the printout says from this
   run's own figures, so its shares are read, not its milliseconds); also "JAX dense
   attention": the same step with the dense attention core (DENSE_ATTENTION_CHANGES), the
   program before the causal blocked core, timed in the same rounds: the before/after of that
   change on this machine;
2. the PyTorch twin (torch_twin.py: the same model, loss, dropout placement, clipping and
   AdamW) eager and under ``torch.compile`` (its first step, which compiles, is reported
   apart) on the same batch, ``torch.set_num_threads(os.cpu_count())``;
   all are timed in interleaved rounds (one step of each per round, a 50 ms pause before
   each so another framework's spinning worker threads go idle), so a change of machine
   load hits all alike; every sample is blocked on
   (``block_until_ready`` / a host read of the loss) and the median is reported, with the
   median per-step minor page faults and system CPU seconds (getrusage around each step:
   the signature of malloc returning XLA's step buffers to the kernel, see
   core/perf/allocator.py; the capstone's ``__main__`` applies its settings and
   bench.json's "allocator" says which were in force);
3. MFU: model FLOPs per step (``flops_per_step``: 6 * N_matmul * B * T for the weight
   matmuls + 12 * L * B * T^2 * D for attention's two T x T matmuls, forward and backward,
   causal half NOT discounted, "attention_skipped" says how much of it the blocked core
   never executes; elementwise work, softmax, LayerNorm and the optimizer are not counted)
   / step time / an honest peak: the fastest float32 GEMM measured in the same run, XLA's
   or torch's, at the step's own matmul shapes and one ``matmul_n`` square (peak.py; both
   frameworks' best are kept);
4. KV-cache decoding vs recomputing: greedy decoding of ``decode_tokens`` new tokens after a
   ``decode_context``-byte prompt (batch 1) with the capstone's KV cache (kv_cache.py) vs a
   jitted full forward pass over the whole (padded) row for every new token; both produce
   the same tokens (checked) so the speed-up compares equal work;
5. KV-cache bytes per token per layer in fp32, bf16 and int8 (closed form from the shapes,
   cross-checked against the nbytes of real cache arrays).

bench.json schema (keys; model documents.BenchResult, docs/schemas/bench.schema.json):
    {"format": "byte_transformer bench", "version": 2,
     "command": str, "machine": str, "cpu_model": str, "cores": int,
     "load_average": {"start": [1m, 5m, 15m], "end": [...] (includes this run's own load),
                      "other_processes_cores": float|null (average cores busy with OTHER
                      processes during the run, from /proc/stat minus this process)},
     "versions": {python, jax, jaxlib, flax, optax, numpy, torch}, "xla_flags": str,
     "allocator": {"mechanism": "mallopt"|"GLIBC_TUNABLES"|"none", "settings": {name: int},
                   "reason": str},
     "torch_threads": int, "jax_devices": [str], "config": Config.to_dict(),
     "batch": {"batch_size", "seq_len", "tokens_per_step" (B*T), "valid_tokens_per_step"},
     "timing": {"method": str, "rounds": int, "warmup": int},
     "peak": {"kernel", "flops", "seconds", "flop_per_s", "method", "xla_best_flop_per_s",
              "torch_best_flop_per_s", "candidates": [{"framework", "m", "k", "n",
              "flop_per_s"}]},
     "flops": {"formula": str, "matmul_params": int, "matmul": float, "attention": float,
               "total": float, "attention_skipped": float, "xla_cost_analysis_flops":
               float|null},
     "jax": {"lower_s", "compile_s", "step": STEP, "mfu": float,
             "breakdown": {"method", "wall_step_s", "categories": [{"category", "ms_per_step",
                           "share"}]}},
     "jax_dense_attention": {"changes": [str], "lower_s", "compile_s", "step": STEP,
                  "mfu": float} (the same train_step with the dense attention core),
     "torch_eager": {"step": STEP, "mfu": float},
     "torch_compile": {"first_step_s": float (includes compiling, inductor caches off),
                       "caches": str, "compile_s_estimate":
                       float (first step - median step), "step": STEP, "mfu": float}
                      or {"error": str} (torch.compile failed; the error is recorded),
     "jax_vs_torch": {"speedup": float (best torch median / JAX median = JAX tokens/s /
                      best torch tokens/s), "faster_torch": "torch_eager"|"torch_compile",
                      "dense_attention_speedup": float (the same with jax_dense_attention),
                      "median_of_round_ratios": float (median over rounds of best torch
                      sample / JAX sample: less noisy on a shared machine)},
     "decode": {"context": int, "new_tokens": int, "capacity": int, "method": str,
                "prefill_s": float, "cached": {"fp32"|"bf16"|"int8": {"prefill_s", "seconds",
                "tokens_per_s", "tokens"}}, "recompute": {"seconds", "tokens_per_s",
                "forward_len": int, "tokens"}, "speedup": float (fp32 cached / recompute
                tokens/s), "cached_device_loop": {precision: {"seconds", "tokens_per_s",
                "tokens"}} (the decode steps in one lax.scan program),
                "speedup_device_loop": float (its fp32 tokens/s / recompute; the
                decode_speedup target takes the faster of the two decoders),
                "end_to_end_speedup": float, "greedy_tokens_identical": bool,
                "tokens": [int]},
     "allocator_comparison": {"method": str, "glibc_defaults" | "tuned": {"allocator",
                "median_s", "samples_s", "minor_faults_per_step", "system_s_per_step",
                "load_average_1m": [start, end]}, "speedup": float (defaults / tuned median)}
                or {"method", "error": str} (malloc_steps=0 or a child failed; malloc.py),
     "cache_bytes": {"fp32"|"bf16"|"int8": {"closed_form", "measured", "ratio_vs_fp32"},
                     "formula": str},
     "targets": {name: {"value", "target", "op": ">="|"<=", "pass": bool}},
     "defects": [str], "warnings": [str] (e.g. a shared machine), "total_s": float,
     optional parts, present when their option ran them (variants.py, decode_ab.py):
     "block_sweep": {"method", "rounds", "warmup", "seq_len", "default_blocks", "rows":
                     [{"blocks": "dense"|int, "skipped_fraction", "step": {"median_s",
                     "p10_s", "p90_s", "samples_s"}, "vs_dense": SPREAD}], "fastest"},
     "bf16": {"method", "rounds", "warmup", "rows": {"jax_f32"|"jax_bf16"|"torch_f32"|
              "torch_bf16": {"median_s", "p10_s", "p90_s", "samples_s", "loss_curve"}},
              "<a>_vs_<b>": {"of_medians", "rounds": SPREAD} (b's seconds / a's: > 1 means
              a is faster), "loss_gap_...": float (largest |loss difference| on the curves)},
     "decode_ab": {"method", "context", "new_tokens", "rounds", "in_process":
                   {"tokens_per_s", "ratio_vs_recompute": {way: SPREAD},
                   "loop_eigen_off_vs_on": SPREAD}, "arena": {"arena_max_1"|"arena_default":
                   {"glibc_tunables", "children", "per_token_ratio", "loop_ratio"},
                   "per_token_arena_max_1_vs_default", "loop_arena_max_1_vs_default"} or
                   {"error"}, "faster": {"loop_multi_thread_eigen", "arena_max_1": bool}}}
    SPREAD = {"median", "p10", "p90", "min"?, "max"?} (over rounds)
    STEP = {"median_s", "p10_s", "p90_s", "min_s", "samples_s": [..], "cpu_median_s",
            "tokens_per_s" (B*T / median), "valid_tokens_per_s", "minor_faults_per_step",
            "system_s_per_step" (medians over the timed steps), "mfu"}

profile.json schema (keys; documents.ProfileResult, docs/schemas/profile.schema.json):
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

The package, one module per job:
    flops.py     model FLOPs per step (capstones/byte_transformer/model_math.py, the formula
                 plan uses too) and MFU
    steppers.py  the JAX / tuned JAX / torch eager / torch.compile steppers and their
                 interleaved timing (core.perf.timing.interleaved)
    profile.py   profiler traces: op table, categories, phases (``profile``, step_breakdown)
    decode.py    KV-cache decoding vs recompute
    variants.py  the optional block-count sweep and bf16 compute-policy rows
    decode_ab.py the optional decode A/Bs (loop Eigen on/off; arena_max=1 vs default)
    record.py    record=true: the key figures as benchmark records (core.perf.records)
    cache.py     KV-cache bytes per token
    load.py      machine load during the run
    report.py    the text of bench.json and profile.json
    command.py   run_bench, the ``bench`` and ``profile`` commands (COMMANDS)
"""

from capstones.byte_transformer.bench.cache import (
    CACHE_FORMULA,
    cache_bytes,
    cache_bytes_closed_form,
)
from capstones.byte_transformer.bench.command import (
    BENCH_FORMAT,
    COMMANDS,
    RUN_DIR,
    TARGETS,
    bench_command,
    profile_command,
    run_bench,
    target_rows,
    versions,
)
from capstones.byte_transformer.bench.decode import decode_benchmark, decode_prompt
from capstones.byte_transformer.bench.flops import FLOP_FORMULA, flops_per_step, matmul_params, mfu
from capstones.byte_transformer.bench.load import (
    cpu_counters,
    load_warnings,
    other_processes_cores,
)
from capstones.byte_transformer.bench.malloc import compare as malloc_comparison
from capstones.byte_transformer.bench.peak import honest_peak, model_matmul_shapes
from capstones.byte_transformer.bench.profile import (
    CATEGORIES,
    PHASES,
    PROFILE_FORMAT,
    RNG_MARKS,
    categorize,
    category_of,
    op_sources,
    phase_of,
    run_profile,
    step_breakdown,
    traced_op_rows,
)
from capstones.byte_transformer.bench.report import format_bench, format_profile
from capstones.byte_transformer.bench.steppers import (
    DENSE_ATTENTION_CHANGES,
    PAUSE_S,
    interleaved,
    jax_dense_attention_stepper,
    jax_stepper,
    step_summary,
    torch_compile_stepper,
    torch_stepper,
    with_usage,
)

__all__ = [
    "BENCH_FORMAT",
    "CACHE_FORMULA",
    "CATEGORIES",
    "COMMANDS",
    "FLOP_FORMULA",
    "PAUSE_S",
    "PHASES",
    "PROFILE_FORMAT",
    "RNG_MARKS",
    "RUN_DIR",
    "TARGETS",
    "DENSE_ATTENTION_CHANGES",
    "bench_command",
    "cache_bytes",
    "cache_bytes_closed_form",
    "categorize",
    "category_of",
    "cpu_counters",
    "decode_benchmark",
    "decode_prompt",
    "flops_per_step",
    "format_bench",
    "format_profile",
    "interleaved",
    "jax_stepper",
    "jax_dense_attention_stepper",
    "load_warnings",
    "malloc_comparison",
    "honest_peak",
    "model_matmul_shapes",
    "matmul_params",
    "mfu",
    "op_sources",
    "other_processes_cores",
    "phase_of",
    "profile_command",
    "run_bench",
    "run_profile",
    "step_breakdown",
    "step_summary",
    "target_rows",
    "torch_compile_stepper",
    "torch_stepper",
    "traced_op_rows",
    "versions",
    "with_usage",
]
