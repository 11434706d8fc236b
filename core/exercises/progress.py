"""What the learner has done in the lessons' exercises, for the course home, and its reset.

Each lesson's exercises are the paper ``lesson-<slug>`` (core.exercises.paper_slug); grading
them saves a progress file under the workspace (core.assessment.sheets: one small JSON document
per paper and seed, validated, written atomically). Here: per lesson, how many exercises the
newest valid progress file counts as passed; sums per phase and per learning path; and a reset
that moves the progress folders aside (never deletes them), so a learner can start again and
still get the old files back.

    state = progress.course_progress(root)          # {lesson slug: LessonProgress}
    progress.totals(state, ["tiny_mlp", "attention"])  # (passed, total)
    progress.reset(root, include_assessments=False)  # -> the folder they were moved to
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib
from collections.abc import Iterable

from core import curriculum, exercises
from core.assessment import PROGRESS_DIR_ENV, sheets

RESET_FOLDER = "reset"  # under the progress folder: reset/<UTC time>/<paper>/seed-N.json


def progress_dir(explicit: str | os.PathLike | None = None) -> pathlib.Path:
    """Where progress is kept: ``explicit``, else $JAX_TPU_LAB_PROGRESS_DIR, else the
    workspace's runs/assessments. The variable is read at each call, not at import: a lesson's
    kernel forked from a warm process imported this module before its own environment was set."""
    return pathlib.Path(explicit or os.environ.get(PROGRESS_DIR_ENV) or sheets.WORKSPACE)


def header_mark(lesson: str) -> str:
    """The lesson header's note on its exercises (" · exercises: done"), or "" for a lesson
    without exercises."""
    if not exercises.lesson_items(lesson):
        return ""
    return f" · {lesson_progress(lesson, progress_dir()).label()}"


@dataclasses.dataclass(frozen=True)
class LessonProgress:
    """One lesson's exercises on the learner's newest progress file (seed ``seed``)."""

    lesson: str
    total: int  # exercises the lesson asks
    attempted: int = 0
    passed: int = 0  # whose last graded answer passed
    seed: int | None = None  # None: nothing graded yet

    @property
    def done(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def label(self) -> str:
        """A few words for a lesson's line: "exercises 1 of 2 passed", "exercises: done"."""
        if self.done:
            return "exercises: done"
        if not self.attempted:
            return f"{self.total} exercises"
        return f"exercises {self.passed} of {self.total} passed"


def lesson_progress(lesson: str, root: pathlib.Path = sheets.WORKSPACE) -> LessonProgress:
    """The exercises of ``lesson`` on its newest valid progress file under ``root``."""
    total = len(exercises.lesson_items(lesson))
    found = sheets.latest_progress(exercises.paper_slug(lesson), pathlib.Path(root))
    if found is None:
        return LessonProgress(lesson, total)
    attempted, passed, _ = found.counts()
    return LessonProgress(lesson, total, attempted, passed, found.seed)


def course_progress(root: pathlib.Path = sheets.WORKSPACE) -> dict[str, LessonProgress]:
    """Every lesson that has exercises, in course order."""
    return {lesson: lesson_progress(lesson, root) for lesson in exercises.lessons()}


def totals(state: dict[str, LessonProgress], lessons: Iterable[str]) -> tuple[int, int]:
    """(exercises passed, exercises asked) over ``lessons`` (slugs without exercises add 0)."""
    chosen = [state[slug] for slug in lessons if slug in state]
    return sum(p.passed for p in chosen), sum(p.total for p in chosen)


def phase_lessons(phase_title: str) -> list[str]:
    """The lesson slugs of one phase of the course map."""
    return [lesson.slug for phase in curriculum.PHASES if phase.title == phase_title
            for lesson in phase.lessons]  # fmt: skip


def path_lessons(path_title: str) -> list[str]:
    """The lesson slugs of every phase of one learning path."""
    path = next(p for p in curriculum.LEARNING_PATHS if p.title == path_title)
    return [slug for phase in path.phase_titles for slug in phase_lessons(phase)]


def reset_papers(include_assessments: bool) -> list[str]:
    """The papers a reset moves aside: every lesson's exercises, and the two assessments when
    asked."""
    papers = [exercises.paper_slug(lesson) for lesson in exercises.lessons()]
    if include_assessments:
        papers += [assessment.paper for assessment in curriculum.ASSESSMENTS]
    return papers


def reset(
    root: pathlib.Path = sheets.WORKSPACE, include_assessments: bool = False, now=None
) -> tuple[pathlib.Path | None, list[str]]:
    """Move the progress folders of ``reset_papers`` from ``root`` into
    ``root/reset/<UTC time>/``; nothing is deleted. Returns (that folder, the papers moved);
    (None, []) when there was nothing to move."""
    root = pathlib.Path(root)
    found = [paper for paper in reset_papers(include_assessments) if (root / paper).is_dir()]
    if not found:
        return None, []
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%dT%H%M%SZ")
    target = root / RESET_FOLDER / stamp
    suffix = 1
    while target.exists():  # two resets in one second keep both
        target = root / RESET_FOLDER / f"{stamp}-{suffix}"
        suffix += 1
    target.mkdir(parents=True)
    for paper in found:
        (root / paper).rename(target / paper)  # same file system: one atomic rename each
    return target, found
