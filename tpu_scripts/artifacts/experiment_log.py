"""Artifact ``experiment-log``: a training run killed mid-way and resumed from its checkpoint.

The run is core/state/recovery_demo's resumable trainer (an MLP with dropout, Adam, a Grain
pipeline, Orbax checkpoints with manifests). Three runs of the same config:

1. interrupted: a child process saves every K steps and is killed with SIGKILL (it sends it
   to itself, as a preemption would strike) right after the update of step S, before that
   step's save: the work since the last checkpoint R = K * floor(S / K) is lost;
2. resumed: a fresh child process on the same checkpoint directory restores the newest
   verified step, R, replays steps R+1..S and trains on to N;
3. reference: the same N steps uninterrupted (in this process, after the children).

The log (NAME.jsonl, one event per line tagged with its run) records every step's loss, the
checkpoint commits, the kill and the resume point. The checks: the restored state has the
reference's digest at R (parameters, both Adam moments, step, dropout key, data position),
the replayed steps repeat the killed run's losses, and the losses of steps 1..N equal the
reference's, all **bit for bit**: the resumed process runs the same compiled program on a
state restored bit for bit, and that program is deterministic, so any difference at all
means something was not restored.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile

from core import documents
from tpu_scripts import receipt as runtime_receipt
from tpu_scripts.artifacts import common

NAME = "experiment-log"
CHILD_TIMEOUT_S = 300


class Document(common.Envelope):
    run: dict
    losses: list[dict]
    log_file: str
    log_sha256: str


def file_problem(json_path, document: dict) -> str | None:
    """Why the JSONL log beside a verified document is not the one it was written with."""
    import pathlib

    from core.state import artifacts

    log_path = pathlib.Path(json_path).with_name(document["log_file"])
    if not log_path.is_file():
        return f"the event log {log_path.name} is missing"
    text = log_path.read_text(encoding="utf-8")
    if artifacts.canonical_sha256({"text": text}) != document["log_sha256"]:
        return f"the event log {log_path.name} was changed after it was written"
    return None


def default_kill_at(steps: int, every: int) -> int:
    """A step past the middle of the run and half an interval past a checkpoint, so that
    some work is lost (K // 2 + 1 steps after the checkpoint nearest N / 2, before N)."""
    return min(max(every, (steps // 2) // every * every) + every // 2 + 1, steps - 1)


def child(checkpoint_dir: str, steps: int, every: int, kill_at: int) -> None:
    """The trainer in a child process: JSON events on stdout; SIGKILL after step kill_at."""
    import os
    import sys

    from core.state import recovery_demo

    def on_event(event: dict) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()
        if event["event"] == "step" and event["step"] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    recovery_demo.train(
        recovery_demo.TrainConfig(),
        checkpoint_dir,
        steps,
        save_every=every,
        max_to_keep=3,
        on_event=on_event,
        digests=True,
    )


def _command(checkpoint_dir, steps: int, every: int, kill_at: int = 0) -> list[str]:
    import sys

    module = "tpu_scripts.artifacts.experiment_log"
    return [sys.executable, "-m", module, str(checkpoint_dir), str(steps), str(every), str(kill_at)]


def _child_env() -> dict:
    from core import runtime

    extra = {} if runtime.host_has_tpu() else {"JAX_PLATFORMS": "cpu"}
    return runtime.child_env(**extra)


def _run_child(argv: list[str]) -> tuple[int, list[dict], str]:
    from core import curriculum
    from core.state import recovery_demo

    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        env=_child_env(),
        cwd=curriculum.REPO_ROOT,
    )
    return result.returncode, recovery_demo.parse_events(result.stdout), result.stderr


def compare(log: list[dict], steps: int, every: int, kill_at: int, stderr=("", "")):
    """(checks, per-step rows, summary) of an experiment log: the killed run, the resumed run
    and the reference, as the tagged events of NAME.jsonl. Every comparison is bitwise."""
    from core import numerics

    def run(name):
        return [e for e in log if e["run"] == name]

    killed, resumed, reference = run("interrupted"), run("resumed"), run("reference")
    killed_rc = next((e["rc"] for e in killed if e["event"] == "killed"), None)
    resumed_rc = next((e["rc"] for e in resumed if e["event"] == "exit"), None)
    killed_err, resumed_err = stderr
    restart = kill_at // every * every  # the newest checkpoint before the kill

    def by_step(events, kind="step", field="loss"):
        return {e["step"]: e[field] for e in events if e["event"] == kind}

    ref_loss, ref_digest = by_step(reference), by_step(reference, "state", "digest")
    killed_loss, resumed_loss = by_step(killed), by_step(resumed)
    run_loss = {**killed_loss, **resumed_loss}  # a replayed step: the resumed run's loss
    replayed = list(range(restart + 1, kill_at + 1))
    resume = next((e for e in resumed if e["event"] == "resumed"), None)
    committed = sorted(by_step(killed, "committed", "step"))
    steps_all = list(range(1, steps + 1))
    same = [s for s in steps_all if s in run_loss and run_loss[s] == ref_loss.get(s)]
    error = (
        numerics.max_abs_error([run_loss[s] for s in steps_all], [ref_loss[s] for s in steps_all])
        if len(run_loss) == steps == len(ref_loss)
        else float("inf")
    )
    final_resumed = by_step(resumed, "state", "digest").get(steps)
    checks = [
        common.check(
            f"the first run was killed (SIGKILL) after step {kill_at}, before its save",
            killed_rc == -signal.SIGKILL and max(killed_loss, default=0) == kill_at,
            f"exit status {killed_rc} (-9: SIGKILL), last step logged "
            f"{max(killed_loss, default=None)}, committed checkpoints {committed}"
            + (f"; stderr: {killed_err[-300:]}" if killed_rc != -signal.SIGKILL else ""),
        ),
        common.check(
            f"a fresh process resumed from the newest checkpoint, step {restart}",
            resumed_rc == 0 and resume is not None and resume["step"] == restart,
            f"exit status {resumed_rc}, resumed at step "
            f"{resume['step'] if resume else None}, ran to {max(resumed_loss, default=None)}"
            + (f"; stderr: {resumed_err[-300:]}" if resumed_rc != 0 else ""),
        ),
        common.check(
            "the restored state is the uninterrupted run's state at that step",
            resume is not None and resume["digest"] == ref_digest.get(restart),
            "sha256 digests of params, Adam mu/nu/count, step, rng, data position: "
            + ("equal" if resume and resume["digest"] == ref_digest.get(restart) else "differ"),
        ),
        common.check(
            f"the replayed steps {restart + 1}..{kill_at} repeat the killed run's losses",
            all(s in resumed_loss and resumed_loss[s] == killed_loss.get(s) for s in replayed),
            f"{sum(resumed_loss.get(s) == killed_loss.get(s) for s in replayed)} of "
            f"{len(replayed)} lost steps recomputed bit for bit",
        ),
        common.check(
            "losses equal the uninterrupted reference bit for bit",
            len(same) == steps,
            f"{len(same)} of {steps} steps bitwise equal, max |difference| {error:g} "
            "(required: 0, the same deterministic program on a bit-exact state)",
        ),
        common.check(
            "the final states are equal",
            final_resumed is not None and final_resumed == ref_digest.get(steps),
            f"step {steps} digests "
            + ("equal" if final_resumed == ref_digest.get(steps) else "differ"),
        ),
    ]
    losses = [
        {
            "step": s,
            "run": "interrupted" if s <= restart else "resumed",
            "replayed": s in replayed,
            "loss": run_loss.get(s),
            "reference loss": ref_loss.get(s),
            "bitwise equal": s in same,
            "checkpoint": s in committed or s in by_step(resumed, "committed", "step"),
        }
        for s in steps_all
    ]
    summary = {
        "killed_after_step": kill_at,
        "lost_steps": replayed,
        "resumed_from_step": resume["step"] if resume else None,
        "committed_steps_before_kill": committed,
        "comparison": "bitwise",
        "max_abs_loss_difference": error,
    }
    return checks, losses, summary


def build(steps: int, every: int, kill_at: int, out_dir) -> tuple[dict, list]:
    import pathlib

    from core import runtime
    from core.state import artifacts, recovery_demo

    out_dir = pathlib.Path(out_dir)
    checkpoints = out_dir / "checkpoints"
    restart = kill_at // every * every  # the newest checkpoint before the kill
    # The children first: on a TPU VM only one process may hold the chips at a time.
    killed_rc, killed, killed_err = _run_child(_command(checkpoints, steps, every, kill_at))
    resumed_rc, resumed, resumed_err = _run_child(_command(checkpoints, steps, every))
    runtime.use_cpu_devices()
    receipt = runtime_receipt.runtime_receipt(repeats=3)
    config = recovery_demo.TrainConfig()
    reference = []
    with tempfile.TemporaryDirectory() as scratch:
        recovery_demo.train(
            config, scratch, steps, save_every=steps, digests=True, on_event=reference.append
        )
    log = [{"run": "interrupted", **e} for e in killed]
    log.append({"run": "interrupted", "event": "killed", "signal": "SIGKILL", "rc": killed_rc})
    log += [{"run": "resumed", **e} for e in resumed]
    log.append({"run": "resumed", "event": "exit", "rc": resumed_rc})
    log += [{"run": "reference", **e} for e in reference]
    log_text = "".join(json.dumps(e, sort_keys=True) + "\n" for e in log)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = documents.write_text_atomic(out_dir / f"{NAME}.jsonl", log_text)

    checks, losses, summary = compare(log, steps, every, kill_at, (killed_err, resumed_err))
    document = common.envelope(NAME, receipt, checks, [])
    document["run"] = {
        "config": config.to_dict(),
        "steps": steps,
        "checkpoint_every": every,
        **summary,
        "checkpoint_dir": checkpoints.name,
    }
    document["losses"] = losses
    document["log_file"] = log_path.name
    document["log_sha256"] = artifacts.canonical_sha256({"text": log_text})
    sections = [
        (
            "The run",
            f"{steps} steps, a checkpoint every {every}; the first process was killed "
            f"(SIGKILL) after step {kill_at}, before its save; a fresh process resumed from "
            f"step {summary['resumed_from_step']} and replayed steps "
            f"{restart + 1}..{kill_at}; the event log is `{log_path.name}`, "
            f"the checkpoints are in `{checkpoints.name}/`.",
        ),
        ("Losses (interrupted + resumed vs uninterrupted)", losses),
    ]
    return document, sections


def add_arguments(parser) -> None:
    parser.add_argument("--steps", type=int, default=20, help="training steps N")
    parser.add_argument(
        "--checkpoint-every", type=int, default=5, help="save a checkpoint every K steps"
    )
    parser.add_argument(
        "--kill-at",
        type=int,
        default=None,
        help="kill the first process after this step's update, before its save (K..N-1; "
        "default: the step after the checkpoint nearest N / 2)",
    )


def problem(args) -> str | None:
    if not 2 <= args.steps <= 10000:
        return f"--steps must be in 2..10000, got {args.steps}"
    if not 1 <= args.checkpoint_every < args.steps:
        return (
            f"--checkpoint-every must be in 1..{args.steps - 1} (a checkpoint before the "
            f"last step), got {args.checkpoint_every}"
        )
    kill_at = args.kill_at
    if kill_at is not None and not args.checkpoint_every <= kill_at < args.steps:
        return (
            f"--kill-at {kill_at} must be in {args.checkpoint_every}..{args.steps - 1}: after "
            f"the first checkpoint (step {args.checkpoint_every}, or there is nothing to "
            f"resume from) and before the last step {args.steps}"
        )
    return None


def produce(args, out_dir) -> tuple[dict, list]:
    kill_at = args.kill_at or default_kill_at(args.steps, args.checkpoint_every)
    document, sections = build(args.steps, args.checkpoint_every, kill_at, out_dir)
    return document, common.write(out_dir, Document, document, sections)


if __name__ == "__main__":
    import sys

    directory, n, k, kill = sys.argv[1:5]
    child(directory, int(n), int(k), int(kill))
