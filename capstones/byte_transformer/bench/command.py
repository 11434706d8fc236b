"""The ``bench`` and ``profile`` commands: run every measurement, write the JSON, print."""

from __future__ import annotations

import os
import pathlib
import platform
import sys
import time

import jax
import numpy as np

from capstones.byte_transformer import args, data, documents, training
from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer.bench import cache as cache_lib
from capstones.byte_transformer.bench import decode as decode_lib
from capstones.byte_transformer.bench import decode_ab as decode_ab_lib
from capstones.byte_transformer.bench import flops as flops_lib
from capstones.byte_transformer.bench import load, profile, record, report, steppers, variants
from capstones.byte_transformer.bench import malloc as malloc_lib
from capstones.byte_transformer.bench import peak as peak_lib
from core.perf import allocator, machine, records

BENCH_FORMAT = documents.BENCH_FORMAT
TARGETS = {  # name: (op, threshold) from the issue
    "jax_vs_torch_speedup": (">=", 1.15),
    "mfu": (">=", 0.45),
    "decode_speedup": (">=", 20.0),
    "int8_cache_ratio": ("<=", 0.27),
    "bf16_cache_ratio": ("<=", 0.5),
}


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


def build_steppers(config, state: dict, batch: dict, torch_compile: bool, progress):
    """(steppers by name, JAX compile figures, dense-attention compile figures, torch.compile
    figures): every train step compiled and ready to time."""
    progress("JAX: lowering and compiling the train step")
    jax_step, compile_figures = steppers.jax_stepper(config, state, batch)
    progress(
        f"  lower {compile_figures['lower_s']:.2f}s, compile {compile_figures['compile_s']:.2f}s"
    )
    progress("JAX with the dense attention core (the step before): lowering and compiling")
    dense_step, dense_figures = steppers.jax_dense_attention_stepper(config, state, batch)
    named = {
        "jax": jax_step,
        "jax_dense_attention": dense_step,
        "torch_eager": steppers.torch_stepper(config, state["params"], batch, False),
    }
    if not torch_compile:
        return named, compile_figures, dense_figures, {"error": "skipped (torch_compile=false)"}
    progress("torch.compile: first step (compiles forward and backward)")
    compiled_step, torch_compile_figures = steppers.torch_compile_stepper(
        config, state["params"], batch
    )
    if compiled_step is not None:
        named["torch_compile"] = compiled_step
        progress(f"  first step {torch_compile_figures['first_step_s']:.1f}s")
    else:
        progress(f"  torch.compile failed: {torch_compile_figures['error'][:200]}")
    return named, compile_figures, dense_figures, torch_compile_figures


def step_sections(summaries: dict, figures: dict, breakdown: dict) -> dict:
    """The jax, jax_dense_attention, torch_eager, torch_compile and jax_vs_torch sections."""
    dense = {"changes": list(steppers.DENSE_ATTENTION_CHANGES), **figures["jax_dense_attention"]}
    sections = {
        "jax": {**figures["jax"], "step": summaries["jax"], "mfu": summaries["jax"]["mfu"]},
        "jax_dense_attention": {**dense, "step": summaries["jax_dense_attention"]},
        "torch_eager": {"step": summaries["torch_eager"]},
        "torch_compile": figures["torch_compile"],
    }
    sections["jax"]["breakdown"] = breakdown
    sections["jax_dense_attention"]["mfu"] = summaries["jax_dense_attention"]["mfu"]
    sections["torch_eager"]["mfu"] = summaries["torch_eager"]["mfu"]
    if "torch_compile" in summaries:
        median = summaries["torch_compile"]["median_s"]
        sections["torch_compile"].update(
            compile_s_estimate=sections["torch_compile"]["first_step_s"] - median,
            step=summaries["torch_compile"],
            mfu=summaries["torch_compile"]["mfu"],
        )
    torch_names = [n for n in ("torch_eager", "torch_compile") if n in summaries]
    faster = min(torch_names, key=lambda n: summaries[n]["median_s"])
    best_torch = summaries[faster]["median_s"]
    sections["jax_vs_torch"] = {
        "speedup": best_torch / summaries["jax"]["median_s"],
        "faster_torch": faster,
        "dense_attention_speedup": best_torch / summaries["jax_dense_attention"]["median_s"],
        "median_of_round_ratios": _median_round_ratio(summaries["jax"], summaries[faster]),
    }
    return sections


def _median_round_ratio(jax_step: dict, torch_step: dict) -> float:
    """The median over rounds of (torch sample / JAX sample): each round's two samples ran
    back to back, so a load change that hits one round hits both; less noisy than the ratio
    of medians when the machine is shared."""
    pairs = zip(torch_step["samples_s"], jax_step["samples_s"], strict=True)
    return float(np.median([t / j for t, j in pairs]))


def time_train_steps(config, state, batch, steps: int, warmup: int, torch_compile, peak, progress):
    """Every train step timed in interleaved rounds with its page faults, the JAX step's
    breakdown, model FLOPs and MFU: (the step sections of bench.json, the flops section)."""
    named, jax_figures, dense_figures, torch_compile_figures = build_steppers(
        config, state, batch, torch_compile, progress
    )
    usage = {name: [] for name in named}
    measured = {name: steppers.with_usage(step, usage[name]) for name, step in named.items()}
    progress(f"timing {steps} interleaved rounds of {', '.join(named)}")
    wall, cpu = steppers.interleaved(measured, steps, warmup, progress)
    progress("JAX: where the step's time goes (2 traced steps)")
    breakdown = profile.step_breakdown(jax_figures)
    flops = flops_lib.flops_per_step(config)
    flops["xla_cost_analysis_flops"] = jax_figures.pop("xla_cost_analysis_flops")
    for figures in (jax_figures, dense_figures):
        for key in ("compiled", "batch", "holder", "xla_cost_analysis_flops"):
            figures.pop(key, None)
    tokens, valid = config.batch_size * config.seq_len, float(batch["weights_BT"].sum())
    summaries = {
        n: steppers.step_summary(wall[n], cpu[n], tokens, valid, usage[n][-steps:]) for n in named
    }
    for summary in summaries.values():
        summary["mfu"] = flops_lib.mfu(flops["total"], summary["median_s"], peak["flop_per_s"])
    figures = {"jax": jax_figures, "jax_dense_attention": dense_figures}
    figures["torch_compile"] = torch_compile_figures
    return step_sections(summaries, figures, breakdown), flops


def find_defects(sections: dict, decode: dict) -> list[str]:
    """What a reader must not miss: JAX slower than torch, or decoders that disagree."""
    defects = []
    speed = sections["jax_vs_torch"]
    if speed["speedup"] < 1.0:
        parts = sorted(sections["jax"]["breakdown"]["categories"], key=lambda r: -r["ms_per_step"])
        defects.append(
            f"JAX train step is slower than {speed['faster_torch']} ({speed['speedup']:.2f}x; "
            f"with dense attention {speed['dense_attention_speedup']:.2f}x). Where the JAX "
            "step's op time goes: "
            + ", ".join(f"{row['category']} {row['ms_per_step']:.0f} ms" for row in parts)
            + " (jax.breakdown; `profile` for the op table)"
        )
    if not decode.get("greedy_tokens_identical", False):
        defects.append(
            "cached and recomputed greedy tokens differ: the speed-up is not like for like"
        )
    return defects


def target_values(sections: dict, decode: dict, cache: dict) -> dict:
    return {
        "jax_vs_torch_speedup": sections["jax_vs_torch"]["speedup"],
        "mfu": sections["jax"]["mfu"],
        # the faster of the two cached decoders (per-token dispatch, on-device loop)
        "decode_speedup": max(
            (v for v in (decode.get("speedup"), decode.get("speedup_device_loop")) if v),
            default=None,
        ),
        "int8_cache_ratio": cache["int8"]["ratio_vs_fp32"],
        "bf16_cache_ratio": cache["bf16"]["ratio_vs_fp32"],
    }


def environment(config: config_lib.Config, command: str, load_start: list) -> dict:
    """The head of bench.json: what ran, where, with which versions."""
    import torch

    return {
        "format": BENCH_FORMAT,
        "version": 2,
        "command": command,
        "machine": machine.machine_label(),
        "cpu_model": machine.cpu_model(),
        "cores": machine.core_count(),
        "load_average": {"start": load_start},
        "versions": versions(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "allocator": allocator.in_force(),
        "torch_threads": torch.get_num_threads(),
        "jax_devices": [str(d) for d in jax.devices()],
        "config": config.to_dict(),
    }


def timing_method(steps: int, warmup: int) -> dict:
    return {
        "method": (
            "one batch from the training stream, reused; each step advances its own "
            "state; interleaved rounds (jax, jax tuned, torch eager, torch compile), a "
            f"{steppers.PAUSE_S * 1e3:.0f} ms pause before each blocked sample; median; "
            "cpu_median_s = process CPU seconds per step (all threads)"
        ),
        "rounds": steps,
        "warmup": warmup,
    }


def measure_peak(config: config_lib.Config, matmul_n: int, progress) -> dict:
    progress(f"peak: float32 GEMM, XLA and torch, the step's matmul shapes and {matmul_n}^2")
    return peak_lib.honest_peak(config, matmul_n, progress=progress)


def run_bench(
    config: config_lib.Config,
    params: dict | None = None,
    steps: int = 10,
    warmup: int = 2,
    torch_compile: bool = True,
    decode_context: int = 512,
    decode_tokens: int = 32,
    matmul_n: int = 2048,
    malloc_steps: int = 6,
    command: str = "",
    progress=steppers.stderr_progress,
    block_sweep: tuple = (),
    bf16: bool = False,
    decode_ab: int = 0,
) -> dict:
    """Every figure of bench.json (see the package docstring); ``params`` default: fresh."""
    import torch

    began = time.perf_counter()
    load_start = list(os.getloadavg())
    counters_start = load.cpu_counters()
    torch.set_num_threads(os.cpu_count() or 1)
    progress(f"bench on {machine.machine_label()}, load average {load_start}")
    corpus = data.load_corpus(config)
    batch = data.training_stream(config, corpus).next_batch()
    tokens = config.batch_size * config.seq_len
    peak = measure_peak(config, matmul_n, progress)
    state = training.init_state(config)
    if params is not None:
        state["params"] = params
    sections, flops = time_train_steps(
        config, state, batch, steps, warmup, torch_compile, peak, progress
    )
    progress(f"decode: {decode_context}-byte prompt, {decode_tokens} new tokens, batch 1")
    prompt = decode_lib.decode_prompt(corpus, decode_context)
    decode = decode_lib.decode_benchmark(config, state["params"], prompt, decode_tokens)
    cache = cache_lib.cache_bytes(config)
    if malloc_steps:
        malloc_comparison = malloc_lib.compare(config, malloc_steps, warmup, progress)
    else:
        malloc_comparison = {"method": "skipped (malloc_steps=0)", "error": "skipped"}
    result = {
        **environment(config, command, load_start),
        "batch": {
            "batch_size": config.batch_size,
            "seq_len": config.seq_len,
            "tokens_per_step": tokens,
            "valid_tokens_per_step": float(batch["weights_BT"].sum()),
        },
        "timing": timing_method(steps, warmup),
        "peak": peak,
        "flops": flops,
        **sections,
        "decode": decode,
        "allocator_comparison": malloc_comparison,
        "cache_bytes": cache,
        "targets": target_rows(target_values(sections, decode, cache)),
        "defects": find_defects(sections, decode),
    }
    if block_sweep:  # the optional parts (variants.py, decode_ab.py), after the default ones
        result["block_sweep"] = variants.block_sweep(
            config, state, batch, list(block_sweep), steps, warmup, progress
        )
    if bf16:
        result["bf16"] = variants.bf16_policy(config, state, batch, steps, warmup, progress)
    if decode_ab:
        result["decode_ab"] = decode_ab_lib.decode_ab(
            config, state["params"], corpus, decode_context, decode_tokens, decode_ab, progress
        )
    result["load_average"]["end"] = list(os.getloadavg())
    result["load_average"]["other_processes_cores"] = load.other_processes_cores(
        counters_start, load.cpu_counters()
    )
    result["warnings"] = load.load_warnings(result)
    result["total_s"] = time.perf_counter() - began
    return result


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
    if parsed["malloc_steps"] < 0:
        raise args.UsageError(f"malloc_steps must be >= 0, got {parsed['malloc_steps']}")
    for name in ("steps", "decode_tokens", "matmul_n"):
        if parsed[name] < 1:
            raise args.UsageError(f"{name} must be >= 1, got {parsed[name]}")
    if parsed["warmup"] < 0 or parsed["decode_context"] < 1 or parsed["decode_tokens"] < 2:
        raise args.UsageError("need warmup >= 0, decode_context >= 1 and decode_tokens >= 2")
    if parsed["decode_ab"] < 0:
        raise args.UsageError(f"decode_ab must be >= 0, got {parsed['decode_ab']}")
    config, params = _config_and_params(parsed)
    try:
        block_sweep = variants.parse_block_sweep(parsed["block_sweep"], config.seq_len)
    except ValueError as exc:
        raise args.UsageError(f"block_sweep: {exc}") from None
    out = _out_path(parsed, "bench.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    given = {**parsed.options, **parsed.overrides}
    command = "python -m capstones.byte_transformer bench " + " ".join(
        f"{key}={value}" for key, value in given.items()
    )
    result = run_bench(
        config,
        params,
        steps=parsed["steps"],
        warmup=parsed["warmup"],
        torch_compile=parsed["torch_compile"],
        decode_context=parsed["decode_context"],
        decode_tokens=parsed["decode_tokens"],
        matmul_n=parsed["matmul_n"],
        malloc_steps=parsed["malloc_steps"],
        command=command,
        block_sweep=tuple(block_sweep),
        bf16=parsed["bf16"],
        decode_ab=parsed["decode_ab"],
    )
    documents.write(out, documents.BenchResult, result)
    print(report.format_bench(result))
    print(f"\nwrote {out}")
    if parsed["record"]:
        try:
            written = record.write_records(result, command)
        except records.BusyMachine as refused:
            print(refused, file=sys.stderr)  # bench.json is written; no record is
            return 1
        for path in written:
            print(f"wrote the benchmark record {path}")
    return 0


def profile_command(parsed: args.Parsed) -> int:
    if parsed["steps"] < 1 or parsed["warmup"] < 0 or parsed["top"] < 1:
        raise args.UsageError("need steps >= 1, warmup >= 0, top >= 1")
    config, params = _config_and_params(parsed)
    out = _out_path(parsed, "profile")
    out.mkdir(parents=True, exist_ok=True)
    result = profile.run_profile(
        config, out, params, parsed["steps"], parsed["warmup"], parsed["top"]
    )
    documents.write(out / "profile.json", documents.ProfileResult, result)
    print(report.format_profile(result))
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
            "matmul_n": args.Option(int, 2048, "n of the n x n float32 GEMM in the peak"),
            "malloc_steps": args.Option(
                int, 6, "JAX steps in each fresh process of the malloc before/after (0: skip)"
            ),
            "block_sweep": args.Option(
                str,
                "",
                "attention cores to time against each other, e.g. dense,2,4,8 "
                "(causal blocks; '': skip)",
            ),
            "bf16": args.Option(
                bool,
                False,
                "also time the bf16 compute policy, JAX and torch autocast, with loss curves",
            ),
            "decode_ab": args.Option(
                int,
                0,
                "rounds of the decode A/Bs: loop Eigen on/off, arena_max=1 vs glibc's "
                "default in fresh processes (0: skip)",
            ),
            "record": args.Option(
                bool, False, "keep the key figures as benchmark records in benchmarks/records/"
            ),
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
