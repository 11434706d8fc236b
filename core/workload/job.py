"""THE training job of the "Workload operations" phase: a real process that runs, saves, resumes,
is preempted, fails, and says so in a structured event log.

    python -m core.workload.job --run-dir DIR --job-id ID --steps N [--save-every K]
        [--step-seconds S] [--heartbeat-s H] [--fault KIND@STEP ...] [--metrics-port P]
        [key=value config overrides]

The model, data pipeline and train step are core.state.recovery_demo's (a two-layer MLP with
dropout and Adam on a Grain pipeline); checkpoints go to DIR/checkpoints through
core.state.checkpoint.Checkpointer, and a restarted job resumes from the newest verified
checkpoint, bit for bit (parameters, Adam moments, dropout key and data position are saved).

Events (one JSON line each, to DIR/events.jsonl through core.workload.events.EventLog and to
stdout): "running" (pid, start_step, resumed, config, flops_per_step, metrics_url), "step"
(step, loss, step_time_s, tokens, examples_per_s), "heartbeat" (every H seconds from a
thread: step = the last finished step, since_step_s), "save" (the save call returned),
"committed" (verified and its manifest written), "preempted" (step, saved_step), "failed"
(cause, step), "succeeded" (step).

Tokens: the model is a classifier, so one real (unpadded) example is one token of the
6 x parameters x tokens FLOP rule; ``tokens`` is the step's real example count.

SIGTERM (the spot/preemption notice) is honoured at a step boundary: the step in flight
finishes, its state is saved (unless already saved), "preempted" is written and the process
exits with EXIT_PREEMPTED. The exit codes below are what a runner or a Kubernetes
podFailurePolicy tells apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import math
import os
import pathlib
import signal
import sys
import threading
import time
from collections.abc import Sequence

# Exit codes (module constants: the runner, the supervisor and the JobSet manifest use them).
EXIT_SUCCEEDED = 0  # every step trained and the final step committed
EXIT_CRASHED = 1  # an unexpected exception (Python's own code for an uncaught error)
EXIT_BAD_INPUT = 2  # bad flags or config: refused before anything was written (argparse's 2)
EXIT_NONFINITE_LOSS = 3  # a NaN/inf loss: the bad state was NOT saved; resume from the last good
EXIT_SAVE_FAILED = 4  # a checkpoint save raised OSError (e.g. ENOSPC, a full disk)
EXIT_RESTORE_FAILED = 5  # no committed checkpoint passed verification, or it has another config
EXIT_PREEMPTED = 143  # SIGTERM honoured: state saved at a step boundary (128 + SIGTERM, the
# status a shell reports for a process SIGTERM ended; what a retry policy matches on)

EXIT_CODES = {
    EXIT_SUCCEEDED: "succeeded",
    EXIT_CRASHED: "crashed",
    EXIT_BAD_INPUT: "bad input",
    EXIT_NONFINITE_LOSS: "non-finite loss",
    EXIT_SAVE_FAILED: "save failed",
    EXIT_RESTORE_FAILED: "restore failed",
    EXIT_PREEMPTED: "preempted",
}

EVENTS_FILE = "events.jsonl"
CHECKPOINTS_DIR = "checkpoints"
CAUSE_NONFINITE = "non-finite loss"


@dataclasses.dataclass(frozen=True)
class JobArgs:
    run_dir: pathlib.Path
    job_id: str
    steps: int
    save_every: int
    step_seconds: float
    heartbeat_s: float
    faults: tuple[str, ...]
    metrics_port: int | None
    max_to_keep: int
    overrides: tuple[str, ...]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m core.workload.job",
        description=__doc__.split("\n\n")[0],
        allow_abbrev=False,
    )
    p.add_argument("--run-dir", required=True, help="events.jsonl and checkpoints/ go here")
    p.add_argument("--job-id", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step (device time)")
    p.add_argument("--heartbeat-s", type=float, default=1.0)
    p.add_argument("--fault", action="append", default=[], help="KIND@STEP (core.workload.faults)")
    p.add_argument("--metrics-port", type=int, default=None, help="0 = any free port")
    p.add_argument("--max-to-keep", type=int, default=3)
    p.add_argument("overrides", nargs="*", help="config key=value (recovery_demo.TrainConfig)")
    return p


def parse_args(argv: Sequence[str] | None = None) -> JobArgs:
    """Validated arguments; a problem is a ValueError naming it (nothing written yet)."""
    a = parser().parse_args(argv)
    if a.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {a.steps}")
    if a.save_every < 1:
        raise ValueError(f"--save-every must be >= 1, got {a.save_every}")
    if a.max_to_keep < 1:
        raise ValueError(f"--max-to-keep must be >= 1, got {a.max_to_keep}")
    if not (a.step_seconds >= 0 and math.isfinite(a.step_seconds)):
        raise ValueError(f"--step-seconds must be >= 0, got {a.step_seconds}")
    if not (a.heartbeat_s > 0 and math.isfinite(a.heartbeat_s)):
        raise ValueError(f"--heartbeat-s must be > 0, got {a.heartbeat_s}")
    if a.metrics_port is not None and not 0 <= a.metrics_port <= 65535:
        raise ValueError(f"--metrics-port must be in 0..65535, got {a.metrics_port}")
    if not a.job_id or any(c.isspace() for c in a.job_id):
        raise ValueError(f"--job-id must be non-empty without spaces, got {a.job_id!r}")
    return JobArgs(
        run_dir=pathlib.Path(a.run_dir),
        job_id=a.job_id,
        steps=a.steps,
        save_every=a.save_every,
        step_seconds=a.step_seconds,
        heartbeat_s=a.heartbeat_s,
        faults=tuple(a.fault),
        metrics_port=a.metrics_port,
        max_to_keep=a.max_to_keep,
        overrides=tuple(a.overrides),
    )


def command(
    run_dir: str | os.PathLike, job_id: str, steps: int, *options: str, python: str | None = None
) -> list[str]:
    """The argv that runs this job in a fresh Python process."""
    return [
        python or sys.executable,
        "-m",
        "core.workload.job",
        "--run-dir",
        str(run_dir),
        "--job-id",
        job_id,
        "--steps",
        str(steps),
        *options,
    ]


def events_path(run_dir: str | os.PathLike) -> pathlib.Path:
    return pathlib.Path(run_dir) / EVENTS_FILE


class _Emitter:
    """The event log shared by the training loop and the heartbeat thread (one lock)."""

    def __init__(self, log):
        self._log = log
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields) -> dict:
        with self._lock:
            return self._log.emit(event, **fields)


class _Heartbeat:
    """A daemon thread that emits "heartbeat" every ``period_s`` with the last finished step."""

    def __init__(self, emit: _Emitter, period_s: float, metrics=None):
        self.emit = emit
        self.period_s = period_s
        self.metrics = metrics
        self.step = 0
        self.step_wall = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stepped(self, step: int) -> None:
        self.step, self.step_wall = step, time.time()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            now = time.time()
            self.emit("heartbeat", step=self.step, since_step_s=now - self.step_wall)
            if self.metrics is not None:
                self.metrics.heartbeat(now)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


def flops_per_step(train_step, state, batch) -> float | None:
    """XLA's own count of one train step's FLOPs (None if the backend does not say).

    ``train_step`` is recovery_demo's (state, batch) -> (state, loss); its program is lowered
    (not compiled again) and XLA's HLO cost analysis counts the FLOPs.
    """
    import jax

    try:
        cost = jax.jit(train_step).lower(state, batch).cost_analysis()
    except Exception:  # noqa: BLE001 (a backend without cost analysis: MFU is then unknown)
        return None
    if isinstance(cost, list):
        cost = cost[0] if cost else {}
    flops = (cost or {}).get("flops")
    return float(flops) if flops else None


def run(args: JobArgs) -> int:
    """Run the job to completion, failure or preemption; returns its exit code."""
    import jax

    from core import data
    from core.state import checkpoint, recovery_demo
    from core.workload import events, faults

    config = recovery_demo.TrainConfig.from_overrides(args.overrides)  # validated by the caller
    plan = faults.FaultPlan.parse(args.faults)
    preempt = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: preempt.set())

    args.run_dir.mkdir(parents=True, exist_ok=True)
    log = events.EventLog(events_path(args.run_dir), args.job_id, echo=sys.stdout)
    emit = _Emitter(log)
    metrics = server = None
    heartbeat = None
    ckpt = None
    try:
        if args.metrics_port is not None:
            from core.workload import health

            metrics = health.JobMetrics(args.job_id)
            server = health.MetricsServer(metrics.registry, port=args.metrics_port)
        checkpoint_dir = args.run_dir / CHECKPOINTS_DIR
        ckpt = checkpoint.Checkpointer(
            checkpoint_dir,
            save_every=args.save_every,
            max_to_keep=args.max_to_keep,
            async_save=False,
            on_commit=lambda step: emit("committed", step=step),
        )
        iterator = data.grain_iterator(recovery_demo.pipeline(config))
        state, start = recovery_demo.init_state(config), 0
        try:
            restored = ckpt.restore_latest(recovery_demo.abstract_state(config))
        except checkpoint.CorruptCheckpointError as exc:
            emit("failed", cause=f"restore failed: {exc}", step=0, exit_code=EXIT_RESTORE_FAILED)
            return EXIT_RESTORE_FAILED
        if restored is not None:
            if restored.config != config.to_dict():
                emit(
                    "failed",
                    cause=f"checkpoint step {restored.step} has config {restored.config}, "
                    f"not {config.to_dict()}",
                    step=restored.step,
                    exit_code=EXIT_RESTORE_FAILED,
                )
                return EXIT_RESTORE_FAILED
            state, start = restored.state, restored.step
            iterator.set_state(restored.data_state)
        train_step = recovery_demo.train_step_fn(config)
        flops = flops_per_step(train_step, state, recovery_demo.pipeline(config)[0])
        emit(
            "running",
            pid=os.getpid(),
            start_step=start,
            resumed=restored is not None,
            steps=args.steps,
            config=config.to_dict(),
            flops_per_step=flops,
            metrics_url=server.url if server is not None else None,
            backend=jax.default_backend(),
        )
        if metrics is not None:
            metrics.started(start, flops)
        heartbeat = _Heartbeat(emit, args.heartbeat_s, metrics)
        heartbeat.stepped(start)
        heartbeat.start()
        step = start
        saved_step = start if restored is not None else None
        while step < args.steps:
            if preempt.is_set():
                break
            step += 1
            t0 = time.perf_counter()
            plan.before_step(step)
            batch = next(iterator)
            tokens = int(batch["mask"].sum())
            state, loss = train_step(state, batch)
            loss = float(loss)
            if args.step_seconds > 0:
                time.sleep(args.step_seconds)
            step_time_s = time.perf_counter() - t0
            loss = plan.loss(step, loss)
            emit(
                "step",
                step=step,
                loss=loss,
                step_time_s=step_time_s,
                tokens=tokens,
                examples_per_s=tokens / step_time_s,
            )
            heartbeat.stepped(step)
            if metrics is not None:
                metrics.stepped(step, loss, step_time_s, tokens)
            if not math.isfinite(loss):
                emit(
                    "failed",
                    cause=CAUSE_NONFINITE,
                    step=step,
                    loss=loss,
                    last_good_step=saved_step,
                    exit_code=EXIT_NONFINITE_LOSS,
                )
                return EXIT_NONFINITE_LOSS
            force = step == args.steps or preempt.is_set()
            if force or ckpt.should_save(step):
                try:
                    plan.before_save(step, checkpoint_dir)
                    saved = ckpt.save(
                        step,
                        state,
                        iterator.get_state(),
                        config.to_dict(),
                        {"loss": loss},
                        force=force,
                    )
                except OSError as exc:
                    emit(
                        "failed",
                        cause=f"save failed: {exc}",
                        step=step,
                        errno=exc.errno,
                        last_good_step=saved_step,
                        exit_code=EXIT_SAVE_FAILED,
                    )
                    return EXIT_SAVE_FAILED
                if saved:
                    emit("save", step=step)
                    saved_step = step
        if preempt.is_set() and step < args.steps:
            if saved_step != step and step > 0:
                ckpt.save(step, state, iterator.get_state(), config.to_dict(), {}, force=True)
                emit("save", step=step)
                saved_step = step
            ckpt.wait_until_finished()
            emit("preempted", step=step, saved_step=saved_step, exit_code=EXIT_PREEMPTED)
            return EXIT_PREEMPTED
        ckpt.wait_until_finished()
        emit("succeeded", step=step, exit_code=EXIT_SUCCEEDED)
        return EXIT_SUCCEEDED
    finally:
        if heartbeat is not None:
            heartbeat.stop()
        if ckpt is not None:
            try:
                ckpt.close()
            except OSError:
                pass  # a save that failed already said so in its "failed" event
        if server is not None:
            server.stop()
        log.close()


def main(argv: Sequence[str] | None = None) -> int:
    from core.state import recovery_demo
    from core.workload import faults

    try:
        args = parse_args(argv)
        recovery_demo.TrainConfig.from_overrides(args.overrides)
        faults.FaultPlan.parse(args.faults)
    except ValueError as exc:
        sys.stderr.write(f"core.workload.job: {exc}\n")
        return EXIT_BAD_INPUT
    try:
        return run(args)
    except Exception as exc:  # noqa: BLE001 (recorded as "failed", then the traceback)
        import traceback

        from core.workload import events

        try:
            with events.EventLog(events_path(args.run_dir), args.job_id) as log:
                log.emit("failed", cause=f"{type(exc).__name__}: {exc}", exit_code=EXIT_CRASHED)
        except OSError:
            pass
        traceback.print_exc()
        return EXIT_CRASHED


if __name__ == "__main__":
    from core import runtime

    runtime.use_cpu_without_tpu()  # a host without a TPU: the CPU backend, libtpu quiet
    exit_code = main()
    # Everything is written and closed. The interpreter's last garbage collections would walk
    # every object JAX, Orbax and Grain created (a noticeable share of a short job's CPU time:
    # compare `/usr/bin/time -v python -m core.workload.job ...` with and without this line);
    # frozen objects are skipped. The process still exits through sys.exit with its code.
    gc.freeze()
    sys.exit(exit_code)
