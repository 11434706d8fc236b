"""Artifact ``decision-dossier``: memory, precision and XProf evidence, each ending in a decision.

- **Memory.** One Adam training step of core.tpu.model's ``tiny`` Transformer, compiled by
  the real TPU compiler for ``--topology`` (libtpu compile-only devices: *compiled for*, not
  measured; nothing runs on a TPU), its memory_analysis beside the analytic budget
  (core.tpu.budget), and its peak against the HBM the compiler lets one program use (read
  off the compiler's own refusal of a 1 TiB program). Decision: the batch fits, with what
  headroom.
- **Precision.** The program's largest matmul, (batch x seq, d_model) @ (d_model, d_ff),
  in float32, bf16 inputs with f32 accumulation, scaled fp8 e4m3 and int8 per-channel
  (core.perf.precision) against NumPy float64; the float products checked within their
  worst-case rounding bounds. Decision: the cheapest format within the error budget that
  the generation runs faster (fp8 only where its published rate beats bf16).
- **XProf.** A warmed-up profiler trace of a small training step (core.perf.trace) on the
  local backend, its top ops by time from the xplane, cross-checked against the trace's
  JSON (a second reader), each named by its HLO instruction. Decision: what to look at first.
"""

from __future__ import annotations

from tpu_scripts import receipt as runtime_receipt
from tpu_scripts.artifacts import common

NAME = "decision-dossier"
PRESET = "tiny"


class Document(common.Envelope):
    memory: dict
    precision: list[dict]
    xprof: dict


def _generation(topology: str) -> str:
    return topology.split(":", 1)[0]


def memory_section(topology: str, batch: int, seq: int) -> tuple[dict, list[dict], dict]:
    from core.tpu import budget, generations, specs, topology_compile

    shape = budget.PRESETS[PRESET]
    chips = generations.topology_chips(topology)
    spec = specs.chip(_generation(topology))
    devices = chips * spec.devices_per_chip
    setup = budget.TrainingSetup(batch=batch, seq=seq, chips=devices)
    analytic = budget.training_budget(shape, setup)
    analytic_peak = sum(analytic.values())
    problem = topology_compile.libtpu_problem()
    if problem is not None:
        capacity = spec.hbm_bytes.value / spec.devices_per_chip
        memory = {
            "topology": topology,
            "compiled": False,
            "why_not": problem,
            "analytic_bytes_per_device": analytic_peak,
            "capacity_bytes_per_device": capacity,
            "capacity_source": "published HBM per chip (core.tpu.specs)",
        }
        headroom = 1 - analytic_peak / capacity
        check = None  # nothing compiled to compare: the decision says it is analytic only
        evidence = (
            f"analytic only, not compiled ({problem}): {analytic_peak / 1e6:.1f} MB per "
            f"device of {capacity / 1e9:.1f} GB published HBM"
        )
    else:
        report = topology_compile.training_step_report(shape, setup, topology)
        rows = topology_compile.training_comparison(shape, setup, report)
        peak = topology_compile.peak_bytes(report.memory)
        capacity = topology_compile.usable_hbm_bytes(topology)
        headroom = 1 - peak / capacity
        arguments = rows[0]
        gap = abs(arguments["compiler (MB)"] - arguments["analytic (MB)"]) / max(
            arguments["analytic (MB)"], 1e-9
        )
        memory = {
            "topology": topology,
            "compiled": True,
            "compiled_for": f"{topology} ({report.devices} x {report.device_kind}), "
            "compile-only: nothing ran on a TPU",
            "memory_analysis": report.memory,
            "comparison": rows,
            "peak_bytes_per_device": peak,
            "analytic_bytes_per_device": analytic_peak,
            "capacity_bytes_per_device": capacity,
            "capacity_source": "the TPU compiler's 'exceeds available HBM' limit",
        }
        # Arguments are parameters + optimizer state + the batch: the budget counts them
        # exactly, so they agree to within the compiler's padding (1%).
        check = common.check(
            "compiled argument bytes match the analytic budget (within 1%)",
            gap <= 0.01,
            f"{arguments['compiler (MB)']:.3f} MB compiled vs {arguments['analytic (MB)']:.3f} "
            f"MB analytic per device ({gap:.2%}); compiled for {topology}, not measured",
        )
        evidence = (
            f"compiled for {topology} (not measured): peak {peak / 1e6:.1f} MB per device of "
            f"{capacity / 1e9:.2f} GB usable; analytic peak {analytic_peak / 1e6:.1f} MB"
        )
    memory["headroom"] = headroom
    fits = headroom > 0
    decision = common.decision(
        "memory",
        f"global batch {batch} x {seq} tokens of the {PRESET} model "
        + (
            f"fits in the HBM of {_generation(topology)} ({topology}) with {headroom:.1%} headroom"
            if fits
            else f"does NOT fit in {_generation(topology)} ({topology}): shrink the batch, "
            "shard (fsdp) or remat"
        ),
        evidence,
    )
    return memory, [check] if check else [], decision


def precision_section(batch: int, seq: int, topology: str, budget_error: float, seed: int = 0):
    import jax
    import numpy as np

    from core import numerics
    from core.perf import precision
    from core.tpu import budget, specs

    shape = budget.PRESETS[PRESET]
    m, k, n = batch * seq, shape.d_model, shape.d_ff
    x, w = precision.example_operands(jax.random.key(seed), m, k, n)
    exact = np.asarray(x, np.float64) @ np.asarray(w, np.float64)  # the independent reference
    kinds = {
        "float32": ("float32", 4, 0.0),
        "bfloat16": ("bf16 inputs, f32 accumulate", 2, precision.BF16_UNIT_ROUNDOFF),
        "fp8 e4m3": ("fp8 e4m3 inputs, f32 accumulate", 1, None),
        "int8 per-channel": ("int8 per-channel", 1, None),
    }
    rows, checks = [], []
    for label, (kind, nbytes, unit) in kinds.items():
        result = precision.matmul(kind, x, w)
        error = numerics.norm_relative_error(result, exact)
        if kind.startswith("fp8"):
            ratio = precision.fp8_bound_ratio(result, x, w)
        elif unit is not None:
            ratio = precision.bound_ratio(result, x, w, unit)
        else:
            ratio = None
        rows.append(
            {
                "format": label,
                "bytes per input": nbytes,
                "relative error vs float64": error,
                "error / rounding bound": ratio,
                "within budget": error <= budget_error,
            }
        )
        if ratio is not None:
            checks.append(
                common.check(
                    f"{label} matmul within its worst-case rounding bound",
                    ratio <= precision.BOUND_RATIO_LIMIT,
                    f"max |error| / bound = {ratio:.3f} (<= 1), relative error {error:.2g}",
                )
            )
    spec = specs.chip(_generation(topology))
    fp8_native = spec.fp8_flops is not None and spec.fp8_flops.value >= 1.5 * spec.bf16_flops.value
    by_label = {r["format"]: r for r in rows}
    choice = "float32"
    if by_label["bfloat16"]["within budget"]:
        choice = "bfloat16"
    if fp8_native and by_label["fp8 e4m3"]["within budget"]:
        choice = "fp8 e4m3"
    chosen = by_label[choice]
    decision = common.decision(
        "precision",
        f"{choice} for the matmuls ({m} x {k} @ {k} x {n}): error "
        f"{chosen['relative error vs float64']:.2g} within the budget {budget_error:g}",
        "vs NumPy float64: "
        + ", ".join(f"{r['format']} {r['relative error vs float64']:.2g}" for r in rows)
        + f"; {_generation(topology)} "
        + ("multiplies fp8 natively" if fp8_native else "has no faster fp8 rate published")
        + "; int8 is for serving weights, not the training matmuls",
    )
    return rows, checks, decision


def xprof_section(trace_dir, seed: int = 0) -> tuple[dict, list[dict], dict]:
    import jax

    from core.perf import trace

    step, params = trace.example_training_step(jax.random.key(seed), batch=64, width=128)
    capture, _ = trace.capture(step, params, trace_dir, steps=3, warmup=1)
    events = trace.xplane_op_events(capture.find(".xplane.pb"))
    module = "jit_train_step"
    table = trace.op_table(events, module)
    readers = trace.compare_readers(
        table,
        trace.json_op_durations(trace.trace_json_events(capture.find(".trace.json.gz")), module),
    )
    hlo = trace.hlo_definitions(step.lower(params).compile().as_text(), [r["op"] for r in table])
    top = [
        {
            "op": r["op"],
            "count": r["count"],
            "total (us)": r["total (us)"],
            "share": r["share"],
            "from": hlo.get(r["op"], ("", ""))[1] or hlo.get(r["op"], ("", ""))[0],
        }
        for r in table[:8]
    ]
    resolution = trace.PROFILE_DATA_RESOLUTION_US
    check = common.check(
        "top ops: the xplane and the trace JSON agree",
        readers.same_ops
        and readers.same_counts
        and readers.json_never_shorter
        and readers.gap_per_event_us <= resolution,
        f"{len(table)} ops of {module}, per-op totals differ by {readers.gap_per_event_us:.2g} us "
        f"per event (tolerance {resolution:g} us: ProfileData truncates picoseconds to whole ns)",
    )
    xprof = {
        "program": "SGD step of a 2-layer MLP, batch 64, width 128 (core.perf.trace)",
        "backend": jax.default_backend(),
        "trace_dir": str(capture.logdir.name),
        "files": [r["file"] for r in capture.file_rows()],
        "steps_traced": capture.steps,
        "top_ops": top,
        "view_with": trace.xprof_commands(capture.logdir.name),
    }
    first = top[0] if top else {"op": "(none)", "share": 0.0, "from": ""}
    decision = common.decision(
        "xprof",
        f"look first at {first['op']}: {first['share']:.0%} of the op time on "
        f"{jax.default_backend()}",
        f"{first['op']} comes from {first['from'] or 'an unnamed op'}; top 3: "
        + ", ".join(f"{r['op']} {r['share']:.0%}" for r in top[:3]),
    )
    return xprof, [check], decision


def build(topology: str, batch: int, seq: int, budget_error: float, out_dir) -> tuple[dict, list]:
    import pathlib

    from core import runtime

    runtime.use_cpu_devices()
    receipt = runtime_receipt.runtime_receipt(repeats=3)
    memory, checks, memory_decision = memory_section(topology, batch, seq)
    precision_rows, precision_checks, precision_decision = precision_section(
        batch, seq, topology, budget_error
    )
    xprof, xprof_checks, xprof_decision = xprof_section(pathlib.Path(out_dir) / "trace")
    document = common.envelope(
        NAME,
        receipt,
        checks + precision_checks + xprof_checks,
        [memory_decision, precision_decision, xprof_decision],
    )
    document["memory"] = memory
    document["precision"] = precision_rows
    document["xprof"] = xprof
    sections = [
        (
            "Memory: " + memory.get("compiled_for", f"{topology}, analytic only"),
            memory.get("comparison", [])
            or f"analytic {memory['analytic_bytes_per_device'] / 1e6:.1f} MB per device",
        ),
        ("Precision: the matmul against NumPy float64", precision_rows),
        (f"XProf: top ops on {xprof['backend']} (trace in `trace/`)", xprof["top_ops"]),
        ("View the trace in XProf", "```bash\n" + xprof["view_with"] + "\n```"),
    ]
    return document, sections


def add_arguments(parser) -> None:
    parser.add_argument(
        "--topology", default="v5e:2x2", help="TPU topology to compile for (v5e:2x2, v6e:2x2...)"
    )
    parser.add_argument("--batch", type=int, default=8, help="global batch (sequences)")
    parser.add_argument("--seq", type=int, default=128, help="sequence length")
    parser.add_argument(
        "--error-budget",
        type=float,
        default=None,
        help="largest relative matmul error accepted (default: the bfloat16 tolerance)",
    )


def problem(args) -> str | None:
    from core.tpu import specs

    generation = _generation(args.topology)
    if generation not in specs.GENERATIONS or ":" not in args.topology:
        return (
            f"--topology {args.topology!r}: expected GEN:AxB with GEN in {specs.GENERATIONS} "
            "(e.g. v5e:2x2)"
        )
    if not 1 <= args.batch <= 4096 or not 1 <= args.seq <= 8192:
        return f"--batch must be in 1..4096 and --seq in 1..8192, got {args.batch}, {args.seq}"
    if args.error_budget is not None and not 0 < args.error_budget < 1:
        return f"--error-budget must be in (0, 1), got {args.error_budget}"
    from core.tpu import topology_compile

    if topology_compile.libtpu_problem() is None:
        try:  # libtpu names the topologies it knows (v5e:2x2 yes, v5e:1x1 no)
            topology_compile.topology_devices(args.topology)
        except ValueError as exc:
            return f"--topology {args.topology!r}: {exc}"
    return None


def produce(args, out_dir) -> tuple[dict, list]:
    from core import numerics

    budget_error = args.error_budget or numerics.tolerance("bfloat16")
    document, sections = build(args.topology, args.batch, args.seq, budget_error, out_dir)
    return document, common.write(out_dir, Document, document, sections)
