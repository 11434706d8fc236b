"""The two papers: one item or more per phase of each path, in path order; reference answers
score 100%, stubs and planted wrong answers score what they deserve, on three seeds."""

from __future__ import annotations

import pytest

from core import curriculum
from core.assessment import paper

SEEDS = (3, 17, 2026)
PAPERS = [p for p in paper.PAPERS.values() if not p.is_lesson]  # the two synthesis papers


def test_each_learning_path_has_a_paper():
    assert {p.path_title for p in PAPERS} == {p.title for p in curriculum.LEARNING_PATHS}
    assert {p.app_slug for p in PAPERS} == {a.slug for a in curriculum.ASSESSMENTS}


@pytest.mark.parametrize("chosen", PAPERS, ids=[p.slug for p in PAPERS])
def test_at_least_one_item_per_phase_in_path_order(chosen):
    phases = chosen.path.phase_titles
    asked = [item.phase for item in chosen.items]
    missing = [phase for phase in phases if phase not in asked]
    assert not missing, f"phases without an item: {missing}"
    positions = [phases.index(phase) for phase in asked]
    assert positions == sorted(positions), "items follow the path's phase order"
    assert {item.kind for item in chosen.items} == {"predict", "diagnose", "code"}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("chosen", PAPERS, ids=[p.slug for p in PAPERS])
def test_reference_answers_score_full_marks(chosen, seed):
    report = paper.grade(chosen.slug, seed, paper.reference_answers(chosen.slug, seed))
    failed = [(r.item.id, r.summary) for r in report.results if not r.passed]
    assert not failed
    assert report.score == 1.0 and report.revisit() == []


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("chosen", PAPERS, ids=[p.slug for p in PAPERS])
def test_stubs_earn_nothing_and_are_sent_back_to_their_lessons(chosen, seed):
    report = paper.grade(chosen.slug, seed, paper.stub_answers(chosen.slug))
    code_items = [item for item in chosen.items if item.kind == "code"]
    assert report.attempted == len(code_items) and report.passed == 0
    assert report.revisit() == [(item.id, item.lesson) for item in code_items]


@pytest.mark.parametrize("chosen", PAPERS, ids=[p.slug for p in PAPERS])
def test_a_sheet_of_planted_mistakes_scores_zero(chosen):
    seed = SEEDS[0]
    wrong = {item.id: next(iter(item.wrong_answers(seed).values())) for item in chosen.items}
    report = paper.grade(chosen.slug, seed, wrong)
    assert report.attempted == len(chosen.items) and report.passed == 0


def test_a_copied_sheet_fails_on_another_seed():
    """Learner 17 hands in learner 3's correct answers: most predict items fail."""
    chosen = paper.paper("learn-tpus")
    copied = paper.reference_answers(chosen.slug, 3)
    report = paper.grade(chosen.slug, 17, copied)
    predict = [r for r in report.results if r.item.kind == "predict"]
    assert sum(not r.passed for r in predict) >= len(predict) // 2


def test_answers_the_paper_cannot_grade_are_named():
    chosen = paper.paper("make-it-fast")
    first_predict = next(item for item in chosen.items if item.kind == "predict")
    problems = paper.answer_problems(
        chosen.slug, {"no.such_item": 1.0, first_predict.id: "twelve", chosen.item_ids[1]: None}
    )
    assert set(problems) == {"answers.no.such_item", f"answers.{first_predict.id}"}
    with pytest.raises(ValueError, match=r"answers\.no\.such_item"):
        paper.grade(chosen.slug, 0, {"no.such_item": 1.0})
    with pytest.raises(ValueError, match="no assessment"):
        paper.paper("learn-fortran")


def test_an_answer_the_grader_fails_on_is_ungraded_and_the_rest_graded(monkeypatch):
    """A grader defect on one answer must not end the sheet, count as the learner's attempt,
    or read as a wrong answer."""
    from core.assessment import sheets, view

    chosen = paper.paper("make-it-fast")
    first, second = chosen.items[:2]

    def broken(seed, answer):
        raise TypeError("a defect of the grader")

    monkeypatch.setattr(first, "grade", broken)
    answers = {first.id: first.reference_answer(3), second.id: second.reference_answer(3)}
    report = paper.grade(chosen.slug, 3, answers)
    one, two = report.results[:2]
    assert one.ungraded and "TypeError: a defect of the grader" in one.summary
    assert two.passed and not two.ungraded
    assert view.feedback_markdown(one).startswith("**Not graded.**")
    assert [r["verdict"] for r in view.score_rows(report)[:2]] == ["not graded", "passed"]
    recorded = sheets.recorded(sheets.Progress(paper=chosen.slug, seed=3), report)
    assert first.id not in recorded.items and second.id in recorded.items
