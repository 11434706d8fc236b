"""A lesson's graded exercises, the same in every lesson app (its items: core/exercises).

Two hidden cells of an app, after the lesson's own cells (see apps/tiny_mlp.py):

    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson("tiny_mlp", ARGS)

    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)

open_lesson validates an ``--answers`` sheet (headless only) and the progress file first and
builds the forms; lesson_section grades what was committed (open_sheet, forms, grade, view and
headless_lines are its parts).

A learner commits an answer in a form; the grade appears below it, with the first hints after
a failed attempt (one more per failed attempt, weakest first); a code exercise's reference
solution only behind its own "show solution" switch. Headless, ``python apps/X.py --answers
FILE`` grades an answers sheet (``python -m core.assessment paper --path lesson-X --seed S
--template FILE`` writes a blank one) and prints one line per exercise. Progress is one small
JSON file per lesson and seed in the learner's workspace (core.assessment.sheets, written
atomically), the same files the course home reads.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

from core import exercises as registry
from core.assessment import paper as papers
from core.assessment import sheets
from core.assessment import view as assessment_view
from core.exercises import progress as exercise_progress
from core.lab import assessment

KIND_WORDS = {"predict": "predict, then see", "diagnose": "find the bug", "code": "write code"}


@dataclasses.dataclass(frozen=True)
class Sheet:
    """One lesson's exercises opened at a learner seed."""

    paper: papers.Paper
    opened: assessment.Opened

    @property
    def problem(self) -> str | None:
        return self.opened.problem


def learner_seed(paper: papers.Paper, progress_dir: pathlib.Path) -> int:
    """The seed of the learner's newest valid progress on this lesson, else 0: a learner who
    comes back sees the numbers they answered before."""
    latest = sheets.latest_progress(paper.slug, progress_dir)
    return latest.seed if latest is not None else 0


def open_sheet(lesson: str, answers: str = "", progress_dir=None) -> Sheet:
    """Open lesson ``lesson``'s exercises: an answers sheet (``answers``, a path, or "") and the
    progress file are validated before anything is graded or written; a sheet's seed is the
    one graded. ``Sheet.problem`` says why a file cannot be used."""
    paper = papers.paper(registry.paper_slug(lesson))
    folder = exercise_progress.progress_dir(progress_dir)
    seed = learner_seed(paper, folder)
    opened = assessment.open_paper(paper, seed, answers, folder, seed_chosen=False)
    return Sheet(paper, opened)


# The switch that reveals what an exercise asks for: a code exercise's reference solution; a
# prediction's measured value and its derivation (a wrong prediction shows only which way it
# is off, so the learner can try again with the hints first).
REVEAL_LABELS = {"code": "show the reference solution", "predict": "show the answer"}


def forms(sheet: Sheet):
    """(answer forms, reveal switches): one form per exercise (a number box, choices, or a
    code editor holding the last answer saved, else the stub) and one switch per code or
    predict exercise (REVEAL_LABELS), each a marimo dictionary keyed by item id."""
    import marimo as mo

    switches = {
        item.id: mo.ui.switch(label=REVEAL_LABELS[item.kind])
        for item in sheet.paper.items
        if item.kind in REVEAL_LABELS
    }
    return assessment.answer_forms(sheet.paper, sheet.opened), mo.ui.dictionary(switches)


@dataclasses.dataclass(frozen=True)
class Graded:
    """What the committed answers earned, and where the progress was saved (None: no new
    answer, nothing written)."""

    report: papers.Report
    entry_problems: dict[str, str]  # item id -> why an entry is not an answer
    progress: sheets.Progress
    saved_to: pathlib.Path | None


def grade(sheet: Sheet, committed: dict) -> Graded:
    """Grade the sheet's answers (``--answers``) or the forms' committed values, and save the
    progress atomically when an answer is new. Nothing is graded or written when a file could
    not be used (``sheet.problem``)."""
    if sheet.problem:
        empty = papers.grade(sheet.paper.slug, sheet.opened.seed, {})
        return Graded(empty, {}, sheet.opened.progress_before, None)
    report, problems, progress, changed = assessment.grade_committed(
        sheet.paper, sheet.opened, committed
    )
    saved_to = sheets.save_progress(progress, sheet.opened.progress_dir) if changed else None
    return Graded(report, problems, progress, saved_to)


def hints_shown(item, failed_attempts: int) -> tuple[str, ...]:
    """The hints a learner has earned: one per failed attempt, weakest first."""
    return tuple(item.hints[: max(0, failed_attempts)])


def failed_attempts(progress: sheets.Progress, item_id: str) -> int:
    """Attempts at ``item_id`` that did not pass (all of them until one passes)."""
    record = progress.items.get(item_id)
    if record is None or record.passed:
        return 0
    return record.attempts


def question_markdown(number: int, item, question) -> str:
    """The exercise's heading, what kind it is, its prompt, program and what to enter."""
    heading = [f"### Exercise {number}: {item.title}", f"*{KIND_WORDS[item.kind]}*"]
    return "\n\n".join(heading + assessment_view.question_body(question))


def feedback_markdown(result, seed: int, answer=None) -> str:
    """The verdict and what it teaches, without a code exercise's reference solution; a
    wrong prediction says which way it is off, not the value (the reveal switch shows it)."""
    feedback = result.feedback
    if result.ungraded:
        return f"**Not graded.** {feedback.summary}\n\n{feedback.detail.strip()}"
    if result.item.kind == "predict" and not result.passed:
        return "**Not right yet.** " + prediction_miss(result.item, seed, answer)
    verdict = "**Right.**" if result.passed else "**Not right yet.**"
    return f"{verdict} {feedback.summary}\n\n{feedback.detail.strip()}"


def prediction_miss(item, seed: int, answer) -> str:
    """Which way a wrong prediction is off, and roughly how far, without the value: an exact
    ratio would give the answer away (the learner's number divided by it)."""
    expected = item.reference_answer(seed)
    if item.answer_type == "shape":
        if len(answer) != len(expected):
            return f"The shape has {len(expected)} axes; yours has {len(answer)}."
        wrong = sum(mine != right for mine, right in zip(answer, expected, strict=True))
        return f"{wrong} of its {len(expected)} axes differ."
    units = f" {item.units}" if item.units else ""
    mine, right = float(answer), float(expected)
    direction = "too high" if mine > right else "too low"
    if right == 0 or mine == 0 or (mine > 0) != (right > 0):
        how_far = "and its sign or its zero is wrong" if right else "and the value is 0"
    else:
        factor = max(mine / right, right / mine)
        how_far = (
            "within a factor of 2"
            if factor < 2
            else "by a factor between 2 and 10"
            if factor < 10
            else "by more than a factor of 10"
        )
    return (
        f"Your {answer:g}{units} is {direction}, {how_far} "
        f"(the tolerance: {item.tolerance_text()})."
    )


def reveal_markdown(item, seed: int) -> str:
    """What the reveal switch shows: the reference solution, or the measured value and its
    derivation."""
    if item.kind == "code":
        return f"```python\n{item.reference_source().strip()}\n```"
    _params, expected, _derived, derivation = item.seeded(seed)
    units = f" {item.units}" if item.units else ""
    value = f"{expected:.6g}{units}" if item.answer_type == "number" else str(expected)
    return f"**The lesson's library computes {value}.**\n\n{derivation}"


def view(sheet: Sheet, graded: Graded, answer_forms, switches):
    """Every exercise: its question and form; once committed, the feedback (green or red),
    the hints earned so far, and behind its switch the reference solution."""
    import marimo as mo

    sections = [mo.md(intro_markdown(sheet, graded))]
    for number, result in enumerate(graded.report.results, start=1):
        item = result.item
        question = sheet.opened.questions[item.id]
        parts = [mo.md(question_markdown(number, item, question)), answer_forms[item.id]]
        if item.id in graded.entry_problems:
            parts.append(mo.callout(mo.md(graded.entry_problems[item.id]), kind="warn"))
        if result.attempted:
            kind = "success" if result.passed else "warn" if result.ungraded else "danger"
            answer = graded.report.answers.get(item.id)
            text = feedback_markdown(result, graded.report.seed, answer)
            parts.append(mo.callout(mo.md(text), kind=kind))
        earned = hints_shown(item, failed_attempts(graded.progress, item.id))
        if earned:
            lines = [f"{n}. {hint}" for n, hint in enumerate(earned, start=1)]
            more = len(item.hints) - len(earned)
            tail = f"\n\n*{more} more hint(s) after another try.*" if more else ""
            hints_text = "**Hints**\n\n" + "\n".join(lines) + tail
            parts.append(mo.callout(mo.md(hints_text), kind="info"))
        if item.id in switches:
            parts.append(switches[item.id])
            if switches[item.id].value:
                parts.append(mo.md(reveal_markdown(item, graded.report.seed)))
        sections.append(mo.vstack(parts))
    return mo.vstack(sections, gap=2)


def intro_markdown(sheet: Sheet, graded: Graded) -> str:
    """The section's heading, the score so far and how to be graded headless."""
    report, lesson = graded.report, sheet.paper.app_slug
    done = f"**{report.passed} of {len(report.results)} passed** at learner seed {report.seed}"
    saved = ""
    if graded.saved_to:
        saved = f" Progress saved in `{assessment_view.shown_path(graded.saved_to)}`."
    return (
        f"## Exercises\n\n{done}.{saved} Commit an answer to grade it: a wrong answer earns a "
        "hint, a code answer runs in a process of its own against hidden tests on inputs you "
        f"have not seen. On a machine without a browser: `python apps/{lesson}.py --answers "
        f"FILE` (a blank FILE: `python -m core.assessment paper --path {sheet.paper.slug} "
        f"--seed {report.seed} --template FILE`)."
    )


def headless_lines(graded: Graded) -> list[str]:
    """One line per exercise, for a script run: ``exercise 1 [pass] title: summary``; a missed
    prediction says which way it is off, as the served lesson does, not the value."""
    lines = []
    for number, result in enumerate(graded.report.results, start=1):
        mark = assessment_view.result_mark(result)
        summary = result.summary
        if result.item.kind == "predict" and result.attempted and not result.passed:
            # as in the served lesson: which way a miss is off, not the value
            answer = graded.report.answers.get(result.item.id)
            summary = prediction_miss(result.item, graded.report.seed, answer)
        lines.append(f"exercise {number} [{mark}] {result.item.title}: {summary}")
    lines.append(f"exercises: {assessment_view.score_line(graded.report)}")
    return lines


UNUSABLE_SHEET = "The exercises cannot use this file."


def open_lesson(lesson: str, args):
    """A lesson's first exercise cell: (sheet, answer forms, reveal switches).

    Headless, ``args.answers`` names a sheet to grade; a served lesson grades what the learner
    commits in its forms and reads no file. A sheet or progress file that cannot be used stops
    the calling cell and the one below it with its reason, as ``lab.guard`` does (headless:
    ``STOPPED: ...``, exit 0, nothing written)."""
    from core import lab  # the package imports this module's callers, not this module

    answers = "" if lab.interactive() else args.answers
    sheet = open_sheet(lesson, answers)
    lab._stop_cell(sheet.problem, (), UNUSABLE_SHEET, sys._getframe(1).f_globals)
    answer_forms, switches = forms(sheet)
    return sheet, answer_forms, switches


def lesson_section(sheet: Sheet, answer_forms, switches):
    """A lesson's second exercise cell: grade the committed answers (progress saved when one
    is new), print one line per exercise in a script run, and return the section to show."""
    from core import lab

    graded = grade(sheet, answer_forms.value)
    if lab.mode() == "script":
        print("\n".join(headless_lines(graded)))
    return view(sheet, graded, answer_forms, switches)
