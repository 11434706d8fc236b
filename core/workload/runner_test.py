import os
import signal
import sys
import time

import pytest

from core.workload import job, runner

# Cheap children (no JAX): each writes the job's events with core.workload.events.
CHILD = """
import os, signal, sys, time
from core.workload import events
log = events.EventLog(sys.argv[1], "c")
mode = sys.argv[2]
if mode == "term":  # a job says "running" only once SIGTERM is honoured (runner's contract)
    signal.signal(signal.SIGTERM, lambda *a: (log.emit("preempted", step=1, saved_step=1),
                                              sys.exit(143)))
if mode != "silent":
    log.emit("running", start_step=0)
if mode == "term" and len(sys.argv) > 3:
    time.sleep(float(sys.argv[3]))  # a loaded machine: slow after saying "running"
if mode == "ok":
    log.emit("step", step=1, loss=0.5)
    log.emit("succeeded", step=1)
elif mode == "fail":
    log.emit("failed", cause="non-finite loss", step=1)
    sys.exit(3)
elif mode == "crash":
    raise RuntimeError("boom")
elif mode == "term":
    while True:
        time.sleep(0.01)
elif mode in ("hang", "silent"):
    pid = os.fork()  # a grandchild: the group kill must reach it too
    if pid:
        log.emit("forked", pid=pid)
    time.sleep(600)
"""


def child(tmp_path, mode, timeout_s=60.0, *extra):
    path = tmp_path / "events.jsonl"
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    argv = [sys.executable, "-c", CHILD, str(path), mode, *extra]
    return runner.JobRunner(argv, path, timeout_s=timeout_s, env=env, log_path=tmp_path / "r.jsonl")


def group_gone(r) -> bool:
    """Every process of the group ended (a killed grandchild may linger as a zombie)."""
    pids = [r.proc.pid] + [e["pid"] for e in r.events if e["event"] == "forked"]
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    return False
        except FileNotFoundError:
            pass
    return True


def states(r):
    return [t.state for t in r.transitions]


def test_success_walks_every_state_in_order(tmp_path):
    r = child(tmp_path, "ok")
    end = r.run()
    assert states(r) == ["queued", "provisioning", "running", "succeeded"]
    assert end.exit_status == 0 and end.signal is None
    assert end.last_events[-1]["event"] == "succeeded"
    times = [t.ts for t in r.transitions]
    assert times == sorted(times)
    assert set(r.durations()) == {"queued", "provisioning", "running"}
    from core.workload import events

    logged = events.read_events(tmp_path / "r.jsonl")
    assert [e["state"] for e in logged] == states(r)


def test_a_failed_job_reports_its_own_cause(tmp_path):
    end = child(tmp_path, "fail").run()
    assert end.state == "failed" and end.cause == "non-finite loss" and end.exit_status == 3


def test_a_crash_without_an_event_reports_stderr(tmp_path):
    end = child(tmp_path, "crash").run()
    assert end.state == "failed" and end.exit_status == 1
    assert "RuntimeError: boom" in end.cause


@pytest.mark.parametrize("slow_s", [None, "0.5"], ids=["prompt", "slow-after-running"])
def test_sigterm_honoured_is_preempted(tmp_path, slow_s):
    """SIGTERM goes out the moment the job says "running"; the job is preempted however slow
    the machine is afterwards, since it says so only once its handler is in place."""
    r = child(tmp_path, "term", 60.0, *([slow_s] if slow_s else [])).start()
    while r.poll() != "running":
        time.sleep(0.01)
    r.preempt()
    end = r.run()
    assert end.state == "preempted" and end.exit_status == runner.EXIT_PREEMPTED
    assert "saved step 1" in end.cause


def test_a_kill_is_a_failure_named_by_its_signal(tmp_path):
    r = child(tmp_path, "hang").start()
    while r.poll() != "running":
        time.sleep(0.01)
    r.kill()
    end = r.run()
    assert end.state == "failed" and end.signal == "SIGKILL" and end.cause == "killed by SIGKILL"


def test_a_timeout_kills_the_whole_group(tmp_path):
    r = child(tmp_path, "silent", timeout_s=1.0)
    end = r.run()
    assert states(r) == ["queued", "provisioning", "failed"]  # never said it was running
    assert end.cause.startswith("timeout after 1 s")
    assert any(e["event"] == "forked" for e in r.events) and group_gone(r)


def test_close_leaves_nothing_running(tmp_path):
    with child(tmp_path, "hang") as r:
        r.start()
        while not any(e["event"] == "forked" for e in r.events):
            r.poll()
            time.sleep(0.01)
    assert r.state == "failed" and "closed by the runner" in r.transitions[-1].cause
    assert group_gone(r)


def test_without_an_event_log_it_runs_once_started(tmp_path):
    r = runner.JobRunner([sys.executable, "-c", "import sys; sys.exit(7)"], timeout_s=30)
    end = r.run()
    assert states(r) == ["queued", "provisioning", "running", "failed"]
    assert end.exit_status == 7 and end.cause.startswith("exit status 7")


def test_bad_arguments_and_the_shared_exit_code():
    with pytest.raises(ValueError, match="argv"):
        runner.JobRunner([])
    with pytest.raises(ValueError, match="timeout_s"):
        runner.JobRunner(["true"], timeout_s=0)
    assert runner.EXIT_PREEMPTED == job.EXIT_PREEMPTED == 128 + signal.SIGTERM
