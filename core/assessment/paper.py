"""Papers: the two synthesis assessments and each lesson's exercises; grading a sheet.

Each path of core.curriculum.LEARNING_PATHS has one paper: at least one item per phase of the
path, in path order. The items live in core/assessment/bank/ (one module per phase); a paper
is a list of item ids, and ``grade`` grades a learner's answers at their seed. A lesson with
exercises (core/exercises) has a paper too, ``lesson-<slug>``, graded the same way.

    report = paper.grade("learn-tpus", seed=7, answers={"setup.shard_shape": [2, 64]})
    report.score, [r.summary for r in report.results]
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core import curriculum, exercises
from core.assessment import bank
from core.assessment.items import Answer, Feedback, Item

ITEMS: dict[str, Item] = {}  # every item by id: the bank's and the lessons' exercises
for _item in (*bank.ITEMS, *exercises.ITEMS):
    if _item.id in ITEMS:
        raise ValueError(f"two assessment items share the id {_item.id!r}")
    ITEMS[_item.id] = _item


@dataclasses.dataclass(frozen=True)
class Paper:
    """One path's assessment: ``slug`` names it on the command line and in progress files."""

    slug: str  # "learn-tpus", or "lesson-tiny_mlp" for a lesson's exercises
    path_title: str  # the LearningPath's title in core.curriculum ("" for a lesson's)
    app_slug: str  # apps/<app_slug>.py
    item_ids: tuple[str, ...]

    @property
    def is_lesson(self) -> bool:
        """A lesson's exercises (practice), not a synthesis assessment."""
        return not self.path_title

    @property
    def title(self) -> str:
        """The path's title, or "Exercises: <lesson title>"."""
        if self.path_title:
            return self.path_title
        titles = {lesson.slug: lesson.title for lesson in curriculum.all_lessons()}
        return f"Exercises: {titles.get(self.app_slug, self.app_slug)}"

    @property
    def items(self) -> list[Item]:
        return [ITEMS[i] for i in self.item_ids]

    @property
    def path(self) -> curriculum.LearningPath:
        return next(p for p in curriculum.LEARNING_PATHS if p.title == self.path_title)


def _path_items(path_title: str) -> tuple[str, ...]:
    """Every item whose phase is on the path, in the path's phase order (bank order within a
    phase)."""
    path = next(p for p in curriculum.LEARNING_PATHS if p.title == path_title)
    return tuple(
        item.id for phase in path.phase_titles for item in bank.ITEMS if item.phase == phase
    )


PAPERS: dict[str, Paper] = {
    assessment.paper: Paper(
        assessment.paper,
        assessment.path_title,
        assessment.slug,
        _path_items(assessment.path_title),
    )
    for assessment in curriculum.ASSESSMENTS
} | {
    exercises.paper_slug(lesson): Paper(
        exercises.paper_slug(lesson),
        "",
        lesson,
        tuple(item.id for item in exercises.lesson_items(lesson)),
    )
    for lesson in exercises.lessons()
}


def paper(slug: str) -> Paper:
    """The paper named ``slug`` (ValueError listing the names if there is none)."""
    if slug not in PAPERS:
        raise ValueError(f"no assessment {slug!r}; choose one of {sorted(PAPERS)}")
    return PAPERS[slug]


@dataclasses.dataclass(frozen=True)
class ItemResult:
    """One item on a graded sheet: ``feedback`` is None when the item was not attempted."""

    item: Item
    feedback: Feedback | None

    @property
    def attempted(self) -> bool:
        return self.feedback is not None

    @property
    def ungraded(self) -> str:
        """Why the grader could not grade the answer ("" when it did or none was given)."""
        return self.feedback.ungraded if self.feedback is not None else ""

    @property
    def passed(self) -> bool:
        return self.feedback is not None and self.feedback.passed

    @property
    def summary(self) -> str:
        return self.feedback.summary if self.feedback else "not attempted"


@dataclasses.dataclass(frozen=True)
class Report:
    """A graded sheet: per-item results in paper order, and the score."""

    paper: Paper
    seed: int
    results: tuple[ItemResult, ...]
    answers: dict[str, Any]  # item id -> the answer graded (attempted items only)

    @property
    def passed(self) -> int:
        return sum(r.passed for r in self.results)

    @property
    def attempted(self) -> int:
        return sum(r.attempted for r in self.results)

    @property
    def score(self) -> float:
        """Passed items over all items of the paper, 0..1."""
        return self.passed / len(self.results)

    def revisit(self) -> list[tuple[str, str]]:
        """(item id, lesson slug) for every attempted item that failed."""
        return [(r.item.id, r.item.lesson) for r in self.results if r.attempted and not r.passed]


def answer_problems(slug: str, answers: dict[str, Any]) -> dict[str, str]:
    """{"answers.<id>": problem} for every answer the paper cannot grade (unknown id, wrong
    type). None means "not attempted" and is never a problem."""
    known = set(paper(slug).item_ids)
    problems = {}
    for item_id, answer in answers.items():
        if item_id not in known:
            problems[f"answers.{item_id}"] = f"no item {item_id!r} on the {slug} paper"
        elif answer is not None:
            problem = ITEMS[item_id].answer_problem(answer)
            if problem is not None:
                problems[f"answers.{item_id}"] = problem
    return problems


def grade(slug: str, seed: int, answers: dict[str, Answer | None]) -> Report:
    """Grade ``answers`` ({item id: answer or None}) on paper ``slug`` at learner ``seed``.

    Raises ValueError naming the first field when an answer cannot be graded.
    """
    problems = answer_problems(slug, answers)
    if problems:
        field, problem = next(iter(problems.items()))
        raise ValueError(f"{field}: {problem}")
    chosen = paper(slug)
    results = []
    for item in chosen.items:
        answer = answers.get(item.id)
        results.append(ItemResult(item, None if answer is None else _grade_one(item, seed, answer)))
    graded = {i: a for i, a in answers.items() if a is not None}
    return Report(chosen, seed, tuple(results), graded)


def _grade_one(item: Item, seed: int, answer: Answer) -> Feedback:
    """The item's feedback; a grader that fails on an answer leaves it ungraded (said so,
    not counted as an attempt) and grades the next item."""
    try:
        return item.grade(seed, answer)
    except Exception as error:
        why = f"the grader failed on this answer ({type(error).__name__}: {error})"[:500]
        return Feedback(False, f"not graded: {why}", "", ungraded=why)


def reference_answers(slug: str, seed: int) -> dict[str, Answer]:
    """The passing answer of every item (tests and the app's own check only)."""
    return {item.id: item.reference_answer(seed) for item in paper(slug).items}


def stub_answers(slug: str) -> dict[str, Answer | None]:
    """What a learner who only opened the paper submits: each code exercise's untouched
    stub, and nothing for the rest (a stub earns no point)."""
    return {item.id: getattr(item, "stub", None) for item in paper(slug).items}
