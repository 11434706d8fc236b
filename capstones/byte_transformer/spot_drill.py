"""The spot/preemption drill on the capstone's trainer (the playbook: "test preemptible runs to
cut costs and confirm you can recover cleanly").

A real ``python -m capstones.byte_transformer train`` process is started in its own process
group; once it has trained N steps (its ``events=true`` stdout says so), SIGTERM (a spot VM's
preemption notice) is sent to the group. training.py's handler only sets a flag: the loop
finishes the step in flight, saves it, and exits 0. A fresh process resumes the same run
directory and is preempted in turn after its own N steps, and so on for every notice asked
for; the last process trains to the end. Reported per notice: the newest step reported when
SIGTERM was sent, the newest step the process finished, the step it saved, its exit status,
the step the next process resumed from, and the steps lost (finished before the exit but
trained again after the resume; the goal is 0: the step in flight is saved, not lost).

The independent reference is a fresh, uninterrupted process on its own run directory: every
step's loss (float equality) and the final state (sha256 per piece: params, both Adam moments,
count, step, dropout key, data position) of the preempted run must equal it, bit for bit.
The victim saves only at a notice or at the last step (ckpt_every above the step count), so
"nothing lost" can only come from the save at the notice, never from an interval save.

    python -m capstones.byte_transformer.spot_drill OUT_DIR [--after 3 3] [--steps 30]

writes OUT_DIR/spot_drill.json (SpotDrill, atomically) and prints its table; exit status 0 when
nothing was lost and everything equals the reference.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Literal

import pydantic

from capstones.byte_transformer import documents, training
from capstones.byte_transformer.document_base import Document
from core import curriculum
from core.state import checkpoint
from core.workload import recovery as workload_recovery

STEPS = 30
# The tiny config: a 2-layer d_model=32 model on 6 files of at most 1 KiB; each step takes
# milliseconds, so a process is mostly its start (imports, data, compile or cache load).
# MODEL is also recovery_test's config.
MODEL = (
    "d_model=32",
    "num_layers=2",
    "num_heads=4",
    "max_len=64",
    "seq_len=32",
    "batch_size=2",
    "max_files=6",
    "max_bytes=1024",
    "heldout_fraction=0.34",
)
TINY = (*MODEL, "eval_every=1000", "log_every=1000")  # eval only at the last step
NO_INTERVAL_SAVE = "ckpt_every=100000"  # the victim saves only at a notice or the last step
START_TIMEOUT_S = 120.0  # the first step of a process imports JAX and compiles the step
SHUTDOWN_TIMEOUT_S = 60.0  # from SIGTERM to exit: one step plus one tiny save
RUN_TIMEOUT_S = 300.0  # a whole process at the tiny config, on a loaded 2-core machine
# steps a notice may land after the one asked for: the trainer can outrun the parent's poll
# by a step or more on a loaded machine; only used to refuse too short a run
OVERSHOOT = 4
POLL_S = 0.002  # the trainer finishes a step every few ms: read its events often
RESULT_FILE = "spot_drill.json"


class Preemption(pydantic.BaseModel):
    """One SIGTERM and the resume after it."""

    model_config = pydantic.ConfigDict(strict=True, extra="forbid")
    sigterm_after_step: int = pydantic.Field(ge=1)  # newest step reported when it was sent
    last_finished_step: int = pydantic.Field(ge=1)  # newest step the process finished
    saved_step: int = pydantic.Field(ge=1)  # its "preempted" event's step, committed
    exit_status: int
    shutdown_s: float = pydantic.Field(ge=0)  # SIGTERM sent -> process exited (wall clock)
    resumed_from: int = pydantic.Field(ge=0)  # the next process's "resumed" step
    steps_lost: int  # last_finished_step - resumed_from: trained again (goal 0)


class SpotDrill(Document):
    """What the drill leaves (OUT_DIR/spot_drill.json)."""

    kind: Literal["spot_drill"] = "spot_drill"
    written_at: str
    command: list[str]
    steps: int = pydantic.Field(ge=2)
    preemptions: list[Preemption] = pydantic.Field(min_length=1)
    final_exit_status: int
    losses_equal_reference: bool  # every step's loss, float equality
    mismatched_steps: list[int]
    final_state_equal_reference: bool  # the final checkpoint's digest per piece
    processes: int  # trainer processes started (the reference included)

    @property
    def steps_lost(self) -> int:
        return sum(p.steps_lost for p in self.preemptions)


def command(run_dir: str | os.PathLike, steps: int, *extra: str) -> list[str]:
    """The trainer's argv at the tiny config, printing one JSON event per line."""
    return [
        sys.executable,
        "-m",
        "capstones.byte_transformer",
        "train",
        f"run_dir={run_dir}",
        *TINY,
        f"steps={steps}",
        "events=true",
        "mlflow=false",
        *extra,
    ]


def _env(cache_dir: str | os.PathLike | None) -> dict[str, str]:
    """The child's environment (the phase's job's: core.workload.recovery), pinned to the CPU
    unless JAX_PLATFORMS says otherwise; with ``cache_dir`` JAX's persistent compilation cache
    there: a later process loads the train step instead of compiling it (less CPU per trainer
    process), the same compiled program, so the same bits."""
    return {"JAX_PLATFORMS": "cpu"} | workload_recovery.job_env(cache_dir)


class Trainer:
    """One trainer process in its own process group; its stdout events go to a file that is
    read as it grows. Bounded: ``close()`` kills the group if it is still there."""

    def __init__(self, argv: Sequence[str], events_path: pathlib.Path, env: dict[str, str]):
        self.events_path = events_path
        self._out = open(events_path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close)
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.DEVNULL,
            cwd=curriculum.REPO_ROOT,
            env=env,
            start_new_session=True,  # its own process group: the notice reaches all of it
        )

    def events(self) -> list[dict]:
        """The complete event lines written so far (an unfinished last line is skipped)."""
        text = self.events_path.read_text(encoding="utf-8")
        lines = text.split("\n")[:-1]  # the last piece has no newline yet (or is empty)
        return [json.loads(line) for line in lines if line.startswith("{")]

    def newest_step(self) -> int:
        return max((e["step"] for e in self.events() if e["event"] == "step"), default=0)

    def wait_for_step(self, step: int, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while self.newest_step() < step:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the trainer exited with status {self.proc.returncode} before step {step}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"no step {step} within {timeout_s:g} s")
            time.sleep(POLL_S)

    def signal_group(self, signum: int) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signum)
            except ProcessLookupError:
                pass

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            self.proc.wait()
            raise RuntimeError(f"the trainer did not exit within {timeout_s:g} s") from None

    def close(self) -> None:
        self.signal_group(signal.SIGKILL)
        self.proc.wait()
        self._out.close()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _losses(run_dir: pathlib.Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in training.read_metrics(run_dir)}


def _final_digest(run_dir: pathlib.Path) -> tuple[int, dict[str, str]]:
    """(step, state digest per piece) of the run's newest verified checkpoint (restored here)."""
    _, restored = training.load_state(run_dir)
    return restored.step, checkpoint.state_digest(restored.state, restored.data_state["stream"])


@dataclasses.dataclass(frozen=True)
class Reference:
    """A fresh uninterrupted process's run: every step's loss and its final state digest."""

    steps: int
    losses: dict[int, float]
    final_digest: dict[str, str]


def uninterrupted(
    run_dir: str | os.PathLike, steps: int = STEPS, cache_dir: str | os.PathLike | None = None
) -> Reference:
    """The reference: one fresh process, no signal, run to the end."""
    run_dir = pathlib.Path(run_dir)
    run_dir.mkdir(parents=True)
    argv = command(run_dir, steps, NO_INTERVAL_SAVE)
    with Trainer(argv, run_dir.parent / f"{run_dir.name}-events.jsonl", _env(cache_dir)) as job:
        status = job.wait(RUN_TIMEOUT_S)
        last = job.events()[-1:]
    if status != 0 or last != [{"event": "done", "step": steps}]:
        raise RuntimeError(f"the reference run failed: status {status}, last event {last}")
    losses = _losses(run_dir)
    if sorted(losses) != list(range(1, steps + 1)):
        raise RuntimeError(f"the reference run lacks steps: {sorted(losses)}")
    step, digest = _final_digest(run_dir)
    if step != steps:
        raise RuntimeError(f"the reference's newest checkpoint is step {step}, not {steps}")
    return Reference(steps, losses, digest)


def _check_notices(after: Sequence[int], steps: int) -> list[int]:
    """``after``: how many steps each process trains before its SIGTERM (the first process
    starts at step 0; each later one at the step the one before saved)."""
    after = list(after)
    if not after:
        raise ValueError("give at least one notice (steps to train before SIGTERM)")
    if min(after) < 1:
        raise ValueError(f"each process trains at least 1 step before its notice: {after}")
    # each notice may land a few steps late (the trainer outruns the poll) plus the one in
    # flight: leave that much room so the run does not end before its last notice
    room = sum(after) + len(after) * (OVERSHOOT + 1)
    if room >= steps:
        raise ValueError(f"notices after {after} steps need more than {room} steps; steps={steps}")
    return after


def compare(run_dir: str | os.PathLike, reference: Reference) -> tuple[list[int], bool]:
    """(steps whose loss differs from the reference's or that only one run has, whether the
    run's final checkpoint is the reference's last step with the same digest per piece)."""
    losses = _losses(pathlib.Path(run_dir))
    mismatched = sorted(
        s for s in set(losses) | set(reference.losses) if losses.get(s) != reference.losses.get(s)
    )
    final_step, final_digest = _final_digest(pathlib.Path(run_dir))
    return mismatched, final_step == reference.steps and final_digest == reference.final_digest


def drill(
    base: str | os.PathLike,
    after: Sequence[int],
    steps: int = STEPS,
    reference: Reference | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> SpotDrill:
    """Preempt one run with SIGTERM once each process has trained ``after[i]`` steps (a
    fresh process resumes after each notice), run it to the end, compare with ``reference``
    (an uninterrupted run made here, under base/reference, when None) and write
    base/spot_drill.json."""
    after = _check_notices(after, steps)
    base = pathlib.Path(base)
    run_dir = base / "victim"
    if run_dir.exists():
        raise ValueError(f"{run_dir} exists: give the drill a new base directory")
    if reference is not None and reference.steps != steps:
        raise ValueError(f"the reference has {reference.steps} steps, the drill {steps}")
    base.mkdir(parents=True, exist_ok=True)
    cache_dir = cache_dir if cache_dir is not None else base / "jax-cache"
    processes = 0
    if reference is None:
        reference = uninterrupted(base / "reference", steps, cache_dir)
        processes += 1
    argv = command(run_dir, steps, NO_INTERVAL_SAVE)
    env = _env(cache_dir)
    preempted: list[dict] = []
    start = 0
    for index, count in enumerate([*after, None]):
        with Trainer(argv, base / f"victim-{index}-events.jsonl", env) as job:
            processes += 1
            if count is None:
                status = job.wait(RUN_TIMEOUT_S)
            else:
                job.wait_for_step(start + count)
                notice_step = job.newest_step()
                sent = time.monotonic()
                job.signal_group(signal.SIGTERM)
                status = job.wait(SHUTDOWN_TIMEOUT_S)
                shutdown_s = time.monotonic() - sent
            events = job.events()
        first = events[0] if events else {}
        if preempted:  # this process resumed after the previous notice
            if first.get("event") != "resumed":
                raise RuntimeError(f"process {index} did not resume: {first}")
            previous = preempted[-1]
            previous |= {
                "resumed_from": first["step"],
                "steps_lost": previous["last_finished_step"] - first["step"],
            }
        if count is not None:
            stopped = events[-1] if events else {}
            if stopped.get("event") == "done":
                raise RuntimeError(
                    f"process {index} finished the run before its notice: raise steps"
                )
            if status != 0 or stopped.get("event") != "preempted":
                raise RuntimeError(
                    f"process {index} did not honour SIGTERM: status {status}, last {stopped}"
                )
            committed = [e["step"] for e in events if e["event"] == "committed"]
            if stopped["step"] not in committed:
                raise RuntimeError(f"process {index} stopped at {stopped['step']} unsaved")
            finished = [e["step"] for e in events if e["event"] == "step"]
            preempted.append(
                {
                    "sigterm_after_step": notice_step,
                    "last_finished_step": max(finished),
                    "saved_step": stopped["step"],
                    "exit_status": status,
                    "shutdown_s": shutdown_s,
                }
            )
            start = stopped["step"]  # where the next process should resume
    mismatched_steps, final_equal = compare(run_dir, reference)
    result = {
        "kind": "spot_drill",
        "written_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": [pathlib.Path(argv[0]).name, *argv[1:]],
        "steps": steps,
        "preemptions": preempted,
        "final_exit_status": status,
        "losses_equal_reference": not mismatched_steps,
        "mismatched_steps": mismatched_steps,
        "final_state_equal_reference": final_equal,
        "processes": processes,
    }
    documents.write(base / RESULT_FILE, SpotDrill, result)
    return SpotDrill.model_validate(result)


def rows(result: SpotDrill) -> list[dict]:
    """One table row per preemption."""
    return [
        {
            "SIGTERM after step": p.sigterm_after_step,
            "last finished": p.last_finished_step,
            "saved": p.saved_step,
            "exit": p.exit_status,
            "shutdown s": round(p.shutdown_s, 2),
            "resumed from": p.resumed_from,
            "steps lost": p.steps_lost,
        }
        for p in result.preemptions
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m capstones.byte_transformer.spot_drill", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out_dir", type=pathlib.Path, help="a new directory for the drill")
    parser.add_argument(
        "--after", type=int, nargs="+", default=[3, 3], help="steps per process before SIGTERM"
    )
    parser.add_argument("--steps", type=int, default=STEPS)
    parsed = parser.parse_args(argv)
    try:
        _check_notices(parsed.after, parsed.steps)
        if parsed.out_dir.exists() and any(parsed.out_dir.iterdir()):
            raise ValueError(f"{parsed.out_dir} is not empty: give a new directory")
    except ValueError as exc:
        parser.error(str(exc))
    result = drill(parsed.out_dir, parsed.after, parsed.steps)
    for row in rows(result):
        print("  ".join(f"{k}: {v}" for k, v in row.items()))
    print(
        f"losses == reference: {result.losses_equal_reference}; final state == reference: "
        f"{result.final_state_equal_reference}; steps lost: {result.steps_lost}; "
        f"written {parsed.out_dir / RESULT_FILE}"
    )
    ok = result.losses_equal_reference and result.final_state_equal_reference
    return 0 if ok and result.steps_lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
