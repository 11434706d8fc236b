"""The ``plan`` command: build every section of the plan, print it, save plan.json."""

from __future__ import annotations

import dataclasses
import datetime
import pathlib
import sys

import numpy as np

from capstones.byte_transformer import args, documents
from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer.plan import compile as plan_compile
from capstones.byte_transformer.plan import memory, precision, recommend, remat, report
from core.perf import machine
from core.tpu import specs

SCHEMA = documents.PLAN_SCHEMA
DEFAULT_TOPOLOGIES = "v5e:2x2,v6e:2x2,tpu7x:2x2x1"


def params_section(config: config_lib.Config) -> dict:
    """The closed-form parameter count beside the real training state's."""
    actual = memory.actual_param_count(config)
    return {
        "parts": memory.param_counts(config),
        "analytic": memory.param_count(config),
        "actual": actual,
        "matches": actual == memory.param_count(config),
        "formula": memory.PARAM_FORMULA,
        "budget_cross_check": memory.budget_cross_check(config),
    }


def add_comparisons(config: config_lib.Config, compiler: dict, policy: str) -> None:
    """Each compiled topology gets its comparison rows (analytic at its chip count)."""
    for group, is_remat in (("topologies", False), ("remat", True)):
        for compiled in compiler[group].values():
            analytic = memory.training_memory(config, compiled["chips"], policy)
            compiled["comparison"] = plan_compile.comparison_rows(analytic, compiled, is_remat)
    compiler["gap_explanation"] = plan_compile.GAP_EXPLANATION


def build_plan(
    config: config_lib.Config,
    topologies: list[str],
    compile_tpu: bool = True,
    policy: str = "nothing_saveable",
    target_tokens_per_s: float = 1e6,
    timing_repeats: int = 5,
    serve_batch: int = 0,
    progress=None,
) -> dict:
    """Everything the plan command prints and saves (see the package docstring)."""
    progress = progress or (lambda line: None)
    compiler = plan_compile.compiler_section(config, topologies, compile_tpu, policy, progress)
    first = next(iter(compiler["topologies"].values()), None)
    analytic = memory.training_memory(config, first["chips"] if first else 4, policy)
    add_comparisons(config, compiler, policy)
    progress(f"measuring remat vs no remat on this CPU ({timing_repeats} timed steps each)")
    remat_topology = next(iter(compiler["remat"]), None)
    result_hypothesis = remat.hypothesis(
        config,
        policy,
        timing_repeats,
        compiler["topologies"].get(remat_topology),
        compiler["remat"].get(remat_topology),
        remat_topology,
    )
    return {
        "schema": SCHEMA,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine.machine_label(),
        "config": config.to_dict(),
        "params": params_section(config),
        "precision": precision.precision_rows(config),
        "memory_analytic": analytic,
        "kv_cache": memory.kv_cache_rows(config, serve_batch or config.batch_size),
        "compiler": compiler,
        "hypothesis": result_hypothesis,
        "recommendation": recommend.recommendation(
            config, analytic, compiler["topologies"], target_tokens_per_s
        ),
    }


def parse_topologies(text: str) -> list[str]:
    """Comma-separated topology names, each of a known generation (UsageError if not)."""
    topologies = [t.strip() for t in text.split(",") if t.strip()]
    if not topologies:
        raise args.UsageError("topologies needs at least one name, e.g. v5e:2x2")
    for topology in topologies:
        if recommend.generation_of(topology) not in specs.GENERATIONS:
            raise args.UsageError(
                f"topology {topology!r}: generation must be one of {specs.GENERATIONS}"
            )
    return topologies


def check_options(parsed: args.Parsed, config: config_lib.Config) -> None:
    if parsed["timing_repeats"] < 1:
        raise args.UsageError("timing_repeats must be >= 1")
    if parsed["target_tokens_per_s"] <= 0:
        raise args.UsageError("target_tokens_per_s must be > 0")
    if config.batch_size % 4:
        raise args.UsageError(
            f"batch_size={config.batch_size} must split over the 4 chips of a 2x2 topology "
            "(use a multiple of 4)"
        )


def plan_command(parsed: args.Parsed) -> int:
    config = parsed.config()
    policy = args.choice("remat_policy", parsed["remat_policy"], remat.REMAT_POLICIES)
    topologies = parse_topologies(parsed["topologies"])
    check_options(parsed, config)
    try:
        plan = build_plan(
            config,
            topologies,
            compile_tpu=parsed["compile"],
            policy=policy,
            target_tokens_per_s=parsed["target_tokens_per_s"],
            timing_repeats=parsed["timing_repeats"],
            serve_batch=parsed["serve_batch"],
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except ValueError as exc:
        raise args.UsageError(str(exc)) from None
    print(report.report_text(plan))
    out = pathlib.Path(parsed["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    documents.write(out, documents.Plan, _jsonable(plan))
    print(f"\nplan saved to {out}")
    return 0


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if dataclasses.is_dataclass(value):
        return _jsonable(dataclasses.asdict(value))
    return value


COMMANDS = {
    "plan": args.Command(
        "TPU plan: parameter count, precision policy, memory per chip (analytic beside the "
        "TPU compiler's memory_analysis of training.train_step for real topologies, compiled "
        "on this CPU host with libtpu), the remat hypothesis with before/after numbers, and a "
        "generation/topology recommendation. Prints tables, saves JSON.",
        {
            "out": args.Option(str, "plan.json", "where to save the plan (JSON)"),
            "compile": args.Option(
                bool, True, "compile for TPU topologies with libtpu (false: analytic only)"
            ),
            "topologies": args.Option(
                str, DEFAULT_TOPOLOGIES, "comma-separated topology names (first gets remat)"
            ),
            "remat_policy": args.Option(
                str,
                "nothing_saveable",
                f"jax.checkpoint policy: {', '.join(remat.REMAT_POLICIES)}",
            ),
            "target_tokens_per_s": args.Option(
                float, 1e6, "training throughput to size the slice for"
            ),
            "timing_repeats": args.Option(int, 5, "timed CPU steps per variant (median)"),
            "serve_batch": args.Option(int, 0, "KV cache rows for serving (0: batch_size)"),
        },
        plan_command,
    ),
}
