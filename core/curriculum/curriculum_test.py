"""The course map against the seeds it is copied from, and against apps/ on disk."""

import json
import pathlib
import re
import subprocess
import sys

import pytest

from core import curriculum
from core.curriculum import course, tpu_record

SEEDS = curriculum.REPO_ROOT / "docs" / "seeds"


def parse_seed(path: pathlib.Path) -> dict:
    """Phases (in order) with their lessons, and capstone bullets, read from a seed file."""
    phases: list[tuple[str, list[str]]] = []
    bullets_after_phases: list[str] = []
    in_phases = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() == "Course phases and lessons":
            in_phases = True
            continue
        if not in_phases:
            continue
        if match := re.match(r"^\s*\d+\. (.+)$", line):
            phases.append((match.group(1).strip(), []))
        elif match := re.match(r"^\s*• (.+)$", line):
            if line.startswith("   ") and phases and not bullets_after_phases:
                phases[-1][1].append(match.group(1).strip())
            else:
                bullets_after_phases.append(match.group(1).strip())
    return {"phases": phases, "capstone_points": bullets_after_phases}


LEARN = parse_seed(SEEDS / "learn-tpus-and-google-cloud.txt")
FAST = parse_seed(SEEDS / "make-it-fast-make-it-scale.txt")


def expected_phases() -> list[tuple[str, list[str]]]:
    pallas = next(p for p in FAST["phases"] if p[0] == "Pallas kernels")
    phases = list(LEARN["phases"])
    phases.insert([t for t, _ in phases].index("Distributed training") + 1, pallas)
    return phases


def test_seed_parser_reads_what_the_issue_promises():
    assert len(LEARN["phases"]) == 18 and len(FAST["phases"]) == 10


def test_19_phases_and_91_lessons_verbatim_from_the_seeds():
    expected = expected_phases()
    actual = [(p.title, [lesson.title for lesson in p.lessons]) for p in curriculum.PHASES]
    assert actual == expected
    assert len(curriculum.PHASES) == 19
    assert len(curriculum.all_lessons()) == 91


def test_capstone_points_verbatim():
    transformer, kernel = curriculum.CAPSTONES
    assert list(transformer.points) == LEARN["capstone_points"]
    assert list(kernel.points) == FAST["capstone_points"]


def test_make_it_fast_path_matches_its_seed():
    fast_path = curriculum.LEARNING_PATHS[1]
    assert list(fast_path.phase_titles) == [title for title, _ in FAST["phases"]]
    learn_path = curriculum.LEARNING_PATHS[0]
    assert list(learn_path.phase_titles) == [title for title, _ in LEARN["phases"]]


def test_slugs_are_unique_module_names():
    slugs = [lesson.slug for lesson in curriculum.all_lessons()]
    slugs += [c.slug for c in curriculum.CAPSTONES] + [curriculum.HOME_APP]
    assert len(slugs) == len(set(slugs))
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", slug) for slug in slugs)


def test_every_app_on_disk_is_named_by_the_map():
    assert curriculum.unnamed_apps() == [], "add these apps to core/curriculum/course.py"


def test_status_agrees_with_the_files():
    for phase in curriculum.course_map():
        for lesson in phase["lessons"]:
            exists = (curriculum.REPO_ROOT / lesson["app"]).is_file()
            assert lesson["status"] == ("present" if exists else "missing"), lesson


def test_stray_and_missing_apps_are_detected(tmp_path):
    (tmp_path / "attention.py").write_text("# a named lesson\n")
    (tmp_path / "not_in_the_map.py").write_text("# a stray app\n")
    assert curriculum.unnamed_apps(tmp_path) == ["not_in_the_map.py"]
    statuses = {
        lesson["app"]: lesson["status"]
        for phase in curriculum.course_map(tmp_path)
        for lesson in phase["lessons"]
    }
    assert statuses["apps/attention.py"] == "present"
    assert list(statuses.values()).count("present") == 1
    rows = curriculum.summary_rows(tmp_path)
    assert sum(present for _, present, _ in rows) == 1 and sum(t for _, _, t in rows) == 91


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "core.curriculum", *args],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        timeout=60,
    )


def test_cli_json_schema():
    result = run_cli("--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [entry["phase"] for entry in data] == [p.title for p in curriculum.PHASES]
    for entry in data:
        assert set(entry) == {"phase", "lessons"}
        for lesson in entry["lessons"]:
            assert set(lesson) == {"title", "app", "status", "tpu"}
            assert lesson["tpu"] is None or lesson["tpu"]["status"] in tpu_record.STATUS_WORDS
            assert re.fullmatch(r"apps/[a-z0-9_]+\.py", lesson["app"])
            assert lesson["status"] in ("present", "missing")


def test_cli_summary_counts_every_lesson():
    result = run_cli("--summary")
    assert result.returncode == 0
    present = sum(p for _, p, _ in curriculum.summary_rows())
    assert f"{present} of 91 lessons present, {91 - present} missing" in result.stdout
    assert all(p.title in result.stdout for p in curriculum.PHASES)


def test_cli_map_marks_each_lesson():
    result = run_cli()
    assert result.returncode == 0
    marks = result.stdout.count("[x]") + result.stdout.count("[ ]")
    assert marks == 91 + len(curriculum.CAPSTONES) + len(curriculum.ASSESSMENTS)


def test_cli_map_shows_the_assessments_and_guides():
    out = run_cli().stdout
    for assessment in curriculum.ASSESSMENTS:
        assert assessment.app in out and f"--path {assessment.paper} " in out
    for capstone in curriculum.CAPSTONES:
        assert f"portfolio guide: docs/portfolio/{capstone.slug}.md" in out


def test_every_path_has_one_assessment_and_a_capstone_guide():
    paths = {p.title for p in curriculum.LEARNING_PATHS}
    assert {a.path_title for a in curriculum.ASSESSMENTS} == paths
    capstones = {c.slug for c in curriculum.CAPSTONES}
    for path in curriculum.LEARNING_PATHS:
        assessment = curriculum.assessment_for(path.title)
        assert assessment.slug.startswith(curriculum.ASSESSMENT_PREFIX)
        assert assessment.capstone in capstones
    with pytest.raises(ValueError, match="no assessment"):
        curriculum.assessment_for("Learn Fortran")
    with pytest.raises(ValueError, match="no capstone"):
        curriculum.portfolio_guide("capstone_missing")


@pytest.mark.parametrize("bad", [["--bogus"], ["--json", "--summary"], ["extra"]])
def test_cli_bad_arguments_print_usage_and_exit_2(bad):
    result = run_cli(*bad)
    assert result.returncode == 2
    assert "usage:" in result.stderr


def test_apps_readme_is_generated_from_the_map_and_current():
    written = curriculum.APPS_README.read_text(encoding="utf-8")
    assert written == curriculum.apps_readme(), (
        "apps/README.md is stale: run `python -m core.curriculum --write-readme`"
    )
    for phase in curriculum.PHASES:
        assert f". {phase.title}\n" in written
    present = [p.stem for p in curriculum.APPS_DIR.glob("*.py") if p.stem != curriculum.HOME_APP]
    for slug in present:
        assert f"[`{slug}.py`]({slug}.py)" in written, slug


def test_apps_readme_marks_a_missing_app_planned(tmp_path):
    (tmp_path / "attention.py").write_text("")
    text = curriculum.apps_readme(tmp_path)
    assert "[`attention.py`](attention.py) | built |" in text
    assert "`jit.py` | planned |" in text


def test_every_phase_has_a_lesson_package_and_names_follow_the_rules():
    packages = [phase.package for phase in curriculum.PHASES]
    assert len(set(packages)) == len(packages) == len(curriculum.PHASE_PACKAGES)
    assert all(package.isidentifier() for package in packages)
    assert curriculum.lesson_module("attention") == "core.lessons.transformers.attention"
    with pytest.raises(ValueError, match="no lesson 'nope'"):
        curriculum.phase_of("nope")
    for capstone in curriculum.CAPSTONES:
        assert capstone.slug.startswith(curriculum.CAPSTONE_PREFIX), capstone.slug
    for track in curriculum.TRACKS:
        assert all(s.startswith(curriculum.TRACK_PREFIXES[track.title]) for s in track.slugs)
    lesson_slugs = {lesson.slug for lesson in curriculum.all_lessons()}
    prefixes = (curriculum.CAPSTONE_PREFIX, *curriculum.TRACK_PREFIXES.values())
    assert not any(slug.startswith(prefixes) for slug in lesson_slugs)


def test_phase_line_numbers_phases_as_the_map_and_readme_do():
    # The post-training lessons are phase 14 in the map; their apps once said "Phase 13".
    assert curriculum.phase_line("dpo") == (
        "*Phase 14 · Post-training: SFT, LoRA, reward models and RLHF*"
    )
    readme = curriculum.apps_readme()
    for lesson in curriculum.all_lessons():
        number = curriculum.phase_number(lesson.slug)
        title = curriculum.phase_of(lesson.slug).title
        assert f"## {number}. {title}\n" in readme, lesson.slug
        assert curriculum.phase_line(lesson.slug) == f"*Phase {number} · {title}*"
    with pytest.raises(ValueError, match="no lesson 'nope'"):
        curriculum.phase_line("nope")


def test_every_lesson_app_derives_its_phase_line_from_the_map():
    """A header's phase is computed (lab.phase_line), never typed: typed ones drifted."""
    typed = re.compile(r"\*Phase \d+ ·")
    for lesson in curriculum.all_lessons():
        path = curriculum.app_path(lesson.slug)
        if not path.exists():
            continue
        source = path.read_text(encoding="utf-8")
        assert f'{{lab.phase_line("{lesson.slug}")}}' in source, lesson.slug
        assert not typed.search(source), f"{lesson.slug}: a hand-typed phase number"


def test_every_track_app_mirrors_a_lesson_of_the_map_once():
    lesson_slugs = {lesson.slug for lesson in curriculum.all_lessons()}
    for track in curriculum.TRACKS:
        paired = [slug for slug, _lesson in track.mirrors]
        assert len(set(paired)) == len(paired) and set(paired) <= set(track.slugs)
        assert {lesson for _slug, lesson in track.mirrors} <= lesson_slugs
    keras = curriculum.track_of("keras_cnn_digits")
    assert keras.mirrored_lesson("keras_cnn_digits") == "cnn_digits"
    line = curriculum.track_line("keras_cnn_digits")
    number = curriculum.phase_number("cnn_digits")
    assert line.startswith("*Keras multi-backend track · mirrors Phase ")
    assert f"Phase {number}: " in line and "(apps/cnn_digits.py)*" in line
    with pytest.raises(ValueError, match="no track app 'tiny_mlp'"):
        curriculum.track_of("tiny_mlp")


def test_the_readme_lists_each_track_app_beside_the_lesson_it_mirrors(tmp_path):
    (tmp_path / "keras_cnn_digits.py").write_text("")
    text = curriculum.apps_readme(tmp_path)
    assert "## Keras multi-backend track" in text
    assert "(`cnn_digits.py`) | [`keras_cnn_digits.py`](keras_cnn_digits.py) | built |" in text
    assert "(`tiny_mlp.py`) | `keras_tiny_mlp.py` | planned |" in text
    ((track, twin),) = curriculum.track_twins("cnn_digits")
    assert (track.title, twin) == ("Keras multi-backend track", "keras_cnn_digits")
    assert curriculum.track_twins("attention") == []


def test_a_missing_guide_is_named_not_raised(monkeypatch, tmp_path):
    monkeypatch.setattr(course, "PORTFOLIO_DIR", tmp_path)
    capstone = curriculum.CAPSTONES[0]
    assert capstone.guide == tmp_path / f"{capstone.slug}.md"
    text = curriculum.portfolio_guide(capstone.slug)
    assert f"docs/portfolio/{capstone.slug}.md" in text and "does not include docs/" in text
