"""The cells the two assessment apps share (apps/assessment_*.py differ only in their path).

Each function is one cell's work: open the paper at a learner seed (the answers file and the
progress file validated first), build the answer forms, grade what was committed, show the
paper with its feedback, show the score, and check the paper itself.
"""

from __future__ import annotations

import dataclasses
import pathlib

import altair as alt
import pandas as pd

from core.assessment import paper as papers
from core.assessment import sheets, view
from core.assessment.items import Question


@dataclasses.dataclass(frozen=True)
class Opened:
    """A paper opened at one seed: what the learner sees, and what was saved before."""

    seed: int
    sheet: sheets.AnswerSheet | None  # the --answers file, when one was given and valid
    progress_before: sheets.Progress
    questions: dict[str, Question]
    problem: str | None  # why a file cannot be used (the app stops with it)
    progress_dir: pathlib.Path
    seed_note: str = ""  # which seed was graded, and why (the app shows it)


def open_paper(
    chosen: papers.Paper, seed: int, answers: str, progress_dir, *, seed_chosen: bool = True
) -> Opened:
    """Validate ``answers`` (a sheet's path, or "") and the progress file before anything is
    graded or written. A sheet says whose paper it is: its seed is graded. ``seed_chosen``
    says the learner set ``seed`` (it is not the control's default): when it differs from the
    sheet's, the two disagree and that is a problem; a default seed gives way to the sheet's,
    and ``seed_note`` says so."""
    sheet, problem, progress_dir = None, None, pathlib.Path(progress_dir)
    note = f"Graded at seed {seed}."
    if answers:
        try:
            sheet = sheets.load_sheet(pathlib.Path(answers), expected_path=chosen.slug)
        except sheets.SheetError as error:
            problem = f"answers file {answers}: {error}"
        else:
            if sheet.seed != seed and seed_chosen:
                problem = (
                    f"answers file {answers} holds the paper of seed {sheet.seed}, and the "
                    f"learner seed is set to seed {seed}: one sheet is graded at one seed. Set "
                    f"the seed to {sheet.seed} (or leave it at its default to take the sheet's)."
                )
            elif sheet.seed != seed:
                note = (
                    f"Graded at seed {sheet.seed}, the answers file's seed (the learner seed "
                    f"control reads {seed})."
                )
            seed = sheet.seed
    try:
        progress = sheets.load_progress(chosen.slug, seed, progress_dir)
    except sheets.SheetError as error:
        progress = sheets.Progress(paper=chosen.slug, seed=seed)
        problem = problem or f"{error}. Move it aside; it is never overwritten."
    questions = {item.id: item.question(seed) for item in chosen.items}
    return Opened(seed, sheet, progress, questions, problem, progress_dir, note)


def answer_forms(chosen: papers.Paper, opened: Opened):
    """One form per item, in paper order: a text box (predict), radio choices (diagnose) or
    a code editor holding the last answer saved, else the stub (code exercise)."""
    import marimo as mo

    def form(number: int, item):
        question = opened.questions[item.id]
        last = opened.progress_before.items.get(item.id)
        last_answer = last.last_answer if last is not None else None
        if item.kind == "code":
            element = mo.ui.code_editor(
                value=last_answer if isinstance(last_answer, str) else question.stub,
                language="python",
                min_height=200,
            )
        elif item.kind == "diagnose":
            element = mo.ui.radio(options={text: choice for choice, text in question.choices})
        else:  # the number is the browser test's handle on the box
            hint = f"item {number}: {question.answer_hint}"
            element = mo.ui.text(placeholder=hint, full_width=True)
        return element.form(submit_button_label="Commit answer", bordered=False)

    return mo.ui.dictionary(
        {item.id: form(number, item) for number, item in enumerate(chosen.items, start=1)}
    )


def grade_committed(chosen: papers.Paper, opened: Opened, committed: dict):
    """(report, entry problems, progress, changed): the sheet's answers when a sheet was
    given, else the forms' committed values; nothing is computed for an item before its
    answer. ``progress`` is the newest saved record (an earlier commit of this session is
    an attempt too) with this report's new answers; ``changed`` says whether to save it."""
    if opened.sheet is not None:
        entered, problems = dict(opened.sheet.answers), {}
    else:
        entered, problems = {}, {}
        for item in chosen.items:
            answer, problem = view.parse_entry(item, committed.get(item.id))
            entered[item.id] = answer
            if problem:
                problems[item.id] = problem
    report = papers.grade(chosen.slug, opened.seed, entered)
    try:
        latest = sheets.load_progress(chosen.slug, opened.seed, opened.progress_dir)
    except sheets.SheetError:  # broken since the paper opened: never overwrite it
        return report, problems, opened.progress_before, False
    progress = sheets.recorded(latest, report)
    return report, problems, progress, progress.items != latest.items


def paper_view(report: papers.Report, forms, questions: dict, problems: dict[str, str]):
    """Every item: its question, its form, a warning for an entry that is not an answer, and
    once committed, the feedback (green or red) with the lesson to revisit."""
    import marimo as mo

    sections = []
    for number, result in enumerate(report.results, start=1):
        item = result.item
        parts = [mo.md(view.question_markdown(number, item, questions[item.id])), forms[item.id]]
        if item.id in problems:
            parts.append(mo.callout(mo.md(problems[item.id]), kind="warn"))
        if result.attempted:
            kind = "success" if result.passed else "warn" if result.ungraded else "danger"
            parts.append(mo.callout(mo.md(view.feedback_markdown(result)), kind=kind))
        sections.append(mo.vstack(parts))
    return mo.vstack(sections, gap=2)


def score_chart(rows: list[dict], phase_titles: tuple[str, ...]) -> alt.Chart:
    """Items per phase, coloured by verdict, phases in path order with whole titles."""
    return (
        alt.Chart(pd.DataFrame(rows), title="Items per phase, by verdict")
        .mark_bar()
        .encode(
            y=alt.Y("phase:N", sort=list(phase_titles), title=None, axis=alt.Axis(labelLimit=0)),
            x=alt.X("count():Q", title="items", axis=alt.Axis(tickMinStep=1)),
            color=alt.Color(
                "verdict:N",
                scale=alt.Scale(
                    domain=["passed", "failed", "not graded", "not yet"],
                    range=["#2e7d32", "#c62828", "#f9a825", "#cfd8dc"],
                ),
            ),
            tooltip=["phase", "item", "verdict", "attempts"],
        )
        .properties(width=360)
    )


# The paper's own check sits below the learner's score: its PASS must not read as theirs.
SELF_CHECK_HEADING = "Is this paper sound? (the course checks its own items; not your score)"


def self_check_what(seed: int) -> str:
    """What the paper's self-check (``paper_self_check``) verifies, for its PASS line."""
    return (
        f"this paper at seed {seed}, not your answers: every live answer equals its closed-form "
        "derivation, every planted defect changes what its program computes, every reference "
        "solution passes its hidden tests and every stub fails them"
    )


def paper_self_check(chosen: papers.Paper, seed: int) -> tuple[dict, dict]:
    """(errors, facts) of the paper's own check at ``seed``: every answer the library computes
    live against its independent closed-form derivation, every planted defect changing what
    its program computes, every code exercise's reference passing its hidden tests and its
    stub failing them."""
    errors, facts = {}, {}
    for item in chosen.items:
        own = item.self_check(seed)
        errors |= own.errors
        facts |= own.facts
    return errors, facts
