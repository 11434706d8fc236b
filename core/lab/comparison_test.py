"""The TPU/CPU comparison of two lesson results documents, and the apps' section."""

import json

import pytest

from core import documents
from core.lab import comparison, results


def sample(lesson="vmap", backend="cpu", kind="cpu", devices=8, processes=1, **changes) -> dict:
    """A valid results.json document (LessonResults v1) with one check, number and table."""
    doc = {
        "schema": results.SCHEMA,
        "version": results.VERSION,
        "lesson": lesson,
        "flags": {"rows": 4, "seed": 0},
        "created_utc": "2026-12-01T10:00:00+00:00",
        "status": "passed",
        "stopped": [],
        "error": None,
        "receipt": {
            "backend": backend,
            "tpu_result": backend == "tpu",
            "device_kinds": [kind],
            "device_count": devices,
            "process_count": processes,
            "host": "h",
            "python": "3.11.7",
            "versions": {"jax": "0.10.2"},
            "compiled_for_tpu_topologies": [],
            "note": "measured on TPU chips" if backend == "tpu" else "not a TPU result",
        },
        "checks": [
            {
                "what": "vmap equals a loop",
                "passed": True,
                "errors": {"max": 1e-7},
                "tolerances": {"max": 1e-5},
                "facts": {"shapes match": True},
                "line": "PASS: ...",
            }
        ],
        "tables": [
            {
                "title": "timings",
                "columns": ["what", "ms"],
                "rows": [{"what": "loop", "ms": 2.0}, {"what": "vmap", "ms": 0.5}],
            }
        ],
        "numbers": [{"name": "speedup", "value": 4.0, "unit": "x"}],
        "charts": [],
    }
    doc.update(changes)
    return documents.validate(results.LessonResults, doc, "lesson results document")


def section(found: comparison.Comparison, title: str) -> comparison.Section:
    return next(s for s in found.sections if s.title == title)


TPU = dict(backend="tpu", kind="TPU v5 lite", devices=16, processes=2)


def test_each_side_is_headed_with_its_backend_and_device_kind():
    found = comparison.compare(sample(**TPU), sample())
    assert found.tpu_label == "TPU: tpu (TPU v5 lite x 16, 2 processes)"
    assert found.local_label == "CPU: cpu (cpu x 8)"
    assert section(found, "checks").columns == ("check", found.tpu_label, found.local_label)


def test_tables_numbers_and_checks_side_by_side():
    local = sample()
    local["tables"][0]["rows"][1]["ms"] = 0.25
    local["numbers"][0]["value"] = 8.0
    local["checks"][0]["errors"]["max"] = 3e-7
    found = comparison.compare(sample(**TPU), local)
    assert section(found, "table: timings").rows == (
        ("loop", "ms", "2", "2", "yes"),
        ("vmap", "ms", "0.5", "0.25", "no"),
    )
    assert section(found, "key numbers").rows == (("speedup", "x", "4", "8", "no"),)
    assert section(found, "checks").rows == (
        (
            "vmap equals a loop",
            "PASS max 1e-07 shapes match: yes",
            "PASS max 3e-07 shapes match: yes",
        ),
    )


def test_what_one_side_lacks_reads_missing_never_the_other_side():
    tpu = sample(**TPU)
    tpu["tables"].append({"title": "tpu only", "columns": ["k", "v"], "rows": [{"k": "a", "v": 1}]})
    tpu["numbers"].append({"name": "hbm", "value": 16, "unit": "GiB"})
    local = sample()
    local["tables"][0]["rows"].pop()  # one row fewer
    found = comparison.compare(tpu, local)
    assert section(found, "table: tpu only").rows == (("a", "v", "1", "missing", ""),)
    assert section(found, "table: timings").rows[1] == ("vmap", "ms", "0.5", "missing", "")
    assert ("hbm", "GiB", "16", "missing", "") in section(found, "key numbers").rows
    alone = comparison.compare(tpu, None)
    assert alone.local_label == "CPU: missing"
    assert section(alone, "checks").rows[0][2] == "missing"
    assert "| missing |" in comparison.markdown(alone)


def test_a_rehearsal_is_never_presented_as_a_tpu_measurement():
    found = comparison.compare(sample(processes=2), sample())
    assert any("not a TPU result" in note and "rehearsal" in note for note in found.notes)
    assert not any("rehearsal" in n for n in comparison.compare(sample(**TPU), None).notes)


def test_different_flags_are_noted_and_bad_pairs_refused():
    found = comparison.compare(sample(**TPU), sample(flags={"rows": 8, "seed": 0}))
    assert any("different flags" in note for note in found.notes)
    assert section(found, "flags").rows[0] == ("rows", "4", "8", "no")
    with pytest.raises(ValueError, match="different lessons"):
        comparison.compare(sample(lesson="jit"), sample())
    with pytest.raises(ValueError, match="nothing to compare"):
        comparison.compare(None, None)


def write(root, relative, doc):
    path = root / relative / "results.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    return path


def test_the_app_section_says_how_to_make_results_when_there_are_none(tmp_path):
    write(tmp_path, "local/2026-12-01/vmap", sample())  # a CPU bundle alone compares nothing
    empty = tmp_path / "no_records"  # not the checkout's records: they hold a TPU course run
    found = comparison.comparison_section("vmap", tmp_path, records_root=empty)
    assert found.comparison is None
    assert "course-run --name VM" in found.markdown and "--lessons vmap" in found.markdown
    assert found._mime_()[0] == "text/html"


def test_the_app_section_shows_the_newest_tpu_bundle_beside_the_newest_local_one(tmp_path):
    write(tmp_path, "tpu/vm-a/2026-11-30/vmap", sample(**TPU, created_utc="2026-11-30T10:00:00"))
    newest = write(tmp_path, "tpu/vm-b/2026-12-01/vmap", sample(**TPU, numbers=[]))
    (tmp_path / "tpu/vm-c/2026-12-02/vmap").mkdir(parents=True)
    (tmp_path / "tpu/vm-c/2026-12-02/vmap/results.json").write_text("{}")  # invalid: skipped
    local = write(tmp_path, "local/2026-12-01/vmap", sample())
    found = comparison.comparison_section("vmap", tmp_path)
    assert found.sources == (str(newest), str(local))
    assert section(found.comparison, "key numbers").rows == (("speedup", "x", "missing", "4", ""),)
    kind, html = found._mime_()
    assert kind == "text/html" and "<table>" in html and "TPU v5 lite" in html


def test_the_app_section_says_when_the_course_run_recorded_a_failure(tmp_path):
    bundle = write(tmp_path, "tpu/vm/2026-12-01/vmap", sample(**TPU))
    workers = [{"worker": 0, "status": "passed"}, {"worker": 1, "status": "error"}]
    record = {"lessons": [{"slug": "vmap", "status": "failed", "workers": workers}]}
    (bundle.parent.parent / "run.json").write_text(json.dumps(record))
    notes = comparison.comparison_section("vmap", tmp_path).comparison.notes
    assert (
        notes[0]
        == "the course run recorded this lesson as failed (worker 0: passed, worker 1: error)"
    )
    record["lessons"][0]["status"] = "passed"
    (bundle.parent.parent / "run.json").write_text(json.dumps(record))
    assert not any(
        "recorded" in n for n in comparison.comparison_section("vmap", tmp_path).comparison.notes
    )


def test_a_lesson_a_tpu_adds_nothing_to_says_why_instead_of_asking_for_a_run(tmp_path, monkeypatch):
    """Issue 36: a model registry and a slice plan still ended with "No TPU results yet"."""
    from core import curriculum

    monkeypatch.setenv("JAX_LAB_RECORDS_DIR", str(tmp_path))  # no TPU course record either

    lessons = {lesson.slug for lesson in curriculum.all_lessons()}
    assert curriculum.TPU_ADDS_NOTHING and set(curriculum.TPU_ADDS_NOTHING) <= lessons
    for slug, reason in curriculum.TPU_ADDS_NOTHING.items():
        section = comparison.comparison_section(slug, tmp_path)
        assert section.comparison is None and reason in section.markdown
        assert "No TPU results" not in section.markdown and "course-run" not in section.markdown
    other = next(iter(lessons - set(curriculum.TPU_ADDS_NOTHING)))
    assert "No TPU results" in comparison.comparison_section(other, tmp_path).markdown


def test_without_a_tpu_bundle_the_section_shows_the_kept_tpu_record(tmp_path, monkeypatch):
    from core.curriculum.tpu_record_test import lesson, write_record

    records_root, runs = tmp_path / "records", tmp_path / "runs"
    monkeypatch.setenv("JAX_LAB_RECORDS_DIR", str(records_root))
    entry = lesson("vmap", "passed")
    entry["checks"][0]["what"] = "vmap equals a loop"  # the same check as the local bundle's
    path = write_record(records_root, "2026-12-06", [entry])
    section = comparison.comparison_section("vmap", runs)  # no bundle on either side
    text = section.markdown
    assert section.sources == (str(path),)
    assert f"measured on TPU v5 lite, 2026-12-06 ({path})" in text
    assert "passed on TPU v5 lite (2026-12-06) in 21.5 s" in text
    assert entry["checks"][0]["line"] in text
    assert "PASS max error 2e-07 (tolerance 1e-05: float32 at HIGHEST on a TPU)" in text
    assert "| step time | ms | 1.25 | missing |" in text
    assert "this machine's check is the badge above" in text
    local = write(runs, "local/2026-12-07/vmap", sample())  # this machine's bundle beside it
    section = comparison.comparison_section("vmap", runs)
    assert section.sources == (str(path), str(local))
    checks = next(s for s in section.comparison.sections if s.title == "checks")
    assert checks.rows == (
        (
            "vmap equals a loop",
            "PASS max error 2e-07 (tolerance 1e-05: float32 at HIGHEST on a TPU)",
            "PASS max error 1e-07 (tolerance 1e-05)",
        ),
    )
    assert "No TPU results for jit yet" in comparison.comparison_section("jit", runs).markdown
    assert "course-record RUN_DIR" in comparison.comparison_section("jit", runs).markdown
    assert "<table>" in section._mime_()[1]


def test_a_tpu_bundle_still_comes_before_the_record(tmp_path, monkeypatch):
    from core.curriculum.tpu_record_test import lesson, write_record

    monkeypatch.setenv("JAX_LAB_RECORDS_DIR", str(tmp_path / "records"))
    write_record(tmp_path / "records", "2026-12-06", [lesson("vmap", "passed")])
    bundle = write(tmp_path / "runs", "tpu/vm/2026-12-01/vmap", sample(**TPU))
    assert comparison.comparison_section("vmap", tmp_path / "runs").sources == (str(bundle),)
