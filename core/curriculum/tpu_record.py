"""Which lessons ran on a TPU: each lesson's entry in the newest committed tpu_course record.

``python -m tpu_scripts course-record`` keeps a course run on a TPU host as
``benchmarks/records/tpu_course/<date>_<machine>.json`` (a ``core.documents.BenchmarkRecord``
with its ``course`` part). This module reads those files (``core.perf.records``: the root is
``$JAX_LAB_RECORDS_DIR`` or the checkout's, or ``root=``), each validated by the record's
schema, and says per lesson "passed on TPU v5 lite (2026-12-06)", or its status and reason, or
"not yet run on a TPU". The reading modules are imported when a record is read, never by
``import core.curriculum`` (the CLIs import it and must stay light).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib

RECORD_NAME = "tpu_course"
NOT_YET = "not yet run on a TPU"
CHANGED_SINCE = "(an earlier version of this app; it has changed since)"
STATUS_WORDS = {
    "passed": "passed",
    "failed": "failed",
    "refused": "refused",
    "timed_out": "timed out",
    "error": "stopped with an error",
}


@dataclasses.dataclass(frozen=True)
class TpuEntry:
    """One lesson's entry in a tpu_course record, with where it came from."""

    slug: str
    status: str  # passed, failed, refused, timed_out, error
    reason: str
    date: str
    device_kind: str
    device_count: int
    record: str  # the record's path, repo-relative when it is the repo's
    lesson: dict  # the record's entry (documents.CourseLesson as JSON)
    apps_dir: pathlib.Path | None = None  # where the app is now (None: the course's apps/)

    @property
    def app_changed(self) -> bool | None:
        """Whether apps/<slug>.py differs from the app the run ran (the entry's sha256); None
        when the record did not keep it (records before 2026-12-06's fifth session) or the
        app is not here. Read when asked, so an app showing its own entry hashes only itself."""
        return app_changed(self.slug, self.lesson.get("app_sha256"), self.apps_dir)

    def line(self, width: int | None = None) -> str:
        """``"passed on TPU v5 lite (2026-12-06)"``, or the status with its reason (cut to
        ``width`` characters when given), and CHANGED_SINCE when the app has changed since
        the run."""
        text = f"{STATUS_WORDS[self.status]} on {self.device_kind} ({self.date})"
        if self.app_changed:
            text += f" {CHANGED_SINCE}"
        if self.reason:
            reason = " ".join(self.reason.split())
            if width is not None and len(reason) > width:
                reason = reason[: width - 1] + "…"
            text += f": {reason}"
        return text

    def as_json(self) -> dict:
        return {
            "status": self.status,
            "reason": self.reason,
            "date": self.date,
            "device_kind": self.device_kind,
            "device_count": self.device_count,
            "record": self.record,
            "app_changed": self.app_changed,
            "line": self.line(),
        }


def shown_path(path: pathlib.Path) -> str:
    """``benchmarks/records/...`` for the repo's records; the path itself elsewhere."""
    from core.perf import records

    try:
        return str(path.resolve().relative_to(records.RECORDS_DIR.resolve().parents[1]))
    except ValueError:
        return str(path)


def app_changed(slug: str, ran_sha256: str | None, apps_dir: pathlib.Path | None = None):
    """Whether apps/<slug>.py now differs from the app a run ran (its sha256); None when the
    run did not keep it or the app is not here."""
    from core.curriculum import queries

    path = queries.app_path(slug, apps_dir or queries.APPS_DIR)
    if ran_sha256 is None or not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest() != ran_sha256


def entries(
    root: str | os.PathLike | None = None, apps_dir: pathlib.Path | None = None
) -> tuple[dict[str, TpuEntry], list[str]]:
    """({slug: its entry in the newest record that has it}, problems): a damaged record is
    left out and named in the problems, never guessed at. Each entry says whether the app in
    ``apps_dir`` (the course's apps/) has changed since its run."""
    records_dir = root if root is not None else os.environ.get("JAX_LAB_RECORDS_DIR")
    if records_dir is None:
        from core import runtime

        records_dir = runtime.course_path("benchmarks/records")
    if not (pathlib.Path(records_dir) / RECORD_NAME).is_dir():
        return {}, []  # no record yet: nothing to read, nothing imported
    from core.perf import records

    loaded, problems = [], []
    for path in records.paths(RECORD_NAME, records_dir):
        try:
            record = records.load(path)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if record.course is None or record.machine.accelerator is None:
            problems.append(f"{path}: no course results or no accelerator: left out")
            continue
        loaded.append((record.date, path.name, path, record))
    found: dict[str, TpuEntry] = {}
    for _, _, path, record in sorted(loaded, key=lambda item: item[:2]):  # newest last
        chips = record.machine.accelerator
        for lesson in record.course.lessons:
            found[lesson.slug] = TpuEntry(
                slug=lesson.slug,
                status=lesson.status,
                reason=lesson.reason,
                date=record.date,
                device_kind=chips.kind,
                device_count=chips.count,
                record=shown_path(path),
                lesson=lesson.model_dump(mode="json"),
                apps_dir=apps_dir,
            )
    return found, problems


def status_line(slug: str, found: dict[str, TpuEntry], width: int | None = None) -> str:
    """The lesson's TPU line: its entry's, or "not yet run on a TPU"."""
    entry = found.get(slug)
    return entry.line(width) if entry is not None else NOT_YET
