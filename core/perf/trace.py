"""Capture a warmed-up profiler trace and read what it wrote, without TensorBoard.

``jax.profiler.trace(logdir)`` (jax 0.10.2) writes, under
``logdir/plugins/profile/<timestamp>/``:

- ``<host>.xplane.pb``: the XSpace protobuf that XProf / TensorBoard's profile plugin read;
- ``<host>.trace.json.gz``: the same timeline as Chrome trace-event JSON;
- ``perfetto_trace.json.gz`` when ``create_perfetto_trace=True`` (for ui.perfetto.dev).

The xplane is parsed here with ``jax.profiler.ProfileData`` (part of jaxlib, no network,
no TensorFlow); the JSON trace is parsed with gzip + json as an independent second reader.

Where the ops are depends on the backend, and both readers handle both:

- CPU: on the ``/host:CPU`` plane, one line per thread; an XLA op's event carries an
  ``hlo_op`` stat (the HLO instruction or fusion name) and an ``hlo_module`` stat (the jitted
  program, e.g. ``jit_train_step``).
- TPU (GPU alike): on a device plane (``/device:TPU:0``) with the lines "Steps", "XLA Modules"
  (one event per program run, named like ``jit_train_step(12)``) and "XLA Ops" (one event per
  op, the HLO op as the event's name). ``hlo_op`` / ``hlo_module`` stats may be there or not:
  an op's program is then the "XLA Modules" event it falls in, without its ``(id)``.

When a device plane has XLA ops, the host plane's are not counted (one timeline per op run).
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import json
import pathlib
import re
import shlex
from collections.abc import Callable, Iterable

import jax


@dataclasses.dataclass(frozen=True)
class TraceCapture:
    logdir: pathlib.Path
    steps: int
    files: tuple[pathlib.Path, ...]

    def file_rows(self) -> list[dict]:
        return [
            {
                "file": str(p.relative_to(self.logdir)),
                "bytes": p.stat().st_size,
                "kind": file_kind(p),
            }
            for p in self.files
        ]

    def find(self, suffix: str) -> pathlib.Path:
        for path in self.files:
            if path.name.endswith(suffix):
                return path
        raise ValueError(
            f"the trace in {self.logdir} has no *{suffix} file: {[p.name for p in self.files]}"
        )


def file_kind(path: pathlib.Path) -> str:
    name = path.name
    if name.endswith(".xplane.pb"):
        return "XSpace protobuf (XProf / TensorBoard profile plugin)"
    if name == "perfetto_trace.json.gz":
        return "Perfetto trace (ui.perfetto.dev)"
    if name.endswith(".trace.json.gz"):
        return "Chrome trace-event JSON (trace viewer)"
    return "other"


def example_training_step(key: jax.Array, batch: int = 64, width: int = 256, depth: int = 2):
    """(train_step, params): SGD on an MLP regression, ``train_step(params) -> params``.

    The data is closed over, so the step is a function of the parameters alone (what
    :func:`capture` expects). Dimensions: B batch, W width.
    """
    import jax.numpy as jnp

    if min(batch, width, depth) < 1:
        raise ValueError(f"batch, width and depth must be >= 1, got {(batch, width, depth)}")
    keys = jax.random.split(key, depth + 2)
    params = [jax.random.normal(k, (width, width), jnp.float32) / width**0.5 for k in keys[:depth]]
    x_BW = jax.random.normal(keys[-2], (batch, width), jnp.float32)
    y_BW = jax.random.normal(keys[-1], (batch, width), jnp.float32)

    def loss(params):
        h_BW = x_BW
        for w_WW in params:
            h_BW = jax.nn.gelu(h_BW @ w_WW)
        return jnp.mean((h_BW - y_BW) ** 2)

    @jax.jit
    def train_step(params):
        grads = jax.grad(loss)(params)
        return [w - 0.01 * g for w, g in zip(params, grads, strict=True)]

    return train_step, params


def capture(
    step: Callable,
    state,
    logdir: str | pathlib.Path,
    steps: int = 3,
    warmup: int = 1,
    perfetto: bool = False,
):
    """Run ``state = step(state)`` ``warmup`` times, then ``steps`` times under the profiler.

    Warm-up (and so compilation) happens before the trace starts; each traced step is a
    ``StepTraceAnnotation`` and is blocked on, so the trace holds finished work only.
    Returns (TraceCapture, final state).
    """
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got {steps}, {warmup}")
    logdir = pathlib.Path(logdir)
    for _ in range(warmup):
        state = jax.block_until_ready(step(state))
    with jax.profiler.trace(str(logdir), create_perfetto_trace=perfetto):
        for number in range(steps):
            with jax.profiler.StepTraceAnnotation("train", step_num=number):
                state = jax.block_until_ready(step(state))
    files = tuple(sorted(p for p in logdir.rglob("*") if p.is_file()))
    return TraceCapture(logdir, steps, files), state


@dataclasses.dataclass(frozen=True)
class OpEvent:
    """One execution of an XLA op (or fusion) on one thread."""

    op: str  # the hlo_op stat: instruction or fusion name
    module: str  # the hlo_module stat: the jitted program
    start_us: float
    duration_us: float
    thread: str


DEVICE_PLANE_PREFIX = "/device:"
XLA_OPS_LINE = "XLA Ops"
XLA_MODULES_LINE = "XLA Modules"
_PROGRAM_ID = re.compile(r"\(\d+\)\Z")  # "jit_train_step(12)": the program's id on a TPU


def op_name(name: str) -> str:
    """An op's name from an event name: ``fusion.3``, also from an HLO text such as
    ``%copy.3 = f32[8]{0} copy(...)`` (a long event name)."""
    return name.split(" = ", 1)[0].strip().lstrip("%") if " = " in name else name


def module_name(name: str) -> str:
    """A program's name from an "XLA Modules" event: ``jit_train_step(12)`` is
    ``jit_train_step``."""
    return _PROGRAM_ID.sub("", name.strip())


def _containing(spans: list[tuple[float, float, str]], start: float, end: float) -> str:
    """The name of the span [s, e] that holds the middle of [start, end] ("" when none does).

    The middle, not both ends: a program's first and last ops start and end with it, and a
    TPU's picosecond times reach the readers rounded (ProfileData truncates to nanoseconds,
    the JSON sums floats), so an edge op can overhang its program by under a nanosecond. Held
    to both ends, such ops fell out of their program in some steps (a v5e's capture counted
    some ops 2 times in 3 steps, and the two readers disagreed on the counts)."""
    middle = (start + end) / 2
    for s, e, name in spans:
        if s <= middle <= e:
            return name
    return ""


def xplane_op_events(path: str | pathlib.Path) -> list[OpEvent]:
    """XLA op events from an .xplane.pb file: a device plane's "XLA Ops" (a TPU's), else the
    host events with an ``hlo_op`` stat (the CPU's)."""
    data = jax.profiler.ProfileData.from_file(str(path))
    device, host = [], []
    for plane in data.planes:
        lines = list(plane.lines)
        if plane.name.startswith(DEVICE_PLANE_PREFIX):
            spans = [
                (e.start_ns, e.end_ns, module_name(e.name))
                for line in lines
                if line.name == XLA_MODULES_LINE
                for e in line.events
            ]
            for line in lines:
                if line.name != XLA_OPS_LINE:
                    continue
                for event in line.events:
                    stats = dict(event.stats)
                    module = stats.get("hlo_module") or _containing(
                        spans, event.start_ns, event.end_ns
                    )
                    device.append(_op_event(event, stats, str(module), plane.name, line.name))
            continue
        for line in lines:
            for event in line.events:
                stats = dict(event.stats)
                if "hlo_op" in stats:
                    module = str(stats.get("hlo_module", ""))
                    host.append(_op_event(event, stats, module, plane.name, line.name))
    return sorted(device or host, key=lambda e: e.start_us)


def _op_event(event, stats: dict, module: str, plane: str, line: str) -> OpEvent:
    return OpEvent(
        op=op_name(str(stats.get("hlo_op") or event.name)),
        module=module_name(module),
        start_us=event.start_ns / 1e3,
        duration_us=event.duration_ns / 1e3,
        thread=f"{plane} {line}",
    )


def trace_json_events(path: str | pathlib.Path) -> list[dict]:
    """Complete ('X') events of a Chrome trace-event file (.trace.json.gz or perfetto), each
    with ``process`` and ``thread``: the names its metadata events give its pid and tid (a
    plane's and a line's name in JAX's export)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        trace = json.load(handle)
    processes, threads = {}, {}
    for event in trace.get("traceEvents", []):
        if event.get("ph") == "M" and event.get("name") == "process_name":
            processes[event.get("pid")] = (event.get("args") or {}).get("name", "")
        if event.get("ph") == "M" and event.get("name") == "thread_name":
            threads[event.get("pid"), event.get("tid")] = (event.get("args") or {}).get("name", "")
    return [
        {
            **e,
            "process": processes.get(e.get("pid"), ""),
            "thread": threads.get((e.get("pid"), e.get("tid")), ""),
        }
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "X"
    ]


def json_op_durations(events: Iterable[dict], module: str | None = None) -> dict[str, list[float]]:
    """Each op's event durations (us), from trace-event dicts (``trace_json_events``): a
    device's "XLA Ops" events (a TPU's; the op is the event's name, its program the "XLA
    Modules" event it falls in) or, with none, the events with an ``hlo_op`` arg (the CPU's)."""
    events = list(events)
    on_device = [
        e
        for e in events
        if e.get("process", "").startswith(DEVICE_PLANE_PREFIX) and e.get("thread") == XLA_OPS_LINE
    ]
    spans: dict = collections.defaultdict(list)
    for e in events:
        if e.get("process", "").startswith(DEVICE_PLANE_PREFIX) and e["thread"] == XLA_MODULES_LINE:
            start = float(e.get("ts", 0.0))
            spans[e.get("pid")].append(
                (start, start + float(e.get("dur", 0.0)), module_name(e.get("name", "")))
            )
    durations: dict[str, list[float]] = collections.defaultdict(list)
    for event in on_device or events:
        args = event.get("args") or {}
        if not on_device and "hlo_op" not in args:
            continue
        name = args.get("hlo_op") or args.get("long_name") or event.get("name", "")
        start = float(event.get("ts", 0.0))
        end = start + float(event.get("dur", 0.0))
        program = args.get("hlo_module") or _containing(spans[event.get("pid")], start, end)
        if module is None or module_name(program) == module:
            durations[op_name(name)].append(float(event.get("dur", 0.0)))
    return dict(durations)


def json_op_totals(events: Iterable[dict], module: str | None = None) -> dict[str, float]:
    """Total duration (us) per op, from trace-event dicts (``json_op_durations``)."""
    return {op: sum(d) for op, d in json_op_durations(events, module).items()}


# jax.profiler.ProfileData gives an event's start and duration in whole nanoseconds: it
# truncates the xplane's picoseconds (2,172 ps reads as 2 ns), where the trace JSON keeps them
# (0.002172 us). A TPU times its ops in picoseconds, so per event the xplane reader falls short
# of the JSON by under a nanosecond, its resolution (a v5e's capture failed a relative 1e-3
# this way); the CPU's events are whole nanoseconds and the two agree exactly.
PROFILE_DATA_RESOLUTION_US = 1e-3


@dataclasses.dataclass(frozen=True)
class ReaderAgreement:
    """The xplane reader's op table against the trace JSON of the same capture."""

    ops: int
    gap_per_event_us: float  # max over ops of |json total - xplane total| / the op's events
    same_ops: bool
    same_counts: bool  # every op ran as many times in both
    json_never_shorter: bool  # truncation only shortens the xplane reader's durations


def compare_readers(table: list[dict], json_durations: dict[str, list[float]]) -> ReaderAgreement:
    """``table`` (``op_table`` of the xplane's events) against ``json_op_durations`` of the
    trace JSON: agreement is a gap per event within PROFILE_DATA_RESOLUTION_US, the same ops
    and event counts, and no op shorter in the JSON (beyond float summation)."""
    gaps = [(sum(json_durations.get(r["op"], [])) - r["total (us)"]) / r["count"] for r in table]
    return ReaderAgreement(
        ops=len(table),
        gap_per_event_us=max((abs(g) for g in gaps), default=float("inf")),
        same_ops=bool(table) and set(json_durations) == {r["op"] for r in table},
        same_counts=all(len(json_durations.get(r["op"], [])) == r["count"] for r in table),
        json_never_shorter=all(g >= -1e-9 for g in gaps),
    )


def hlo_definitions(
    hlo_text: str, ops: Iterable[str], width: int = 140
) -> dict[str, tuple[str, str]]:
    """For each op name, (its defining HLO instruction, the JAX operation it came from).

    Tells what a profiler op name such as ``fusion.3`` computes: the instruction
    (``name = shape kind(operands), ...``, metadata dropped, cut to ``width``) and the
    ``op_name`` of its metadata (e.g. ``jit(step)/transpose(jvp(...))/dot_general``: a
    ``transpose`` marks the backward pass), or "" when there is none.
    """
    wanted = set(ops)
    found = {}
    for line in hlo_text.splitlines():
        text = line.strip().removeprefix("ROOT ")
        name = text.split(" = ", 1)[0].lstrip("%")
        if name in wanted and name not in found:
            instruction = text.split(", metadata=", 1)[0].replace("%", "")
            source = re.search(r'op_name="([^"]*)"', text)
            found[name] = (instruction[:width], source.group(1) if source else "")
    return found


def op_table(events: Iterable[OpEvent], module: str | None = None) -> list[dict]:
    """Top ops by total time: op, count, total and mean (us), share of op time; largest first."""
    totals: dict[str, list[float]] = collections.defaultdict(list)
    for event in events:
        if module is None or event.module == module:
            totals[event.op].append(event.duration_us)
    grand_total = sum(sum(d) for d in totals.values()) or 1.0
    rows = [
        {
            "op": op,
            "count": len(durations),
            "total (us)": sum(durations),
            "mean (us)": sum(durations) / len(durations),
            "share": sum(durations) / grand_total,
        }
        for op, durations in totals.items()
    ]
    return sorted(rows, key=lambda r: r["total (us)"], reverse=True)


def modules(events: Iterable[OpEvent]) -> list[str]:
    """The jitted programs seen in the trace, most op time first."""
    totals: dict[str, float] = collections.defaultdict(float)
    for event in events:
        totals[event.module] += event.duration_us
    return sorted(totals, key=totals.get, reverse=True)


def timeline_rows(events: Iterable[OpEvent], limit: int = 2000) -> list[dict]:
    """Rows for a Gantt-style chart: op, thread, start and end (us from the first event).

    Threads are named by their pool (``tf_XLAEigen``, ...) and a short number, in order of
    first appearance, instead of the profiler's long numeric ids.
    """
    events = list(events)[:limit]
    if not events:
        return []
    origin = min(e.start_us for e in events)
    short_names: dict[str, str] = {}
    for event in events:
        if event.thread not in short_names:
            pool = event.thread.split(" ", 1)[-1].split("/")[0]
            short_names[event.thread] = f"{pool} #{len(short_names) + 1}"
    return [
        {
            "op": e.op,
            "thread": short_names[e.thread],
            "start (us)": e.start_us - origin,
            "end (us)": e.start_us - origin + e.duration_us,
            "duration (us)": e.duration_us,
        }
        for e in events
    ]


def xprof_commands(
    logdir: str, tpu_name: str = "my-tpu", zone: str = "us-central2-b", port: int = 6006
) -> str:
    """The steps to view a trace in XProf on a TPU VM, as shell text (nothing is run)."""
    logdir_q, tpu_q, zone_q = shlex.quote(logdir), shlex.quote(tpu_name), shlex.quote(zone)
    return f"""# 1. On the TPU VM: capture a warmed-up trace (compile excluded) from your script
#    with jax.profiler.trace("{logdir}") around a few blocked steps, as this lesson does.
# 2. On the TPU VM: install and start XProf on the trace directory
pip install xprof
xprof --logdir={logdir_q} --port={port}
#    (or with TensorBoard: pip install tensorboard tensorboard-plugin-profile;
#     tensorboard --logdir={logdir_q} --port={port})
# 3. On your laptop: forward the port over SSH, then open http://localhost:{port}
gcloud compute tpus tpu-vm ssh {tpu_q} --zone={zone_q} -- -L {port}:localhost:{port}
# 4. In XProf pick the run, then Trace Viewer (timeline), Overview Page (step time),
#    HLO Op Stats / Framework Op Stats (top ops), Memory Profile / Memory Viewer (HBM).
# Or copy the directory home and open it locally:
gcloud compute tpus tpu-vm scp --recurse {tpu_q}:{logdir_q} ./profile --zone={zone_q}
xprof --logdir=./profile --port={port}"""
