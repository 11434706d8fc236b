"""The bench's profiler views of the train step: a jax.profiler trace of a few blocked
steps, its XLA ops by self time, attributed to JAX primitives (the HLO's op_name
metadata), to categories (weight matmuls, attention, dropout RNG, other) and to phases
(forward, backward, dropout RNG, optimizer). Used by ``bench`` (step_breakdown) and
``profile`` (run_profile). Op events of XLA:CPU are leaf thunks (no nesting), so each op's
duration is its self time."""

from __future__ import annotations

import pathlib
import re
import statistics
import tempfile

import jax

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import data, documents, training
from capstones.byte_transformer.bench.steppers import stderr_progress
from core.perf import machine, timing, trace

PROFILE_FORMAT = documents.PROFILE_FORMAT


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
    # core.lm.transformer.dropout's named scope reads "jvp(dropout)/..." under grad
    ("dropout RNG", ("(dropout)", "/dropout/", "_bernoulli", "_uniform", "threefry")),
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


# the attention core's ops: the dense core (attention_pieces, a jitted function) or the
# causal blocked core's named scope (core.lm.causal_blocked.SCOPE)
ATTENTION_MARKS = ("attention_pieces", "causal_blocked_attention")


def category_of(op_source: str, inner_sources: list[str]) -> str:
    """One of CATEGORIES for an op: its own source path and those of what it fuses."""
    if any(mark in s for s in inner_sources for mark in RNG_MARKS):
        return CATEGORIES[3]
    if op_source.endswith("dot_general"):
        in_attention = any(mark in op_source for mark in ATTENTION_MARKS)
        return CATEGORIES[1] if in_attention else CATEGORIES[0]
    if any(mark in s for s in inner_sources for mark in ATTENTION_MARKS):
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
    wall = []
    with jax.profiler.trace(str(trace_dir)):
        for number in range(steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=number):
                out, seconds = timing.timed_call(compiled, state, batch)
                state = out[0]
                wall.append(seconds)
    xplanes = sorted(trace_dir.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not xplanes:
        raise RuntimeError(f"the profiler wrote no .xplane.pb under {trace_dir}")
    events = trace.xplane_op_events(xplanes[-1])
    module = trace.modules(events)[0] if events else ""
    events = [e for e in events if e.module == module]
    return trace.op_table(events), events, wall, xplanes[-1], module, state


def step_breakdown(figures: dict, steps: int = 2) -> dict:
    """ms per step by category (CATEGORIES) of the compiled JAX step, from a profiler
    trace of ``steps`` blocked steps (in a temporary directory, deleted after)."""
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


def _shares(totals: dict[str, float], key: str, steps: int, op_total: float) -> list[dict]:
    """Rows {key, ms_per_step, share} from microsecond totals, largest first."""
    return [
        {key: name, "ms_per_step": total / 1e3 / steps, "share": total / 1e6 / op_total}
        for name, total in sorted(totals.items(), key=lambda kv: -kv[1])
    ]


def op_views(rows: list[dict], definitions: dict, steps: int) -> dict:
    """The op table (each op with its HLO and JAX source) and its totals by JAX primitive
    and by phase."""
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
    return {
        "table": table,
        "op_total": op_total,
        "by_source": _shares(by_source, "source", steps, op_total),
        "by_phase": _shares(by_phase, "phase", steps, op_total),
    }


def warmed_train_step(
    config: config_lib.Config, params: dict | None, warmup: int, steps: int, progress
):
    """(compiled train step, state after ``warmup`` blocked steps, the batch it runs on)."""
    corpus = data.load_corpus(config)
    batch = jax.device_put(data.training_stream(config, corpus).next_batch())
    state = training.init_state(config)
    if params is not None:
        state["params"] = params
    compiled = training.make_train_step(config).lower(state, batch).compile()
    progress(f"profile: compiled; {warmup} warm-up steps, then {steps} traced steps")
    for _ in range(warmup):
        state = jax.block_until_ready(compiled(state, batch))[0]
    return compiled, state, batch


def run_profile(
    config: config_lib.Config,
    out_dir: pathlib.Path,
    params: dict | None = None,
    steps: int = 3,
    warmup: int = 2,
    top: int = 25,
    progress=stderr_progress,
) -> dict:
    """Warm the train step (compile excluded), trace ``steps`` blocked steps, summarize."""
    compiled, state, batch = warmed_train_step(config, params, warmup, steps, progress)
    trace_dir = out_dir / "trace"
    rows, events, wall, xplane, module, state = traced_op_rows(
        compiled, state, batch, trace_dir, steps
    )
    hlo_text = compiled.as_text()
    definitions = trace.hlo_definitions(hlo_text, [r["op"] for r in rows])
    views = op_views(rows, definitions, steps)
    return {
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
        "op_time_total_s": views["op_total"],
        "op_busy_s": _union_seconds([(e.start_us, e.start_us + e.duration_us) for e in events]),
        "op_table": views["table"][:top],
        "ops": len(views["table"]),
        "by_source": views["by_source"],
        "by_category": categorize(rows, definitions, op_sources(hlo_text), steps),
        "by_phase": views["by_phase"],
    }
