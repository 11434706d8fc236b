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
    # -q prints it bare (the chip's runs of 2026-12-06 found no summary line before this)
    bare = "x\n5 failed, 183 passed, 34 skipped, 461 deselected in 43.44s\n"
    assert pytest_on_chip.summary_line(bare) == bare.split("\n")[1]
    cut = "KeyboardInterrupt\n84 passed, 1 skipped in 193.94s (0:03:13)\n"
    assert pytest_on_chip.summary_line(cut) == "84 passed, 1 skipped in 193.94s (0:03:13)"
    assert pytest_on_chip.summary_line("a test printed: 3 passed so far\n") == ""


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


SAMPLE_TESTS = """
import pytest

def test_a():
    pass

def test_ab():
    pass

@pytest.mark.parametrize("n", [1, 10])
def test_p(n):
    pass

class TestGroup:
    def test_in_class(self):
        pass
"""


def test_node_ids_read_from_junit_name_files_classes_and_parameters(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "sample_test.py").write_text(SAMPLE_TESTS)
    (tmp_path / "junit.xml").write_text(
        '<testsuites><testsuite tests="3">'
        '<testcase classname="pkg.sample_test" name="test_p[1]"/>'
        '<testcase classname="pkg.sample_test.TestGroup" name="test_in_class"/>'
        '<testcase classname="pkg.sample_test" name="test_a"/>'
        '<testcase time="0.001"/>'  # what a SIGINT leaves of the test it cut
        "</testsuite></testsuites>"
    )
    assert pytest_on_chip.node_ids(tmp_path / "junit.xml", tmp_path) == [
        "pkg/sample_test.py::test_p[1]",
        "pkg/sample_test.py::TestGroup::test_in_class",
        "pkg/sample_test.py::test_a",
    ]
    (tmp_path / "stray.xml").write_text(
        '<testsuite><testcase classname="gone" name="t"/></testsuite>'
    )
    with pytest.raises(ValueError, match="no test file"):
        pytest_on_chip.node_ids(tmp_path / "stray.xml", tmp_path)
    with pytest.raises(ValueError, match="not a readable junit xml"):
        pytest_on_chip.node_ids(tmp_path / "missing.xml", tmp_path)


def test_a_continued_run_leaves_out_exactly_the_tests_an_earlier_report_holds(tmp_path):
    # A real pytest run writes the first report; the second run, with the hook, must run
    # exactly the rest: test_ab survives test_a, test_p[10] survives test_p[1] (the prefix
    # trap of pytest's own --deselect).
    import subprocess

    (tmp_path / "sample_test.py").write_text(SAMPLE_TESTS)
    first = tmp_path / "first.xml"
    env = {**pytest_on_chip.runtime.child_env(), "PYTHONPATH": str(pytest_on_chip.REPO_ROOT)}
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q"]
    subprocess.run(
        [*base, "sample_test.py::test_a", "sample_test.py::test_p[1]", f"--junitxml={first}"],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
    )
    done = tmp_path / "done.txt"
    done.write_text("\n".join(pytest_on_chip.node_ids(first, tmp_path)) + "\n")
    second = tmp_path / "second.xml"
    result = subprocess.run(
        [*base, "sample_test.py", "-p", "tpu_scripts.pytest_continue", f"--junitxml={second}"],
        cwd=tmp_path,
        env={**env, pytest_on_chip.DONE_ENV: str(done)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(pytest_on_chip.node_ids(second, tmp_path)) == [
        "sample_test.py::TestGroup::test_in_class",
        "sample_test.py::test_ab",
        "sample_test.py::test_p[10]",
    ]
    assert "2 deselected" in result.stdout
