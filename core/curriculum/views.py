"""The course map as text: JSON-ready data, the printed map and summary, and apps/README.md."""

from __future__ import annotations

import pathlib

from core.curriculum.course import (
    APPS_DIR,
    ASSESSMENTS,
    CAPSTONES,
    HOME_APP,
    PHASES,
    REPO_ROOT,
    TRACKS,
)
from core.curriculum.queries import all_lessons, status
from core.curriculum.tpu_record import entries, status_line

TPU_WIDTH = 70  # characters of a reason the printed map keeps


def course_map(apps_dir: pathlib.Path = APPS_DIR, records_root=None) -> list[dict]:
    """The map as JSON-ready data: [{"phase", "lessons": [{"title", "app", "status", "tpu"}]}]
    where "tpu" is the lesson's entry in the newest tpu_course record (tpu_record.py: status,
    reason, date, device kind and count, record, line) or None when no TPU has run it."""
    found, _ = entries(records_root)
    return [
        {
            "phase": phase.title,
            "lessons": [
                {
                    "title": lesson.title,
                    "app": lesson.app,
                    "status": status(lesson.slug, apps_dir),
                    "tpu": found[lesson.slug].as_json() if lesson.slug in found else None,
                }
                for lesson in phase.lessons
            ],
        }
        for phase in PHASES
    ]


def summary_rows(apps_dir: pathlib.Path = APPS_DIR) -> list[tuple[str, int, int]]:
    """(phase title, lessons present, lessons in phase) per phase."""
    return [
        (
            phase.title,
            sum(status(lesson.slug, apps_dir) == "present" for lesson in phase.lessons),
            len(phase.lessons),
        )
        for phase in PHASES
    ]


def format_map(apps_dir: pathlib.Path = APPS_DIR, records_root=None) -> str:
    """The printed map: each app's status and, under it, its line from the newest TPU record
    (tpu_record.py), then which records those lines come from."""
    found, problems = entries(records_root)

    def tpu(slug: str) -> str:
        return f"          TPU: {status_line(slug, found, TPU_WIDTH)}"

    lines = []
    for number, phase in enumerate(PHASES, start=1):
        lines.append(f"{number:2d}. {phase.title}")
        for lesson in phase.lessons:
            mark = "x" if status(lesson.slug, apps_dir) == "present" else " "
            lines.append(f"    [{mark}] {lesson.title:<66} {lesson.app}")
            lines.append(tpu(lesson.slug))
    lines.append("")
    lines.append("Capstones")
    for capstone in CAPSTONES:
        mark = "x" if status(capstone.slug, apps_dir) == "present" else " "
        lines.append(f"    [{mark}] {capstone.title:<66} {capstone.app}")
        lines.append(tpu(capstone.slug))
        lines.extend(f"          - {point}" for point in capstone.points)
        lines.append(f"          portfolio guide: {_relative(capstone.guide)}")
    lines.append("")
    lines.append("Synthesis assessments")
    for assessment in ASSESSMENTS:
        mark = "x" if status(assessment.slug, apps_dir) == "present" else " "
        lines.append(f"    [{mark}] {assessment.title:<66} {assessment.app}")
        lines.append(tpu(assessment.slug))
        lines.append(
            f"          grade headless: python -m core.assessment grade --path "
            f"{assessment.paper} --answers FILE"
        )
    lines += ["", tpu_sources(found, problems)]
    return "\n".join(lines)


def tpu_sources(found: dict, problems: list[str]) -> str:
    """Where the TPU lines come from, or how to make the record they would come from."""
    if not found:
        text = (
            "TPU: no tpu_course record yet. On a TPU host: python -m tpu_scripts course-run "
            "--local --keep-going --phases all; bring the run folder here, then python -m "
            "tpu_scripts course-record RUN_DIR"
        )
    else:
        kept = sorted({entry.record for entry in found.values()})
        text = f"TPU lines ({len(found)} apps) from: " + ", ".join(kept)
    return "\n".join([text, *(f"TPU record left out: {problem}" for problem in problems)])


def _relative(path: pathlib.Path) -> str:
    return str(path.relative_to(REPO_ROOT))


def format_summary(apps_dir: pathlib.Path = APPS_DIR) -> str:
    rows = summary_rows(apps_dir)
    width = max(len(title) for title, _, _ in rows)
    lines = [f"{'phase':<{width + 4}} present / lessons"]
    for number, (title, present, total) in enumerate(rows, start=1):
        lines.append(f"{number:2d}. {title:<{width}} {present:>7} / {total}")
    present = sum(r[1] for r in rows)
    total = sum(r[2] for r in rows)
    lines.append(f"{'':4}{'total':<{width}} {present:>7} / {total}")
    lines.append(f"{present} of {total} lessons present, {total - present} missing")
    return "\n".join(lines)


def apps_readme(apps_dir: pathlib.Path = APPS_DIR) -> str:
    """apps/README.md as Markdown: the phases in order, each lesson linked, with its status.

    GitHub shows this file under the folder listing, so apps/ reads as the course there too.
    """
    present, total = (sum(r[i] for r in summary_rows(apps_dir)) for i in (1, 2))
    lines = [
        "# The course, lesson by lesson",
        "",
        "<!-- Generated by `python -m core.curriculum --write-readme` from",
        "     core/curriculum/course.py; core/curriculum/curriculum_test.py fails when this file",
        "     is stale. Do not edit by hand. -->",
        "",
        f"{present} of {total} lessons are built. Open one with `marimo edit apps/<lesson>.py`,",
        "run it headless with `python apps/<lesson>.py --help`, or serve them all with `make lab`",
        f"(the course home is [`{HOME_APP}.py`]({HOME_APP}.py)).",
    ]
    for number, phase in enumerate(PHASES, start=1):
        built = sum(status(lesson.slug, apps_dir) == "present" for lesson in phase.lessons)
        lines += ["", f"## {number}. {phase.title}", "", phase.summary, ""]
        lines += [f"{built} of {len(phase.lessons)} built.", "", "| lesson | app | status |"]
        lines.append("|---|---|---|")
        for lesson in phase.lessons:
            lines.append(_readme_row(lesson.title, lesson.slug, apps_dir))
    lines += ["", "## Capstones", "", "| capstone | app | status |", "|---|---|---|"]
    lines += [_readme_row(c.title, c.slug, apps_dir) for c in CAPSTONES]
    lines += ["", "Each capstone's portfolio guide (what to build, the evidence per bullet, how it"]
    lines += [
        "is judged): " + ", ".join(f"[`{c.slug}.md`](../{_relative(c.guide)})" for c in CAPSTONES)
    ]
    lines += [
        "",
        "## Synthesis assessments",
        "",
        "| learning path | app | status |",
        "|---|---|---|",
    ]
    lines += [_readme_row(a.path_title, a.slug, apps_dir) for a in ASSESSMENTS]
    lines += [
        "",
        "Grade an answers file headless: `python -m core.assessment grade --path learn-tpus "
        "--answers FILE`",
        "(`--path make-it-fast` for the other path; `python -m core.assessment --help`).",
    ]
    for track in TRACKS:
        if not track.slugs:
            continue
        lines += ["", f"## {track.title}", "", track.summary, ""]
        lines += ["| mirrors the lesson | app | status |", "|---|---|---|"]
        titles = {lesson.slug: lesson.title for lesson in all_lessons()}
        for slug in track.slugs:
            mirrored = track.mirrored_lesson(slug)
            title = f"{titles[mirrored]} (`{mirrored}.py`)" if mirrored else "-"
            lines.append(_readme_row(title, slug, apps_dir))
    return "\n".join(lines) + "\n"


def _readme_row(title: str, slug: str, apps_dir: pathlib.Path) -> str:
    if status(slug, apps_dir) == "present":
        return f"| {title} | [`{slug}.py`]({slug}.py) | built |"
    return f"| {title} | `{slug}.py` | planned |"
