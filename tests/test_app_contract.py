"""The lesson-app contract of DESIGN.md, enforced for every app in apps/.

Each app parses as a marimo app with the skeleton (title, setup, hidden title cell, check,
test cells), `marimo check --strict` is clean, and `python apps/NAME.py` exits 0 headless
within the bound, printing its check's PASS and its results, and writing its results bundle
(`--out`, core.lab.results). That headless run is also the app's test: a
script run executes every cell, the test_* cells included, and nothing may stop at the
defaults (no `STOPPED:`; any other `mo.stop` is a run-button wait or sits in a cell that
defines nothing). `pytest apps/NAME.py` runs the same test cells one by one; there a test
cell under a stopped ancestor fails (conftest.py), shown here.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import tomllib

import pytest

from core import curriculum, lab
from core.lab import charts, results
from tpu_scripts import export

APPS = sorted(curriculum.APPS_DIR.glob("*.py"))
LESSON_APPS = [p for p in APPS if p.stem != curriculum.HOME_APP]
# A hang guard, not a speed assertion: lessons target well under 30 s on 2 CPU cores, but a
# loaded machine (three pytest workers, a browser) runs the training lessons 3-5x slower.
HEADLESS_LIMIT_S = 300
HEADLESS_TIMES: dict[str, float] = {}


def _ids(paths):
    return [p.name for p in paths]


def _tree(path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _app_call(tree: ast.Module) -> ast.Call:
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if ast.unparse(node.value.func) == "marimo.App":
                return node.value
    raise AssertionError("no `app = marimo.App(...)`")


@pytest.mark.parametrize("app_path", APPS, ids=_ids(APPS))
def test_app_has_the_skeleton(app_path):
    source = app_path.read_text(encoding="utf-8")
    assert export.marimo_app_problem(source) is None
    tree = _tree(app_path)
    keywords = {k.arg: ast.literal_eval(k.value) for k in _app_call(tree).keywords}
    assert keywords.get("width") == "medium"
    assert keywords.get("app_title"), "app_title names the lesson"
    assert any(
        isinstance(n, ast.With) and ast.unparse(n.items[0].context_expr) == "app.setup"
        for n in tree.body
    ), "imports live in `with app.setup:`"
    cells = export.app_cells(tree)
    first = cells[0]
    assert "hide_code=True" in ast.unparse(first.decorator_list[0]), (
        "the first cell is the hidden title"
    )
    assert "mo.md(" in ast.unparse(first)
    assert any(cell.name.startswith("test_") for cell in cells), "an app carries test_* cells"
    assert "FLAGS.parse(" in source, "controls mirror command-line flags (core.lab.Flags)"


@pytest.mark.parametrize("app_path", LESSON_APPS, ids=_ids(LESSON_APPS))
def test_lesson_is_named_and_has_a_check(app_path):
    assert app_path.stem in {lesson.slug for lesson in curriculum.all_lessons()} | {
        c.slug for c in curriculum.CAPSTONES
    } | {slug for track in curriculum.TRACKS for slug in track.slugs} | {
        a.slug for a in curriculum.ASSESSMENTS
    }
    source = app_path.read_text(encoding="utf-8")
    assert "lab.Check(" in source, "the check cell is a lab.Check (core.numerics errors)"
    assert "title" in source
    cells = export.app_cells(_tree(app_path))
    tests = [ast.unparse(c) for c in cells if c.name.startswith("test_")]
    assert any(".assert_passed()" in t for t in tests), "a test cell calls check.assert_passed()"


COURSE_SLUGS = {lesson.slug for lesson in curriculum.all_lessons()}
COURSE_LESSON_APPS = [p for p in LESSON_APPS if p.stem in COURSE_SLUGS]


@pytest.mark.parametrize("app_path", COURSE_LESSON_APPS, ids=_ids(COURSE_LESSON_APPS))
def test_lesson_ends_with_the_frame(app_path):
    """The lesson frame (core/lab/frame.py): the title cell shows the phase line with the
    phase's goal, `lab.phase_line("<its slug>")`, and one hidden cell closes the lesson,
    `lab.lesson_end("<its slug>")` (its course-run results, TPU beside CPU, or how to get them;
    the previous and next lessons; its sources), before the test cells."""
    source = app_path.read_text(encoding="utf-8")
    assert re.findall(r'lab\.phase_line\("([^"]*)"\)', source) == [app_path.stem]
    assert re.findall(r'lab\.lesson_end\("([^"]*)"\)', source) == [app_path.stem]


@pytest.mark.parametrize("app_path", APPS, ids=_ids(APPS))
def test_app_speaks_the_one_check_vocabulary(app_path):
    """No hand-made badge, no STOPPED print beside a mo.stop: lab.Check and lab.guard."""
    source = app_path.read_text(encoding="utf-8")
    assert "lab.check_badge(" not in source, "use lab.Check (it prints and renders the badge)"
    assert "STOPPED" not in source, "use lab.guard(problem): it prints STOPPED headless"
    assert "def relative_error" not in source, "error measures live in core.numerics"


@pytest.mark.parametrize("app_path", APPS, ids=_ids(APPS))
def test_test_cells_come_last(app_path):
    names = [cell.name for cell in export.app_cells(_tree(app_path))]
    first_test = next(i for i, name in enumerate(names) if name.startswith("test_"))
    late = [name for name in names[first_test:] if not name.startswith("test_")]
    assert not late, f"cells after the first test_* cell: {late} (tests go last)"


def _silent_stops(cell: ast.FunctionDef) -> list[str]:
    """The `mo.stop(...)` calls of a cell that can stop a headless run without a word.

    A run-button wait (`mo.stop(lab.interactive() and ...)`) never stops headless; a stop in a
    cell that defines nothing has no descendants, so no test cell can be skipped below it.
    """
    returns_names = any(
        isinstance(node, ast.Return) and node.value is not None for node in ast.walk(cell)
    )
    stops = []
    for node in ast.walk(cell):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "mo.stop" and node.args:
            condition = ast.unparse(node.args[0])
            if not condition.startswith("lab.interactive() and") and returns_names:
                stops.append(f"{cell.name}: mo.stop({condition}, ...)")
    return stops


@pytest.mark.parametrize("app_path", APPS, ids=_ids(APPS))
def test_every_cell_runs_headless(app_path):
    """The headless run is the app's test, so no cell with descendants may stop silently."""
    stops = [stop for cell in export.app_cells(_tree(app_path)) for stop in _silent_stops(cell)]
    assert not stops, (
        f"{stops}: use lab.guard(problem) for a refusal (it prints STOPPED), "
        "`mo.stop(lab.interactive() and not button.value, ...)` for a run button"
    )


def test_the_silent_stop_detector_bites():
    cells = export.app_cells(
        ast.parse(
            "@app.cell\ndef _(x):\n    mo.stop(x > 1)\n    y = 2\n    return (y,)\n"
            "@app.cell\ndef _(b):\n    mo.stop(lab.interactive() and not b.value)\n"
            "    z = 1\n    return (z,)\n"
            "@app.cell\ndef _(x):\n    mo.stop(x > 1)\n    mo.md('leaf')\n    return\n"
        )
    )
    assert [len(_silent_stops(cell)) for cell in cells] == [1, 0, 0]


@pytest.fixture(scope="session")
def marimo_check_report():
    result = subprocess.run(
        [sys.executable, "-m", "marimo", "check", "--strict", "--format", "json", *map(str, APPS)],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        timeout=600,
    )
    return result


@pytest.mark.parametrize("app_path", APPS, ids=_ids(APPS))
def test_marimo_check_is_clean(app_path, marimo_check_report):
    text = marimo_check_report.stdout.strip()
    report = json.loads(text) if text else {}
    issues = [
        issue
        for issue in report.get("issues", [])
        if os.path.basename(str(issue.get("filename", ""))) == app_path.name
    ]
    assert issues == [], json.dumps(issues, indent=2)[:3000]


def test_marimo_check_exit_status(marimo_check_report):
    assert marimo_check_report.returncode == 0, (
        marimo_check_report.stdout + marimo_check_report.stderr
    )[-3000:]


def shown_problems(out, bundle: dict) -> list[str]:
    """What misleads in a results bundle's charts, and any shown file that differs from the
    text the app meant to show or does not load as its language."""
    problems = []
    for chart in bundle["charts"]:
        spec = json.loads((out / chart["file"]).read_text(encoding="utf-8"))
        problems += [f"chart {chart['title']!r}: {p}" for p in charts.spec_problems(spec)]
    for code in bundle["code"]:
        shown = (out / code["file"]).read_text(encoding="utf-8")
        if hashlib.sha256(shown.encode("utf-8")).hexdigest() != code["source_sha256"]:
            problems.append(f"{code['title']!r}: the page shows other text than the app's")
        try:
            LOADERS.get(code["language"], str)(shown)
        except Exception as error:  # the learner's copy would not load either
            problems.append(f"{code['title']!r} does not load as {code['language']}: {error}")
    return problems


def _yaml(text: str) -> list:
    import yaml

    return list(yaml.safe_load_all(text))


LOADERS = {
    "yaml": _yaml,
    "json": json.loads,
    "jsonl": lambda text: [json.loads(line) for line in text.splitlines() if line.strip()],
    "toml": tomllib.loads,
}


def test_shown_problems_reads_charts_and_files(tmp_path):
    import altair as alt
    import pandas as pd

    (tmp_path / "charts").mkdir()
    (tmp_path / "code").mkdir()
    zeros = pd.DataFrame({"b": ["1", "2"], "e": [0.0, 1e-7]})
    spec = alt.Chart(zeros).mark_bar().encode(x="b:N", y=alt.Y("e:Q").scale(type="log"))
    (tmp_path / "charts" / "01.vl.json").write_text(json.dumps(spec.to_dict()))
    meant = "a:\n- 1\n"
    (tmp_path / "code" / "01.yaml").write_text("a:\n    - 1\n\n  - 2\n")  # as mo.md mangled it
    bundle = {
        "charts": [{"title": "errors", "file": "charts/01.vl.json"}],
        "code": [
            {
                "title": "m.yaml",
                "language": "yaml",
                "file": "code/01.yaml",
                "source_sha256": hashlib.sha256(meant.encode()).hexdigest(),
            }
        ],
    }
    problems = shown_problems(tmp_path, bundle)
    assert len(problems) == 3, problems
    assert "log scale" in problems[0] and "other text" in problems[1]
    assert "does not load as yaml" in problems[2]
    (tmp_path / "code" / "01.yaml").write_text(meant)
    assert len(shown_problems(tmp_path, bundle)) == 1  # the chart alone


@pytest.mark.parametrize("app_path", APPS, ids=_ids(APPS))
def test_app_runs_headless(app_path, capsys, tmp_path, run_app):
    env = lab.child_env(JAX_NUM_CPU_DEVICES="8", JAX_PLATFORMS="cpu")
    start = time.perf_counter()
    result = run_app(
        [app_path, "--out", tmp_path], env=env, cwd=curriculum.REPO_ROOT, timeout=HEADLESS_LIMIT_S
    )
    HEADLESS_TIMES[app_path.name] = time.perf_counter() - start
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "FAIL:" not in result.stdout, result.stdout[-4000:]
    # A stop at the defaults would skip the cells below it, test cells included.
    assert "STOPPED:" not in result.stdout, result.stdout[-4000:]
    if app_path.stem != curriculum.HOME_APP or "PASS:" in result.stdout:
        assert "PASS:" in result.stdout, "the check cell prints its PASS headless"
    # The same run wrote its results bundle (core.lab.results), verified against the schema.
    bundle = results.load(tmp_path / "results.json")
    assert bundle["lesson"] == app_path.stem and bundle["status"] == "passed", bundle["status"]
    assert bundle["receipt"]["tpu_result"] is False, "a CPU run is never a TPU result"
    if app_path.stem != curriculum.HOME_APP:
        assert bundle["checks"] and all(c["passed"] for c in bundle["checks"])
        assert "== Results of" in result.stdout, "the results are printed headless"
    # What the learner saw: every chart honest (core.lab.charts.spec_problems), every file
    # or command shown verbatim and loadable (core.lab.text.code_block).
    assert shown_problems(tmp_path, bundle) == []
    with capsys.disabled():
        print(f" [{app_path.name}: headless in {HEADLESS_TIMES[app_path.name]:.1f} s]", end="")


def test_a_test_cell_under_a_stopped_ancestor_fails():
    fixture = curriculum.REPO_ROOT / "tests" / "fixtures" / "stopped_ancestor_app.py"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(fixture)],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        timeout=300,
        env=lab.child_env(),
    )
    assert result.returncode == 1, result.stdout[-3000:]
    assert "1 failed, 1 passed" in result.stdout, result.stdout[-3000:]
    assert "test_under_a_stopped_ancestor did not run" in result.stdout
