"""The exercises' progress as the course home reads it, and its reset (nothing deleted)."""

import datetime
import json

import pytest

from core import curriculum, exercises, lab
from core.assessment import paper as papers
from core.assessment import sheets
from core.exercises import progress

LESSON = exercises.lessons()[0]  # tiny_mlp, the first lesson with exercises


def _save(root, lesson, seed, passed_ids):
    """A progress file as grading writes it: each listed item passed, the others failed."""
    record = sheets.Progress(paper=exercises.paper_slug(lesson), seed=seed)
    items = {}
    for item in exercises.lesson_items(lesson):
        ok = item.id in passed_ids
        items[item.id] = sheets.ItemProgress(
            attempts=1, passed=ok, ever_passed=ok, summary="", lesson=lesson,
            last_answer=None, updated_utc="2026-12-07T00:00:00Z",
        )  # fmt: skip
    return sheets.save_progress(record.model_copy(update={"items": items}), root)


def test_a_lesson_without_a_graded_answer_counts_nothing_passed(tmp_path):
    state = progress.lesson_progress(LESSON, tmp_path)
    assert (state.attempted, state.passed, state.seed) == (0, 0, None)
    assert state.total == len(exercises.lesson_items(LESSON)) >= 2
    assert not state.done and state.label() == f"{state.total} exercises"


def test_passed_exercises_are_counted_from_the_newest_progress_file(tmp_path):
    first, *rest = [item.id for item in exercises.lesson_items(LESSON)]
    _save(tmp_path, LESSON, 0, {first})
    state = progress.lesson_progress(LESSON, tmp_path)
    assert (state.attempted, state.passed, state.seed) == (state.total, 1, 0)
    assert state.label() == f"exercises 1 of {state.total} passed"
    _save(tmp_path, LESSON, 3, {first, *rest})  # written later: the newest
    state = progress.lesson_progress(LESSON, tmp_path)
    assert state.done and state.seed == 3 and state.label() == "exercises: done"


def test_a_broken_progress_file_is_skipped_not_overwritten(tmp_path):
    folder = tmp_path / exercises.paper_slug(LESSON)
    folder.mkdir()
    (folder / "seed-0.json").write_text("{not json")
    assert progress.lesson_progress(LESSON, tmp_path).attempted == 0
    assert (folder / "seed-0.json").read_text() == "{not json"


def test_totals_sum_a_phase_and_a_path_and_ignore_lessons_without_exercises(tmp_path):
    _save(tmp_path, LESSON, 0, {item.id for item in exercises.lesson_items(LESSON)})
    state = progress.course_progress(tmp_path)
    phase = curriculum.phase_of(LESSON).title
    passed, total = progress.totals(state, progress.phase_lessons(phase))
    assert passed == state[LESSON].passed and total >= state[LESSON].total
    for path in curriculum.LEARNING_PATHS:
        slugs = progress.path_lessons(path.title)
        assert set(progress.phase_lessons(phase)) <= set(slugs)  # every path holds phase 9
    assert progress.totals(state, ["workspace"]) == (0, 0)


def test_reset_moves_the_exercises_aside_and_keeps_the_assessments(tmp_path):
    _save(tmp_path, LESSON, 0, set())
    assessment = curriculum.ASSESSMENTS[0].paper
    kept = sheets.save_progress(sheets.Progress(paper=assessment, seed=1), tmp_path)
    now = datetime.datetime(2026, 12, 7, 12, 0, 0, tzinfo=datetime.UTC)
    moved_to, moved = progress.reset(tmp_path, include_assessments=False, now=now)
    assert moved == [exercises.paper_slug(LESSON)]
    assert moved_to == tmp_path / "reset" / "20261207T120000Z"
    assert progress.lesson_progress(LESSON, tmp_path).attempted == 0
    backup = json.loads((moved_to / moved[0] / "seed-0.json").read_text())
    assert backup["paper"] == exercises.paper_slug(LESSON)  # nothing deleted
    assert kept.is_file()
    # a second reset in the same second keeps the first one's folder
    _save(tmp_path, LESSON, 0, set())
    again, _ = progress.reset(tmp_path, include_assessments=True, now=now)
    assert again != moved_to and moved_to.is_dir() and not kept.exists()
    assert (again / assessment / "seed-1.json").is_file()


def test_reset_with_nothing_saved_moves_nothing(tmp_path):
    assert progress.reset(tmp_path) == (None, [])
    assert not (tmp_path / "reset").exists()


@pytest.mark.parametrize("include", [False, True])
def test_reset_touches_only_known_papers(tmp_path, include):
    (tmp_path / "notes").mkdir()
    progress.reset(tmp_path, include_assessments=include)
    assert (tmp_path / "notes").is_dir()
    assert set(progress.reset_papers(include)) <= set(papers.PAPERS)


def test_the_lesson_header_says_how_far_the_learner_got(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_TPU_LAB_PROGRESS_DIR", str(tmp_path))  # read at the call
    assert progress.progress_dir() == tmp_path
    assert progress.header_mark("workspace") == ""  # a lesson without exercises
    total = len(exercises.lesson_items(LESSON))
    assert progress.header_mark(LESSON) == f" · {total} exercises"
    _save(tmp_path, LESSON, 0, {item.id for item in exercises.lesson_items(LESSON)})
    assert progress.header_mark(LESSON) == " · exercises: done"
    assert progress.header_mark(LESSON) in lab.phase_line(LESSON)
