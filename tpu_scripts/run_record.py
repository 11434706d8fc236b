"""The record of a course run, ``<run>/run.json``: its pydantic models (``RunRecord``), loading
and saving it validated and atomically, merging a new call's lessons into it, and reading
which lessons' bundles came back (course_run.py runs the lessons and keeps this record).
"""

from __future__ import annotations

import datetime
import json
import pathlib
import re
from typing import Any, Literal

import pydantic

from core import documents
from core.lab import results

SCHEMA = "jax-tpu-lab/course-run"
RECORD = "run.json"
DONE = ("passed", "stopped")  # a bundle with this status came back: not rerun


class WorkerRecord(documents.Document):
    worker: int
    status: str  # that worker's results status, "missing" or "invalid"
    results: str | None  # its results.json, relative to the run folder


class LessonRecord(documents.Document):
    slug: str
    status: Literal["pending", "passed", "failed", "stopped", "error"]
    exit_code: int | None
    seconds: float | None
    finished_utc: str | None
    results: str | None  # process 0's results.json, relative to the run folder
    workers: list[WorkerRecord]
    output_tail: str
    # "own": the lesson ran in its own process (as a learner runs it); "shared": in course-run's
    # process with the lessons before it (--one-process, tpu_scripts/one_process.py)
    process: Literal["own", "shared"] = "own"
    # sha256 of the app the lesson's staged script was exported from (export.source_digest)
    app_sha256: str | None = None


class VmRecord(documents.Document):
    name: str
    zone: str
    project: str
    accelerator_type: str
    runtime_version: str
    hosts: int
    state: str
    described: dict[str, Any]  # what `gcloud ... describe --format=json` printed


class CallRecord(documents.Document):
    """One call of course-run into this run folder: its command, the machine it ran on (the
    TPU host's CPU with --local there) and the load other processes put on that machine
    while it ran (``core.perf.records.measure_load``; course-record keeps it)."""

    command: list[str]
    started_utc: str
    cpu: str
    cores: int
    load: dict[str, Any] | None  # measure_load's document, updated as the lessons finish


class RunRecord(documents.Document):
    """run.json: one course run (TPU VM or local), lesson by lesson."""

    schema_: Literal["jax-tpu-lab/course-run"] = pydantic.Field(alias="schema")
    version: Literal[1]
    backend: Literal["tpu", "local"]
    vm: VmRecord | None
    created_utc: str
    updated_utc: str
    command: list[str]
    wheel: str | None
    wheel_sha256: str | None
    versions: dict[str, str]  # as the lessons resolved them (process 0's receipt)
    status: Literal["running", "passed", "failed"]
    lessons: list[LessonRecord]
    wheelhouse: str | None = None  # the build installed instead of the network (wheelhouse)
    calls: list[CallRecord] = []  # every call into this folder (absent before they were kept)

    @pydantic.field_validator("created_utc", "updated_utc")
    @classmethod
    def _time(cls, value: str) -> str:
        return documents.iso_time(value)


def now_utc() -> str:
    """This moment in UTC, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def load_record(path: pathlib.Path) -> dict:
    """A run.json, validated (ValueError naming the bad field)."""
    return documents.load(path, RunRecord, "course run record")


def save_record(path: pathlib.Path, record: dict, load_start: dict | None = None) -> None:
    """Validate and write atomically (a crash leaves the previous record whole).

    ``load_start``: ``records.read_load()`` at this call's start: the call's load so far is
    kept in its entry of ``calls`` (what other processes used of the machine meanwhile)."""
    record["updated_utc"] = now_utc()
    if load_start is not None and record.get("calls"):
        from core.perf import records

        record["calls"][-1]["load"] = records.measure_load(load_start)
    documents.validate(RunRecord, record, "course run record")
    documents.write_text_atomic(path, json.dumps(record, indent=2) + "\n")


def pending_lesson(slug: str) -> dict:
    return {
        "slug": slug,
        "status": "pending",
        "exit_code": None,
        "seconds": None,
        "finished_utc": None,
        "results": None,
        "workers": [],
        "output_tail": "",
        "app_sha256": None,
    }


def merge_record(existing: dict | None, slugs: list[str], backend: str, argv) -> dict:
    """The record for this call: the existing one's lessons kept, new ones pending."""
    if existing is None:
        existing = {
            "schema": SCHEMA,
            "version": 1,
            "backend": backend,
            "vm": None,
            "created_utc": now_utc(),
            "updated_utc": now_utc(),
            "command": [],
            "wheel": None,
            "wheel_sha256": None,
            "versions": {},
            "status": "running",
            "lessons": [],
        }
    known = {lesson["slug"]: lesson for lesson in existing["lessons"]}
    others = [lesson for lesson in existing["lessons"] if lesson["slug"] not in slugs]
    existing["lessons"] = [known.get(slug) or pending_lesson(slug) for slug in slugs] + others
    existing["command"] = list(argv)
    existing["status"] = "running"
    existing.setdefault("calls", []).append(call_record(argv))
    return existing


def call_record(argv) -> dict:
    """This call's entry of ``calls``: its command and this machine's CPU (load: later)."""
    from core.perf import machine  # imports jax; the TPU backend is not started by it

    return {
        "command": list(argv),
        "started_utc": now_utc(),
        "cpu": machine.cpu_model(),
        "cores": machine.core_count(),
        "load": None,
    }


def bundle_problem(run_dir: pathlib.Path, slug: str) -> str | None:
    """Why ``<run>/<slug>/results.json`` is not a finished bundle, or None when it is."""
    path = run_dir / slug / "results.json"
    if not path.is_file():
        return f"no {path}"
    try:
        doc = results.load(path)
    except ValueError as exc:
        return str(exc)
    if doc["lesson"] != slug:
        return f"{path} is of lesson {doc['lesson']!r}"
    if doc["status"] not in DONE:
        return f"its status is {doc['status']}"
    return None


def to_run(record: dict, run_dir: pathlib.Path, force: bool) -> list[str]:
    """The lessons of ``record`` this call runs: all with ``force``, else those not done."""
    slugs = []
    for lesson in record["lessons"]:
        if force or lesson["status"] not in DONE or bundle_problem(run_dir, lesson["slug"]):
            slugs.append(lesson["slug"])
    return slugs


def lesson_outcome(run_dir: pathlib.Path, slug: str, workers: int, exit_code: int | None):
    """(status, results path, worker records, problem) from the bundles that came back."""
    records, problems = [], []
    for worker in range(workers):
        folder = run_dir / slug if worker == 0 else run_dir / slug / "workers" / str(worker)
        path = folder / "results.json"
        if not path.is_file():
            status = "missing"
        else:
            try:
                status = results.load(path)["status"]
            except ValueError as exc:
                status, path = "invalid", None
                problems.append(f"worker {worker}: {exc}")
        rel = str(path.relative_to(run_dir)) if path is not None and path.is_file() else None
        records.append({"worker": worker, "status": status, "results": rel})
    first = records[0]["status"]
    bad = [r for r in records if r["status"] not in DONE]
    if first in ("missing", "invalid"):
        status = "error"
    elif first not in DONE:
        status = first
    elif bad or exit_code != 0:
        status = "failed"
    else:
        status = first
    problems += [f"worker {r['worker']}: {r['status']}" for r in bad]
    if exit_code != 0:
        problems.append(f"exit code {exit_code}")
    return status, records[0]["results"], records, "; ".join(problems)


def verdicts(output: str) -> list[str]:
    """The PASS/FAIL/STOPPED/ERROR lines of the output, each once (every worker prints them)."""
    lines = [line.strip() for line in output.splitlines()]
    return list(
        dict.fromkeys(x for x in lines if x.startswith(("PASS", "FAIL", "STOPPED", "ERROR")))
    )


_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Exit|Interrupt)\b.*")


def first_problem(output: str) -> str:
    """The line that says what went wrong: the first FAIL/STOPPED/ERROR verdict, else the
    exception a traceback ends with, else the last line of output."""
    bad = [line for line in verdicts(output) if not line.startswith("PASS")]
    if bad:
        return bad[0]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    raised = [line for line in lines if _EXCEPTION.match(line)]
    return raised[-1] if raised else (lines[-1] if lines else "(no output)")


def lesson_line(run_dir: pathlib.Path, lesson: dict) -> str:
    """A lesson's line for the summary: a passed lesson's check lines (from its bundle, else
    its output); otherwise the first line that says what went wrong."""
    if lesson["status"] in ("pending",):
        return "(not run)"
    path = run_dir / lesson["results"] if lesson.get("results") else None
    doc = None
    if path is not None and path.is_file():
        try:
            doc = results.load(path)
        except ValueError:
            doc = None
    if lesson["status"] == "passed":
        if doc is not None and doc["checks"]:
            return "; ".join(check["line"] for check in doc["checks"])
        passed = [line for line in verdicts(lesson["output_tail"]) if line.startswith("PASS")]
        return "; ".join(passed) or "(passed; no check line)"
    if doc is not None:
        failed = [check["line"] for check in doc["checks"] if not check["passed"]]
        if failed or doc["stopped"]:
            return (failed or doc["stopped"])[0]
    return first_problem(lesson["output_tail"])


def summary_table(run_dir: pathlib.Path, record: dict, slugs, width: int = 110) -> str:
    """A Markdown table of ``slugs``' lessons in ``record``: lesson, status, seconds, and its
    check line or first error line (cut to ``width`` characters)."""
    lessons = {lesson["slug"]: lesson for lesson in record["lessons"]}
    rows = ["| lesson | status | seconds | check line or first error |", "|---|---|---|---|"]
    for slug in slugs:
        lesson = lessons[slug]
        line = " ".join(lesson_line(run_dir, lesson).split()).replace("|", "\\|")
        if len(line) > width:
            line = line[: width - 1] + "…"
        seconds = "" if lesson["seconds"] is None else f"{lesson['seconds']:.1f}"
        rows.append(f"| {slug} | {lesson['status']} | {seconds} | {line} |")
    return "\n".join(rows)
