"""Point 2 of the capstone: fresh-process recovery, bit for bit.

An uninterrupted reference run keeps every checkpoint. Then one run is killed with SIGKILL
at seeded random steps, each time resumed by a fresh ``python -m capstones.byte_transformer
train`` process, until it finishes. At every resumption the restored pieces (parameters,
Adam mu, Adam nu, Adam count, step, dropout key, data-stream position) must equal the
reference's checkpoint of the same step piece by piece, the restored step must be at least
the newest one the victim reported committed, and in the end the loss of every step equals
the reference's bit for bit. SIGTERM (preemption) must save the current step, exit 0 and
resume the same way.
"""

from __future__ import annotations

import json
import pathlib
import random
import signal
import subprocess
import sys

import pytest

from capstones.byte_transformer import spot_drill, training
from core import curriculum, runtime
from core.state import checkpoint

STEPS = 30
TINY = [
    *spot_drill.MODEL,
    f"steps={STEPS}",
    "ckpt_every=3",
    "eval_every=10",
    "log_every=10",
]
SEED = 20261130


def _start(run_dir: pathlib.Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "capstones.byte_transformer", "train", f"run_dir={run_dir}"]
        + TINY
        + ["events=true", "mlflow=false", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        bufsize=1,
        cwd=curriculum.REPO_ROOT,
        env=runtime.child_env(JAX_PLATFORMS="cpu"),
    )


def _events_until(process: subprocess.Popen, stop) -> list[dict]:
    """Read JSON events until ``stop(event)`` is true or the process ends."""
    events = []
    for line in process.stdout:
        event = json.loads(line)
        events.append(event)
        if stop(event):
            break
    return events


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: its losses and the digest of every checkpointed step."""
    run_dir = tmp_path_factory.mktemp("reference")
    process = _start(run_dir, "max_to_keep=100", "async_ckpt=false")
    events = _events_until(process, lambda e: False)
    assert process.wait(timeout=300) == 0
    assert events[-1] == {"event": "done", "step": STEPS}
    losses = {r["step"]: r["loss"] for r in training.read_metrics(run_dir)}
    assert sorted(losses) == list(range(1, STEPS + 1))
    config = training.run_config(run_dir, {})
    abstract = training.abstract_state(config)
    digests = {}
    with checkpoint.Checkpointer(run_dir / training.CHECKPOINTS, async_save=False) as ckpt:
        for step in ckpt.committed_steps():
            restored = ckpt.restore(step, abstract)
            digests[step] = checkpoint.state_digest(restored.state, restored.data_state["stream"])
    assert sorted(digests) == list(range(3, STEPS + 1, 3))
    return {"losses": losses, "digests": digests}


def test_sigkill_at_random_steps_resumes_bit_for_bit(tmp_path, reference):
    rng = random.Random(SEED)
    run_dir = tmp_path / "victim"
    kill_after = sorted(rng.sample(range(4, STEPS - 2), 3))  # after the first save at 3
    resumptions = []
    for round_index, target in enumerate([*kill_after, None]):
        async_save = "true" if round_index % 2 else "false"
        process = _start(run_dir, f"async_ckpt={async_save}")
        if target is None:
            events = _events_until(process, lambda e: False)
            assert process.wait(timeout=300) == 0
        else:
            events = _events_until(
                process, lambda e, t=target: e["event"] == "step" and e["step"] >= t
            )
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
            process.stdout.close()
            assert process.returncode == -signal.SIGKILL
        start = events[0]
        if round_index == 0:
            assert start["event"] == "fresh"
        else:
            assert start["event"] == "resumed"
            step = start["step"]
            # never older than the newest step the previous victim saw committed
            assert step >= resumptions[-1]["newest committed"]
            expected = reference["digests"][step]
            mismatched = [k for k in checkpoint.DIGEST_GROUPS if start["digest"][k] != expected[k]]
            assert not mismatched, f"restored step {step}: {mismatched} differ from the reference"
        committed = [e["step"] for e in events if e["event"] == "committed"]
        resumptions.append({"newest committed": max(committed, default=0)})
    assert len(resumptions) == 4
    losses = {r["step"]: r["loss"] for r in training.read_metrics(run_dir)}
    assert losses == reference["losses"]  # every step, bit for bit (float equality)
    final = training.load_state(run_dir)[1]
    assert final.step == STEPS
    assert (
        checkpoint.state_digest(final.state, final.data_state["stream"])
        == reference["digests"][STEPS]
    )


def test_sigterm_saves_and_exits_cleanly_then_resumes(tmp_path, reference):
    run_dir = tmp_path / "preempted"
    process = _start(run_dir, "ckpt_every=100")  # no interval save before the signal
    events = _events_until(process, lambda e: e["event"] == "step" and e["step"] >= 5)
    process.send_signal(signal.SIGTERM)
    events += _events_until(process, lambda e: False)
    assert process.wait(timeout=120) == 0
    stopped = events[-1]
    assert stopped["event"] == "preempted" and stopped["step"] >= 5
    assert stopped["step"] in [e["step"] for e in events if e["event"] == "committed"]
    process = _start(run_dir, "ckpt_every=100")
    events = _events_until(process, lambda e: False)
    assert process.wait(timeout=300) == 0
    assert events[0]["event"] == "resumed" and events[0]["step"] == stopped["step"]
    losses = {r["step"]: r["loss"] for r in training.read_metrics(run_dir)}
    assert losses == reference["losses"]
