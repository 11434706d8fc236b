"""What an assessment shows, as Markdown and rows: the questions, the feedback, the score.

The apps (apps/assessment_*.py) and the headless grader share these, so the paper reads the
same in the browser and in a terminal. Nothing here imports marimo.
"""

from __future__ import annotations

import html
import pathlib
import re
from typing import Any

from core import curriculum
from core.assessment import paper as papers
from core.assessment import sheets
from core.assessment.items import Answer, Item, Question

KIND_WORDS = {
    "predict": "predict, then check",
    "diagnose": "diagnose",
    "code": "code exercise",
}


def shown_path(path: pathlib.Path) -> str:
    """``path`` relative to the repository when it lies inside it (runs/assessments/...)."""
    path = pathlib.Path(path).resolve()
    try:
        return str(path.relative_to(curriculum.REPO_ROOT))
    except ValueError:
        return str(path)


def question_markdown(number: int, item: Item, question: Question) -> str:
    """The item's heading, prompt, program and what to enter (never the answer)."""
    heading = [
        f"### {number}. {item.title}",
        f"*{item.phase} · {KIND_WORDS[item.kind]} · `{item.id}`*",
    ]
    return "\n\n".join(heading + question_body(question))


def question_body(question: Question) -> list[str]:
    """The prompt, the program to read (a diagnose item's) and what to enter: Markdown parts."""
    parts = [question.prompt.strip()]
    if question.program:
        parts.append("```python\n" + question.program.strip() + "\n```")
    enter = f"**Enter:** {question.answer_hint}"
    if question.tolerance:
        enter += f". **Tolerance:** {question.tolerance}"
    return [*parts, enter + "."]


def feedback_markdown(result: papers.ItemResult) -> str:
    """The verdict and what teaches: shown only once an answer was committed."""
    if result.feedback is None:
        return ""
    body = result.feedback.detail.strip()
    if result.feedback.solution:  # an assessment shows the reference after an attempt
        body += "\n\n" + result.feedback.solution.strip()
    if result.ungraded:  # the grader's failure: nothing to revisit, commit it again
        return f"**Not graded.** {result.feedback.summary}\n\n{body}"
    verdict = "**Right.**" if result.passed else "**Not right.**"
    text = f"{verdict} {result.feedback.summary}\n\n{body}"
    if not result.passed:
        text += f"\n\n**Revisit:** `apps/{result.item.lesson}.py`"
    return text


def parse_entry(item: Item, raw: Any) -> tuple[Answer | None, str | None]:
    """A form's raw value as the item's answer type: (answer, None) or (None, problem).

    A predict item's text box takes "12.5", "1e9" or, for a shape, "4, 128" / "(4, 128)";
    an empty entry is "not attempted".
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None, None
    if item.kind == "predict" and isinstance(raw, str):
        text = raw.strip()
        if getattr(item, "answer_type", "number") == "shape":
            pieces = [p for p in re.split(r"[\s,x×()\[\]]+", text) if p]
            if not pieces or not all(re.fullmatch(r"\d+", p) for p in pieces):
                return None, f"{text!r} is not a shape: enter integers separated by commas"
            return [int(p) for p in pieces], None
        try:
            value = float(text.replace("_", ""))
        except ValueError:
            units = getattr(item, "units", "")
            hint = f" (the unit, {units}, is implied)" if units else ""
            return None, f"{text!r} is not a number: enter digits only{hint}"
        return value, None
    problem = item.answer_problem(raw)
    return (None, problem) if problem else (raw, None)


def score_rows(report: papers.Report, attempts: dict[str, int] | None = None) -> list[dict]:
    """One row per item: number, phase, kind, title, verdict, attempts, lesson to revisit."""
    rows = []
    for number, result in enumerate(report.results, start=1):
        item = result.item
        verdict = "passed" if result.passed else ("failed" if result.attempted else "not yet")
        verdict = "not graded" if result.ungraded else verdict
        rows.append(
            {
                "#": number,
                "phase": item.phase,
                "kind": KIND_WORDS[item.kind],
                "item": item.title,
                "verdict": verdict,
                "attempts": (attempts or {}).get(item.id, int(result.attempted)),
                "revisit": f"apps/{item.lesson}.py" if verdict == "failed" else "",
            }
        )
    return rows


def result_mark(result: papers.ItemResult) -> str:
    """A graded item's four-letter mark for a headless line: pass, FAIL, ---- (not attempted)
    or ???? (the grader could not grade it)."""
    if result.ungraded:
        return "????"
    return "pass" if result.passed else ("FAIL" if result.attempted else "----")


def score_line(report: papers.Report) -> str:
    total = len(report.results)
    return (
        f"score: {report.passed} of {total} items passed ({report.score:.0%}); "
        f"{report.attempted} attempted"
    )


def progress_html(slug: str, root: pathlib.Path = sheets.WORKSPACE) -> str:
    """The course home's line for paper ``slug``: items attempted and passed on the newest
    progress file, and a link to the lesson to revisit for each failure."""
    found = sheets.latest_progress(slug, root)
    if found is None:
        return f'<p data-progress="{slug}">No attempt yet: commit a first answer.</p>'
    attempted, passed, total = found.counts()
    misses = "".join(
        f'<li data-revisit="{lesson}">{html.escape(papers.ITEMS[item_id].title)}: revisit '
        f'<a href="/?file={lesson}.py" target="_blank">{lesson}</a></li>'
        for item_id, lesson in found.revisit()
    )
    return (
        f'<p data-progress="{slug}">Learner seed {found.seed}: '
        f"<strong>{attempted} of {total} items attempted, {passed} passed</strong>.</p>"
        + (f"<ul>{misses}</ul>" if misses else "")
    )
