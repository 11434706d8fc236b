"""``python -m tpu_scripts course-record RUN_DIR [RUN_DIR ...]``: a TPU course run as a record.

A course run on a TPU host (``course-run --local`` there, or ``course-run --name VM``) leaves
run folders: ``run.json`` (run_record.py) and one bundle per lesson, ``<slug>/results.json``
(``core.lab.results``), whose receipt names the backend and devices. This command reads one or
more of them, verifies every bundle (schema, lesson, receipt) and writes ONE small record per
machine and date through ``core.perf.records.write_document``:
``benchmarks/records/tpu_course/<date>_<machine>.json`` (``core.documents.BenchmarkRecord``
with its ``course`` part). Nothing in it is typed: per lesson the status (passed, failed,
refused with its reason, timed_out, error), each check's line, worst error, tolerance and the
tolerance's reason (as its line gives it), seconds, exit code, key numbers (``lab.report``),
the receipt in short and the sha256 of its results.json; per record the accelerator (device
kind and count, from the receipts), the host's CPU and cores and each call's command (from
run.json's ``calls``), the versions (from the receipts) and the dates.

Refused, exit 2 and nothing written: a bundle that does not validate or is of another lesson,
a receipt that is not a TPU's (a CPU receipt; ``tpu_result`` claimed on another backend; a
device kind that is not a TPU), receipts that disagree on the devices or versions, a run.json
that says a lesson passed whose bundle did not (or is missing).

Merging: the run folders of one date and one accelerator go into one record, and into the
record already kept for that date and machine (its lessons stay unless rerun). A lesson run
more than once: the run that finished last wins, and its entry names the runs it replaced.

The load: a record is refused when other processes kept its machine busy (records.py). The
machine that matters is the TPU host during the run, not this one (which only reads files):
course-run keeps each call's load in run.json (``calls``, measured on the host from the
call's start to its last lesson), and the record keeps the busiest call's. A run.json from
before calls were kept has no load: the record says so (``load`` null) and is not refused.

``--pytest-summary FILE --pytest-command CMD`` adds ``pytest``'s counts on that machine: FILE
is a junit xml (``pytest --junitxml FILE``) or a text holding pytest's final summary line
(``=== 3 failed, 385 passed, 5 skipped in 496.12s ===``, e.g. ``pytest ... | tail -1``).
Repeat the pair for a run continued over several commands (``pytest_on_chip --after``):
the record adds the counts and keeps every command.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import pathlib
import re
import shlex
import sys
import xml.etree.ElementTree as ElementTree

from core import documents
from core.lab import results
from core.perf import records
from tpu_scripts import run_record

NAME = "tpu_course"
NOT_RECORDED = "not recorded"  # the host's CPU when run.json predates its calls
STATUS = {"passed": "passed", "failed": "failed", "stopped": "refused", "error": "error"}


class Refused(ValueError):
    """A run folder, bundle or file that cannot go into the record (nothing was written)."""


@dataclasses.dataclass
class RunRead:
    """One run folder, read and verified: its lessons as record entries."""

    info: dict  # documents.CourseRun
    date: str
    accelerator: dict  # {"kind", "count"}
    versions: dict[str, str]
    hosts: set[tuple[str, int]]  # (cpu, cores) of each call that recorded its host
    loads: list[dict]  # each call's load on the host
    lessons: list[dict]  # documents.CourseLesson


# ----------------------------------------------------------------------------------------
# One lesson


def check_entry(check: dict) -> dict:
    """A bundle's check as the record keeps it: its worst error (nearest its bound, as
    ``lab.Check`` picks it; a NaN error is the worst) and that error's tolerance."""
    error, tolerance = results.worst_check_error(check)
    return {
        "what": check["what"],
        "passed": check["passed"],
        "line": check["line"],
        "max_error": error,
        "tolerance": tolerance,
        "tolerance_reason": results.tolerance_reason(check["line"]),
    }


def receipt_problem(receipt: dict) -> str | None:
    """Why a bundle's receipt cannot stand in a TPU record, or None."""
    backend, kinds = receipt["backend"], receipt["device_kinds"]
    if receipt["tpu_result"] and backend != "tpu":
        return f"its receipt claims a TPU result on backend {backend!r}: it contradicts itself"
    if backend != "tpu":
        return f"its receipt says backend {backend!r} ({', '.join(kinds)}): not a TPU result"
    if not receipt["tpu_result"]:
        return "its receipt says backend 'tpu' but tpu_result false: it contradicts itself"
    if not kinds or not all(kind.startswith("TPU") for kind in kinds):
        return f"its receipt's device kinds {kinds} are not TPU devices"
    if receipt["device_count"] < 1:
        return "its receipt counts no devices"
    return None


def _status(lesson: dict, doc: dict | None) -> tuple[str, str]:
    """(record status, reason) from run.json's lesson and its bundle (None: none came back)."""
    tail = lesson["output_tail"]
    if lesson["exit_code"] is None and "timed out after" in tail:
        return "timed_out", run_record.first_problem(tail)
    if doc is None:
        return "error", run_record.first_problem(tail)
    status = STATUS[doc["status"]]
    if status == "refused":
        return status, "; ".join(doc["stopped"])
    if status == "error":
        return status, doc["error"] or run_record.first_problem(tail)
    if status == "failed":
        return status, next(c["line"] for c in doc["checks"] if not c["passed"])
    if lesson["status"] not in run_record.DONE:  # its bundle passed; another worker or the exit
        bad = [f"worker {w['worker']}: {w['status']}" for w in lesson["workers"][1:]]
        bad = [w for w in bad if not w.endswith(("passed", "stopped"))]
        return "failed", "; ".join([*bad, f"exit code {lesson['exit_code']}"])
    return "passed", ""


def lesson_entry(run_dir: pathlib.Path, lesson: dict, run_id: str) -> tuple[dict, dict | None]:
    """(record entry, its bundle or None) of one lesson of run.json (Refused when its bundle
    cannot be trusted)."""
    slug = lesson["slug"]
    path = run_dir / (lesson["results"] or f"{slug}/results.json")
    doc = None
    if path.is_file():
        try:
            doc = results.load(path)
        except ValueError as exc:
            raise Refused(f"{path}: {exc}") from None
        if doc["lesson"] != slug:
            raise Refused(f"{path} is a bundle of lesson {doc['lesson']!r}, not {slug!r}")
        if problem := receipt_problem(doc["receipt"]):
            raise Refused(f"{path}: {problem}; it cannot go into a TPU record")
    elif lesson["status"] in run_record.DONE:
        raise Refused(
            f"{run_dir / 'run.json'} says {slug} {lesson['status']}, but {path} "
            "is not there (was the run folder brought back whole?)"
        )
    status, reason = _status(lesson, doc)
    if lesson["status"] in run_record.DONE and status not in ("passed", "refused"):
        raise Refused(
            f"{run_dir / 'run.json'} says {slug} {lesson['status']}, its bundle "
            f"{path} says {doc['status'] if doc else 'nothing'}"
        )
    receipt = doc["receipt"] if doc else None
    entry = {
        "slug": slug,
        "status": status,
        "reason": reason,
        "checks": [check_entry(check) for check in doc["checks"]] if doc else [],
        "seconds": lesson["seconds"],
        "exit_code": lesson["exit_code"],
        "finished_utc": lesson["finished_utc"],
        "numbers": [dict(number) for number in doc["numbers"]] if doc else [],
        "receipt": {k: receipt[k] for k in documents.CourseReceipt.model_fields}
        if receipt
        else None,
        "results_sha256": hashlib.sha256(path.read_bytes()).hexdigest() if doc else None,
        "app_sha256": lesson.get("app_sha256"),
        "run": run_id,
        "replaced": [],
    }
    return entry, doc


# ----------------------------------------------------------------------------------------
# One run folder


def _date(run_dir: pathlib.Path, record: dict) -> str:
    try:
        return datetime.date.fromisoformat(run_dir.name).isoformat()
    except ValueError:
        return record["created_utc"][:10]


def _agree(values: dict[str, object], what: str) -> object:
    """The one value every bundle gives (Refused naming the ones that differ)."""
    distinct = {repr(v): v for v in values.values()}
    if len(distinct) > 1:
        shown = "; ".join(f"{where}: {value}" for where, value in values.items())
        raise Refused(f"the bundles disagree on {what} (one record holds one machine): {shown}")
    return next(iter(distinct.values()))


def read_run(run_dir: str | pathlib.Path) -> RunRead:
    """A run folder's lessons as record entries, its machine, versions and loads (Refused)."""
    run_dir = pathlib.Path(run_dir)
    try:
        record = run_record.load_record(run_dir / run_record.RECORD)
    except (OSError, ValueError) as exc:
        raise Refused(f"{run_dir} is not a course run folder: {exc}") from None
    folder = f"{run_dir.parent.name}/{run_dir.name}"
    run_id = f"{folder}@{record['created_utc']}"
    lessons, receipts = [], {}
    for lesson in record["lessons"]:
        if lesson["status"] == "pending":
            print(f"# {folder}: {lesson['slug']} was not run (pending): left out")
            continue
        entry, doc = lesson_entry(run_dir, lesson, run_id)
        lessons.append(entry)
        if doc is not None:
            receipts[lesson["slug"]] = doc
    if not receipts:
        raise Refused(f"{run_dir}: no lesson's bundle came back, so nothing names the device")
    where = {f"{folder}/{slug}": doc["receipt"] for slug, doc in receipts.items()}
    accelerator = _agree(
        {
            k: records.accelerator("tpu", r["device_kinds"], r["device_count"])
            for k, r in where.items()
        },
        "the devices",
    )
    versions = _agree(
        {k: {**r["versions"], "python": r["python"]} for k, r in where.items()}, "the versions"
    )
    calls = record.get("calls", [])
    commands = [shlex.join(call["command"]) for call in calls] or [shlex.join(record["command"])]
    info = {
        "id": run_id,
        "folder": folder,
        "created_utc": record["created_utc"],
        "updated_utc": record["updated_utc"],
        "commands": commands,
        "lessons": [entry["slug"] for entry in lessons],
    }
    return RunRead(
        info=info,
        date=_date(run_dir, record),
        accelerator=accelerator,
        versions=versions,
        hosts={(call["cpu"], call["cores"]) for call in calls},
        loads=[call["load"] for call in calls if call["load"] is not None],
        lessons=lessons,
    )


# ----------------------------------------------------------------------------------------
# pytest's counts


COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)\b")


def pytest_counts(path: str | pathlib.Path, command: str) -> dict:
    """``documents.PytestCounts`` from a junit xml or pytest's summary line (Refused)."""
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise Refused(f"--pytest-summary {path}: cannot read it ({exc.strerror})") from None
    if not command.strip():
        raise Refused("--pytest-summary needs --pytest-command: the exact command that ran")
    if text.lstrip().startswith("<"):
        try:
            root = ElementTree.fromstring(text)
        except ElementTree.ParseError as exc:
            raise Refused(f"--pytest-summary {path}: not a junit xml ({exc})") from None
        suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
        if not suites:
            raise Refused(f"--pytest-summary {path}: no <testsuite> in this junit xml")
        total = {
            k: sum(int(s.get(k, 0)) for s in suites)
            for k in ("tests", "failures", "errors", "skipped")
        }
        seconds = sum(float(s.get("time", 0)) for s in suites)
        counts = {
            "passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"],
            "skipped": total["skipped"],
            "errors": total["errors"],
        }
        summary = ", ".join(f"{v} {k}" for k, v in counts.items()) + f" in {seconds:.2f}s"
        return {
            "command": command,
            "source": "junit xml",
            "summary": summary,
            **counts,
            "seconds": round(seconds, 2),
        }
    lines = [line for line in text.splitlines() if COUNT.search(line) and " in " in line]
    if not lines:
        raise Refused(
            f"--pytest-summary {path}: no pytest summary line "
            "('=== 3 failed, 385 passed in 496.12s ===') and not a junit xml"
        )
    summary = lines[-1].strip(" =")
    found = {kind: int(n) for n, kind in COUNT.findall(summary)}
    seconds = re.search(r" in ([\d.]+)s", summary)
    return {
        "command": command,
        "source": "summary line",
        "summary": summary,
        "passed": found.get("passed", 0),
        "failed": found.get("failed", 0),
        "skipped": found.get("skipped", 0),
        "errors": found.get("errors", 0) + found.get("error", 0),
        "seconds": float(seconds.group(1)) if seconds else None,
    }


def pytest_counts_of(paths: list[str], commands: list[str]) -> dict:
    """One ``documents.PytestCounts`` from the parts of a run continued over several calls
    (``pytest_on_chip --after``): counts and seconds added, commands joined by " ; " in order
    (Refused: a part unreadable, or not one command per part)."""
    if len(commands) != len(paths):
        raise Refused(
            f"--pytest-summary needs --pytest-command: the exact command that ran, one per "
            f"summary ({len(paths)} summaries, {len(commands)} commands)"
        )
    parts = [pytest_counts(path, command) for path, command in zip(paths, commands, strict=True)]
    if len(parts) == 1:
        return parts[0]
    kinds = ("passed", "failed", "skipped", "errors")
    total = {kind: sum(part[kind] for part in parts) for kind in kinds}
    seconds = [part["seconds"] for part in parts]
    seconds = None if None in seconds else round(sum(seconds), 2)
    return {
        "command": " ; ".join(part["command"] for part in parts),
        "source": " + ".join(sorted({part["source"] for part in parts})),
        "summary": ", ".join(f"{total[kind]} {kind}" for kind in kinds)
        + (f" in {seconds:.2f}s" if seconds is not None else "")
        + f" over {len(parts)} runs",
        **total,
        "seconds": seconds,
    }


# ----------------------------------------------------------------------------------------
# The record


def _winners(candidates: list[dict]) -> tuple[list[dict], list[str]]:
    """One entry per lesson: the one that finished last (the others named in ``replaced``)."""
    by_slug: dict[str, list[dict]] = {}
    for entry in candidates:
        by_slug.setdefault(entry["slug"], []).append(entry)
    chosen, said = [], []
    for slug, entries in by_slug.items():
        entries = sorted(entries, key=lambda e: e["finished_utc"] or "")  # stable: later last
        winner = dict(entries[-1])
        earlier = [
            f"{e['run']} ({e['status']}, finished {e['finished_utc']})" for e in entries[:-1]
        ]
        winner["replaced"] = list(dict.fromkeys([*winner["replaced"], *earlier]))
        if earlier:
            said.append(
                f"{slug}: run {len(entries)} times; the later run wins: "
                f"{winner['run']} ({winner['status']}) replaces {'; '.join(earlier)}"
            )
        chosen.append(winner)
    return chosen, said


def _host(runs: list[RunRead], existing: dict | None) -> tuple[str, int | None]:
    hosts = set().union(*(run.hosts for run in runs))
    if existing and existing["machine"]["cpu"] != NOT_RECORDED:
        hosts.add((existing["machine"]["cpu"], existing["machine"]["cores"]))
    if len(hosts) > 1:
        raise Refused(f"these runs name different host machines: {sorted(hosts)}")
    return next(iter(hosts)) if hosts else (NOT_RECORDED, None)


def build_document(runs: list[RunRead], existing: dict | None, pytest: dict | None):
    """The record of ``runs`` (one date, one accelerator), merged into ``existing``:
    (document, what the merge said)."""
    first = runs[0]
    cpu, cores = _host(runs, existing)
    versions = _agree(
        {run.info["id"]: run.versions for run in runs}
        | ({"the kept record": existing["versions"]} if existing else {}),
        "the versions",
    )
    candidates = [entry for run in runs for entry in run.lessons]
    infos = {run.info["id"]: run.info for run in runs}
    if existing:
        candidates = existing["course"]["lessons"] + candidates
        infos = {info["id"]: info for info in existing["course"]["runs"]} | infos
    lessons, said = _winners(candidates)
    loads = [load for run in runs for load in run.loads]
    if existing and existing["load"]:
        loads.append(existing["load"])
    load = max(loads, key=lambda x: x["other_processes_cores"] or 0.0) if loads else None
    counts = {
        status: sum(e["status"] == status for e in lessons)
        for status in ("passed", "failed", "refused", "timed_out", "error")
    }
    pytest = pytest or (existing["course"].get("pytest") if existing else None)
    figures = {
        "lessons": len(lessons),
        **counts,
        "device_kind": first.accelerator["kind"],
        "device_count": first.accelerator["count"],
    }
    if pytest:
        figures |= {f"pytest_{k}": pytest[k] for k in ("passed", "failed", "skipped", "errors")}
    commands = [command for info in infos.values() for command in info["commands"]]
    load_note = (
        "the load is the busiest course-run call's on the TPU host (run.json calls)"
        if load
        else "no load was measured (run.json from before course-run kept its calls' load)"
    )
    document = {
        "schema_version": 1,
        "name": NAME,
        "date": first.date,
        "machine": {
            "label": records.machine_label(
                f"{cpu}, {cores} cores" if cores else cpu, first.accelerator
            ),
            "cpu": cpu,
            "cores": cores,
            "platform": "tpu",
            "accelerator": first.accelerator,
        },
        "versions": versions,
        "command": "; ".join(dict.fromkeys(commands)),
        "load_average": load["load_average_start"] if load else None,
        "load": load,
        "figures": figures,
        "notes": (
            "Written by `python -m tpu_scripts course-record` from the lessons' results.json "
            f"and run.json of {len(infos)} run folder(s), never typed; {load_note}."
        ),
        "under_load": "",
        "course": {
            "lessons": lessons,
            "runs": list(infos.values()),
            **({"pytest": pytest} if pytest else {}),
        },
    }
    return documents.validate(documents.BenchmarkRecord, document, records.WHAT), said


def record_runs(run_dirs, root=None, pytest: dict | None = None) -> list[pathlib.Path]:
    """Read, verify, merge and write: one record per date and accelerator (Refused,
    records.BusyMachine; nothing written unless every record is whole)."""
    runs = [read_run(run_dir) for run_dir in run_dirs]
    groups: dict[tuple, list[RunRead]] = {}
    for run in runs:
        key = (run.date, run.accelerator["kind"], run.accelerator["count"])
        groups.setdefault(key, []).append(run)
    if pytest is not None and len(groups) > 1:
        raise Refused(f"--pytest-summary names one record; these runs make {len(groups)}")
    written = []
    for group in groups.values():
        document, said = build_document(group, None, pytest)
        path = records.record_path(document, root)
        if path.is_file():
            try:
                records.load(path)
                existing = documents.read_json(path)
            except ValueError as exc:
                raise Refused(f"the kept record cannot be merged into: {exc}") from None
            if existing.get("course") is None:
                raise Refused(f"{path} holds no course results to merge into")
            document, said = build_document(group, existing, pytest)
        written.append((document, said))
    paths = []
    for document, said in written:  # every record built and verified before the first write
        for line in said:
            print(f"# {line}")
        paths.append(records.write_document(document, root))
    return paths


def summary(path: pathlib.Path) -> str:
    """The written record as a short table: lesson, status, seconds, check line or reason."""
    record = records.load(path)
    rows = [
        f"{path}: {record.machine.label}, {record.date}",
        "| lesson | status | seconds | check line or reason |",
        "|---|---|---|---|",
    ]
    for lesson in record.course.lessons:
        line = lesson.reason or "; ".join(c.line for c in lesson.checks) or "(no check)"
        line = " ".join(line.split())[:110]
        rows.append(f"| {lesson.slug} | {lesson.status} | {lesson.seconds} | {line} |")
    if record.course.pytest:
        rows.append(f"pytest: {record.course.pytest.summary} ({record.course.pytest.command})")
    return "\n".join(rows)


# ----------------------------------------------------------------------------------------
# Command line


def add_parser(commands) -> None:
    sub = commands.add_parser(
        "course-record",
        help="the TPU results of course-run folders as one validated record per machine/date",
        description="Read course-run folders (run.json and each lesson's results.json), "
        "verify every bundle and receipt, and write benchmarks/records/tpu_course/"
        "<date>_<machine>.json (merged with the record kept for that date and machine).",
    )
    sub.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="e.g. runs/local/2026-12-06")
    sub.add_argument(
        "--pytest-summary",
        action="append",
        default=[],
        metavar="FILE",
        help="pytest's counts on that machine: a junit xml or a file with pytest's final line; "
        "repeat it for a run continued over several calls (the counts are added)",
    )
    sub.add_argument(
        "--pytest-command",
        action="append",
        default=[],
        help="the exact pytest command that ran (one per --pytest-summary, in the same order)",
    )
    sub.add_argument(
        "--records-root",
        help=f"write under this folder (default: ${records.ROOT_ENV} or benchmarks/records)",
    )


def main(args: argparse.Namespace) -> int:
    """Exit 0 (written), 2 (refused: the reason on stderr, nothing written)."""
    try:
        pytest = None
        if args.pytest_summary:
            pytest = pytest_counts_of(args.pytest_summary, args.pytest_command)
        elif args.pytest_command:
            raise Refused("--pytest-command goes with --pytest-summary FILE")
        paths = record_runs(args.run_dirs, args.records_root, pytest)
    except (Refused, records.BusyMachine) as exc:
        print(f"error: {exc}. Nothing was written.", file=sys.stderr)
        return 2
    for path in paths:
        print(summary(path))
        print(f"wrote {path}")
    return 0
