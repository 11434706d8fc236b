"""What a headless lesson run found, printed as text and written as a results bundle.

Every app gets this without code of its own: ``lab.Flags.parse()`` adds ``--out DIR`` in
script mode (``python apps/<slug>.py``, and the exported TPU scripts) and wraps the app's
``app.run()``. While the cells run, ``lab.table`` records each table it shows, ``lab.Check``
its check, ``lab.guard`` a refusal, every Altair chart the app displays is recorded as its
Vega-Lite spec, and every file or command shown with ``core.lab.text.code_block`` as the text
the page shows; an app names any further key number with ``lab.report(name, value)``.
When the run ends the results are printed (tables as markdown, the receipt) and, with
``--out``, written as ``results.json`` (the ``LessonResults`` schema, validated before it is
written), ``results.md``, ``charts/<n>.vl.json`` and ``code/<n>.<ext>`` (each shown file, as
shown, with the sha256 of the text the app meant to show beside it in results.json).

The receipt says which backend produced the numbers: on a CPU host nothing is a TPU result,
and figures from the TPU compiler (topologies compiled on this host) are compile-time
analyses, never TPU measurements.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import numbers
import pathlib
import platform
import reprlib
import sys
from typing import Any, Literal

import pydantic

from core import documents, runtime
from core.lab import tables

SCHEMA = "jax-tpu-lab/lesson-results"
VERSION = 1
Cell = str | int | float | bool | None


class Receipt(documents.Document):
    """Where the numbers came from."""

    backend: str  # jax.default_backend(): "cpu", "tpu", "gpu"
    tpu_result: bool  # True only when the numbers were produced on TPU chips
    device_kinds: list[str]
    device_count: int
    process_count: int
    host: str
    python: str
    versions: dict[str, str]
    compiled_for_tpu_topologies: list[str]  # TPU compiler runs on this host (compile only)
    note: str


class CheckResult(documents.Document):
    what: str
    passed: bool
    errors: dict[str, float | None]  # None: a NaN or infinite error
    tolerances: dict[str, float]
    facts: dict[str, bool]
    line: str


class Table(documents.Document):
    title: str
    columns: list[str]
    rows: list[dict[str, Cell]]


class Number(documents.Document):
    name: str
    value: Cell
    unit: str


class Chart(documents.Document):
    title: str
    file: str  # relative to results.json


# A shown file's extension by its language (core.lab.text.LANGUAGES).
CODE_SUFFIX = {
    "bash": "sh",
    "diff": "diff",
    "dockerfile": "dockerfile",
    "json": "json",
    "python": "py",
    "text": "txt",
    "toml": "toml",
    "yaml": "yaml",
}


class Code(documents.Document):
    """A file or command the lesson showed: ``file`` holds the text as the page showed it,
    ``source_sha256`` is the sha256 of the text the app meant to show (equal when shown
    verbatim)."""

    title: str
    language: str
    file: str  # relative to results.json
    source_sha256: str


class LessonResults(documents.Document):
    """results.json: one headless run of one lesson."""

    schema_: Literal["jax-tpu-lab/lesson-results"] = pydantic.Field(alias="schema")
    version: Literal[1]
    lesson: str
    flags: dict[str, Cell]
    created_utc: str
    status: Literal["passed", "failed", "stopped", "error"]
    stopped: list[str]
    error: str | None
    receipt: Receipt
    checks: list[CheckResult]
    tables: list[Table]
    numbers: list[Number]
    charts: list[Chart]
    code: list[Code] = []

    @pydantic.field_validator("created_utc")
    @classmethod
    def _time(cls, value: str) -> str:
        return documents.iso_time(value)


@dataclasses.dataclass
class Recorder:
    """The results of this process's lesson run, filled while the cells run."""

    active: bool = False
    lesson: str = ""
    flags: dict[str, Cell] = dataclasses.field(default_factory=dict)
    out: pathlib.Path | None = None
    checks: list[dict] = dataclasses.field(default_factory=list)
    tables: list[dict] = dataclasses.field(default_factory=list)
    numbers: list[dict] = dataclasses.field(default_factory=list)
    charts: list[dict] = dataclasses.field(default_factory=list)  # {"title", "spec"}
    code: list[dict] = dataclasses.field(default_factory=list)  # {"title", "language", ...}
    stopped: list[str] = dataclasses.field(default_factory=list)
    chart_keys: set[str] = dataclasses.field(default_factory=set)


RECORDER = Recorder()


def cell_value(value: Any) -> Cell:
    """A table cell or number as JSON can hold it: NaN and infinities become text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float) or hasattr(value, "__float__") and not hasattr(value, "shape"):
        number = float(value)
        return number if math.isfinite(number) else str(number)
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return cell_value(value.item())
    return str(value)


def _title(caption: str) -> str:
    return caption.strip().splitlines()[0].lstrip("#* ").rstrip("*") if caption.strip() else ""


def record_table(rows: list[dict], caption: str = "") -> None:
    if not RECORDER.active:
        return
    columns = [str(c) for c in rows[0]] if rows else []
    cells = [{str(k): cell_value(v) for k, v in row.items()} for row in rows]
    title = _title(caption)
    if any(t["rows"] == cells and t["columns"] == columns for t in RECORDER.tables):
        return  # the same table shown twice (two cells, one view) is one result
    RECORDER.tables.append(
        {"title": title or f"table {len(RECORDER.tables) + 1}", "columns": columns, "rows": cells}
    )


def record_check(check) -> None:
    if not RECORDER.active:
        return
    RECORDER.checks.append(
        {
            "what": check.what,
            "passed": bool(check.passed),
            "errors": {
                k: (float(v) if math.isfinite(float(v)) else None) for k, v in check.errors.items()
            },
            "tolerances": dict(check.tolerances),
            "facts": {k: bool(v) for k, v in check.facts.items()},
            "line": check.line(),
        }
    )


def record_stop(problem: str) -> None:
    if RECORDER.active:
        RECORDER.stopped.append(problem)


def report(name: str, value: Any, unit: str = "") -> None:
    """Name one key number of the lesson for its results (no effect outside a headless run)."""
    if RECORDER.active:
        RECORDER.numbers.append({"name": name, "value": cell_value(value), "unit": unit})


def record_chart(spec: dict) -> None:
    key = json.dumps(spec, sort_keys=True, default=str)
    if key in RECORDER.chart_keys:
        return
    RECORDER.chart_keys.add(key)
    title = spec.get("title", "")
    if isinstance(title, dict):
        title = title.get("text", "")
    RECORDER.charts.append(
        {"title": str(title or f"chart {len(RECORDER.charts) + 1}"), "spec": spec}
    )


def record_code(title: str, language: str, source: str, shown: str) -> None:
    """A file or command shown to the learner: ``shown`` is the text the page shows."""
    if not RECORDER.active:
        return
    entry = {
        "title": title or f"code {len(RECORDER.code) + 1}",
        "language": language,
        "shown": shown,
        "source_sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
    }
    if entry not in RECORDER.code:
        RECORDER.code.append(entry)


_depth = 0


def _install_chart_hook() -> None:
    """Record every top-level Altair chart serialized while the app runs (marimo serializes
    what it displays; nested to_dict calls of a layered chart's parts are not recorded)."""
    import altair as alt

    original = alt.TopLevelMixin.to_dict
    if getattr(original, "_records_results", False):
        return

    def to_dict(self, *args, **kwargs):
        global _depth
        _depth += 1
        try:
            spec = original(self, *args, **kwargs)
        finally:
            _depth -= 1
        if RECORDER.active and _depth == 0 and isinstance(spec, dict):
            record_chart(spec)
        return spec

    to_dict._records_results = True
    alt.TopLevelMixin.to_dict = to_dict


def _leave_cycles_to_the_os() -> None:
    """At this process's exit, after every atexit handler registered later (they run last in,
    first out), move all objects to the collector's permanent generation: the interpreter's
    final collections then skip the JAX, Flax and pandas objects a lesson leaves behind
    (0.7-1.2 of a lesson's 3.5-4.9 CPU s: attention, tiny_mlp). Objects are still freed by
    their reference counts; only cyclic garbage is left to the OS, which frees it anyway.
    Registered once per process."""
    import atexit
    import gc

    if not getattr(_leave_cycles_to_the_os, "registered", False):
        atexit.register(gc.freeze)
        _leave_cycles_to_the_os.registered = True


def start(lesson: str, flags: dict[str, Any], out: str | None) -> None:
    """Begin recording this process's headless run (lab.Flags.parse calls this), from an
    empty recorder: a process can run several lessons (course-run --one-process)."""
    _leave_cycles_to_the_os()
    for field in dataclasses.fields(Recorder):
        setattr(RECORDER, field.name, getattr(Recorder(), field.name))
    topology_compile = sys.modules.get("core.tpu.topology_compile")
    if topology_compile is not None:  # the receipt names this lesson's compiles, not a former's
        topology_compile.TOPOLOGIES_USED.clear()
    RECORDER.active = True
    RECORDER.lesson = lesson
    RECORDER.flags = {k: cell_value(v) for k, v in flags.items()}
    RECORDER.out = pathlib.Path(out) if out else None
    _install_chart_hook()
    main = sys.modules.get("__main__")
    app = getattr(main, "app", None)
    if app is None or not callable(getattr(app, "run", None)):
        return
    original_run = app.run

    def run(*args, **kwargs):
        try:
            outputs, defs = original_run(*args, **kwargs)
        except BaseException as error:
            finish(outputs=(), error=f"{type(error).__name__}: {error}")
            raise
        finish(outputs=outputs)
        return outputs, defs

    app.run = run


def receipt() -> dict:
    """Backend, devices, host and versions of this process."""
    import jax

    devices = jax.devices()
    versions = {"jax": jax.__version__, "jaxlib": runtime.package_version("jaxlib") or "unknown"}
    if libtpu := runtime.package_version("libtpu"):
        versions["libtpu"] = libtpu
    topology_compile = sys.modules.get("core.tpu.topology_compile")
    compiled = sorted(getattr(topology_compile, "TOPOLOGIES_USED", ()))
    backend = jax.default_backend()
    note = (
        "measured on TPU chips"
        if backend == "tpu"
        else f"measured on {backend.upper()}, not a TPU result"
        + (
            "; the TPU-compiler figures are compile-time analyses for "
            + ", ".join(compiled)
            + ", nothing ran on a TPU"
            if compiled
            else ""
        )
    )
    return {
        "backend": backend,
        "tpu_result": backend == "tpu",
        "device_kinds": sorted({d.device_kind for d in devices}),
        "device_count": len(devices),
        "process_count": jax.process_count(),
        "host": platform.node(),
        "python": platform.python_version(),
        "versions": versions,
        "compiled_for_tpu_topologies": compiled,
        "note": note,
    }


def document(status_error: str | None = None) -> dict:
    """The run's results as a results.json document (not yet validated)."""
    if status_error is not None:
        status = "error"
    elif any(not c["passed"] for c in RECORDER.checks):
        status = "failed"
    elif RECORDER.stopped:
        status = "stopped"
    else:
        status = "passed"
    charts = [
        {"title": c["title"], "file": f"charts/{i + 1:02d}.vl.json"}
        for i, c in enumerate(RECORDER.charts)
    ]
    code = [
        {
            "title": c["title"],
            "language": c["language"],
            "file": f"code/{i + 1:02d}.{CODE_SUFFIX.get(c['language'], 'txt')}",
            "source_sha256": c["source_sha256"],
        }
        for i, c in enumerate(RECORDER.code)
    ]
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "lesson": RECORDER.lesson,
        "flags": RECORDER.flags,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "status": status,
        "stopped": list(RECORDER.stopped),
        "error": status_error,
        "receipt": receipt(),
        "checks": RECORDER.checks,
        "tables": RECORDER.tables,
        "numbers": RECORDER.numbers,
        "charts": charts,
        "code": code,
    }


def markdown(doc: dict) -> str:
    """results.md: the same results for a person."""

    r = doc["receipt"]
    lines = [
        f"# {doc['lesson']}: {doc['status']}",
        "",
        f"- backend: **{r['backend']}** ({r['device_count']} x {', '.join(r['device_kinds'])}, "
        f"{r['process_count']} process(es)), {r['note']}",
        f"- host {r['host']}, Python {r['python']}, "
        + ", ".join(f"{k} {v}" for k, v in r["versions"].items()),
        f"- created {doc['created_utc']}; flags: "
        + (", ".join(f"--{k.replace('_', '-')}={v}" for k, v in doc["flags"].items()) or "none"),
    ]
    if doc["error"]:
        lines += ["", f"**Error**: {doc['error']}"]
    lines += [f"\nSTOPPED: {problem}" for problem in doc["stopped"]]
    lines += ["", "## Checks", ""] + [f"- {c['line']}" for c in doc["checks"]]
    for number in doc["numbers"]:
        lines.append(f"- {number['name']}: {number['value']} {number['unit']}".rstrip())
    for table in doc["tables"]:
        lines += ["", tables.table_markdown(table["rows"], f"### {table['title']}")]
    if doc["charts"]:
        lines += ["", "## Charts", ""] + [f"- {c['title']}: `{c['file']}`" for c in doc["charts"]]
    if doc.get("code"):
        lines += ["", "## Files shown", ""] + [
            f"- {c['title']}: `{c['file']}`" for c in doc["code"]
        ]
    return "\n".join(lines) + "\n"


def _print_text(doc: dict) -> None:

    r = doc["receipt"]
    print(f"\n== Results of {doc['lesson']} ({r['note']}) ==")
    print(f"backend {r['backend']}: {r['device_count']} x {', '.join(r['device_kinds'])}")
    for number in doc["numbers"]:
        print(f"{number['name']}: {number['value']} {number['unit']}".rstrip())
    for table in doc["tables"]:
        print("\n" + tables.table_markdown(table["rows"], f"{table['title']}:"))
    if doc["charts"]:
        print(f"\n{len(doc['charts'])} chart(s): " + "; ".join(c["title"] for c in doc["charts"]))


def write(doc: dict, out: pathlib.Path) -> list[pathlib.Path]:
    """Validate ``doc`` and write results.json, results.md and the charts under ``out``."""
    documents.validate(LessonResults, doc, "lesson results document")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for chart, entry in zip(RECORDER.charts, doc["charts"], strict=True):
        spec_text = json.dumps(chart["spec"], indent=1)
        written.append(documents.write_text_atomic(out / entry["file"], spec_text))
    for shown, entry in zip(RECORDER.code, doc["code"], strict=True):
        written.append(documents.write_text_atomic(out / entry["file"], shown["shown"]))
    written.append(documents.write_text_atomic(out / "results.md", markdown(doc)))
    doc_text = json.dumps(doc, indent=2) + "\n"
    written.append(documents.write_text_atomic(out / "results.json", doc_text))
    return written


def stray_outputs(outputs) -> list[str]:
    """Cell outputs that are bare values (a number, a string, a tuple, an array): a cell whose
    last line is an expression by accident shows its value to the learner ("8" above a
    title). What marimo draws on purpose (markdown, UI elements, charts, ``_mime_`` objects,
    tables) and None are not stray."""
    stray = []
    for i, output in enumerate(outputs or ()):
        if output is None or any(
            hasattr(output, name)
            for name in ("_mime_", "_repr_html_", "_repr_markdown_", "_display_")
        ):
            continue
        plain = isinstance(output, (numbers.Number, str, bytes, list, tuple, dict, set))
        if plain or hasattr(output, "shape") and hasattr(output, "dtype"):
            stray.append(f"cell {i + 1} shows {type(output).__name__} {reprlib.repr(output)}")
    return stray


def finish(outputs=(), error: str | None = None) -> dict | None:
    """End the run: record charts shown directly as cell outputs, print, write with --out.

    A chart that cannot be drawn or a cell that shows a stray value ends the run in an error.
    """
    if not RECORDER.active:
        return None
    broken = stray_outputs(outputs)
    for output in outputs or ():
        if hasattr(output, "to_dict") and type(output).__module__.startswith("altair"):
            try:
                output.to_dict()  # the hook records it (once)
            except Exception as chart_error:  # the browser cannot draw it either
                broken.append(f"{getattr(output, 'title', '') or 'a chart'}: {chart_error}")
    if broken and error is None:
        error = "a chart cannot be drawn or a cell shows a stray value (" + "; ".join(broken) + ")"
    doc = document(error)
    RECORDER.active = False
    _print_text(doc)
    if RECORDER.out is not None:
        paths = write(doc, RECORDER.out)
        print(f"wrote {paths[-1]} ({len(paths)} files)")
    if broken:
        raise SystemExit(f"ERROR: {error}")
    return doc


def worst_check_error(check: dict) -> tuple[float | None, float]:
    """(error, its tolerance) of a results.json check's measured error nearest its bound, as
    ``lab.Check`` picks its headline one; a NaN or infinite error (None) is the worst."""
    names = list(check["errors"])
    worst = next((name for name in names if check["errors"][name] is None), None)
    if worst is None:
        worst = max(names, key=lambda n: check["errors"][n] / max(check["tolerances"][n], 1e-300))
    return check["errors"][worst], check["tolerances"][worst]


def tolerance_reason(line: str) -> str:
    """Why a check's bound has its value, as its line says: ``(tolerance 3e-03: REASON)``
    after ``max error`` (``lab.Check.line``); "" when the line gives none."""
    start = line.find("(tolerance ", max(line.find(" max error "), 0))
    if start < 0:
        return ""
    depth, end = 0, len(line)
    for index in range(start, len(line)):
        depth += {"(": 1, ")": -1}.get(line[index], 0)
        if depth == 0:
            end = index
            break
    _, colon, reason = line[start + 1 : end].partition(": ")
    return reason.strip() if colon else ""


def load(path: pathlib.Path) -> dict:
    """A results.json, verified against the schema (ValueError naming the bad field)."""
    return documents.load(path, LessonResults, "lesson results document")


REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# Beside the capstone's schemas, in a folder of its own (the capstone owns docs/schemas/*.json).
SCHEMA_FILE = REPO_ROOT / "docs" / "schemas" / "lessons" / "lesson_results.schema.json"


def write_schema() -> pathlib.Path:
    """Regenerate docs/schemas/lessons/lesson_results.schema.json from ``LessonResults``."""
    schema = json.dumps(documents.json_schema(LessonResults), indent=2, sort_keys=True)
    SCHEMA_FILE.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_FILE.write_text(schema + "\n", encoding="utf-8")
    return SCHEMA_FILE
