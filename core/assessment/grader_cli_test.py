"""`python -m core.assessment`: the paper, the grader (exit 2 naming the field of a malformed
sheet), saved progress, and the progress summary."""

from __future__ import annotations

import json
import subprocess
import sys

from core import curriculum, runtime
from core.assessment import __main__ as cli
from core.assessment import paper

SLUG = "make-it-fast"


def _write(tmp_path, name, answers, seed=11, path=SLUG):
    file = tmp_path / name
    file.write_text(json.dumps({"path": path, "seed": seed, "answers": answers}))
    return file


def test_reference_sheet_scores_full_marks(tmp_path, capsys):
    file = _write(tmp_path, "ref.json", paper.reference_answers(SLUG, 11))
    assert cli.main(["grade", "--path", SLUG, "--answers", str(file)]) == 0
    out = capsys.readouterr().out
    total = len(paper.paper(SLUG).item_ids)
    assert f"score: {total} of {total} items passed (100%); {total} attempted" in out
    assert "FAIL" not in out and "revisit" not in out


def test_stub_sheet_scores_zero_and_names_the_lessons(tmp_path, capsys):
    file = _write(tmp_path, "stub.json", paper.stub_answers(SLUG))
    assert cli.main(["grade", "--path", SLUG, "--answers", str(file)]) == 0
    out = capsys.readouterr().out
    code = [item for item in paper.paper(SLUG).items if item.kind == "code"]
    assert f"score: 0 of {len(paper.paper(SLUG).item_ids)} items passed (0%)" in out
    for item in code:
        assert f"revisit: apps/{item.lesson}.py" in out
    assert "hidden tests pass" in out


def test_malformed_sheets_exit_2_naming_the_field_and_the_rest_are_graded(tmp_path, capsys):
    good = _write(tmp_path, "good.json", {})
    bad_seed = _write(tmp_path, "bad_seed.json", {}, seed="eleven")
    item = paper.paper(SLUG).item_ids[0]
    bad_answer = _write(tmp_path, "bad_answer.json", {item: {"value": 3}})
    status = cli.main(
        ["grade", "--path", SLUG, "--answers", str(good), str(bad_seed), str(bad_answer)]
    )
    captured = capsys.readouterr()
    assert status == cli.EXIT_MALFORMED
    assert f"{bad_seed}: malformed answers file: seed: " in captured.err
    assert f"{bad_answer}: malformed answers file: answers.{item}: " in captured.err
    assert f"# {good}" in captured.out and "0 attempted" in captured.out


def test_the_grader_runs_as_a_module_and_exits_2(tmp_path):
    wrong_path = _write(tmp_path, "other.json", {}, path="learn-tpus")
    result = subprocess.run(
        [sys.executable, "-m", "core.assessment", "grade", "--path", SLUG, "--answers", wrong_path],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=runtime.child_env(JAX_PLATFORMS="cpu"),
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "malformed answers file: path: the sheet answers 'learn-tpus'" in result.stderr


def test_paper_prints_the_questions_and_writes_a_template_once(tmp_path, capsys):
    template = tmp_path / "answers.json"
    argv = ["paper", "--path", SLUG, "--seed", "4", "--template", str(template), "--learner", "ada"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    for number, item in enumerate(paper.paper(SLUG).items, start=1):
        assert f"## {number}. {item.title}" in out
    written = json.loads(template.read_text())
    assert (written["seed"], written["learner"]) == (4, "ada")
    try:
        cli.main(argv)
    except SystemExit as stop:
        assert stop.code == 2
    else:
        raise AssertionError("a template is never overwritten")
    assert "exists; it is never overwritten" in capsys.readouterr().err


def test_saved_progress_shows_what_to_revisit(tmp_path, capsys):
    chosen = paper.paper(SLUG)
    item = chosen.items[0]
    wrong = next(iter(item.wrong_answers(11).values()))
    sheet = _write(tmp_path, "one.json", {item.id: wrong})
    root = tmp_path / "workspace"
    argv = ["grade", "--path", SLUG, "--answers", str(sheet), "--save-progress"]
    assert cli.main([*argv, "--progress-dir", str(root)]) == 0
    assert f"progress saved: {root / SLUG / 'seed-11.json'}" in capsys.readouterr().out
    assert cli.main(["progress", "--progress-dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"{SLUG} (seed 11): 1 of {len(chosen.item_ids)} attempted, 0 passed" in out
    assert f"revisit apps/{item.lesson}.py for {item.title}" in out
    assert "learn-tpus: no progress yet" in out


def test_json_report(tmp_path, capsys):
    sheet = _write(tmp_path, "ref.json", paper.reference_answers(SLUG, 11))
    assert cli.main(["grade", "--path", SLUG, "--answers", str(sheet), "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["score"] == 1.0 and report["seed"] == 11
    assert [r["item"] for r in report["results"]] == list(paper.paper(SLUG).item_ids)


def test_a_cohort_with_hostile_sheets_is_graded_to_the_end(tmp_path):
    """An answer that calls sys.exit(0), a 5000-digit seed and arrays nested 100,000 deep:
    the grader used to stop at the first (status 0, no score) or crash on the others
    (traceback, status 1), skipping every later sheet. Now each is that sheet's feedback,
    every sheet is graded, and the status says some were malformed, at the end."""
    code = next(item for item in paper.paper(SLUG).items if item.kind == "code")
    leaves = _write(tmp_path, "exits.json", {code.id: "import sys\nsys.exit(0)\n"})
    digits = tmp_path / "digits.json"
    digits.write_text(f'{{"path": "{SLUG}", "seed": {"7" * 5000}, "answers": {{}}}}')
    deep = tmp_path / "deep.json"
    deep.write_text(f'{{"path": "{SLUG}", "seed": 1, "answers": {"[" * 100_000}')
    last = _write(tmp_path, "last.json", {})
    argv = ["grade", "--path", SLUG, "--answers", leaves, digits, deep, last]
    result = subprocess.run(
        [sys.executable, "-m", "core.assessment", *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=runtime.child_env(JAX_PLATFORMS="cpu"),
        timeout=600,
    )
    assert result.returncode == cli.EXIT_MALFORMED, (result.stdout + result.stderr)[-3000:]
    out, err = result.stdout, result.stderr
    assert f"# {leaves}" in out and f"# {last}" in out
    assert "your code ended its own process" in out and "SystemExit" in out
    assert f"{digits}: malformed answers file: sheet: " in err and "digits" in err
    assert f"{deep}: malformed answers file: sheet: " in err and "nested too deeply" in err
    assert "graded 2 of 4 answer files; 2 malformed" in err
