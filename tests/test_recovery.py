"""Reliability of the course's checkpointing (core/state/checkpoint.py) under real failures.

1. SIGKILL: a training process (``python -m core.state.recovery_demo``) is killed at seeded random
   moments: during training steps, during synchronous saves, during asynchronous saves
   (after the save call returned, files still being written), and by its own SIGKILL right
   after an async save call. Each kill is followed by a fresh process that must resume from
   the newest step that was committed and verified before the kill (read off the directory
   here, and never older than the last "committed" event the victim printed), with a state
   whose every part (params, both Adam moments, Adam count, step, dropout key, data position)
   equals the uninterrupted run's at that step, and then produce the uninterrupted run's
   losses bit for bit. The resumed process is the next victim; the last one runs to the end
   and its final checkpoint must equal the uninterrupted run's leaf by leaf.
2. Corruption: truncated file, flipped byte, missing item, wrong tree structure in the newest
   step are detected before anything is loaded, rejected with an error naming the step and
   the problem, and training resumes from the previous good step, again bit for bit.
"""

from __future__ import annotations

import json
import pathlib
import random
import shutil
import signal
import subprocess
import time

import jax
import numpy as np
import pytest

from core import curriculum, lab
from core.state import checkpoint, recovery_demo

STEPS = 40
SAVE_EVERY = 3
TRIALS = 10
SEED = 20260101
LAST_SAVE = (STEPS - 1) // SAVE_EVERY * SAVE_EVERY  # the last interval save before the end
OPTIONS = ("--save-every", str(SAVE_EVERY), "--max-to-keep", "3", "--digests")
# Kill kinds, cycled over the trials (each with seeded random steps and delays).
KINDS = (
    "during training",
    "during sync save",
    "during async save",
    "self-kill after async save call",
    "during training, async",
)


def _start(
    directory: pathlib.Path, log: pathlib.Path, *options: str, stdout=subprocess.PIPE
) -> subprocess.Popen:
    return subprocess.Popen(
        recovery_demo.command(directory, STEPS, *OPTIONS, *options),
        stdout=stdout,
        stderr=open(log, "ab"),
        text=True,
        bufsize=1,
        cwd=curriculum.REPO_ROOT,
        env=lab.child_env(JAX_PLATFORMS="cpu"),
    )


def _read_event(child: subprocess.Popen, log: pathlib.Path, eof_ok: bool = False) -> dict:
    line = child.stdout.readline()
    if not line:
        child.wait(timeout=60)
        if eof_ok:
            return {"event": "end of output"}
        raise AssertionError(
            f"trainer exited ({child.returncode}) early:\n{log.read_text()[-3000:]}"
        )
    return json.loads(line) if line.startswith("{") else {"event": "other", "line": line}


def _verified_steps_on_disk(directory: pathlib.Path) -> list[int]:
    """Independent of core.state.checkpoint: committed step directories that carry a manifest."""
    if not directory.is_dir():
        return []
    return sorted(
        int(p.name)
        for p in directory.iterdir()
        if p.name.isdigit() and (p / "manifest.json").is_file()
    )


def _restore_final(directory: pathlib.Path, config: recovery_demo.TrainConfig):
    ckpt = checkpoint.Checkpointer(directory)
    try:
        return ckpt.restore_latest(recovery_demo.abstract_state(config))
    finally:
        ckpt.close()


def _assert_trees_equal(a, b, what: str):
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b), what
    for (path, x), y in zip(
        jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b), strict=True
    ):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and np.array_equal(x, y), (
            f"{what}: leaf {jax.tree_util.keystr(path)} differs"
        )


def test_sigkill_at_random_moments_resumes_from_the_last_committed_step_bit_for_bit(tmp_path):
    started = time.perf_counter()
    rng = random.Random(SEED)
    reference_dir, run_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    log = tmp_path / "stderr.log"
    reference_out = tmp_path / "uninterrupted.jsonl"
    reference = _start(
        reference_dir, log, stdout=open(reference_out, "w")
    )  # beside the first victims

    trials = []
    last_committed = None
    for trial in range(TRIALS + 1):
        kind = KINDS[trial % len(KINDS)] if trial < TRIALS else "none: run to the end"
        options = ["--async-save"] if "async" in kind else []
        expected = _verified_steps_on_disk(run_dir)
        assert last_committed is None or (expected and expected[-1] >= last_committed), (
            f"trial {trial}: the victim reported step {last_committed} committed, "
            f"the directory has {expected}"
        )
        kill_after_save_step = None
        if kind.startswith("self-kill"):
            kill_after_save_step = (
                (expected[-1] if expected else 0) // SAVE_EVERY + rng.randint(1, 2)
            ) * SAVE_EVERY
            if kill_after_save_step <= LAST_SAVE:
                options += ["--kill-after-save-call", str(kill_after_save_step)]
            else:
                kind, kill_after_save_step = "during training", None
        child = _start(run_dir, log, *options)
        first = _read_event(child, log)
        while first["event"] not in ("fresh", "resumed"):
            first = _read_event(child, log)
        start_step = first.get("step", 0)
        # Resumed from the newest verified step on disk before this process started.
        assert start_step == (expected[-1] if expected else 0), (
            f"trial {trial}: resumed {first}, on disk {expected}"
        )
        record = {
            "trial": trial,
            "kind": kind,
            "resumed_from": start_step,
            "digest": first.get("digest"),
            "losses": {},
        }
        # Where to kill: seeded, and always before the end of the run.
        kill_step = start_step + rng.randint(1, 2 * SAVE_EVERY)
        if "save" in kind:
            kill_step = (start_step // SAVE_EVERY + rng.randint(1, 2)) * SAVE_EVERY
        if kind != "none: run to the end" and kill_step > (
            LAST_SAVE if "save" in kind else STEPS - 1
        ):
            assert start_step + 1 < STEPS, f"trial {trial}: the run is too short for {TRIALS} kills"
            kind, kill_step = "during training", start_step + 1  # near the end: kill the next step
        delay = rng.uniform(0.0, 0.08) if "save" in kind else rng.uniform(0.0, 0.01)
        last_committed = None
        while True:
            event = _read_event(child, log, eof_ok=kill_after_save_step is not None)
            if event["event"] == "end of output":
                break
            if event["event"] == "step":
                record["losses"][event["step"]] = event["loss"]
            if event["event"] == "committed":
                last_committed = event["step"]
            if event["event"] == "done":
                break
            if kill_after_save_step is not None:
                continue  # the child kills itself; read until its output ends
            trigger = (
                (event["event"] == "save" and event["step"] == kill_step)
                if kind == "during async save"
                else (event["event"] == "step" and event["step"] == kill_step)
            )
            if kind != "none: run to the end" and trigger:
                time.sleep(delay)
                child.send_signal(signal.SIGKILL)
                break
        child.wait(timeout=120)
        if kind == "none: run to the end":
            assert child.returncode == 0, log.read_text()[-3000:]
        else:
            assert child.returncode == -signal.SIGKILL, (
                f"trial {trial} ({kind}) was not killed: rc {child.returncode}"
            )
        record["killed_at_step"] = max(record["losses"], default=start_step)
        record["partial_save_left"] = checkpoint.partial_saves(run_dir)
        record["on_disk_after"] = _verified_steps_on_disk(run_dir)
        trials.append(record)

    assert reference.wait(timeout=300) == 0, log.read_text()[-3000:]
    reference_events = recovery_demo.parse_events(reference_out.read_text())
    reference_losses = {e["step"]: e["loss"] for e in reference_events if e["event"] == "step"}
    reference_digests = {e["step"]: e["digest"] for e in reference_events if e["event"] == "state"}
    assert sorted(reference_losses) == list(range(1, STEPS + 1))

    for record in trials:
        if record["resumed_from"]:
            assert record["digest"] == reference_digests[record["resumed_from"]], (
                f"trial {record['trial']}: restored state differs from the uninterrupted run at "
                f"step {record['resumed_from']}: {record['digest']} vs "
                f"{reference_digests[record['resumed_from']]}"
            )
        for step, loss in record["losses"].items():
            assert loss == reference_losses[step], (
                f"trial {record['trial']}: step {step} loss {loss!r} != {reference_losses[step]!r}"
            )
    assert max(trials[-1]["losses"]) == STEPS
    # Every kind of failure really happened, and some kills did land inside a save.
    assert sum(1 for r in trials[:-1] if r["killed_at_step"] > r["resumed_from"]) >= TRIALS // 2
    assert any(r["partial_save_left"] for r in trials), "no kill landed inside a save"

    config = recovery_demo.TrainConfig()
    final, uninterrupted = _restore_final(run_dir, config), _restore_final(reference_dir, config)
    assert final.step == uninterrupted.step == STEPS
    _assert_trees_equal(final.state, uninterrupted.state, "final state")
    assert final.data_state == uninterrupted.data_state and final.config == uninterrupted.config

    summary = [
        {
            k: r[k]
            for k in (
                "trial",
                "kind",
                "resumed_from",
                "killed_at_step",
                "partial_save_left",
                "on_disk_after",
            )
        }
        for r in trials
    ]
    print(
        f"\n{len(trials) - 1} SIGKILL trials + final run in {time.perf_counter() - started:.1f} s:"
    )
    for row in summary:
        print("  ", row)


# --- corruption -------------------------------------------------------------------------


def _array_file(step_dir: pathlib.Path) -> pathlib.Path:
    return max(
        (p for p in (step_dir / "state").rglob("*") if p.is_file() and "/d/" in p.as_posix()),
        key=lambda p: p.stat().st_size,
    )


def _truncate(step_dir):
    path = _array_file(step_dir)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(step_dir):
    path = _array_file(step_dir)
    content = bytearray(path.read_bytes())
    content[-1] ^= 0x80
    path.write_bytes(bytes(content))


def _remove_item(step_dir):
    shutil.rmtree(step_dir / "data")


def _other_model(step_dir):
    # Replace the step with one written by a model of another width: same step, other tree.
    other = recovery_demo.TrainConfig(hidden=12)
    scratch = step_dir.parent.parent / "other_model"
    recovery_demo.train(other, scratch, 9, save_every=9)
    shutil.rmtree(step_dir)
    shutil.copytree(scratch / "9", step_dir)


CORRUPTIONS = {
    "truncated file": (_truncate, "(truncated or rewritten)"),
    "flipped byte": (_flip, "sha256 mismatch"),
    "missing item": (_remove_item, "item 'data' is missing"),
    "wrong tree structure": (
        _other_model,
        "['params']['w1_FH'] is (8, 12) float32 in the checkpoint, expected (8, 16) float32",
    ),
}


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    directory = tmp_path_factory.mktemp("trained")
    config = recovery_demo.TrainConfig()
    uninterrupted = recovery_demo.train(
        config, directory / "uninterrupted", 12, save_every=3, max_to_keep=None
    )
    recovery_demo.train(config, directory / "run", 9, save_every=3, max_to_keep=None)
    return config, directory / "run", uninterrupted


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupted_newest_step_is_rejected_before_use_and_training_resumes_from_the_previous(
    trained_run, tmp_path, corruption
):
    config, run, uninterrupted = trained_run
    damage, reason = CORRUPTIONS[corruption]
    directory = tmp_path / "run"
    shutil.copytree(run, directory)
    damage(directory / "9")

    ckpt = checkpoint.Checkpointer(directory)
    abstract = recovery_demo.abstract_state(config)
    with pytest.raises(checkpoint.CorruptCheckpointError) as error:
        ckpt.restore(9, abstract)
    message = str(error.value)
    assert message.startswith("checkpoint step 9 rejected: ") and reason in message, message
    assert ckpt.verify(6, abstract) == []
    ckpt.close()

    resumed = recovery_demo.train(config, directory, 12, save_every=3, max_to_keep=None)
    assert resumed.start_step == 6
    assert (
        resumed.rejected
        and resumed.rejected[0][0] == 9
        and any(reason in p for p in resumed.rejected[0][1])
    )
    assert resumed.losses == {s: uninterrupted.losses[s] for s in range(7, 13)}
    _assert_trees_equal(resumed.state, uninterrupted.state, "resumed state")
    assert (directory / checkpoint.REJECTED / "step_9_0" / "REJECTED.json").is_file()
