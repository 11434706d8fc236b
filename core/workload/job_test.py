import errno
import os
import signal
import subprocess
import sys
import time

import pytest

from core.state import checkpoint
from core.workload import events, faults, job

PROCESS_TIMEOUT_S = 120  # a tiny job takes ~4 s of CPU; generous for a loaded 2-core machine


def losses(evts):
    return {e["step"]: e["loss"] for e in evts if e["event"] == "step"}


def run_inprocess(tmp_path, *argv):
    args = job.parse_args(["--run-dir", str(tmp_path), "--job-id", "t", *argv])
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = job.run(args)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return code, events.read_events(job.events_path(tmp_path))


def test_bad_input_is_refused_before_anything_is_written(tmp_path, capsys):
    run_dir = tmp_path / "run"
    for argv in (
        ["--steps", "0"],
        ["--steps", "3", "--fault", "bogus@2"],
        ["--steps", "3", "hidden=-1"],
        ["--steps", "3", "nosuch=1"],
        ["--steps", "3", "--heartbeat-s", "0"],
        ["--steps", "3", "--metrics-port", "70000"],
    ):
        code = job.main(["--run-dir", str(run_dir), "--job-id", "x", *argv])
        assert code == job.EXIT_BAD_INPUT, argv
        assert not run_dir.exists(), argv
    assert "core.workload.job:" in capsys.readouterr().err


def test_exit_codes_are_distinct_and_named():
    assert len(job.EXIT_CODES) == len(set(job.EXIT_CODES))
    assert job.EXIT_PREEMPTED == 128 + signal.SIGTERM
    assert all(0 <= code < 256 for code in job.EXIT_CODES)


def test_a_run_succeeds_saves_and_a_rerun_resumes_bitwise(tmp_path):
    code, first = run_inprocess(tmp_path / "a", "--steps", "4", "--save-every", "2")
    assert code == job.EXIT_SUCCEEDED
    kinds = [e["event"] for e in first]
    assert kinds[0] == "running" and kinds[-1] == "succeeded"
    assert [e["step"] for e in first if e["event"] == "committed"] == [2, 4]
    run = first[0]
    assert run["start_step"] == 0 and run["resumed"] is False
    assert run["flops_per_step"] > 0
    steps = [e for e in first if e["event"] == "step"]
    assert [e["tokens"] for e in steps] == [8] * 4  # batch 8 of 48 examples: never padded
    for e in steps:
        assert e["examples_per_s"] == pytest.approx(e["tokens"] / e["step_time_s"])
    # Same run dir, more steps: resumes at 4 and continues exactly like one uninterrupted run.
    code, both = run_inprocess(tmp_path / "a", "--steps", "7", "--save-every", "2")
    assert code == job.EXIT_SUCCEEDED
    second = both[len(first) :]
    assert second[0]["event"] == "running" and second[0]["start_step"] == 4
    code, straight = run_inprocess(tmp_path / "b", "--steps", "7", "--save-every", "2")
    assert losses(first) | losses(second) == losses(straight)  # == on floats: bit for bit


def test_non_finite_loss_fails_without_saving_the_bad_state(tmp_path):
    code, evts = run_inprocess(tmp_path, "--steps", "6", "--save-every", "2", "--fault", "nan@3")
    assert code == job.EXIT_NONFINITE_LOSS
    failed = evts[-1]
    assert failed["event"] == "failed" and failed["cause"] == job.CAUSE_NONFINITE
    assert failed["step"] == 3 and failed["last_good_step"] == 2
    assert checkpoint.step_dirs(tmp_path / job.CHECKPOINTS_DIR).keys() == {2}


def test_a_failed_save_is_reported_with_its_errno(tmp_path, monkeypatch):
    def full_disk(self, step, checkpoint_dir):
        if step == 4:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(faults.FaultPlan, "before_save", full_disk)
    code, evts = run_inprocess(tmp_path, "--steps", "6", "--save-every", "2")
    assert code == job.EXIT_SAVE_FAILED
    failed = evts[-1]
    assert failed["event"] == "failed" and failed["cause"].startswith("save failed")
    assert failed["errno"] == errno.ENOSPC and failed["last_good_step"] == 2


def test_a_config_change_is_refused_on_resume(tmp_path):
    assert run_inprocess(tmp_path, "--steps", "2")[0] == job.EXIT_SUCCEEDED
    code, evts = run_inprocess(tmp_path, "--steps", "4", "learning_rate=0.02")
    assert code == job.EXIT_RESTORE_FAILED
    assert evts[-1]["event"] == "failed" and "has config" in evts[-1]["cause"]
    code, evts = run_inprocess(tmp_path, "--steps", "4", "hidden=8")  # other shapes
    assert code == job.EXIT_RESTORE_FAILED
    assert evts[-1]["cause"].startswith("restore failed") and "expected (8, 8)" in evts[-1]["cause"]


def test_sigterm_saves_the_step_in_flight_and_resume_loses_nothing(tmp_path):
    """A real process: SIGTERM after its 2nd step -> saved, exit 143; a rerun continues bitwise.

    Trials: 1 here (each costs two JAX processes); the recovery helper's supervisor test
    repeats the drill.
    """
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    run_dir = tmp_path / "run"
    argv = job.command(run_dir, "p", 8, "--save-every", "100", "--step-seconds", "0.3")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        tail = events.Tail(job.events_path(run_dir))
        seen, deadline = [], time.monotonic() + PROCESS_TIMEOUT_S
        while not any(e["event"] == "step" and e["step"] >= 2 for e in seen):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            seen += tail.new_events()
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=PROCESS_TIMEOUT_S) == job.EXIT_PREEMPTED
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    first = events.read_events(job.events_path(run_dir))
    preempted = first[-1]
    assert preempted["event"] == "preempted"
    assert preempted["saved_step"] == preempted["step"] == max(losses(first))
    code, both = run_inprocess(run_dir, "--steps", "8", "--save-every", "100")
    assert code == job.EXIT_SUCCEEDED
    second = both[len(first) :]
    assert second[0]["start_step"] == preempted["step"]
    _, straight = run_inprocess(tmp_path / "straight", "--steps", "8", "--save-every", "100")
    assert losses(first) | losses(second) == losses(straight)


def test_command_runs_this_module():
    argv = job.command("/r", "j", 3, "--save-every", "1")
    assert argv[:3] == [sys.executable, "-m", "core.workload.job"]
    assert job.parse_args(argv[3:]).save_every == 1
