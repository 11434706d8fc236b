"""Each lesson's line from the newest TPU course record: the printed map, --json, the apps."""

import json
import pathlib
import subprocess
import sys

import pytest

from core import curriculum, documents
from core.curriculum import tpu_record


def lesson(slug: str, status: str, reason: str = "", finished: str = "10:00") -> dict:
    """A course record's lesson entry (documents.CourseLesson)."""
    line = f"{'PASS' if status == 'passed' else 'FAIL'}: {slug} vs NumPy float64. max error 2e-07"
    return {
        "slug": slug,
        "status": status,
        "reason": reason,
        "checks": [
            {
                "what": f"{slug} vs NumPy float64",
                "passed": status == "passed",
                "line": line + " (tolerance 1e-05: float32 at HIGHEST on a TPU)",
                "max_error": 2e-7,
                "tolerance": 1e-5,
                "tolerance_reason": "float32 at HIGHEST on a TPU",
            }
        ],
        "seconds": 21.5,
        "exit_code": 0,
        "finished_utc": f"2026-12-06T{finished}:00+00:00",
        "numbers": [{"name": "step time", "value": 1.25, "unit": "ms"}],
        "receipt": {
            "backend": "tpu",
            "tpu_result": True,
            "device_kinds": ["TPU v5 lite"],
            "device_count": 1,
            "process_count": 1,
        },
        "results_sha256": "0" * 64,
        "run": "local/2026-12-06@2026-12-06T09:00:00+00:00",
        "replaced": [],
    }


def write_record(root: pathlib.Path, date: str, lessons: list[dict]) -> pathlib.Path:
    """A tpu_course record, validated by the schema, as course-record writes it."""
    document = {
        "schema_version": 1,
        "name": "tpu_course",
        "date": date,
        "machine": {
            "label": "1 x TPU v5 lite; host CPU: unknown, 13 cores",
            "cpu": "unknown",
            "cores": 13,
            "platform": "tpu",
            "accelerator": {"kind": "TPU v5 lite", "count": 1},
        },
        "versions": {"jax": "0.10.2", "jaxlib": "0.10.2", "python": "3.11.7"},
        "command": "python -m tpu_scripts course-run --local --keep-going --phases 1-9",
        "load_average": None,
        "load": None,
        "figures": {"lessons": len(lessons)},
        "notes": "",
        "under_load": "",
        "course": {
            "lessons": lessons,
            "runs": [
                {
                    "id": "local/2026-12-06@2026-12-06T09:00:00+00:00",
                    "folder": "local/2026-12-06",
                    "created_utc": "2026-12-06T09:00:00+00:00",
                    "updated_utc": "2026-12-06T11:00:00+00:00",
                    "commands": ["python -m tpu_scripts course-run --local --phases 1-9"],
                    "lessons": [entry["slug"] for entry in lessons],
                }
            ],
        },
    }
    documents.validate(documents.BenchmarkRecord, document, "benchmark record")
    path = root / "tpu_course" / f"{date}_tpu-v5-lite-x1-unknown-13core-tpu.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2))
    return path


@pytest.fixture
def kept(tmp_path, monkeypatch) -> pathlib.Path:
    """Two records: jit failed on the 5th and passed on the 6th; vmap refused on the 5th."""
    monkeypatch.setenv("JAX_LAB_RECORDS_DIR", str(tmp_path))
    write_record(
        tmp_path,
        "2026-12-05",
        [lesson("jit", "failed", "FAIL: jit vs NumPy float64"), lesson("vmap", "refused", "no x")],
    )
    write_record(tmp_path, "2026-12-06", [lesson("jit", "passed")])
    return tmp_path


def test_each_lesson_reads_its_newest_record(kept):
    found, problems = tpu_record.entries()
    assert problems == []
    assert found["jit"].line() == "passed on TPU v5 lite (2026-12-06)"
    assert found["vmap"].line() == "refused on TPU v5 lite (2026-12-05): no x"
    assert found["jit"].record.endswith(
        "tpu_course/2026-12-06_tpu-v5-lite-x1-unknown-13core-tpu.json"
    )
    assert tpu_record.status_line("lax_scan", found) == "not yet run on a TPU"


def test_an_entry_says_when_its_app_has_changed_since_the_run(tmp_path, monkeypatch):
    """The entry keeps the sha256 of the app the run ran: the same app now reads as before;
    another one (an edited app) says the entry is of an earlier version; a record without it
    (written before it was kept) says neither."""
    import hashlib

    apps = tmp_path / "apps"
    apps.mkdir()
    for slug in ("jit", "vmap", "pytrees"):
        (apps / f"{slug}.py").write_text(f"# the {slug} app\n")
    ran = hashlib.sha256(b"# the jit app\n").hexdigest()
    edited = hashlib.sha256(b"# the vmap app, before an edit\n").hexdigest()
    records = tmp_path / "records"
    write_record(
        records,
        "2026-12-06",
        [
            {**lesson("jit", "passed"), "app_sha256": ran},
            {**lesson("vmap", "passed"), "app_sha256": edited},
            lesson("pytrees", "passed"),
        ],
    )
    found, problems = tpu_record.entries(records, apps_dir=apps)
    assert problems == []
    assert found["jit"].app_changed is False
    assert found["jit"].line() == "passed on TPU v5 lite (2026-12-06)"
    assert found["vmap"].app_changed is True
    assert found["vmap"].line().endswith(tpu_record.CHANGED_SINCE)
    assert found["vmap"].as_json()["app_changed"] is True
    assert found["pytrees"].app_changed is None
    assert found["pytrees"].line() == "passed on TPU v5 lite (2026-12-06)"


def test_a_damaged_record_is_named_and_left_out(kept):
    bad = kept / "tpu_course" / "2026-12-07_tpu-v5-lite-x1-unknown-13core-tpu.json"
    bad.write_text(json.dumps({"schema_version": 1, "name": "tpu_course"}))
    found, problems = tpu_record.entries()
    assert found["jit"].date == "2026-12-06"
    assert len(problems) == 1 and bad.name in problems[0] and "missing" in problems[0]


def test_the_map_and_its_json_show_each_lessons_tpu_line(kept):
    printed = curriculum.format_map()
    jit_app = next(i for i, line in enumerate(printed.splitlines()) if line.endswith("apps/jit.py"))
    assert printed.splitlines()[jit_app + 1].strip() == "TPU: passed on TPU v5 lite (2026-12-06)"
    assert "TPU: not yet run on a TPU" in printed
    assert "TPU lines (2 apps) from: " in printed
    lessons = {
        entry["app"]: entry for phase in curriculum.course_map() for entry in phase["lessons"]
    }
    assert lessons["apps/jit.py"]["tpu"]["status"] == "passed"
    assert lessons["apps/jit.py"]["tpu"]["date"] == "2026-12-06"
    assert lessons["apps/lax_scan.py"]["tpu"] is None


def test_without_a_record_the_map_says_how_to_make_one(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_LAB_RECORDS_DIR", str(tmp_path))
    printed = curriculum.format_map()
    assert "TPU: not yet run on a TPU" in printed and "course-record RUN_DIR" in printed
    assert "passed on TPU" not in printed


def test_importing_the_course_map_reads_no_record_and_imports_no_schema_library():
    code = "import sys, core.curriculum; print(sorted({'pydantic', 'jax'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=curriculum.REPO_ROOT,
    )
    assert done.stdout.strip() == "[]"
