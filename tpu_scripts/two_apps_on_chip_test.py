"""two_apps_on_chip's judgement of each run, and its refusal on a host without a TPU (the
two-process run itself needs a chip: its result is a benchmark record)."""

from __future__ import annotations

import subprocess
import sys

from core import runtime
from tpu_scripts import two_apps_on_chip as two

HOLDER = 4242
NOTICE = runtime.ChipBusy(HOLDER, "python -c ...", "/tmp/libtpu_lockfile").notice()


def a_run(backend="cpu", status="passed", returncode=0, stderr=NOTICE + "\n"):
    return {
        "returncode": returncode,
        "seconds": 1.0,
        "stderr": stderr,
        "results": {"status": status, "receipt": {"backend": backend}, "checks": []},
    }


def test_the_notice_line_is_the_runtimes_own_notice():
    assert two.NOTICE_MARK in NOTICE
    assert two.notice_line("warming up\n" + NOTICE + "\nmore") == NOTICE


def test_a_held_chip_run_behaves_on_the_cpu_with_the_notice_naming_the_holder():
    assert two.judge(a_run(), HOLDER) == []


def test_a_held_chip_run_is_refused_for_each_misbehaviour():
    assert any("not the CPU" in p for p in two.judge(a_run(backend="tpu"), HOLDER))
    assert any("no notice" in p for p in two.judge(a_run(stderr=""), HOLDER))
    other = runtime.ChipBusy(99, "", "/tmp/libtpu_lockfile").notice()
    assert any("does not name" in p for p in two.judge(a_run(stderr=other), HOLDER))
    crashed = a_run(stderr="Traceback (most recent call last):\n  ...", returncode=1)
    problems = two.judge(crashed, HOLDER)
    assert any("exited 1" in p for p in problems) and any("traceback" in p for p in problems)
    assert any("'failed'" in p for p in two.judge(a_run(status="failed"), HOLDER))
    assert any("not 'passed'" in p for p in two.judge({**a_run(), "results": None}, HOLDER))


def test_a_free_chip_run_must_be_on_the_tpu_without_the_notice():
    assert two.judge(a_run(backend="tpu", stderr=""), None) == []
    assert any("not the TPU" in p for p in two.judge(a_run(backend="cpu", stderr=""), None))
    assert any("still says" in p for p in two.judge(a_run(backend="tpu"), None))


def test_a_host_without_a_tpu_is_refused_before_anything_runs(tmp_path, monkeypatch):
    script = tmp_path / "app.py"
    script.write_text("raise SystemExit('must not run')\n")
    monkeypatch.setattr(runtime, "host_has_tpu", lambda: False)
    assert two.main(["--app", str(script), "--out", str(tmp_path / "out")]) == two.EXIT_NO_TPU
    assert not (tmp_path / "out").exists()


def test_a_missing_app_is_a_usage_error(tmp_path, capsys):
    assert two.main(["--app", str(tmp_path / "none.py"), "--out", str(tmp_path / "o")]) == 2
    assert "no exported app" in capsys.readouterr().err


def test_the_holder_source_is_valid_python_that_holds_until_stdin_closes():
    # On this CPU host the holder opens the CPU (no chip): it still prints, then waits.
    holder = subprocess.Popen(
        [sys.executable, "-c", two.HOLDER_SOURCE],
        env=runtime.child_env(JAX_PLATFORMS="cpu"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = holder.stdout.readline().split()
    assert line[0] == "HOLDING" and int(line[1]) == holder.pid and line[2] == "cpu"
    assert holder.poll() is None  # still holding
    holder.stdin.close()
    assert holder.wait(timeout=60) == 0


def test_the_flow_judges_both_runs_and_keeps_the_command_it_was_given(tmp_path, monkeypatch):
    # the processes stubbed (no chip here): a held run on the CPU with the notice, then a free
    # run on the TPU; the document keeps each run's summary, its problems and the argv given
    import json

    class Holder:
        class stdin:  # noqa: N801 - stands in for the pipe
            close = staticmethod(lambda: None)

        wait = staticmethod(lambda timeout: 0)

    runs = iter([a_run(), a_run(backend="tpu", stderr="")])
    script = tmp_path / "app.py"
    script.write_text("")
    monkeypatch.setattr(runtime, "host_has_tpu", lambda: True)
    monkeypatch.setattr(runtime, "busy_tpu", lambda: None)
    monkeypatch.setattr(two, "start_holder", lambda: (Holder, HOLDER, "TPU v5 lite"))
    monkeypatch.setattr(two, "run_app", lambda script, out: next(runs))
    argv = ["--app", str(script), "--out", str(tmp_path / "out")]
    assert two.main(argv) == two.EXIT_BEHAVED
    document = json.loads((tmp_path / "out" / "two_apps.json").read_text())
    assert document["behaved"] and document["command"].endswith(" ".join(argv))
    assert document["held"]["backend"] == "cpu" and document["held"]["notice"] == NOTICE
    assert document["released"] == {**document["released"], "backend": "tpu", "problems": []}
    runs = iter([a_run(backend="tpu"), a_run(backend="tpu", stderr="")])  # held, yet on the TPU
    assert two.main(argv) == two.EXIT_MISBEHAVED
