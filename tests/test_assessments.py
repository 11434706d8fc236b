"""The two assessment apps headless: a reference sheet scores 100%, a stub sheet scores what
the stubs deserve (nothing), both save progress in the workspace they are given, and the
course home shows that progress per path with the lessons to revisit."""

from __future__ import annotations

import json
import re

import pytest

from core import curriculum, lab
from core.assessment import paper, sheets, view

ASSESSMENTS = list(curriculum.ASSESSMENTS)
SEED = 23


def _run(run_app, app, *argv, tmp_path):
    result = run_app(
        [curriculum.APPS_DIR / f"{app}.py", *argv],
        env=lab.child_env(JAX_NUM_CPU_DEVICES="8", JAX_PLATFORMS="cpu"),
        cwd=curriculum.REPO_ROOT,
        timeout=300,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return result.stdout


def _sheet(tmp_path, name, slug, answers):
    file = tmp_path / name
    file.write_text(json.dumps({"path": slug, "seed": SEED, "answers": answers}))
    return file


@pytest.mark.parametrize("assessment", ASSESSMENTS, ids=[a.paper for a in ASSESSMENTS])
def test_reference_and_stub_sheets_headless(assessment, run_app, tmp_path):
    slug = assessment.paper
    total = len(paper.paper(slug).item_ids)
    root = tmp_path / "workspace"
    reference = _sheet(tmp_path, "reference.json", slug, paper.reference_answers(slug, SEED))
    out = _run(
        run_app, assessment.slug, "--answers", reference, "--progress-dir", root, tmp_path=tmp_path
    )
    assert f"score: {total} of {total} items passed (100%); {total} attempted" in out
    assert "PASS:" in out and "FAIL:" not in out and "STOPPED:" not in out
    saved = sheets.load_progress(slug, SEED, root)
    assert saved.counts() == (total, total, total) and saved.revisit() == []

    stubs = _sheet(tmp_path, "stubs.json", slug, paper.stub_answers(slug))
    out = _run(
        run_app, assessment.slug, "--answers", stubs, "--progress-dir", root, tmp_path=tmp_path
    )
    code = [item for item in paper.paper(slug).items if item.kind == "code"]
    assert f"score: 0 of {total} items passed (0%); {len(code)} attempted" in out
    after = sheets.load_progress(slug, SEED, root)
    assert after.counts() == (total, total - len(code), total)
    assert after.revisit() == [(item.id, item.lesson) for item in code]
    assert all(after.items[item.id].attempts == 2 for item in code)


def test_a_malformed_sheet_stops_the_app_with_the_field_named(run_app, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"path": "learn-tpus", "seed": -3, "answers": {}}))
    out = _run(
        run_app,
        "assessment_learn_tpus",
        "--answers",
        bad,
        "--progress-dir",
        tmp_path / "ws",
        tmp_path=tmp_path,
    )
    assert re.search(r"STOPPED: answers file .*bad\.json: seed: ", out), out[-3000:]
    assert not (tmp_path / "ws").exists(), "nothing is written for a refused sheet"


def test_home_shows_progress_and_what_to_revisit(tmp_path):
    slug = "make-it-fast"
    chosen = paper.paper(slug)
    assert 'data-progress="make-it-fast">No attempt yet' in view.progress_html(slug, tmp_path)
    item = chosen.items[0]
    wrong = next(iter(item.wrong_answers(SEED).values()))
    report = paper.grade(slug, SEED, {item.id: wrong, chosen.items[1].id: None})
    progress = sheets.recorded(sheets.Progress(paper=slug, seed=SEED), report)
    sheets.save_progress(progress, tmp_path)
    shown = view.progress_html(slug, tmp_path)
    assert f"1 of {len(chosen.item_ids)} items attempted, 0 passed" in shown
    assert f'href="/?file={item.lesson}.py"' in shown


def test_the_two_apps_differ_only_in_their_path():
    """One app per path, the same cells (core/lab/assessment.py does their work): a change to
    one must be made to the other."""
    first, second = (curriculum.APPS_DIR / f"{a.slug}.py" for a in ASSESSMENTS)
    text = first.read_text(encoding="utf-8")
    for a, b in zip(ASSESSMENTS, ASSESSMENTS[1:], strict=False):
        text = text.replace(a.path_title, b.path_title)
    assert text == second.read_text(encoding="utf-8")
