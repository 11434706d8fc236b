"""Artifact ``experiment-log``: a training run killed mid-way and resumed from its checkpoint.

The run is core/state/recovery_demo's resumable trainer (an MLP with dropout, Adam, a Grain
pipeline, Orbax checkpoints with manifests). Three runs of the same config:

1. interrupted: a child process saves every K steps and is killed (SIGKILL, by itself, right
   after the save call of step S returns, as a preemption would);
2. resumed: a fresh child process on the same checkpoint directory restores the newest
   verified step and trains on to N;
3. reference: the same N steps uninterrupted (in this process, after the children).

The log (NAME.jsonl, one event per line tagged with its run) records every step's loss, the
checkpoint commits, the kill and the resume point. The check: the resumed state at S has the
reference's digest (parameters, both Adam moments, step, dropout key, data position), and
the losses of steps 1..N (interrupted, then resumed) equal the reference's **bit for bit**:
the resumed process runs the same compiled program on a state restored bit for bit, and
that program is deterministic, so any difference at all means something was not restored.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile

from tpu_scripts import receipt as runtime_receipt
from tpu_scripts.artifacts import common

NAME = "experiment-log"
CHILD_TIMEOUT_S = 300


class Document(common.Envelope):
    run: dict
    losses: list[dict]
    log_file: str
    log_sha256: str


def default_kill_at(steps: int, every: int) -> int:
    """The checkpoint step nearest the middle of the run (at least the first checkpoint)."""
    return max(every, (steps // 2) // every * every)


def _child_env() -> dict:
    from core import runtime

    extra = {} if runtime.host_has_tpu() else {"JAX_PLATFORMS": "cpu"}
    return runtime.child_env(**extra)


def _run_child(argv: list[str]) -> tuple[int, list[dict], str]:
    from core.state import recovery_demo

    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=_child_env()
    )
    return result.returncode, recovery_demo.parse_events(result.stdout), result.stderr


def build(steps: int, every: int, kill_at: int, out_dir) -> tuple[dict, list]:
    import pathlib

    from core import numerics, runtime
    from core.state import artifacts, recovery_demo

    out_dir = pathlib.Path(out_dir)
    checkpoints = out_dir / "checkpoints"
    options = ("--save-every", str(every), "--max-to-keep", "3", "--digests")
    # The children first: on a TPU VM only one process may hold the chips at a time.
    killed_rc, killed, killed_err = _run_child(
        recovery_demo.command(checkpoints, steps, *options, "--kill-after-save-call", str(kill_at))
    )
    resumed_rc, resumed, resumed_err = _run_child(
        recovery_demo.command(checkpoints, steps, *options)
    )
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
    log += [{"run": "reference", **e} for e in reference]
    log_text = "".join(json.dumps(e, sort_keys=True) + "\n" for e in log)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = artifacts.write_text_atomic(out_dir / f"{NAME}.jsonl", log_text)

    def by_step(events, kind="step", field="loss"):
        return {e["step"]: e[field] for e in events if e["event"] == kind}

    ref_loss, ref_digest = by_step(reference), by_step(reference, "state", "digest")
    run_loss = {**by_step(killed), **by_step(resumed)}
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
            f"the first run was killed right after saving step {kill_at}",
            killed_rc == -signal.SIGKILL and max(by_step(killed), default=0) == kill_at,
            f"exit status {killed_rc} (-9: SIGKILL), last step logged "
            f"{max(by_step(killed), default=None)}, committed checkpoints {committed}"
            + (f"; stderr: {killed_err[-300:]}" if killed_rc != -signal.SIGKILL else ""),
        ),
        common.check(
            f"a fresh process resumed from step {kill_at}",
            resumed_rc == 0 and resume is not None and resume["step"] == kill_at,
            f"exit status {resumed_rc}, resumed at step "
            f"{resume['step'] if resume else None}, ran to {max(by_step(resumed), default=None)}"
            + (f"; stderr: {resumed_err[-300:]}" if resumed_rc != 0 else ""),
        ),
        common.check(
            "the restored state is the uninterrupted run's state at that step",
            resume is not None and resume["digest"] == ref_digest.get(kill_at),
            "sha256 digests of params, Adam mu/nu/count, step, rng, data position: "
            + ("equal" if resume and resume["digest"] == ref_digest.get(kill_at) else "differ"),
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
            "run": "interrupted" if s <= kill_at else "resumed",
            "loss": run_loss.get(s),
            "reference loss": ref_loss.get(s),
            "bitwise equal": s in same,
            "checkpoint": s in committed or s == steps,
        }
        for s in steps_all
    ]
    document = common.envelope(NAME, receipt, checks, [])
    document["run"] = {
        "config": config.to_dict(),
        "steps": steps,
        "checkpoint_every": every,
        "killed_after_save_of_step": kill_at,
        "resumed_from_step": resume["step"] if resume else None,
        "committed_steps_before_kill": committed,
        "comparison": "bitwise",
        "max_abs_loss_difference": error,
        "checkpoint_dir": checkpoints.name,
    }
    document["losses"] = losses
    document["log_file"] = log_path.name
    document["log_sha256"] = artifacts.canonical_sha256({"text": log_text})
    sections = [
        (
            "The run",
            f"{steps} steps, a checkpoint every {every}; the first process was killed "
            f"(SIGKILL) after saving step {kill_at}, a fresh process resumed from step "
            f"{resume['step'] if resume else '(none)'}; the event log is `{log_path.name}`, "
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
        help="kill the first process after saving this step (a multiple of K below N; "
        "default: the checkpoint nearest N / 2)",
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
    if kill_at is not None and (not 1 <= kill_at < args.steps or kill_at % args.checkpoint_every):
        return (
            f"--kill-at {kill_at} must be a checkpoint step (a multiple of "
            f"--checkpoint-every {args.checkpoint_every}) below --steps {args.steps}"
        )
    return None


def produce(args, out_dir) -> tuple[dict, list]:
    kill_at = args.kill_at or default_kill_at(args.steps, args.checkpoint_every)
    document, sections = build(args.steps, args.checkpoint_every, kill_at, out_dir)
    return document, common.write(out_dir, Document, document, sections)
