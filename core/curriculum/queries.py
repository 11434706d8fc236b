"""What the course map answers: a lesson's phase and its lines, a track's twins, a path's
assessment, a capstone's guide, and each app's status on disk (present or missing)."""

from __future__ import annotations

import pathlib

from core.curriculum.course import (
    APPS_DIR,
    ASSESSMENTS,
    CAPSTONES,
    HOME_APP,
    PHASES,
    TRACKS,
    Assessment,
    Lesson,
    Phase,
    Track,
)


def assessment_for(path_title: str) -> Assessment:
    """The synthesis assessment of learning path ``path_title`` (ValueError if none)."""
    for assessment in ASSESSMENTS:
        if assessment.path_title == path_title:
            return assessment
    raise ValueError(f"no assessment for the learning path {path_title!r}")


def portfolio_guide(capstone_slug: str) -> str:
    """The Markdown text of capstone ``capstone_slug``'s portfolio guide (docs/portfolio/)."""
    capstone = next((c for c in CAPSTONES if c.slug == capstone_slug), None)
    if capstone is None:
        raise ValueError(
            f"no capstone {capstone_slug!r}; choose one of {[c.slug for c in CAPSTONES]}"
        )
    try:
        return capstone.guide.read_text(encoding="utf-8")
    except FileNotFoundError:
        # An app exported to a TPU VM runs from the installed wheel, which ships no docs/.
        return (
            f"The portfolio guide of *{capstone.title}* is `docs/portfolio/{capstone.slug}.md` "
            "in the course repository (this installation does not include docs/)."
        )


def all_lessons() -> list[Lesson]:
    return [lesson for phase in PHASES for lesson in phase.lessons]


def neighbours(slug: str) -> tuple[Lesson | None, Lesson | None]:
    """The lessons before and after lesson ``slug`` in the course map's order (None past
    either end); ValueError naming the slug if it is no lesson."""
    lessons = all_lessons()
    slugs = [lesson.slug for lesson in lessons]
    if slug not in slugs:
        raise ValueError(f"no lesson {slug!r} in the course map")
    index = slugs.index(slug)
    return (
        lessons[index - 1] if index > 0 else None,
        lessons[index + 1] if index + 1 < len(lessons) else None,
    )


def phase_of(slug: str) -> Phase:
    """The phase that holds lesson ``slug`` (ValueError naming the slug if none does)."""
    for phase in PHASES:
        if any(lesson.slug == slug for lesson in phase.lessons):
            return phase
    raise ValueError(f"no lesson {slug!r} in the course map")


def phase_number(slug: str) -> int:
    """The 1-based number of lesson ``slug``'s phase in the course map (README and home agree)."""
    return PHASES.index(phase_of(slug)) + 1


def phase_line(slug: str) -> str:
    """The italic line under a lesson's title: ``*Phase 14 · Post-training: ...*``.

    Every app's title cell shows this, derived from the map, never typed by hand.
    """
    return f"*Phase {phase_number(slug)} · {phase_of(slug).title}*"


def track_of(slug: str) -> Track:
    """The track that holds app ``slug`` (ValueError naming the slug if none does)."""
    for track in TRACKS:
        if slug in track.slugs:
            return track
    raise ValueError(f"no track app {slug!r} in the course map")


def track_twins(lesson_slug: str) -> list[tuple[Track, str]]:
    """The track apps that mirror lesson ``lesson_slug``: [(track, track app slug)]."""
    return [(t, s) for t in TRACKS for s, lesson in t.mirrors if lesson == lesson_slug]


def track_line(slug: str) -> str:
    """The italic line under a track app's title, from the map: the track and the lesson it
    mirrors (``*Keras multi-backend track · mirrors Phase 9 · Tiny MLP ...*``)."""
    track = track_of(slug)
    line = f"*{track.title}"
    mirrored = track.mirrored_lesson(slug)
    if mirrored is not None:
        lesson = next(x for x in all_lessons() if x.slug == mirrored)
        line += f" · mirrors Phase {phase_number(mirrored)}: {lesson.title} (apps/{mirrored}.py)"
    return line + "*"


def lesson_module(slug: str) -> str:
    """Where lesson ``slug``'s own code lives: ``core.lessons.<phase package>.<slug>``."""
    return f"core.lessons.{phase_of(slug).package}.{slug}"


def named_app_slugs() -> set[str]:
    """Every app slug the map names: lessons, capstones, tracks and the course home."""
    slugs = {lesson.slug for lesson in all_lessons()}
    slugs |= {c.slug for c in CAPSTONES}
    slugs |= {s for t in TRACKS for s in t.slugs}
    slugs |= {a.slug for a in ASSESSMENTS}
    return slugs | {HOME_APP}


def app_path(slug: str, apps_dir: pathlib.Path = APPS_DIR) -> pathlib.Path:
    return apps_dir / f"{slug}.py"


def status(slug: str, apps_dir: pathlib.Path = APPS_DIR) -> str:
    return "present" if app_path(slug, apps_dir).is_file() else "missing"


def unnamed_apps(apps_dir: pathlib.Path = APPS_DIR) -> list[str]:
    """App files in apps/ that the map does not name (each is a map defect)."""
    named = named_app_slugs()
    return sorted(p.name for p in apps_dir.glob("*.py") if p.stem not in named)
