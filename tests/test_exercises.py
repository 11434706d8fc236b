"""A lesson's exercises (core.lab.exercises, items in core/exercises), end to end: graded
headless from an answers sheet with one line per exercise, progress saved atomically only for a
new answer, a broken sheet refused before anything is graded or written, hints earned one per
failed attempt, and a code exercise's reference solution never inside the feedback."""

from __future__ import annotations

import json

import pytest

from core import curriculum, exercises, lab
from core.assessment import paper as papers
from core.assessment import sheets
from core.assessment import view as assessment_view
from core.lab import exercises as lesson_exercises

LESSON = "tiny_mlp"  # the first lesson with exercises
SEED = 11


def _run(run_app, root, *argv):
    return run_app(
        [curriculum.APPS_DIR / f"{LESSON}.py", *argv],
        env=lab.child_env(
            JAX_NUM_CPU_DEVICES="8", JAX_PLATFORMS="cpu", JAX_TPU_LAB_PROGRESS_DIR=str(root)
        ),
        cwd=curriculum.REPO_ROOT,
        timeout=300,
    )


def _sheet(tmp_path, name, answers):
    file = tmp_path / name
    slug = exercises.paper_slug(LESSON)
    file.write_text(json.dumps({"path": slug, "seed": SEED, "answers": answers}))
    return file


def _exercise_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("exercise")]


def test_a_sheet_is_graded_headless_one_line_per_exercise_and_progress_saved(run_app, tmp_path):
    slug = exercises.paper_slug(LESSON)
    root = tmp_path / "progress"
    right = _sheet(tmp_path, "right.json", papers.reference_answers(slug, SEED))
    result = _run(run_app, root, "--answers", right)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    lines = _exercise_lines(result.stdout)
    assert len(lines) == 3 and all("[pass]" in line for line in lines[:2]), lines
    assert lines[2] == "exercises: score: 2 of 2 items passed (100%); 2 attempted"
    saved = sheets.load_progress(slug, SEED, root)
    assert all(record.passed and record.attempts == 1 for record in saved.items.values())

    item = papers.paper(slug).items[0]
    wrong_answer = next(iter(item.wrong_answers(SEED).values()))
    wrong = _sheet(tmp_path, "wrong.json", {item.id: wrong_answer})
    result = _run(run_app, root, "--answers", wrong)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    lines = _exercise_lines(result.stdout)
    assert "[FAIL]" in lines[0] and "[----]" in lines[1], lines
    # a missed prediction says which way it is off, not the value (as the served lesson)
    expected = item.reference_answer(SEED)
    assert f"{expected:.6g}" not in lines[0] and ("too high" in lines[0] or "too low" in lines[0])
    # ... nor the exact ratio to it (the learner's number divided by it gives the value)
    ratio = float(wrong_answer) / float(expected)
    assert f"{ratio:.3g}" not in lines[0] and "factor" in lines[0], lines[0]
    after = sheets.load_progress(slug, SEED, root)
    assert after.items[item.id].attempts == 2 and not after.items[item.id].passed
    assert after.items[item.id].ever_passed


def test_a_broken_sheet_is_refused_before_anything_is_written(run_app, tmp_path):
    root = tmp_path / "progress"
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    result = _run(run_app, root, "--answers", broken)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert f"STOPPED: answers file {broken}: sheet: the sheet is not JSON" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert not _exercise_lines(result.stdout) and not root.exists()


def test_hints_come_one_per_failed_attempt_and_stop_once_passed():
    item = exercises.lesson_items(LESSON)[1]
    progress = sheets.Progress(paper=exercises.paper_slug(LESSON), seed=SEED)
    assert lesson_exercises.failed_attempts(progress, item.id) == 0
    record = dict(passed=False, ever_passed=False, summary="", lesson=LESSON, updated_utc="")
    for attempts, shown in ((1, 1), (2, 2), (9, len(item.hints))):
        failed = progress.model_copy(
            update={"items": {item.id: sheets.ItemProgress(attempts=attempts, **record)}}
        )
        count = lesson_exercises.failed_attempts(failed, item.id)
        assert lesson_exercises.hints_shown(item, count) == item.hints[:shown]
    record |= {"passed": True, "ever_passed": True}
    passed = progress.model_copy(
        update={"items": {item.id: sheets.ItemProgress(attempts=3, **record)}}
    )
    assert lesson_exercises.failed_attempts(passed, item.id) == 0  # passed: no more hints


@pytest.mark.parametrize("item", exercises.lesson_items(LESSON), ids=lambda item: item.id)
def test_the_lesson_feedback_holds_no_solution_until_revealed(item):
    slug = exercises.paper_slug(LESSON)
    for answer in item.wrong_answers(SEED).values():
        result = papers.grade(slug, SEED, {item.id: answer}).results[
            papers.paper(slug).item_ids.index(item.id)
        ]
        shown = lesson_exercises.feedback_markdown(result, SEED, answer)
        assert shown.startswith("**Not right yet.**"), shown[:200]
        if item.kind == "code":
            assert item.reference_source().strip() not in shown
            # the assessments show it after an attempt, as before
            assert item.reference_source().strip() in assessment_view.feedback_markdown(result)
            assert item.reference_source().strip() in lesson_exercises.reveal_markdown(item, SEED)
        else:  # a wrong prediction learns which way it is off, not the value
            expected = item.reference_answer(SEED)
            assert f"{expected:.6g}" not in shown and ("too high" in shown or "too low" in shown)
            assert f"{expected:.6g}" in lesson_exercises.reveal_markdown(item, SEED)
