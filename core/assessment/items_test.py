"""Every assessment item, on three learner seeds: the reference answer passes, every planted
wrong answer fails, the live value agrees with its derivation, a code exercise's hidden tests
fail on the stub and on each planted wrong solution, and seeds change the question."""

from __future__ import annotations

import pytest

from core import curriculum
from core.assessment import bank, items, paper
from core.assessment.items import CodeItem, DiagnoseItem, PredictItem

SEEDS = (3, 17, 2026)
ITEMS = list(paper.ITEMS.values())
IDS = [item.id for item in ITEMS]
NOT_CODE = [i for i in ITEMS if not isinstance(i, CodeItem)]
CODE = [i for i in ITEMS if isinstance(i, CodeItem)]


def test_there_are_items_of_every_kind():
    assert {item.kind for item in ITEMS} == {"predict", "diagnose", "code"}


@pytest.mark.parametrize("item", ITEMS, ids=IDS)
def test_item_names_a_lesson_of_its_phase(item):
    assert item.phase in {p.title for p in curriculum.PHASES}, item.phase
    assert curriculum.phase_of(item.lesson).title == item.phase, (item.lesson, item.phase)
    assert item.id.split(".")[0] == curriculum.PHASE_PACKAGES[item.phase], (
        "an item id starts with its phase's package name"
    )
    assert item.title


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("item", ITEMS, ids=IDS)
def test_reference_passes_and_wrong_answers_fail(item, seed):
    question = item.question(seed)
    assert question.prompt.strip() and question.answer_hint
    if isinstance(item, PredictItem):
        assert question.tolerance, "a predict item states its tolerance"
    if isinstance(item, DiagnoseItem):
        assert len(question.choices) >= 3 and question.program.strip()
    if isinstance(item, CodeItem):
        assert question.stub == item.stub and item.function_name in item.stub
    reference = item.reference_answer(seed)
    assert item.answer_problem(reference) is None
    verdict = item.grade(seed, reference)
    assert verdict.passed, f"reference rejected: {verdict.summary}\n{verdict.detail}"
    assert verdict.detail.strip(), "feedback teaches: a derivation, evidence or the tests"
    wrong = item.wrong_answers(seed)
    assert len(wrong) >= 2, "at least two planted wrong answers"
    for mistake, answer in wrong.items():
        assert item.answer_problem(answer) is None, mistake
        feedback = item.grade(seed, answer)
        assert not feedback.passed, f"{mistake!r} ({answer!r}) was accepted: {feedback.summary}"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("item", ITEMS, ids=IDS)
def test_self_check_holds(item, seed):
    check = item.self_check(seed)
    assert check.errors or check.facts
    for name, error in check.errors.items():
        assert error <= 1e-6, (name, error)
    for name, holds in check.facts.items():
        assert holds, name


@pytest.mark.parametrize("item", NOT_CODE, ids=[i.id for i in NOT_CODE])
def test_seeds_change_the_answer(item):
    """Two learners get different numbers: over eight seeds the expected answer takes more
    than one value, so a copied answer fails for someone. A lesson's exercise may teach an
    answer that no seed changes (``same_answer_at_every_seed`` says why); its question's numbers
    still change, and no assessment item may do so."""
    if getattr(item, "same_answer_at_every_seed", ""):
        assert item.id not in {i.id for i in bank.ITEMS}, "an assessment's answer follows the seed"
        assert len({item.question(seed).prompt for seed in range(8)}) >= 2
        return
    answers = {repr(item.reference_answer(seed)) for seed in range(8)}
    assert len(answers) >= 2, answers


@pytest.mark.parametrize("item", CODE, ids=[i.id for i in CODE])
def test_code_exercise_fails_stub_and_planted_wrong(item):
    planted = item.planted_wrong()
    assert len(planted) >= 2
    for seed in SEEDS:
        assert not item.grade(seed, item.stub).passed
        for mistake, source in planted.items():
            tests = item.run_tests(seed, source)
            assert tests and not all(t.passed for t in tests), mistake


def test_code_exercise_reports_learner_errors_as_feedback():
    """Errors raised in the answer's own process come back as the learner's feedback."""
    item = next(i for i in CODE if i.id == "reinforcement_learning.gae_truncation")
    for source, words in (
        ("def broken(:\n", "SyntaxError"),
        ("x = 1\n", "no function named 'gae'"),
        ("def gae(*a, **k):\n    1 / 0\n", "ZeroDivisionError: division by zero (line 2 of"),
    ):
        feedback = item.grade(SEEDS[0], source)
        assert not feedback.passed and words in feedback.detail, feedback.detail


@pytest.mark.parametrize("item", CODE, ids=[i.id for i in CODE])
def test_an_answer_that_imports_the_reference_solution_fails(item):
    """It passed: the solutions were importable by the answer they grade."""
    source = f"from {item.solution_module} import {item.function_name}\n"
    feedback = item.grade(SEEDS[0], source)
    assert not feedback.passed, feedback.summary
    assert "ModuleNotFoundError: No module named 'core'" in feedback.detail, feedback.detail


def test_an_answer_that_exits_is_feedback_and_grading_goes_on():
    """``sys.exit(0)`` ended the grader (status 0, no score) and every later answer."""
    item = next(i for i in CODE if i.id == "reinforcement_learning.gae_truncation")
    feedback = item.grade(SEEDS[0], "import sys; sys.exit(0)")
    assert not feedback.passed and "SystemExit(0)" in feedback.detail, feedback.detail
    assert not feedback.ungraded and "your code ended its own process" in feedback.detail


@pytest.mark.parametrize("item", CODE, ids=[i.id for i in CODE])
def test_a_right_answer_that_is_not_the_course_text_passes_in_its_own_process(item):
    """The hidden tests call it across the process boundary: arrays, a mesh, sharded results
    and its ValueError make the trip."""
    source = item.reference_source() + "\n# the learner's own copy\n"
    run = item.run(SEEDS[0], source)
    assert run.tests and all(t.passed for t in run.tests), run.tests
    assert run.confinement != items._OWN and not run.ungraded


def test_a_wrong_answer_stays_wrong_across_the_process_boundary():
    """Copies on the devices that differ (no collective) are seen as such in the grader."""
    item = next(i for i in CODE if i.id == "distributed.sharded_step")
    source = item.planted_wrong()["no collective: each device steps on its own shard's gradient"]
    run = item.run(SEEDS[0], source + "\n# edited\n")
    assert not all(t.passed for t in run.tests)
    assert "differ from device 0's" in " ".join(t.message for t in run.tests)


def test_only_the_course_sources_run_in_the_graders_process():
    item = CODE[0]
    assert item.reference_source() in item.course_sources()
    with pytest.raises(ValueError, match="only the course's own sources"):
        item.load(item.reference_source() + "\n")
