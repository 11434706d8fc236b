"""The local half: unknown flags named, the previous lesson found, processes run together with
timeouts reported, a real app exported and run (and a non-app refused), and an export reused
only for the same source."""

import pathlib
import sys

import pytest

from core import curriculum
from core.tpu import local_run

REPO = curriculum.REPO_ROOT


def test_unknown_flags():
    help_text = "usage: x [-h] [--rows ROWS] [--seed SEED]\n  --rows ROWS  rows"
    assert local_run.unknown_flags(["--rows", "4", "--seed=2"], help_text) == []
    assert local_run.unknown_flags(["--row", "4", "--cols", "3", "-v"], help_text) == [
        "--row",
        "--cols",
    ]


def test_previous_lesson_app_prefers_virtual_devices(tmp_path):
    (tmp_path / "arrays_devices.py").write_text("")
    assert local_run.previous_lesson_app(tmp_path).name == "arrays_devices.py"
    (tmp_path / "virtual_devices.py").write_text("")
    assert local_run.previous_lesson_app(tmp_path).name == "virtual_devices.py"
    with pytest.raises(FileNotFoundError, match="none of"):
        local_run.previous_lesson_app(tmp_path / "missing")


def test_run_processes_runs_together_and_reports_timeouts(tmp_path):
    ok, failing = local_run.run_processes(
        [
            [sys.executable, "-c", "print('PASS: fine')"],
            [sys.executable, "-c", "import sys; print('FAIL: no'); sys.exit(3)"],
        ],
        tmp_path,
    )
    assert ok.ok and ok.printed_pass and ok.stdout == "PASS: fine\n"
    assert failing.returncode == 3 and not failing.printed_pass
    # Killed before it finished, observed by what the child printed (not by how long the call
    # took; a loaded machine may not even have started it within the 1 s): no "finished".
    child = "import time; time.sleep(30); print('finished')"
    (slow,) = local_run.run_processes([[sys.executable, "-c", child]], tmp_path, timeout_s=1)
    assert slow.returncode is None and "timed out" in slow.stderr
    assert "finished" not in slow.stdout


def test_export_and_run_a_real_app(monkeypatch):
    """The whole local round trip on the smallest lesson: export, --help, a run that prints PASS;
    then the same source with other flags starts only the real run, on the export kept."""
    app = REPO / "apps" / "arrays_devices.py"
    result = local_run.export_and_run(app, REPO, ["--rows", "2", "--cols", "3"])
    assert result.export.ok, result.export.stderr
    assert result.export.stdout.strip().endswith("arrays_devices_tpu.py")
    assert "--rows" in result.help.stdout and result.help.ok
    assert result.run.ok and result.run.printed_pass and result.passed, result.run.stderr[-2000:]
    assert "source sha256:" in result.script_header
    # The temporary folder is gone, and nothing was written beside the apps.
    assert not pathlib.Path(result.export.stdout.strip()).exists()
    assert not (REPO / "apps" / "arrays_devices_tpu.py").exists()

    started = []

    def one_run(argvs, cwd, timeout_s=120, env=None):
        started.extend(argvs)
        (argv,) = argvs
        script = pathlib.Path(cwd) / argv[1]
        assert script.read_text(encoding="utf-8").startswith(result.script_header)
        return [local_run.ProcessResult(tuple(argv), 0, "PASS: stand-in\n", "", 0.1)]

    monkeypatch.setattr(local_run, "run_processes", one_run)
    again = local_run.export_and_run(app, REPO, ["--rows", "4", "--cols", "3"])
    assert started == [[sys.executable, "arrays_devices_tpu.py", "--rows", "4", "--cols", "3"]]
    assert again.export is result.export and again.help is result.help
    assert again.passed and again.script_header == result.script_header


def test_an_export_is_reused_only_for_the_same_source(tmp_path):
    app = tmp_path / "lesson.py"
    app.write_text("import marimo\n")
    key = local_run.export_key(app, REPO)
    assert local_run.export_key(app, REPO) == key
    app.write_text("import marimo\n# edited\n")
    assert local_run.export_key(app, REPO) != key
    assert local_run.export_key(app, tmp_path) != local_run.export_key(app, REPO)


def test_export_of_a_non_app_fails_without_a_script(tmp_path):
    not_an_app = tmp_path / "plain.py"
    not_an_app.write_text("print('hello')\n")
    result = local_run.export_and_run(not_an_app, REPO)
    assert not result.export.ok and result.run is None and not result.passed
    assert "not a marimo app" in result.export.stderr
