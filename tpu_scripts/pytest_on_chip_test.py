"""The chip's pytest runner, checked here on the CPU: its command, environment, report
reading, and the budget that cuts a run."""

import json
import sys

import pytest

from tpu_scripts import pytest_on_chip


def test_the_command_runs_one_process_and_writes_junit(tmp_path):
    command = pytest_on_chip.pytest_command(["core/nn"], tmp_path, 120, python="python3")
    assert command[:4] == ["python3", "-m", "pytest", "core/nn"]
    assert "no:xdist" in command and f"--junitxml={tmp_path / 'junit.xml'}" in command
    assert "--timeout=120" in command
    assert not any(
        a.startswith("--timeout") for a in pytest_on_chip.pytest_command([], tmp_path, None)
    )


def test_the_environment_asks_for_chip_mode_and_keeps_the_callers_platforms(monkeypatch):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    env = pytest_on_chip.chip_env()
    assert env["JAX_TPU_LAB_TEST_BACKEND"] == "tpu" and env["JAX_PLATFORMS"] == "tpu,cpu"
    assert not any(name.startswith("PYTEST_") for name in env)  # marimo's test mode stays off
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    assert pytest_on_chip.chip_env()["JAX_PLATFORMS"] == "tpu"
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert pytest_on_chip.chip_env()["JAX_PLATFORMS"] == "tpu,cpu"


def test_summary_line_is_pytests_last():
    log = "x\n==== 1 failed, 2 passed in 3.00s ====\nmore\n=== 3 passed, 1 skipped in 9.1s ===\n"
    assert pytest_on_chip.summary_line(log) == "3 passed, 1 skipped in 9.1s"
    assert pytest_on_chip.summary_line("no summary here\n") == ""


def test_counts_sum_the_junit_suites(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(
        '<testsuites><testsuite tests="10" failures="2" errors="1" skipped="3"/>'
        '<testsuite tests="5" failures="0" errors="0" skipped="1"/></testsuites>'
    )
    assert pytest_on_chip.counts_from_junit(path) == {
        "tests": 15,
        "failures": 2,
        "errors": 1,
        "skipped": 4,
        "passed": 8,
    }
    assert pytest_on_chip.counts_from_junit(tmp_path / "missing.xml") is None


def test_a_run_past_its_budget_is_interrupted_and_said_so(tmp_path):
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    # grace 2 s: a child that the SIGINT reaches before Python handles it (still starting, on
    # a loaded machine) is killed after the grace instead of the run's 30 s
    code, cut = pytest_on_chip.run(sleeper, None, tmp_path / "log", budget=0.5, grace=2)
    assert cut and code != 0


def test_bad_arguments_are_refused_by_name(tmp_path, capsys):
    with pytest.raises(SystemExit):
        pytest_on_chip.main(["--out", str(tmp_path), "--budget", "600"])
    assert "--budget must be 30..540" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pytest_on_chip.main(["core/no_such_test.py", "--out", str(tmp_path)])
    assert "no such test path: core/no_such_test.py" in capsys.readouterr().err


def test_on_a_host_without_a_tpu_the_run_stops_with_the_reason(tmp_path):
    # chip mode refuses to run on the CPU (conftest: a usage error naming the backend)
    code = pytest_on_chip.main(
        ["tests/test_chip_mode.py", "--out", str(tmp_path), "--budget", "120"]
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == summary["exit_code"] == 4 and not summary["cut_at_budget"]
    assert "needs a TPU" in (tmp_path / "pytest.log").read_text()
