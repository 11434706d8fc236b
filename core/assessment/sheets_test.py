"""Answer sheets are validated before grading (the field is named), and progress is kept in
the workspace: validated, written atomically, never overwritten when it does not validate."""

from __future__ import annotations

import json
import os

import pytest

from core.assessment import paper, sheets

SLUG = "make-it-fast"
PAPER = paper.paper(SLUG)
PREDICT = next(i for i in PAPER.items if getattr(i, "answer_type", "") == "number")
CODE = next(item for item in PAPER.items if item.kind == "code")


def _sheet(**changes) -> str:
    data = {"path": SLUG, "seed": 5, "learner": "ada", "answers": {PREDICT.id: 1.0}}
    data.update(changes)
    return json.dumps(data)


def test_a_valid_sheet_parses():
    sheet = sheets.parse_sheet(_sheet(), expected_path=SLUG)
    assert (sheet.path, sheet.seed, sheet.answers) == (SLUG, 5, {PREDICT.id: 1.0})


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("{not json", "sheet"),
        ("[1, 2]", "sheet"),
        (json.dumps({"path": SLUG, "answers": {}}), "seed"),
        (_sheet(seed=-1), "seed"),
        (_sheet(seed="5"), "seed"),  # strict: a string is not a seed
        (_sheet(seed=2**31), "seed"),
        (_sheet(path="learn-fortran"), "path"),
        (_sheet(answers=[1.0]), "answers"),
        (_sheet(score=100), "score"),  # no field the schema does not name
        (_sheet(answers={"no.such_item": 1.0}), "answers.no.such_item"),
        (_sheet(answers={PREDICT.id: "12 GiB"}), f"answers.{PREDICT.id}"),
        (_sheet(answers={PREDICT.id: True}), f"answers.{PREDICT.id}"),  # a bool is no number
        (_sheet(answers={CODE.id: 42}), f"answers.{CODE.id}"),
    ],
)
def test_a_malformed_sheet_names_the_field(text, field):
    with pytest.raises(sheets.SheetError) as raised:
        sheets.parse_sheet(text)
    assert raised.value.field == field, str(raised.value)
    assert str(raised.value).startswith(f"{field}: ")


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        # json.loads raises ValueError past 4300 digits, not JSONDecodeError
        (_sheet().replace('"seed": 5', '"seed": ' + "9" * 5000), "sheet", "digits"),
        (_sheet().replace("1.0}", "1" * 5000 + "}"), "sheet", "digits"),
        # past Python's recursion limit: RecursionError
        (_sheet().replace("1.0}", DEEP + "}"), "sheet", "nested"),
        (DEEP, "sheet", "nested"),
        # digits under the limit, past float64: math.isfinite raised OverflowError
        (_sheet(answers={PREDICT.id: 10**4000}), f"answers.{PREDICT.id}", "finite"),
        (_sheet(answers={CODE.id: "#" * 200_000}), f"answers.{CODE.id}", "characters"),
    ],
)
def test_hostile_json_is_a_malformed_sheet(text, field, words):
    """Each of these ended the grader with a traceback (a ValueError, a RecursionError, an
    OverflowError) instead of naming what is wrong."""
    with pytest.raises(sheets.SheetError) as raised:
        sheets.parse_sheet(text)
    assert raised.value.field == field and words in str(raised.value), str(raised.value)


def test_a_huge_file_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "w") as file:
        file.write(_sheet()[:-1] + ', "pad": "')
        file.truncate(sheets.MAX_SHEET_BYTES + 1)
    with pytest.raises(sheets.SheetError, match="larger than"):
        sheets.load_sheet(big)


def test_a_sheet_for_the_other_path_is_refused():
    other = _sheet(path="learn-tpus", answers={})
    with pytest.raises(sheets.SheetError, match="^path: "):
        sheets.parse_sheet(other, expected_path=SLUG)


def test_an_unreadable_file_is_named(tmp_path):
    with pytest.raises(sheets.SheetError, match="^answers file: cannot read"):
        sheets.load_sheet(tmp_path / "missing.json")


def test_the_template_is_a_valid_sheet_with_the_stubs_in_place():
    blank = sheets.template(SLUG, 9, "ada")
    sheet = sheets.parse_sheet(json.dumps(blank), expected_path=SLUG)
    assert list(sheet.answers) == list(PAPER.item_ids)
    assert sheet.answers[CODE.id] == CODE.stub
    report = paper.grade(SLUG, 9, sheet.answers)
    assert report.passed == 0


def _report(answers: dict, seed: int = 5) -> paper.Report:
    return paper.grade(SLUG, seed, answers)


def test_progress_counts_distinct_attempts_and_keeps_the_last_answer(tmp_path):
    progress = sheets.load_progress(SLUG, 5, tmp_path)
    assert progress.items == {}
    wrong = next(iter(PREDICT.wrong_answers(5).values()))
    right = PREDICT.reference_answer(5)
    progress = sheets.recorded(progress, _report({PREDICT.id: wrong}))
    progress = sheets.recorded(progress, _report({PREDICT.id: wrong}))  # the same, regraded
    record = progress.items[PREDICT.id]
    assert (record.attempts, record.passed, record.lesson) == (1, False, PREDICT.lesson)
    assert progress.revisit() == [(PREDICT.id, PREDICT.lesson)]
    progress = sheets.recorded(progress, _report({PREDICT.id: right}))
    record = progress.items[PREDICT.id]
    assert (record.attempts, record.passed, record.ever_passed) == (2, True, True)
    assert record.last_answer == right and progress.revisit() == []
    assert progress.counts() == (1, 1, len(PAPER.item_ids))


def test_progress_is_saved_atomically_and_read_back(tmp_path):
    progress = sheets.recorded(
        sheets.load_progress(SLUG, 5, tmp_path), _report({CODE.id: CODE.stub})
    )
    file = sheets.save_progress(progress, tmp_path)
    assert file == tmp_path / SLUG / "seed-5.json"
    assert sheets.load_progress(SLUG, 5, tmp_path) == progress
    assert [p.name for p in file.parent.iterdir()] == ["seed-5.json"], "no temporary file left"
    assert sheets.latest_progress(SLUG, tmp_path) == progress


def test_a_crash_while_saving_keeps_the_previous_file(tmp_path, monkeypatch):
    first = sheets.recorded(sheets.load_progress(SLUG, 5, tmp_path), _report({CODE.id: CODE.stub}))
    file = sheets.save_progress(first, tmp_path)
    before = file.read_bytes()
    second = sheets.recorded(first, _report({CODE.id: CODE.reference_answer(5)}))

    def crash(*_args):
        raise OSError("disk pulled out")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk pulled out"):
        sheets.save_progress(second, tmp_path)
    assert file.read_bytes() == before
    assert [p.name for p in file.parent.iterdir()] == ["seed-5.json"]


def test_a_broken_progress_file_is_named_and_never_used(tmp_path):
    file = sheets.progress_file(SLUG, 5, tmp_path)
    file.parent.mkdir(parents=True)
    file.write_text('{"paper": "make-it-fast", "seed": 5, "items": {"x": {}}}')
    with pytest.raises(sheets.SheetError, match="not a valid progress file"):
        sheets.load_progress(SLUG, 5, tmp_path)
    assert sheets.latest_progress(SLUG, tmp_path) is None


def test_latest_progress_is_the_newest_seed(tmp_path):
    for seed, stamp in ((1, 1_000), (2, 2_000)):
        saved = sheets.save_progress(sheets.Progress(paper=SLUG, seed=seed), tmp_path)
        os.utime(saved, (stamp, stamp))
    assert sheets.latest_progress(SLUG, tmp_path).seed == 2
    assert sheets.latest_progress("learn-tpus", tmp_path) is None
