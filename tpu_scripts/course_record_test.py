"""course-record: run folders -> one validated tpu_course record per machine and date.

Every entry is checked against its bundle read here with json alone (never through the
writer's functions). The bundles come from a real ``course-run --local`` of two small lessons
on this CPU; a TPU host's bundle differs only in its receipt, so ``on_chip`` rewrites the
receipts as a v5e chip writes them (tests never need a TPU).
"""

import copy
import hashlib
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from core import documents
from core.curriculum import REPO_ROOT
from core.lab import results
from core.perf import records
from tpu_scripts import course_record, run_record
from tpu_scripts.__main__ import main

LESSONS = ("workspace", "arrays_devices")
CHIP = {"backend": "tpu", "tpu_result": True, "device_kinds": ["TPU v5 lite"], "device_count": 1}


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> pathlib.Path:
    """A real course run of two small lessons on this CPU (run.json and both bundles)."""
    root = tmp_path_factory.mktemp("runs")
    argv = [sys.executable, "-m", "tpu_scripts", "course-run", "--local", "--keep-going"]
    argv += ["--lessons", ",".join(LESSONS), "--runs-root", str(root), "--date", "2026-12-06"]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return root / "local" / "2026-12-06"


def on_chip(run: pathlib.Path, target: pathlib.Path, **receipt) -> pathlib.Path:
    """A copy of ``run`` whose bundles carry a TPU receipt (``receipt`` overrides fields)."""
    shutil.copytree(run, target, ignore=shutil.ignore_patterns("staged", ".work"))
    for slug in LESSONS:
        path = target / slug / "results.json"
        doc = json.loads(path.read_text())
        doc["receipt"].update(CHIP, note="measured on TPU chips", **receipt)
        path.write_text(json.dumps(doc, indent=2))
    # This shared machine's load is not under test here (test_a_busy_tpu_host_... is): the
    # measured call load is kept, with the other processes' share set to none.
    run_json = json.loads((target / "run.json").read_text())
    assert run_json["calls"][-1]["load"]["seconds"] > 0  # course-run measured it
    run_json["calls"][-1]["load"]["other_processes_cores"] = 0.0
    (target / "run.json").write_text(json.dumps(run_json, indent=2))
    return target


@pytest.fixture
def out(tmp_path, monkeypatch) -> pathlib.Path:
    """The records root (never the repo's)."""
    root = tmp_path / "records"
    monkeypatch.setenv(records.ROOT_ENV, str(root))
    return root


def record_files(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted((root / "tpu_course").glob("*.json")) if root.exists() else []


def worst(check: dict) -> tuple:
    """The bundle check's error nearest its bound (NaN first), computed here."""
    ratios = []
    for name, error in check["errors"].items():
        bound = check["tolerances"][name]
        ratio = float("inf") if error is None else error / max(bound, 1e-300)
        ratios.append((ratio, -len(ratios), error, bound))
    _, _, error, bound = max(ratios)
    return error, bound


def test_each_entry_agrees_with_its_bundle_and_run(cpu_run, tmp_path, out, capsys):
    run = on_chip(cpu_run, tmp_path / "local" / "2026-12-06")
    assert main(["course-record", str(run)]) == 0
    [path] = record_files(out)
    assert path.name.startswith("2026-12-06_tpu-v5-lite-x1-")
    record = json.loads(path.read_text())
    run_json = json.loads((run / "run.json").read_text())
    [call] = run_json["calls"]  # course-run kept its host and load
    assert record["machine"]["cpu"] == call["cpu"] and record["machine"]["cores"] == call["cores"]
    assert record["machine"]["accelerator"] == {"kind": "TPU v5 lite", "count": 1}
    assert record["machine"]["platform"] == "tpu" and "TPU v5 lite" in record["machine"]["label"]
    assert record["load"] == call["load"] and call["load"]["seconds"] > 0
    entries = {entry["slug"]: entry for entry in record["course"]["lessons"]}
    assert sorted(entries) == sorted(LESSONS)
    for slug in LESSONS:
        raw = (run / slug / "results.json").read_bytes()
        bundle = json.loads(raw)
        entry = entries[slug]
        ran = next(lesson for lesson in run_json["lessons"] if lesson["slug"] == slug)
        assert entry["results_sha256"] == hashlib.sha256(raw).hexdigest()
        # the app the run exported and ran: course-run kept its sha256, the record copies it
        app = hashlib.sha256((REPO_ROOT / "apps" / f"{slug}.py").read_bytes()).hexdigest()
        assert entry["app_sha256"] == ran["app_sha256"] == app
        assert entry["status"] == bundle["status"] == "passed" and entry["reason"] == ""
        assert entry["seconds"] == ran["seconds"] and entry["exit_code"] == 0
        for field in ("backend", "tpu_result", "device_kinds", "device_count", "process_count"):
            assert entry["receipt"][field] == bundle["receipt"][field]
        assert record["versions"] == {
            **bundle["receipt"]["versions"],
            "python": bundle["receipt"]["python"],
        }
        assert entry["numbers"] == bundle["numbers"]
        assert [c["line"] for c in entry["checks"]] == [c["line"] for c in bundle["checks"]]
        for kept, check in zip(entry["checks"], bundle["checks"], strict=True):
            assert (kept["max_error"], kept["tolerance"]) == worst(check)
            assert kept["passed"] == check["passed"] and kept["what"] == check["what"]
    assert record["figures"]["passed"] == 2 and record["figures"]["device_kind"] == "TPU v5 lite"
    assert records.load(path).course.lessons[0].slug == LESSONS[0]  # the schema reads it
    assert "| workspace | passed |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("receipt", "said"),
    [
        ({"backend": "cpu", "tpu_result": False, "device_kinds": ["cpu"]}, "not a TPU result"),
        ({"backend": "cpu", "tpu_result": True}, "claims a TPU result on backend 'cpu'"),
        ({"tpu_result": False}, "tpu_result false"),
        ({"device_kinds": ["cpu"]}, "not TPU devices"),
    ],
)
def test_a_receipt_that_contradicts_a_tpu_record_is_refused(
    cpu_run, tmp_path, out, capsys, receipt, said
):
    run = on_chip(cpu_run, tmp_path / "local" / "2026-12-06")
    path = run / "arrays_devices" / "results.json"
    doc = json.loads(path.read_text())
    doc["receipt"].update(receipt)
    path.write_text(json.dumps(doc))
    assert main(["course-record", str(run)]) == 2
    err = capsys.readouterr().err
    assert said in err and "arrays_devices" in err and "Nothing was written" in err
    assert record_files(out) == []


def test_the_cpu_run_itself_is_refused(cpu_run, out, capsys):
    assert main(["course-record", str(cpu_run)]) == 2
    assert "backend 'cpu'" in capsys.readouterr().err and record_files(out) == []


def test_bundles_of_two_chips_or_versions_cannot_share_a_record(cpu_run, tmp_path, out, capsys):
    run = on_chip(cpu_run, tmp_path / "a" / "2026-12-06")
    path = run / "workspace" / "results.json"
    doc = json.loads(path.read_text())
    doc["receipt"]["device_kinds"] = ["TPU v6 lite"]
    path.write_text(json.dumps(doc))
    assert main(["course-record", str(run)]) == 2
    assert "disagree on the devices" in capsys.readouterr().err
    doc["receipt"]["device_kinds"] = ["TPU v5 lite"]
    doc["receipt"]["versions"]["jax"] = "0.9.0"
    path.write_text(json.dumps(doc))
    assert main(["course-record", str(run)]) == 2
    assert "disagree on the versions" in capsys.readouterr().err and record_files(out) == []


def test_a_bundle_that_fails_validation_or_is_missing_is_refused(cpu_run, tmp_path, out, capsys):
    run = on_chip(cpu_run, tmp_path / "local" / "2026-12-06")
    path = run / "workspace" / "results.json"
    doc = json.loads(path.read_text())
    del doc["receipt"]
    path.write_text(json.dumps(doc))
    assert main(["course-record", str(run)]) == 2
    assert "'receipt' is missing" in capsys.readouterr().err
    path.unlink()  # run.json says passed: the folder did not come back whole
    assert main(["course-record", str(run)]) == 2
    assert "was the run folder brought back whole" in capsys.readouterr().err
    assert record_files(out) == []


def bundle(slug: str, status: str, **changes) -> dict:
    """A results.json document of ``slug`` on a v5e chip, validated."""
    check = {
        "what": f"{slug} vs NumPy float64",
        "passed": status != "failed",
        "errors": {"y": 3.4e-3 if status == "failed" else 2e-7, "sum": 1e-7},
        "tolerances": {"y": 1e-5, "sum": 1e-5},
        "facts": {},
        "line": "",
    }
    check["line"] = (
        f"{'FAIL' if status == 'failed' else 'PASS'}: {check['what']}. max error "
        f"{max(check['errors'].values()):.3g} (tolerance 1e-05: float32 at HIGHEST on a TPU "
        "(6 bf16 passes))"
    )
    doc = {
        "schema": results.SCHEMA,
        "version": 1,
        "lesson": slug,
        "flags": {},
        "created_utc": "2026-12-06T10:00:00+00:00",
        "status": status,
        "stopped": ["this host has no loopback socket"] if status == "stopped" else [],
        "error": None,
        "receipt": {
            **CHIP,
            "process_count": 1,
            "host": "chip",
            "python": "3.11.7",
            "versions": {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1"},
            "compiled_for_tpu_topologies": [],
            "note": "measured on TPU chips",
        },
        "checks": [] if status == "stopped" else [check],
        "tables": [],
        "numbers": [{"name": "step time", "value": 1.25, "unit": "ms"}],
        "charts": [],
        **changes,
    }
    return documents.validate(results.LessonResults, doc, "lesson results document")


def write_run(folder: pathlib.Path, lessons: list[tuple], load: dict | None = None):
    """A run folder: run.json through run_record's own writer, and the given bundles.
    ``lessons``: (slug, run.json status, exit code, finished, output tail, bundle or None)."""
    record = run_record.merge_record(None, [s[0] for s in lessons], "local", ["python", "-m", "x"])
    record["calls"][-1]["load"] = load
    for entry, (slug, status, code, finished, tail, doc) in zip(
        record["lessons"], lessons, strict=True
    ):
        entry.update(status=status, exit_code=code, seconds=20.5, finished_utc=finished)
        entry.update(output_tail=tail, results=f"{slug}/results.json" if doc else None)
        entry["workers"] = [{"worker": 0, "status": status, "results": entry["results"]}]
        if doc is not None:
            (folder / slug).mkdir(parents=True)
            (folder / slug / "results.json").write_text(json.dumps(doc))
    record["status"] = "failed"
    run_record.save_record(folder / "run.json", record)
    return folder


def test_every_outcome_gets_its_status_and_reason(tmp_path, out):
    day = "2026-12-06T1{}:00:00+00:00".format
    run = write_run(
        tmp_path / "local" / "2026-12-06",
        [
            ("virtual_devices", "failed", 1, day(1), "FAIL", bundle("virtual_devices", "failed")),
            ("pod_slices", "stopped", 0, day(2), "STOPPED: ...", bundle("pod_slices", "stopped")),
            ("least_squares", "error", 1, day(3), "Traceback\nXlaRuntimeError: f64", None),
            ("observability", "error", None, day(4), "(timed out after 600 s)", None),
            ("jit", "passed", 0, day(5), "PASS: ...", bundle("jit", "passed")),
        ],
    )  # fmt: skip
    [path] = course_record.record_runs([run])
    entries = {e["slug"]: e for e in json.loads(path.read_text())["course"]["lessons"]}
    failed = entries["virtual_devices"]
    assert failed["status"] == "failed" and failed["reason"].startswith("FAIL: virtual_devices")
    assert failed["checks"][0]["max_error"] == 3.4e-3 and failed["checks"][0]["tolerance"] == 1e-5
    assert failed["checks"][0]["tolerance_reason"] == "float32 at HIGHEST on a TPU (6 bf16 passes)"
    assert entries["pod_slices"]["status"] == "refused"
    assert entries["pod_slices"]["reason"] == "this host has no loopback socket"
    crashed = entries["least_squares"]
    assert crashed["status"] == "error" and crashed["reason"].startswith("XlaRuntimeError")
    assert crashed["receipt"] is None and crashed["results_sha256"] is None
    assert entries["observability"]["status"] == "timed_out"
    assert entries["observability"]["reason"] == "(timed out after 600 s)"
    assert entries["jit"]["numbers"] == [{"name": "step time", "value": 1.25, "unit": "ms"}]
    record = json.loads(path.read_text())
    assert record["machine"]["cores"] >= 1 and record["load"] is None
    assert "no load was measured" in record["notes"]


def test_runs_of_one_date_merge_and_the_later_run_wins(tmp_path, out, capsys):
    first = write_run(
        tmp_path / "a" / "2026-12-06",
        [("jit", "failed", 1, "2026-12-06T10:00:00+00:00", "", bundle("jit", "failed"))],
    )
    second = write_run(
        tmp_path / "b" / "2026-12-06",
        [
            ("jit", "passed", 0, "2026-12-06T12:00:00+00:00", "", bundle("jit", "passed")),
            ("vmap", "passed", 0, "2026-12-06T12:01:00+00:00", "", bundle("vmap", "passed")),
        ],
    )
    other_day = write_run(
        tmp_path / "c" / "2026-12-07",
        [("lax_scan", "passed", 0, "2026-12-07T09:00:00+00:00", "", bundle("lax_scan", "passed"))],
    )
    assert main(["course-record", str(second), str(other_day), str(first)]) == 0
    said = capsys.readouterr().out
    assert "jit: run 2 times; the later run wins: b/2026-12-06@" in said
    day_one, day_two = record_files(out)
    kept = json.loads(day_one.read_text())["course"]
    entries = {e["slug"]: e for e in kept["lessons"]}
    assert entries["jit"]["status"] == "passed" and entries["jit"]["run"].startswith("b/")
    assert entries["jit"]["replaced"][0].startswith("a/2026-12-06@")
    assert "(failed, finished 2026-12-06T10:00:00+00:00)" in entries["jit"]["replaced"][0]
    assert sorted(entries) == ["jit", "vmap"] and len(kept["runs"]) == 2
    assert [e["slug"] for e in json.loads(day_two.read_text())["course"]["lessons"]] == ["lax_scan"]


def test_a_later_call_merges_into_the_kept_record(tmp_path, out):
    first = write_run(
        tmp_path / "a" / "2026-12-06",
        [("jit", "passed", 0, "2026-12-06T10:00:00+00:00", "", bundle("jit", "passed"))],
    )
    second = write_run(
        tmp_path / "b" / "2026-12-06",
        [("vmap", "failed", 1, "2026-12-06T11:00:00+00:00", "", bundle("vmap", "failed"))],
    )
    [path] = course_record.record_runs([first])
    assert course_record.record_runs([second]) == [path]
    kept = json.loads(path.read_text())
    assert sorted(e["slug"] for e in kept["course"]["lessons"]) == ["jit", "vmap"]
    assert kept["figures"]["passed"] == 1 and kept["figures"]["failed"] == 1


def test_a_busy_tpu_host_is_refused_by_its_own_load(tmp_path, out, capsys):
    busy = {
        "seconds": 600.0,
        "cpus": 13,
        "own_cores": 1.0,
        "other_processes_cores": 6.0,
        "limit_cores": 1.625,
        "load_average_start": [6.0, 6.0, 6.0],
        "load_average_end": [6.0, 6.0, 6.0],
    }
    run = write_run(
        tmp_path / "a" / "2026-12-06",
        [("jit", "passed", 0, "2026-12-06T10:00:00+00:00", "", bundle("jit", "passed"))],
        load=busy,
    )
    assert main(["course-record", str(run)]) == 2
    assert "6.00 of 13 cores" in capsys.readouterr().err and record_files(out) == []
    quiet = dict(busy, other_processes_cores=0.2)
    run = write_run(
        tmp_path / "b" / "2026-12-06",
        [("jit", "passed", 0, "2026-12-06T10:00:00+00:00", "", bundle("jit", "passed"))],
        load=quiet,
    )
    [path] = course_record.record_runs([run])  # this machine's own load plays no part
    assert json.loads(path.read_text())["load"] == quiet


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1"
 failures="3" skipped="5" tests="394" time="496.120"><testcase classname="a" name="b"/>
</testsuite></testsuites>"""


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("... lines ...\n=== 3 failed, 385 passed, 5 skipped, 1 error in 496.12s (0:08:16) ===\n",
         (385, 3, 5, 1, 496.12)),
        (JUNIT, (385, 3, 5, 1, 496.12)),
        ("======= 12 passed in 3.01s =======", (12, 0, 0, 0, 3.01)),
    ],
)  # fmt: skip
def test_pytest_counts_come_from_its_summary_line_or_junit_xml(tmp_path, out, text, counts):
    summary = tmp_path / "pytest.txt"
    summary.write_text(text)
    run = write_run(
        tmp_path / "a" / "2026-12-06",
        [("jit", "passed", 0, "2026-12-06T10:00:00+00:00", "", bundle("jit", "passed"))],
    )
    command = "JAX_PLATFORMS=tpu python -m pytest -p no:cacheprovider core/"
    argv = ["course-record", str(run), "--pytest-summary", str(summary)]
    assert main([*argv, "--pytest-command", command]) == 0
    kept = json.loads(record_files(out)[0].read_text())
    pytest_part = kept["course"]["pytest"]
    found = tuple(pytest_part[k] for k in ("passed", "failed", "skipped", "errors", "seconds"))
    assert found == counts and pytest_part["command"] == command
    assert kept["figures"]["pytest_failed"] == counts[1]


def test_a_pytest_run_continued_over_calls_adds_its_parts(tmp_path, out, capsys):
    first, second = tmp_path / "first.xml", tmp_path / "second.txt"
    first.write_text(JUNIT)  # 385 passed, 3 failed, 5 skipped, 1 error in 496.12 s
    second.write_text("=== 2 failed, 40 passed, 7 skipped, 5 deselected in 100.00s ===\n")
    run = write_run(
        tmp_path / "a" / "2026-12-06",
        [("jit", "passed", 0, "2026-12-06T10:00:00+00:00", "", bundle("jit", "passed"))],
    )
    argv = ["course-record", str(run), "--pytest-summary", str(first)]
    argv += ["--pytest-summary", str(second), "--pytest-command", "pytest core/lm"]
    assert main(argv) == 2  # two parts, one command: which ran what is unknown
    assert "one per summary (2 summaries, 1 commands)" in capsys.readouterr().err
    assert record_files(out) == []
    assert main([*argv, "--pytest-command", "pytest core/nn --after a.xml"]) == 0
    part = json.loads(record_files(out)[0].read_text())["course"]["pytest"]
    found = tuple(part[k] for k in ("passed", "failed", "skipped", "errors", "seconds"))
    assert found == (425, 5, 12, 1, 596.12)
    assert part["command"] == "pytest core/lm ; pytest core/nn --after a.xml"
    assert part["summary"].endswith("over 2 runs")


def test_pytest_input_that_says_nothing_is_refused(tmp_path, out, capsys):
    summary = tmp_path / "pytest.txt"
    summary.write_text("collected 0 items\n")
    run = write_run(
        tmp_path / "a" / "2026-12-06",
        [("jit", "passed", 0, "2026-12-06T10:00:00+00:00", "", bundle("jit", "passed"))],
    )
    argv = ["course-record", str(run), "--pytest-summary", str(summary)]
    assert main([*argv, "--pytest-command", "pytest core/"]) == 2
    assert "no pytest summary line" in capsys.readouterr().err
    summary.write_text("=== 1 passed in 1.0s ===")
    assert main(argv) == 2
    assert "needs --pytest-command" in capsys.readouterr().err and record_files(out) == []


def test_the_record_schema_is_strict(tmp_path, out):
    run = write_run(
        tmp_path / "a" / "2026-12-06",
        [("jit", "passed", 0, "2026-12-06T10:00:00+00:00", "", bundle("jit", "passed"))],
    )
    [path] = course_record.record_runs([run])
    good = json.loads(path.read_text())
    for damage, field in [
        (lambda d: d["course"]["lessons"][0].update(status="ok"), "course.lessons[0].status"),
        (lambda d: d["course"]["lessons"][0].update(typo=1), "course.lessons[0].typo"),
        (lambda d: d["course"]["lessons"][0].update(results_sha256="x"), "results_sha256"),
        (lambda d: d["machine"]["accelerator"].update(count=0), "machine.accelerator.count"),
        (lambda d: d["course"].update(lessons=[]), "course.lessons"),
    ]:
        document = copy.deepcopy(good)
        damage(document)
        with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
            documents.validate(documents.BenchmarkRecord, document, "benchmark record")
