"""The assessment apps' shared cells, without a browser: files validated before anything is
graded, committed form values parsed with a message for an entry that is not an answer."""

from __future__ import annotations

import json

from core.assessment import paper, sheets
from core.lab import assessment

PAPER = paper.paper("make-it-fast")
SHAPE = next(i for i in PAPER.items if getattr(i, "answer_type", "") == "shape")
NUMBER = next(i for i in PAPER.items if getattr(i, "answer_type", "") == "number")
DIAGNOSE = next(i for i in PAPER.items if i.kind == "diagnose")


def test_a_sheet_seed_wins_over_a_default_seed_and_a_bad_sheet_is_a_problem(tmp_path):
    sheet = tmp_path / "sheet.json"
    sheet.write_text(json.dumps({"path": PAPER.slug, "seed": 41, "answers": {}}))
    opened = assessment.open_paper(PAPER, 3, str(sheet), tmp_path, seed_chosen=False)
    assert (opened.seed, opened.problem) == (41, None)
    assert list(opened.questions) == list(PAPER.item_ids)
    sheet.write_text(json.dumps({"path": PAPER.slug, "seed": 41, "answers": {"x.y": 1}}))
    opened = assessment.open_paper(PAPER, 3, str(sheet), tmp_path, seed_chosen=False)
    assert opened.sheet is None and "answers.x.y: no item" in opened.problem


def test_a_chosen_seed_that_is_not_the_sheets_is_refused(tmp_path):
    """Issue 36: `--seed 5 --answers sheet` graded the sheet's seed 11 while results.md said
    --seed=5. A seed the learner chose and the sheet's disagree: refused, both named; a seed
    left at its default takes the sheet's, and the app says which seed it graded."""
    sheet = tmp_path / "sheet.json"
    sheet.write_text(json.dumps({"path": PAPER.slug, "seed": 11, "answers": {}}))
    opened = assessment.open_paper(PAPER, 5, str(sheet), tmp_path, seed_chosen=True)
    assert opened.problem is not None
    assert "seed 11" in opened.problem and "seed 5" in opened.problem
    opened = assessment.open_paper(PAPER, 0, str(sheet), tmp_path, seed_chosen=False)
    assert (opened.seed, opened.problem) == (11, None)
    assert "Graded at seed 11" in opened.seed_note and "answers file" in opened.seed_note
    opened = assessment.open_paper(PAPER, 11, str(sheet), tmp_path, seed_chosen=True)
    assert (opened.seed, opened.problem) == (11, None)
    assert opened.seed_note == "Graded at seed 11."


def test_a_broken_progress_file_is_a_problem_and_is_kept(tmp_path):
    broken = sheets.progress_file(PAPER.slug, 3, tmp_path)
    broken.parent.mkdir(parents=True)
    broken.write_text("{")
    opened = assessment.open_paper(PAPER, 3, "", tmp_path)
    assert "never overwritten" in opened.problem and broken.read_text() == "{"


def test_committed_values_are_parsed_and_graded(tmp_path):
    opened = assessment.open_paper(PAPER, 5, "", tmp_path)
    right_shape = SHAPE.reference_answer(5)
    committed = {
        SHAPE.id: " (" + ", ".join(map(str, right_shape)) + ") ",
        NUMBER.id: "twelve",  # not a number: a warning, not an attempt
        DIAGNOSE.id: DIAGNOSE.reference_answer(5),
    }
    report, problems, progress, changed = assessment.grade_committed(PAPER, opened, committed)
    assert report.attempted == 2 and report.passed == 2 and changed
    assert set(problems) == {NUMBER.id} and "'twelve' is not a number" in problems[NUMBER.id]
    assert set(progress.items) == {SHAPE.id, DIAGNOSE.id}


def test_a_second_commit_in_one_session_is_a_second_attempt(tmp_path):
    """The app saves after each commit; the next grading starts from that file, not from
    what was saved when the paper opened."""
    opened = assessment.open_paper(PAPER, 5, "", tmp_path)
    wrong = next(iter(DIAGNOSE.wrong_answers(5).values()))
    *_, progress, changed = assessment.grade_committed(PAPER, opened, {DIAGNOSE.id: wrong})
    assert changed
    sheets.save_progress(progress, tmp_path)
    *_, again, changed = assessment.grade_committed(PAPER, opened, {DIAGNOSE.id: wrong})
    assert not changed and again.items[DIAGNOSE.id].attempts == 1  # the same answer, rerun
    right = DIAGNOSE.reference_answer(5)
    *_, progress, changed = assessment.grade_committed(PAPER, opened, {DIAGNOSE.id: right})
    assert changed and progress.items[DIAGNOSE.id].attempts == 2
    assert progress.items[DIAGNOSE.id].ever_passed


def test_the_paper_check_passes_and_the_chart_keeps_phase_titles(tmp_path):
    errors, facts = assessment.paper_self_check(PAPER, 5)
    assert errors and max(errors.values()) <= 1e-6 and facts and all(facts.values())
    opened = assessment.open_paper(PAPER, 5, "", tmp_path)
    report, *_ = assessment.grade_committed(PAPER, opened, {})
    rows = [
        {"phase": r.item.phase, "item": r.item.title, "verdict": "not yet", "attempts": 0}
        for r in report.results
    ]
    chart = assessment.score_chart(rows, PAPER.path.phase_titles).to_dict()
    assert chart["encoding"]["y"]["axis"]["labelLimit"] == 0


def test_a_hostile_sheet_is_a_problem_not_a_crash(tmp_path):
    """Issue 36: a 5000-digit number or arrays nested 100,000 deep crashed the app."""
    for name, text in (
        ("digits.json", f'{{"path": "{PAPER.slug}", "seed": {"9" * 5000}, "answers": {{}}}}'),
        ("deep.json", f'{{"path": "{PAPER.slug}", "seed": 1, "answers": {"[" * 100_000}'),
    ):
        sheet = tmp_path / name
        sheet.write_text(text)
        opened = assessment.open_paper(PAPER, 3, str(sheet), tmp_path, seed_chosen=False)
        assert opened.sheet is None and f"answers file {sheet}: sheet: " in opened.problem


def test_the_self_checks_pass_line_says_it_is_the_paper_not_the_learner():
    """Issue 36: a green PASS right under "score 0 of 12" read as the learner's."""
    from core import lab

    errors, facts = assessment.paper_self_check(PAPER, 5)
    line = lab.Check(assessment.self_check_what(5), errors, 1e-6, facts=facts).line()
    assert line.startswith("PASS: this paper at seed 5, not your answers:")
    assert "not your score" in assessment.SELF_CHECK_HEADING
