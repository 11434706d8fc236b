"""A lesson's TPU results beside its local CPU results: the same tables, two value columns.

``compare(tpu_doc, local_doc)`` takes two results.json documents (``core.lab.results``,
LessonResults v1; either may be None: not produced yet) and returns rows for a person: the
checks side by side with their errors, the key numbers, and every table with one value
column per backend, headed with the backend and device kind from each side's receipt. What
one side lacks reads "missing", never a value from the other side. ``markdown`` writes it
for ``python -m tpu_scripts compare``; ``comparison_section(slug)`` is the section of a
lesson app: the newest TPU bundle of that lesson under runs/tpu/ beside the newest local one
under runs/local/; without a TPU bundle, the lesson's entry in the newest committed tpu_course
record (``core.curriculum.tpu_record``: what a TPU chip gave, with its date and file) beside
the newest local bundle; else one line saying how to produce them.

Nothing here imports marimo: the section is an object marimo shows through ``_mime_``
(HTML), so the command-line tools (which never import marimo) share this module.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import pathlib
from typing import Any

from core import curriculum
from core.curriculum import tpu_record

MISSING = "missing"
RUNS_ROOT = pathlib.Path(__file__).resolve().parents[2] / "runs"


def backend_label(doc: dict | None, side: str) -> str:
    """Column heading for one side: "TPU: tpu (TPU v5 lite x 8)", or "TPU: missing"."""
    if doc is None:
        return f"{side}: {MISSING}"
    receipt = doc["receipt"]
    kinds = ", ".join(receipt["device_kinds"]) or "no devices"
    processes = receipt["process_count"]
    where = f"{kinds} x {receipt['device_count']}"
    if processes > 1:
        where += f", {processes} processes"
    return f"{side}: {receipt['backend']} ({where})"


def _text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.6g}"
    return str(value)


def _check_text(check: dict | None) -> str:
    if check is None:
        return MISSING
    verdict = "PASS" if check["passed"] else "FAIL"
    errors = ", ".join(
        f"{name} {'nan' if error is None else f'{error:.3g}'}"
        for name, error in check["errors"].items()
    )
    facts = ", ".join(f"{name}: {_text(ok)}" for name, ok in check["facts"].items())
    return " ".join(part for part in (verdict, errors, facts) if part)


def _same(a: str, b: str) -> str:
    if MISSING in (a, b):
        return ""
    return "yes" if a == b else "no"


@dataclasses.dataclass(frozen=True)
class Section:
    """One part of the comparison: a title, its column names and rows of text."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclasses.dataclass(frozen=True)
class Comparison:
    lesson: str
    tpu_label: str
    local_label: str
    sections: tuple[Section, ...]
    notes: tuple[str, ...]


def _by_key(items: list[dict], key: str) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for item in items:
        name, n = item[key], 2
        while name in found:  # two tables of one title stay apart
            name, n = f"{item[key]} ({n})", n + 1
        found[name] = item
    return found


def _ordered(a: dict, b: dict) -> list[str]:
    return list(dict.fromkeys([*a, *b]))


def _table_section(title: str, tpu: dict | None, local: dict | None, labels) -> Section:
    """A table of the lesson as (row, column, TPU value, CPU value, same): rows by position,
    labelled by their first column (what a row is); the other columns as values."""
    tables = [t for t in (tpu, local) if t is not None]
    columns = list(dict.fromkeys(c for t in tables for c in t["columns"]))
    label_column = columns[0] if columns else ""
    rows = []
    count = max(len(t["rows"]) for t in tables) if tables else 0
    for i in range(count):
        sides = [
            (t["rows"][i] if t is not None and i < len(t["rows"]) else None) for t in (tpu, local)
        ]
        present = next(row for row in sides if row is not None)
        label = _text(present.get(label_column)) if label_column else str(i + 1)
        for column in columns[1:] or columns:
            values = [
                MISSING if row is None or column not in row else _text(row[column]) for row in sides
            ]
            rows.append((label, column, values[0], values[1], _same(*values)))
    return Section(f"table: {title}", ("row", "column", labels[0], labels[1], "same"), tuple(rows))


def _number_rows(numbers: list[dict]) -> list[tuple]:
    """(name, unit, value per side..., same) for every key number of any side ({name: number}
    per side); a side without it reads MISSING."""
    rows = []
    for name in _ordered(*numbers):
        found = [side.get(name) for side in numbers]
        unit = next(f["unit"] for f in found if f is not None)
        values = [MISSING if f is None else _text(f["value"]) for f in found]
        rows.append((name, unit, *values, _same(*values)))
    return rows


def compare(tpu_doc: dict | None, local_doc: dict | None) -> Comparison:
    """The two results documents of one lesson side by side (None: that side is missing)."""
    docs = [d for d in (tpu_doc, local_doc) if d is not None]
    if not docs:
        raise ValueError("nothing to compare: neither a TPU nor a local results document")
    lessons = {d["lesson"] for d in docs}
    if len(lessons) > 1:
        raise ValueError(f"these results are of different lessons: {sorted(lessons)}")
    labels = (backend_label(tpu_doc, "TPU"), backend_label(local_doc, "CPU"))
    sides = [d or {} for d in (tpu_doc, local_doc)]
    notes = []
    for label, doc in zip(labels, (tpu_doc, local_doc), strict=True):
        if doc is None:
            continue
        line = f"{label}: status {doc['status']}, created {doc['created_utc']}"
        line += f", {doc['receipt']['note']}"
        notes.append(line)
        notes += [f"{label}: STOPPED: {problem}" for problem in doc["stopped"]]
        if doc["error"]:
            notes.append(f"{label}: error: {doc['error']}")
    if tpu_doc is not None and not tpu_doc["receipt"]["tpu_result"]:
        notes.append(
            "the TPU side's receipt says it is not a TPU result "
            f"(backend {tpu_doc['receipt']['backend']}): a rehearsal, not a TPU measurement"
        )
    if tpu_doc is not None and local_doc is not None and tpu_doc["flags"] != local_doc["flags"]:
        notes.append(
            f"the two runs used different flags: {tpu_doc['flags']} vs {local_doc['flags']}"
        )
    flags = _ordered(*(s.get("flags", {}) for s in sides))
    flag_rows = []
    for name in flags:
        values = [_text(s["flags"][name]) if name in s.get("flags", {}) else MISSING for s in sides]
        flag_rows.append((name, *values, _same(*values)))
    checks = [_by_key(s.get("checks", []), "what") for s in sides]
    check_rows = []
    for what in _ordered(*checks):
        values = [_check_text(c.get(what)) for c in checks]
        check_rows.append((what, *values))
    numbers = [_by_key(s.get("numbers", []), "name") for s in sides]
    number_rows = _number_rows(numbers)
    sections = [
        Section("flags", ("flag", *labels, "same"), tuple(flag_rows)),
        Section("checks", ("check", *labels), tuple(check_rows)),
        Section("key numbers", ("number", "unit", *labels, "same"), tuple(number_rows)),
    ]
    tables = [_by_key(s.get("tables", []), "title") for s in sides]
    for title in _ordered(*tables):
        sections.append(_table_section(title, tables[0].get(title), tables[1].get(title), labels))
    return Comparison(docs[0]["lesson"], labels[0], labels[1], tuple(sections), tuple(notes))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(comparison: Comparison, level: int = 2, title: str | None = None) -> str:
    """The comparison as markdown: a heading (``title``, default the lesson), the notes, one
    table per section."""
    lines = [f"{'#' * level} {title or comparison.lesson}", ""]
    lines += [f"- {note}" for note in comparison.notes]
    for section in comparison.sections:
        lines += ["", f"{'#' * (level + 1)} {section.title}", ""]
        if not section.rows:
            lines.append("(none on either side)")
            continue
        lines.append("| " + " | ".join(_cell(c) for c in section.columns) + " |")
        lines.append("|" + "---|" * len(section.columns))
        lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in section.rows]
    return "\n".join(lines) + "\n"


def _html(comparison: Comparison) -> str:
    esc = html.escape
    parts = [f"<h3>TPU beside CPU: {esc(comparison.lesson)}</h3>"]
    parts += [f"<p>{esc(note)}</p>" for note in comparison.notes]
    for section in comparison.sections:
        if not section.rows:
            continue
        head = "".join(f"<th>{esc(c)}</th>" for c in section.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>" for row in section.rows
        )
        parts.append(
            f"<h4>{esc(section.title)}</h4><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>"
        )
    return "\n".join(parts)


def course_run_hint(slug: str) -> str:
    """How to produce the bundles of ``slug`` (the line shown when there are none), or why a
    TPU run adds nothing to this lesson (the course map's ``TPU_ADDS_NOTHING``)."""
    if reason := curriculum.TPU_ADDS_NOTHING.get(slug):
        return f"A TPU run adds nothing to {slug}: {reason}."
    return (
        f"No TPU results for {slug} yet: no bundle under runs/tpu/, and no committed TPU "
        f"course record has it. Produce them with `python -m tpu_scripts course-run --name VM "
        f"--zone ZONE --accelerator-type TYPE --lessons {slug}` (on a TPU host itself: "
        f"`course-run --local --lessons {slug}`), keep them with `python -m tpu_scripts "
        f"course-record RUN_DIR`, and the CPU side with `python -m tpu_scripts course-run "
        f"--local --lessons {slug}` here."
    )


def _record_check_text(check: dict) -> str:
    error = "nan" if check["max_error"] is None else f"{check['max_error']:.3g}"
    reason = f": {check['tolerance_reason']}" if check["tolerance_reason"] else ""
    verdict = "PASS" if check["passed"] else "FAIL"
    return f"{verdict} max error {error} (tolerance {check['tolerance']:.1g}{reason})"


def _bundle_check_text(check: dict | None) -> str:
    from core.lab import results

    if check is None:
        return MISSING
    error, tolerance = results.worst_check_error(check)
    return _record_check_text(
        {
            "passed": check["passed"],
            "max_error": error,
            "tolerance": tolerance,
            "tolerance_reason": results.tolerance_reason(check["line"]),
        }
    )


def record_comparison(entry: tpu_record.TpuEntry, local_doc: dict | None) -> Comparison:
    """A lesson's entry in a TPU course record beside a local results document (None: this
    machine has no bundle of it): checks (worst error against its tolerance), key numbers."""
    lesson = entry.lesson
    tpu_label = f"TPU: {entry.device_kind} x {entry.device_count} ({entry.date})"
    local_label = backend_label(local_doc, "CPU")
    seconds = "" if lesson["seconds"] is None else f" in {lesson['seconds']:.1f} s"
    notes = [
        f"measured on {entry.device_kind}, {entry.date} ({entry.record})",
        f"{entry.line()}{seconds} (course-run, exit code {lesson['exit_code']})",
    ]
    notes += [f"{tpu_label}: {check['line']}" for check in lesson["checks"]]
    if local_doc is None:
        notes.append(
            f"{local_label}: this machine's check is the badge above; `python -m tpu_scripts "
            f"course-run --local --lessons {entry.slug}` keeps it as a bundle shown here"
        )
    else:
        notes.append(
            f"{local_label}: status {local_doc['status']}, created "
            f"{local_doc['created_utc']}, {local_doc['receipt']['note']}"
        )
    tpu_checks = _by_key(lesson["checks"], "what")
    local_checks = _by_key(local_doc["checks"] if local_doc else [], "what")
    check_rows = tuple(
        (
            what,
            _record_check_text(tpu_checks[what]) if what in tpu_checks else MISSING,
            _bundle_check_text(local_checks.get(what)),
        )
        for what in _ordered(tpu_checks, local_checks)
    )
    numbers = [
        _by_key(lesson["numbers"], "name"),
        _by_key(local_doc["numbers"] if local_doc else [], "name"),
    ]
    number_rows = _number_rows(numbers)
    sections = (
        Section("checks", ("check", tpu_label, local_label), check_rows),
        Section(
            "key numbers", ("number", "unit", tpu_label, local_label, "same"), tuple(number_rows)
        ),
    )
    return Comparison(entry.slug, tpu_label, local_label, sections, tuple(notes))


def _load(path: pathlib.Path) -> dict | None:
    from core.lab import results

    try:
        return results.load(path)
    except (OSError, ValueError):
        return None  # not a valid bundle: shown as missing, never guessed at


def newest_bundle(paths: list[pathlib.Path]) -> tuple[pathlib.Path, dict] | None:
    """The newest valid results.json among ``paths`` (by its created_utc), or None."""
    found = []
    for path in paths:
        doc = _load(path)
        if doc is not None:
            found.append((doc["created_utc"], str(path), path, doc))
    if not found:
        return None
    _, _, path, doc = max(found)
    return path, doc


def tpu_bundles(slug: str, runs_root: pathlib.Path) -> list[pathlib.Path]:
    """runs/tpu/<vm>/<date>/<slug>/results.json (process 0's bundle of each run)."""
    return sorted(pathlib.Path(runs_root).glob(f"tpu/*/*/{slug}/results.json"))


def local_bundles(slug: str, runs_root: pathlib.Path) -> list[pathlib.Path]:
    """runs/local/<date>/<slug>/results.json."""
    return sorted(pathlib.Path(runs_root).glob(f"local/*/{slug}/results.json"))


@dataclasses.dataclass(frozen=True)
class ComparisonSection:
    """What a lesson app shows (marimo renders ``_mime_``): the comparison, or the hint."""

    slug: str
    comparison: Comparison | None
    sources: tuple[str, ...]
    hint: str

    @property
    def markdown(self) -> str:
        if self.comparison is None:
            return self.hint + "\n"
        text = markdown(self.comparison, level=3, title=f"TPU beside CPU: {self.slug}")
        return text + "\n" + "\n".join(f"- from `{s}`" for s in self.sources) + "\n"

    def _mime_(self) -> tuple[str, str]:
        if self.comparison is None:
            parts = html.escape(self.hint).split("`")  # `code` spans at the odd indices
            text = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
            return "text/html", f"<p><em>{text}</em></p>"
        sources = "".join(f"<li><code>{html.escape(s)}</code></li>" for s in self.sources)
        return "text/html", _html(self.comparison) + f"<ul>{sources}</ul>"


def comparison_section(
    slug: str, runs_root: str | pathlib.Path | None = None, records_root=None
) -> ComparisonSection:
    """The newest TPU bundle of lesson ``slug`` beside the newest local one (for its app).

    Without a TPU bundle: the lesson's entry in the newest tpu_course record under
    ``records_root`` (default: $JAX_LAB_RECORDS_DIR or benchmarks/records) beside the newest
    local bundle; without either, the one-line hint of how to make them (a local bundle alone
    is no comparison). Reads only files; costs a glob when there are none.
    """
    root = pathlib.Path(runs_root) if runs_root is not None else RUNS_ROOT
    tpu = newest_bundle(tpu_bundles(slug, root))
    if tpu is None:
        entry = tpu_record.entries(records_root)[0].get(slug)
        if entry is None:
            return ComparisonSection(slug, None, (), course_run_hint(slug))
        local = newest_bundle(local_bundles(slug, root))
        sources = [entry.record] + ([str(local[0])] if local else [])
        found = record_comparison(entry, local[1] if local else None)
        return ComparisonSection(slug, found, tuple(sources), course_run_hint(slug))
    local = newest_bundle(local_bundles(slug, root))
    sources = [str(tpu[0])] + ([str(local[0])] if local else [])
    comparison = compare(tpu[1], local[1] if local else None)
    if note := run_record_note(tpu[0], slug):
        comparison = dataclasses.replace(comparison, notes=(note, *comparison.notes))
    return ComparisonSection(slug, comparison, tuple(sources), course_run_hint(slug))


def run_record_note(bundle: pathlib.Path, slug: str) -> str | None:
    """What the course run's run.json (beside ``<slug>/results.json``) says when the lesson
    did not pass there (a failure on another worker), or None."""
    try:
        record = json.loads((bundle.parent.parent / "run.json").read_text(encoding="utf-8"))
        lesson = next(x for x in record["lessons"] if x["slug"] == slug)
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None
    if lesson.get("status") in ("passed", "stopped"):
        return None
    workers = ", ".join(
        f"worker {w.get('worker')}: {w.get('status')}" for w in lesson.get("workers", [])
    )
    return f"the course run recorded this lesson as {lesson.get('status')}" + (
        f" ({workers})" if workers else ""
    )


def as_json(comparison: Comparison) -> str:
    """The comparison as JSON (sections as lists of rows), for tools."""
    return json.dumps(dataclasses.asdict(comparison), indent=1)
