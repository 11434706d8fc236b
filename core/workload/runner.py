"""A job runner: starts a job (any argv) as a subprocess in its own process group and records
every state transition with its time and cause.

    queued -> provisioning -> running -> succeeded | failed | preempted

- queued: accepted, not started.
- provisioning: the process exists but has not said it is running (here: the interpreter
  starts, imports JAX and restores a checkpoint; on Cloud TPU: the VM or slice is created).
- running: the job's first "running" event appeared in its event log (core.workload.events,
  watched with Tail). A job without an event log is running as soon as it is started. A job
  says "running" only once its SIGTERM handler is installed (core.workload.job does), so a
  preemption notice sent from then on is honoured however slow the machine is.
- succeeded: exit status 0.
- preempted: the job honoured SIGTERM (exit core.workload.job.EXIT_PREEMPTED, or a
  "preempted" event), or SIGTERM ended it.
- failed: any other exit; the cause is the job's last "failed" event, else the signal or the
  status; a timeout kills the whole process group (SIGKILL) and is the cause.

Every transition carries ``ts`` (wall clock), ``cause``, and the terminal one also
``exit_status``, ``signal`` and the job's ``last_events``. Bounded: nothing outlives
``timeout_s``; ``close()`` (or leaving the ``with`` block) kills what is still running.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence

from core.workload import events, job

STATES = ("queued", "provisioning", "running", "succeeded", "failed", "preempted")
TERMINAL = ("succeeded", "failed", "preempted")
EXIT_PREEMPTED = job.EXIT_PREEMPTED  # 143 (128 + SIGTERM): a job that honoured SIGTERM
LAST_EVENTS = 5  # events kept with the terminal transition: enough to read the ending
POLL_S = 0.05


@dataclasses.dataclass(frozen=True)
class Transition:
    state: str
    ts: float
    cause: str
    exit_status: int | None = None
    signal: str | None = None
    last_events: tuple[dict, ...] = ()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


GROUP_EXIT_TIMEOUT_S = 5.0  # close(): the longest wait for a killed group's last member


def live_group_members(pgid: int) -> list[int]:
    """The pids of process group ``pgid`` that are not zombies (read from Linux's /proc; []
    where there is no /proc)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    members = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8") as file:
                # after "(comm)": state, ppid, pgrp, ...
                fields = file.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while we read
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(name))
    return members


class JobRunner:
    """Runs ``argv`` once; ``transitions`` is its life so far."""

    def __init__(
        self,
        argv: Sequence[str],
        events_path: str | os.PathLike | None = None,
        timeout_s: float = 120.0,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        log_path: str | os.PathLike | None = None,
        on_transition: Callable[[Transition], None] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        if not argv:
            raise ValueError("argv must name a program")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.argv = [str(a) for a in argv]
        self.events_path = pathlib.Path(events_path) if events_path is not None else None
        self.timeout_s = timeout_s
        self.env, self.cwd = env, cwd
        self.log_path = pathlib.Path(log_path) if log_path is not None else None
        self.on_transition = on_transition
        self.clock = clock
        self.transitions: list[Transition] = []
        self.events: list[dict] = []
        self.proc: subprocess.Popen | None = None
        self._tail = events.Tail(self.events_path) if self.events_path is not None else None
        self._deadline: float | None = None
        self._timed_out = self._closed = False
        self.stderr_tail = ""
        self._record("queued", "accepted")

    @property
    def state(self) -> str:
        return self.transitions[-1].state

    @property
    def done(self) -> bool:
        return self.state in TERMINAL

    def _record(self, state: str, cause: str, **fields) -> Transition:
        transition = Transition(state, self.clock(), cause, **fields)
        self.transitions.append(transition)
        if self.log_path is not None:
            line = events.EventLog(self.log_path, "runner")
            with line:
                line.emit("transition", **transition.to_dict())
        if self.on_transition is not None:
            self.on_transition(transition)
        return transition

    def start(self) -> JobRunner:
        if self.proc is not None:
            raise RuntimeError("a JobRunner runs its job once")
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,  # a file, not a pipe: a chatty job can never block on it
            start_new_session=True,  # its own process group: a kill reaches its children
        )
        self._deadline = time.monotonic() + self.timeout_s
        self._record("provisioning", f"process {self.proc.pid} started")
        if self._tail is None:
            self._record("running", "started (no event log to wait for)")
        return self

    def poll(self) -> str:
        """Read new events, advance the state, enforce the timeout; returns the state."""
        if self.proc is None or self.done:
            return self.state
        new = self._tail.new_events() if self._tail is not None else []
        self.events.extend(new)
        if self.state == "provisioning" and any(e["event"] == "running" for e in new):
            running = next(e for e in new if e["event"] == "running")
            self._record("running", f"job reported running at step {running.get('start_step')}")
        status = self.proc.poll()
        if status is None and time.monotonic() > self._deadline:
            self._timed_out = True
            status = self._kill_and_reap_group()
        if status is not None:
            self._finish(status)
        return self.state

    def wait(self, poll_s: float = POLL_S) -> Transition:
        """Poll until the job ends (at most ``timeout_s``); returns the terminal transition."""
        if self.proc is None:
            self.start()
        while not self.done:
            self.poll()
            if not self.done:
                time.sleep(poll_s)
        return self.transitions[-1]

    def run(self) -> Transition:
        try:
            return self.wait()
        finally:
            self.close()

    def preempt(self) -> None:
        """Send the preemption notice (SIGTERM) to the job's process group."""
        self._kill_group(signal.SIGTERM)

    def kill(self) -> None:
        self._kill_group(signal.SIGKILL)

    def _kill_group(self, signum: int) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signum)
        except ProcessLookupError:
            pass

    def _finish(self, status: int) -> None:
        if self._tail is not None:
            self.events.extend(self._tail.new_events())
        last = tuple(self.events[-LAST_EVENTS:])
        self._stderr.seek(0)
        stderr = self._stderr.read().decode("utf-8", "replace")
        self.stderr_tail = stderr[-2000:]
        signame = signal.Signals(-status).name if status < 0 else None
        job_said = [e for e in self.events if e["event"] in TERMINAL]
        said = job_said[-1] if job_said else None
        if self._timed_out:
            state, cause = "failed", f"timeout after {self.timeout_s:g} s: process group killed"
        elif self._closed:
            state, cause = "failed", "closed by the runner: process group killed"
        elif status == 0:
            state, cause = "succeeded", "exit status 0"
        elif status == EXIT_PREEMPTED or (said and said["event"] == "preempted"):
            saved = said.get("saved_step") if said else None
            state, cause = "preempted", f"preemption notice honoured, saved step {saved}"
        elif signame == "SIGTERM":
            state, cause = "preempted", "ended by SIGTERM before it could save"
        elif said and said["event"] == "failed":
            state, cause = "failed", str(said.get("cause"))
        elif signame is not None:
            state, cause = "failed", f"killed by {signame}"
        else:
            last_line = stderr.strip().splitlines()[-1:] or [""]
            state, cause = "failed", f"exit status {status}: {last_line[0][:200]}".rstrip(": ")
        self._record(state, cause, exit_status=status, signal=signame, last_events=last)

    def close(self) -> None:
        """Kill the process group if it is still running, reap it, and return only once no
        process of the group is left running (bounded by GROUP_EXIT_TIMEOUT_S)."""
        if self.proc is None:
            return
        was_running = self.proc.poll() is None
        status = self._kill_and_reap_group()
        if not self.done:
            self._closed = was_running  # an exit it made on its own keeps its own cause
            self._finish(status)
        self._stderr.close()

    def _kill_and_reap_group(self) -> int:
        """SIGKILL the group, reap the job, and wait until no member of the group runs.

        SIGKILL reaches the other members asynchronously, and a grandchild may outlive the
        leader: what is left of the group is killed until none of it runs (bounded). The
        group id cannot be reused while a member exists, so this never signals a stranger.
        """
        self._kill_group(signal.SIGKILL)
        status = self.proc.wait()
        deadline = time.monotonic() + GROUP_EXIT_TIMEOUT_S
        while live_group_members(self.proc.pid) and time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.01)
        return status

    def __enter__(self) -> JobRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def durations(self) -> dict[str, float]:
        """Seconds spent in each non-terminal state."""
        out = {}
        for a, b in zip(self.transitions, self.transitions[1:], strict=False):
            out[a.state] = out.get(a.state, 0.0) + (b.ts - a.ts)
        return out
