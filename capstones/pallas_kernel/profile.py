"""Where the byte Transformer's train step spends its time and memory, and what replacing its
attention core with the flash kernel could buy the whole step (Amdahl's law).

The step: the capstone's ``training.train_step`` (AdamW, clipping, dropout) with the dense
XLA attention core named explicitly (``dense_train_step``), so what is measured is the core the
kernel replaces, whichever core the training command uses by default.

Measured, synchronized (every timed call ends with ``jax.block_until_ready``): lower and
compile seconds apart (core.perf.timing.lower_and_compile), the median blocked step time
over ``steps`` steps after ``warmup`` untimed ones. Then a jax.profiler trace of a few more
steps, its XLA ops by self time in categories (capstones/byte_transformer/bench/profile.py:
an op belongs to the attention core when the JAX source path in its HLO op_name metadata runs
through ``attention_pieces``, core.lm.attention's jitted core: the T x T score and
probability matmuls are "attention matmuls", the fused scale / mask / softmax (forward and
backward) "attention: scale, mask, softmax"). Those two categories are what the kernel
replaces: their share f of op time bounds the whole step's speed-up by 1 / (1 - f) (an
infinitely fast kernel) and 1 / ((1 - f) + f / s) for a kernel s times faster.

The profiler slows the step it traces (by how much, this run measures: the traced and
untraced medians are both reported): shares are shares of op time, not of wall time.

Memory: the compiled step's memory_analysis (arguments, outputs, temporaries) beside the
closed form of what attention holds per layer: the f32 scores B * H * T * T * 4 bytes (and
the probabilities the backward keeps, as many again), the O(T^2) term the kernel removes.
"""

from __future__ import annotations

import pathlib
import statistics

from capstones.byte_transformer import args
from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer.bench import profile as bench_profile
from capstones.pallas_kernel import common

# Profiles in well under 30 s on 2 CPU cores; T = 256 gives attention a visible share.
SMALL = config_lib.Config(
    d_model=64,
    num_layers=2,
    num_heads=4,
    seq_len=256,
    batch_size=4,
    max_files=8,
    max_bytes=16384,
    max_len=256,
)
PRESETS = {"small": SMALL, "capstone": config_lib.Config()}
ATTENTION_CORE = bench_profile.CATEGORIES[1:3]  # what the flash kernel replaces
SPEEDUPS = (2.0, 4.0, 8.0, 16.0)  # kernel speed-ups s to evaluate Amdahl's law at


def amdahl(share: float, speedup: float | None = None) -> float:
    """Whole-step speed-up when a part taking ``share`` of the time gets ``speedup`` x faster
    (None: infinitely fast, the bound 1 / (1 - share))."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be in [0, 1], got {share}")
    rest = 1.0 - share
    if speedup is None:
        return float("inf") if rest == 0 else 1.0 / rest
    if speedup <= 0:
        raise ValueError(f"speedup must be > 0, got {speedup}")
    return 1.0 / (rest + share / speedup)


def amdahl_rows(share: float, speedups=SPEEDUPS) -> list[dict]:
    rows = [{"kernel speed-up s": s, "whole-step speed-up": amdahl(share, s)} for s in speedups]
    return rows + [{"kernel speed-up s": "infinite", "whole-step speed-up": amdahl(share)}]


def attention_bytes(config: config_lib.Config) -> dict[str, int]:
    """Closed form: the f32 T x T scores of one layer, B * H * T * T * 4 bytes, and the
    probabilities every layer keeps for the backward (L layers, the same size each)."""
    per_layer = config.batch_size * config.num_heads * config.seq_len**2 * 4
    return {
        "scores per layer": per_layer,
        "probabilities kept, all layers": per_layer * config.num_layers,
    }


def dense_train_step(config: config_lib.Config):
    """jit of the capstone's training.train_step (AdamW, clipping, dropout) with the dense XLA
    attention core (training.loss_fn's dense_attention: core.lm.attention's T x T scores,
    mask and softmax, whose jitted ``attention_pieces`` marks its ops in the HLO): the core
    the flash kernel replaces, not the causal blocked core ``train`` uses."""
    from capstones.byte_transformer import training

    return training.make_train_step(config, dense_attention=True)


def measure(
    config: config_lib.Config,
    out: pathlib.Path,
    steps: int = 5,
    warmup: int = 2,
    trace_steps: int = 2,
    top: int = 12,
    progress=None,
) -> dict:
    """The profile section (see the module docstring); the trace is kept under out/trace."""
    import jax

    from capstones.byte_transformer import data, training
    from core.perf import timing, trace

    say = progress or (lambda line: None)
    corpus = data.load_corpus(config)
    batch = jax.device_put(data.training_stream(config, corpus).next_batch())
    state = training.init_state(config)
    compiled = timing.lower_and_compile(dense_train_step(config), state, batch)
    say(f"profile: lowered in {compiled.lower_s:.2f} s, compiled in {compiled.compile_s:.2f} s")
    step = compiled.executable
    for _ in range(warmup):
        state = jax.block_until_ready(step(state, batch))[0]
    untraced = []
    for _ in range(steps):
        (state, _), seconds = timing.timed_call(step, state, batch)
        untraced.append(seconds)
    say(f"profile: median step {statistics.median(untraced) * 1e3:.1f} ms over {steps} steps")
    rows, events, traced, xplane, _, state = bench_profile.traced_op_rows(
        step, state, batch, pathlib.Path(out) / "trace", trace_steps
    )
    hlo = step.as_text()
    definitions = trace.hlo_definitions(hlo, [r["op"] for r in rows])
    sources = bench_profile.op_sources(hlo)
    categories = bench_profile.categorize(rows, definitions, sources, trace_steps)
    views = bench_profile.op_views(rows, definitions, trace_steps)
    share = sum(c["share"] for c in categories if c["category"] in ATTENTION_CORE)
    top_ops = []
    for entry in views["table"][:top]:
        inner = sources.get(entry["op"], [entry["source"]])
        top_ops.append(
            {
                "op": entry["op"],
                "ms per step": entry["ms_per_step"],
                "share": entry["share"],
                "category": bench_profile.category_of(entry["source"], inner),
                "hlo": entry["hlo"][:80],
            }
        )
    memory = step.memory_analysis()
    compiled_memory = {
        name: int(getattr(memory, f"{name}_size_in_bytes"))
        for name in ("argument", "output", "alias", "temp", "generated_code")
    }
    closed = attention_bytes(config)
    inflation = statistics.median(traced) / statistics.median(untraced) - 1
    return {
        "section": "profile",
        "created_utc": common.now_utc(),
        "hardware": common.hardware(),
        "config": config.to_dict(),
        "timing": {
            "lower_s": compiled.lower_s,
            "compile_s": compiled.compile_s,
            "steps": steps,
            "median_step_s": statistics.median(untraced),
            "step_s": untraced,
            "traced_median_step_s": statistics.median(traced),
            "profiler_inflation": inflation,
        },
        "trace": {
            "xplane": str(xplane),
            "steps": trace_steps,
            "threads": len({e.thread for e in events}),
            "ops": len(views["table"]),
            "op_time_per_step_s": views["op_total"] / trace_steps,
            "method": "XLA op self time from a jax.profiler trace; categories from the HLO "
            "op_name metadata (attention core: ops whose JAX source runs through "
            "core.lm.attention.attention_pieces: the T x T matmuls, mask, softmax, forward "
            "and backward)",
            "by_category": categories,
            "by_phase": views["by_phase"],
            "top_ops": top_ops,
        },
        "attention_share": share,
        "amdahl": {
            "bound": common.finite(amdahl(share)),
            "rows": [
                {**r, "whole-step speed-up": common.finite(r["whole-step speed-up"])}
                for r in amdahl_rows(share)
            ],
        },
        "memory": {
            "compiled": compiled_memory,
            "attention_closed_form": closed,
            "scores share of temporaries": closed["probabilities kept, all layers"]
            / max(compiled_memory["temp"], 1),
        },
        "caveat": f"the profiler changed this run's median step time by {inflation:+.0%} "
        "(traced vs untraced, timing.profiler_inflation): the shares are shares of op time, "
        "not of wall time",
    }


def summary_lines(section: dict) -> list[str]:
    t, share = section["timing"], section["attention_share"]
    bound = section["amdahl"]["bound"]
    return [
        f"lower {t['lower_s']:.2f} s, compile {t['compile_s']:.2f} s, median step "
        f"{t['median_step_s'] * 1e3:.1f} ms over {t['steps']} blocked steps "
        f"(traced: {t['traced_median_step_s'] * 1e3:.1f} ms, "
        f"profiler +{t['profiler_inflation']:.0%})",
        f"attention core (the kernel's target): {share:.1%} of op time; whole-step speed-up "
        f"<= {bound:.2f}x (Amdahl, an infinitely fast kernel)"
        if bound
        else "",
        section["caveat"],
    ]


def command(parsed: args.Parsed) -> int:
    from capstones.pallas_kernel import cli

    preset = args.choice("preset", parsed["preset"], tuple(PRESETS))
    config = cli.make_config(parsed, PRESETS[preset])
    for name in ("steps", "trace_steps"):
        if not 1 <= parsed[name] <= 100:
            raise args.UsageError(f"{name} must be in 1..100, got {parsed[name]}")
    out = pathlib.Path(parsed["out"])
    section = measure(config, out, parsed["steps"], 2, parsed["trace_steps"], progress=print)
    common.print_rows(section["trace"]["by_category"], "\nop time by category:")
    common.print_rows(section["trace"]["top_ops"], "\ntop ops:")
    common.print_rows(section["amdahl"]["rows"], "\nAmdahl:")
    print("\n".join(line for line in summary_lines(section) if line))
    print(f"wrote {common.write_json(out, 'profile.json', section)}")
    return 0


OPTIONS = {
    "out": args.Option(str, common.DEFAULT_OUT, "output folder (profile.json, trace/)"),
    "preset": args.Option(str, "small", "small (profiles in seconds) or capstone (its defaults)"),
    "steps": args.Option(int, 5, "timed blocked steps (median)"),
    "trace_steps": args.Option(int, 2, "traced steps"),
}
COMMANDS = {
    "profile": args.Command(
        "the byte Transformer's train step: time, trace, memory, Amdahl bound",
        OPTIONS,
        command,
        True,
    )
}
