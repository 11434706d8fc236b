"""The supervisor: runs the training job (core.workload.job), detects each failure, recovers
automatically where it can, and proves the recovery bitwise against an uninterrupted run.

    recovery = supervise(run_dir, Failure.parse("sigkill@6"), steps=12, save_every=3)
    reference = uninterrupted(ref_dir, steps=12, save_every=3)      # a fresh process
    problems = compare(recovery, reference)                         # [] = bitwise equal

Failures (``Failure.KINDS``): "sigkill" and "sigterm" are sent from here to the job's process
group once it reports step S; "nan", "hang" and "disk-full" are injected inside the job
(core.workload.faults, ``--fault KIND@S``). Detection, per attempt:

- the exit status and signal (core.workload.runner.JobRunner's terminal transition), and the
  job's own "failed" event with its cause (non-finite loss, save failed + errno);
- a stall: the job is running (heartbeats still arrive) but no "step" event for ``stall_s``
  -> the supervisor SIGKILLs the whole process group.

Recovery: start the job again on the same checkpoint directory without the fault (a transient
fault is not re-injected); the job resumes from its newest COMMITTED, verified checkpoint
(core.state.checkpoint: a partial save is never used). After a full disk the supervisor first
frees space (removes uncommitted partial saves; the job's one-page tmpfs went with it). A NaN
resumes from the checkpoint before it: the job never saves a non-finite state.

Each attempt has its own directory (``attempt-N/events.jsonl``, its stderr) and shares
``checkpoints/`` (a symlink to the run's one checkpoint directory).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import time
from collections.abc import Callable, Sequence

from core.workload import events, runner

KINDS = ("sigkill", "sigterm", "nan", "hang", "disk-full")
IN_JOB = ("nan", "hang", "disk-full")  # core.workload.faults.KINDS
CHECKPOINTS = "checkpoints"  # core.workload.job.CHECKPOINTS_DIR
EXIT_NONFINITE_LOSS = 3  # core.workload.job's exit codes (recovery_test checks they agree)
EXIT_SAVE_FAILED = 4
EXIT_PREEMPTED = 143
DEFAULT_STALL_S = 2.0  # no step for this long while running = a stall (steps are far shorter)
FIRST_STEP_S = 30.0  # the first step of a process also compiles (or loads) the train step
HEARTBEAT_S = 0.25  # the job's heartbeat period: several heartbeats inside one stall window
ATTEMPT_TIMEOUT_S = 120.0  # one job process: seconds of CPU, far more wall on a loaded machine
MAX_RESTARTS = 3
POLL_S = 0.02


@dataclasses.dataclass(frozen=True)
class Failure:
    kind: str  # one of KINDS, or "none"
    step: int

    @classmethod
    def parse(cls, spec: str) -> Failure:
        """``"sigkill@6"`` -> Failure("sigkill", 6); ``"none"`` -> no failure."""
        if spec == "none":
            return cls("none", 0)
        kind, _, step = spec.partition("@")
        if kind not in KINDS or not step.isdigit() or int(step) < 1:
            raise ValueError(
                f"failure {spec!r}: expected KIND@STEP with KIND one of {', '.join(KINDS)} "
                "and STEP >= 1 (or 'none')"
            )
        return cls(kind, int(step))

    def __str__(self) -> str:
        return "none" if self.kind == "none" else f"{self.kind}@{self.step}"


@dataclasses.dataclass
class Attempt:
    index: int
    argv: list[str]
    events: list[dict]
    transitions: list[dict]  # runner.Transition.to_dict() of each state change
    start_step: int | None  # the step it resumed from ("running" event), None if it never ran
    last_step: int  # the last step it reported finished
    committed: list[int]  # the steps it reported committed
    exit_status: int | None
    signal: str | None
    outcome: str  # the runner's terminal state: succeeded, failed, preempted
    detected: str  # what the supervisor saw, in words
    action: str  # what it did about it
    sent_at: float | None = None  # wall clock when the supervisor signalled or killed it


@dataclasses.dataclass
class Recovery:
    failures: tuple[Failure, ...]  # failures[i] was injected into attempt i
    attempts: list[Attempt]
    losses: dict[int, float]  # step -> loss, from the attempt that trained it last
    recomputed: list[int]  # steps trained twice (finished before the failure, after the resume)
    final_step: int
    final_digest: dict[str, str] | None  # state_digest of the final committed checkpoint
    recovered: bool  # the last attempt succeeded

    @property
    def lost_steps(self) -> int:
        """Finished steps the failed attempt did not keep (trained again after the resume)."""
        return len(self.recomputed)


@dataclasses.dataclass
class Reference:
    losses: dict[int, float]
    final_digest: dict[str, str]
    events: list[dict]


def _job_argv(attempt_dir: pathlib.Path, job_id: str, steps: int, options: Sequence[str]):
    from core.workload import job

    return job.command(attempt_dir, job_id, steps, *options)


def job_env(cache_dir: str | os.PathLike | None) -> dict[str, str]:
    """The job's environment; with ``cache_dir``, JAX's persistent compilation cache there
    (every entry kept): a restarted job loads its train step instead of compiling it again,
    less CPU per job process, the same compiled program, so the same bits.
    A cache this process was already given (JAX_COMPILATION_CACHE_DIR: a test session's, which
    it probed on this CPU, or the user's) is kept: every job of the session shares it."""
    from core import runtime

    extra = {"PYTHONUNBUFFERED": "1"}
    if cache_dir is not None and not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        extra |= {
            "JAX_COMPILATION_CACHE_DIR": str(cache_dir),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
        }
    return runtime.child_env(**extra)


def _prepare_attempt(run_dir: pathlib.Path, index: int) -> pathlib.Path:
    attempt_dir = run_dir / f"attempt-{index}"
    attempt_dir.mkdir(parents=True, exist_ok=False)
    (run_dir / CHECKPOINTS).mkdir(exist_ok=True)
    (attempt_dir / CHECKPOINTS).symlink_to(run_dir / CHECKPOINTS, target_is_directory=True)
    return attempt_dir


def final_digest(checkpoint_dir: str | os.PathLike, overrides: Sequence[str] = ()) -> tuple:
    """(step, state_digest) of the newest verified checkpoint in ``checkpoint_dir``."""
    from core.state import checkpoint, recovery_demo

    config = recovery_demo.TrainConfig.from_overrides(list(overrides))
    with checkpoint.Checkpointer(checkpoint_dir, async_save=False) as ckpt:
        restored = ckpt.restore_latest(recovery_demo.abstract_state(config))
    if restored is None:
        return None, None
    return restored.step, checkpoint.state_digest(restored.state, restored.data_state)


def _losses(evts: list[dict]) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in evts if e["event"] == "step"}


def _options(save_every: int, step_seconds: float, overrides: Sequence[str]) -> list[str]:
    return [
        "--save-every",
        str(save_every),
        "--step-seconds",
        str(step_seconds),
        "--heartbeat-s",
        str(HEARTBEAT_S),
        *overrides,
    ]


def uninterrupted(
    run_dir: str | os.PathLike,
    steps: int,
    save_every: int,
    overrides: Sequence[str] = (),
    timeout_s: float = ATTEMPT_TIMEOUT_S,
    cache_dir: str | os.PathLike | None = None,
) -> Reference:
    """The reference: one fresh job process, no failure, run to the end."""
    run_dir = pathlib.Path(run_dir)
    argv = _job_argv(run_dir, "reference", steps, _options(save_every, 0.0, overrides))
    with runner.JobRunner(
        argv, run_dir / "events.jsonl", timeout_s=timeout_s, env=job_env(cache_dir)
    ) as job_runner:
        end = job_runner.wait()
        stderr = job_runner.stderr_tail
    if end.state != "succeeded":
        raise RuntimeError(f"the reference run did not succeed: {end.cause}\n{stderr}")
    evts = events.read_events(run_dir / "events.jsonl")
    step, digest = final_digest(run_dir / CHECKPOINTS, overrides)
    if step != steps:
        raise RuntimeError(f"the reference run's newest checkpoint is step {step}, not {steps}")
    return Reference(_losses(evts), digest, evts)


def _free_space(checkpoint_dir: pathlib.Path) -> str:
    """A full disk's runbook step: remove what an interrupted save left, report free bytes."""
    from core.state import checkpoint

    removed = checkpoint.partial_saves(checkpoint_dir)
    for name in removed:
        shutil.rmtree(checkpoint_dir / name, ignore_errors=True)
    free = shutil.disk_usage(checkpoint_dir).free
    return (
        f"freed space: removed {len(removed)} partial save(s) {removed}; "
        f"{free / 2**30:.1f} GiB free on the checkpoint file system"
    )


def _describe(attempt: Attempt, stalled_for: float | None, sent: str | None) -> str:
    said = [e for e in attempt.events if e["event"] in ("failed", "preempted")]
    if stalled_for is not None:
        beats = sum(
            1
            for e in attempt.events
            if e["event"] == "heartbeat" and e["step"] == attempt.last_step
        )
        return (
            f"stall: no step for {stalled_for:.1f} s after step {attempt.last_step} while "
            f"{beats} heartbeat(s) still arrived -> process group killed (SIGKILL)"
        )
    if attempt.exit_status == EXIT_PREEMPTED:
        saved = said[-1].get("saved_step") if said else None
        return f"preempted: {sent or 'SIGTERM'} honoured, step {saved} saved, exit {EXIT_PREEMPTED}"
    if attempt.signal is not None:
        return f"killed by {attempt.signal} at step {attempt.last_step} ({sent or 'from outside'})"
    if said and said[-1]["event"] == "failed":
        failed = said[-1]
        extra = f", errno {failed['errno']}" if failed.get("errno") is not None else ""
        return (
            f"failed at step {failed.get('step')}: {failed.get('cause')}{extra} "
            f"(exit {attempt.exit_status}; last good checkpoint {failed.get('last_good_step')})"
        )
    if attempt.exit_status == 0:
        return "succeeded"
    return f"exit status {attempt.exit_status}"


def _run_attempt(
    run_dir: pathlib.Path,
    index: int,
    steps: int,
    options: list[str],
    failure: Failure,
    stall_s: float,
    timeout_s: float,
    on_event: Callable[[dict], None] | None,
    cache_dir: str | os.PathLike | None,
) -> tuple[Attempt, float | None]:
    attempt_dir = _prepare_attempt(run_dir, index)
    inject = failure.kind in IN_JOB
    argv = _job_argv(
        attempt_dir,
        f"attempt-{index}",
        steps,
        options + (["--fault", str(failure)] if inject else []),
    )
    sent, sent_at, stalled_for = None, None, None
    with runner.JobRunner(
        argv, attempt_dir / "events.jsonl", timeout_s=timeout_s, env=job_env(cache_dir)
    ) as job_runner:
        job_runner.start()
        seen, last_step, last_step_at, stepped = 0, 0, None, False
        while not job_runner.done:
            job_runner.poll()
            for event in job_runner.events[seen:]:
                if on_event is not None:
                    on_event({**event, "attempt": index})
                if event["event"] == "running":
                    last_step, last_step_at = event["start_step"], time.monotonic()
                elif event["event"] == "step":
                    last_step, last_step_at, stepped = event["step"], time.monotonic(), True
            seen = len(job_runner.events)
            if job_runner.done:
                break
            external = failure.kind in ("sigkill", "sigterm") and sent is None
            if external and last_step >= failure.step:
                sent, sent_at = failure.kind.upper(), time.time()
                if failure.kind == "sigterm":
                    job_runner.preempt()
                else:
                    job_runner.kill()
            elif last_step_at is not None and time.monotonic() - last_step_at > (
                stall_s if stepped else FIRST_STEP_S
            ):
                stalled_for, sent_at = time.monotonic() - last_step_at, time.time()
                job_runner.kill()
                job_runner.proc.wait()
            else:
                time.sleep(POLL_S)
        end = job_runner.transitions[-1]
        evts = list(job_runner.events)
        stderr = job_runner.stderr_tail
    running = [e for e in evts if e["event"] == "running"]
    attempt = Attempt(
        index=index,
        argv=[str(a) for a in argv],
        events=evts,
        transitions=[t.to_dict() for t in job_runner.transitions],
        start_step=running[0]["start_step"] if running else None,
        last_step=max((e["step"] for e in evts if e["event"] == "step"), default=0),
        committed=[e["step"] for e in evts if e["event"] == "committed"],
        exit_status=end.exit_status,
        signal=end.signal,
        outcome=end.state,
        detected="",
        action="",
        sent_at=sent_at,
    )
    attempt.detected = _describe(attempt, stalled_for, sent)
    if end.state == "failed" and not running:
        attempt.detected += f"; stderr: {stderr[-400:]}"
    return attempt, stalled_for


def supervise(
    run_dir: str | os.PathLike,
    failures: Failure | Sequence[Failure],
    steps: int,
    save_every: int,
    step_seconds: float = 0.05,
    stall_s: float = DEFAULT_STALL_S,
    overrides: Sequence[str] = (),
    max_restarts: int = MAX_RESTARTS,
    timeout_s: float = ATTEMPT_TIMEOUT_S,
    on_event: Callable[[dict], None] | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> Recovery:
    """Run the job, inject ``failures[i]`` into attempt ``i`` (one failure: attempt 0), and
    restart after each until the run succeeds or ``max_restarts`` restarts are spent.

    Several failures in one run are several drills for the price of one process each (the
    tests batch their trials this way); each must come after the previous one's step.
    """
    run_dir = pathlib.Path(run_dir)
    failures = (failures,) if isinstance(failures, Failure) else tuple(failures)
    for failure in failures:
        if failure.kind != "none" and not 1 <= failure.step <= steps:
            raise ValueError(f"failure step {failure.step} is outside 1..{steps}")
    if [f.step for f in failures] != sorted(f.step for f in failures):
        raise ValueError(f"failures must be in step order: {[str(f) for f in failures]}")
    max_restarts = max(max_restarts, len(failures))
    if not stall_s > 0:
        raise ValueError(f"stall_s must be > 0, got {stall_s}")
    run_dir.mkdir(parents=True, exist_ok=True)
    options = _options(save_every, step_seconds, overrides)
    attempts: list[Attempt] = []
    for index in range(max_restarts + 1):
        failure = failures[index] if index < len(failures) else Failure("none", 0)
        attempt, _ = _run_attempt(
            run_dir, index, steps, options, failure, stall_s, timeout_s, on_event, cache_dir
        )
        attempts.append(attempt)
        if attempt.outcome == "succeeded":
            attempt.action = "none: the run is complete"
            break
        if attempt.start_step is None:
            attempt.action = "gave up: the job never started (see the detection)"
            break
        if attempt.exit_status == EXIT_SAVE_FAILED:
            attempt.action = _free_space(run_dir / CHECKPOINTS) + "; restart"
        else:
            attempt.action = "restart"
        attempt.action += " from the newest committed checkpoint, fault not re-injected"
    losses: dict[int, float] = {}
    recomputed = []
    for attempt in attempts:
        for step, loss in _losses(attempt.events).items():
            if step in losses:
                recomputed.append(step)
            losses[step] = loss
    recovered = attempts[-1].outcome == "succeeded"
    step, digest = final_digest(run_dir / CHECKPOINTS, overrides) if recovered else (None, None)
    return Recovery(failures, attempts, losses, sorted(recomputed), step or 0, digest, recovered)


def compare(recovery: Recovery, reference: Reference) -> list[str]:
    """Every way the recovered run differs from the uninterrupted one (empty: bitwise equal)."""
    problems = []
    if not recovery.recovered:
        problems.append(f"not recovered: {recovery.attempts[-1].detected}")
    missing = sorted(set(reference.losses) - set(recovery.losses))
    if missing:
        problems.append(f"steps never trained: {missing}")
    differ = [
        step
        for step, loss in reference.losses.items()
        if step in recovery.losses and recovery.losses[step] != loss
    ]
    if differ:
        problems.append(f"losses differ from the uninterrupted run at steps {differ}")
    if recovery.final_digest != reference.final_digest:
        pieces = [
            key
            for key in reference.final_digest
            if (recovery.final_digest or {}).get(key) != reference.final_digest[key]
        ]
        problems.append(f"final state differs: {pieces}")
    return problems


def resume_points(recovery: Recovery) -> list[tuple[int, int | None, int | None]]:
    """(attempt, newest step it saw committed, step the next attempt resumed from)."""
    out = []
    for before, after in zip(recovery.attempts, recovery.attempts[1:], strict=False):
        out.append((before.index, max(before.committed, default=None), after.start_step))
    return out
