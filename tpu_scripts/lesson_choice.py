"""Which lessons a course run runs: ``--lessons`` (phase titles, learning-path titles, phase
packages, lesson slugs) and ``--phases`` (the course map's phase numbers and ranges, ``all``),
each resolved against the course map and refused, before anything runs, with the valid names.
"""

from __future__ import annotations

import pathlib
import re

from core import curriculum


class UsageError(ValueError):
    """Bad input, refused before anything runs (exit 2)."""


def lesson_names() -> dict[str, tuple[str, ...]]:
    """Every name ``--lessons`` accepts (lowercase) -> the lesson slugs it stands for."""
    names: dict[str, tuple[str, ...]] = {}
    for phase in curriculum.PHASES:
        slugs = tuple(lesson.slug for lesson in phase.lessons)
        names[phase.title.lower()] = slugs
        names[phase.package.lower()] = slugs
    phases = {phase.title: phase for phase in curriculum.PHASES}
    for path in curriculum.LEARNING_PATHS:
        names[path.title.lower()] = tuple(
            lesson.slug for title in path.phase_titles for lesson in phases[title].lessons
        )
    for lesson in curriculum.all_lessons():
        names[lesson.slug] = (lesson.slug,)
    # The course's other apps: each by its slug, and each kind by one name, so a chip run can
    # cover every app the course map names (--lessons capstones,assessments,keras).
    for group, slugs in other_apps().items():
        names[group] = slugs
        for slug in slugs:
            names[slug] = (slug,)
    return names


def other_apps() -> dict[str, tuple[str, ...]]:
    """The apps beside the phases' lessons, by kind: capstones, assessments and each track
    with apps of its own (its title, and its first word: "keras")."""
    groups = {
        "capstones": tuple(capstone.slug for capstone in curriculum.CAPSTONES),
        "assessments": tuple(assessment.slug for assessment in curriculum.ASSESSMENTS),
    }
    for track in curriculum.TRACKS:
        if track.slugs:
            groups[track.title.lower()] = tuple(track.slugs)
            groups[track.title.split()[0].lower()] = tuple(track.slugs)
    return groups


def resolve_lessons(spec: str, apps_dir: pathlib.Path = curriculum.APPS_DIR) -> list[str]:
    """The lesson slugs ``spec`` names, in order, each once (UsageError on a bad name).

    Comma-separated pieces are joined back when together they make one name ("Post-training:
    SFT, LoRA, reward models and RLHF"): the longest name wins.
    """
    names = lesson_names()
    pieces = [piece.strip() for piece in spec.split(",")]
    if not any(pieces):
        raise UsageError("--lessons is empty: name phases, learning paths or lesson slugs")
    slugs, unknown, i = [], [], 0
    while i < len(pieces):
        for j in range(len(pieces), i, -1):
            candidate = ", ".join(pieces[i:j]).lower()
            if candidate in names:
                slugs += names[candidate]
                i = j
                break
        else:
            if pieces[i]:
                unknown.append(pieces[i])
            i += 1
    if unknown:
        raise UsageError(
            f"unknown lesson name(s): {', '.join(map(repr, unknown))}. Valid: the phases "
            + "; ".join(f"{p.title!r} ({p.package})" for p in curriculum.PHASES)
            + "; the learning paths "
            + "; ".join(repr(p.title) for p in curriculum.LEARNING_PATHS)
            + "; the other apps' kinds "
            + ", ".join(map(repr, other_apps()))
            + "; or an app's slug: "
            + ", ".join(lesson.slug for lesson in curriculum.all_lessons())
            + ", "
            + ", ".join(dict.fromkeys(s for slugs in other_apps().values() for s in slugs))
        )
    return require_apps(list(dict.fromkeys(slugs)), apps_dir)


def require_apps(slugs: list[str], apps_dir: pathlib.Path = curriculum.APPS_DIR) -> list[str]:
    """``slugs``, or UsageError naming those without an app in ``apps_dir``."""
    missing = [slug for slug in slugs if not curriculum.app_path(slug, apps_dir).is_file()]
    if missing:
        present = [
            s.slug
            for s in curriculum.all_lessons()
            if curriculum.app_path(s.slug, apps_dir).is_file()
        ]
        raise UsageError(
            f"no app for {', '.join(missing)} in {apps_dir} (not written yet); lessons with an "
            f"app: {', '.join(present)}"
        )
    return slugs


def phase_numbers() -> str:
    """The phases as ``--phases`` numbers them (for a refusal and ``--help``)."""
    return "; ".join(f"{i} {phase.title}" for i, phase in enumerate(curriculum.PHASES, 1))


def resolve_phases(spec: str) -> list[str]:
    """The lesson slugs of the phases ``spec`` names: ``all``, numbers and ranges in the course
    map's order (``1-4,7``), or phase titles and packages as ``--lessons`` takes them. A whole
    course split across calls: ``--phases 1-9``, then ``--phases 10-19``."""
    pieces = [piece.strip() for piece in spec.split(",") if piece.strip()]
    if not pieces:
        raise UsageError(f"--phases is empty: name phase numbers ({phase_numbers()}) or all")
    count, chosen, names = len(curriculum.PHASES), [], []
    for piece in pieces:
        match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", piece)
        if piece.lower() == "all":
            chosen += range(1, count + 1)
        elif match:
            first, last = int(match[1]), int(match[2] or match[1])
            if not 1 <= first <= last <= count:
                raise UsageError(
                    f"--phases {piece!r} is not within 1-{count} (first <= last): {phase_numbers()}"
                )
            chosen += range(first, last + 1)
        else:
            names.append(piece)
    phases = {p.title.lower(): i for i, p in enumerate(curriculum.PHASES, 1)}
    phases.update({p.package: i for i, p in enumerate(curriculum.PHASES, 1)})
    unknown = [name for name in names if name.lower() not in phases]
    if unknown:
        raise UsageError(f"unknown phase(s) {', '.join(map(repr, unknown))}: {phase_numbers()}")
    chosen += [phases[name.lower()] for name in names]
    slugs = [lesson.slug for i in chosen for lesson in curriculum.PHASES[i - 1].lessons]
    return list(dict.fromkeys(slugs))
