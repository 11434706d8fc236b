"""Lesson 3 (failure_runbooks): one failure injected for real into the training job, the
supervisor's detection and recovery (core.workload.recovery), its timeline, and the runbook an
on-call engineer follows for it."""

from __future__ import annotations

import functools
import pathlib
import tempfile

from core.workload import recovery

# The runbook per failure: what the on-call engineer sees, what fires, what happens by itself,
# what is left to a person, and what is lost. Commands use placeholders in CAPITALS.
RUNBOOKS = {
    "sigterm": {
        "symptom": "Spot/preemptible TPU VM reclaimed: the job exits 143 after a final save",
        "detection": "exit status 143 + the job's 'preempted' event (saved_step)",
        "automatic": "restart on new capacity; resume from the step saved at the notice",
        "manual": "if capacity does not return: queue a new slice, or fall back to on-demand",
        "commands": [
            "gcloud compute tpus queued-resources list --zone=ZONE",
            "gcloud compute tpus tpu-vm describe VM --zone=ZONE --format='value(state,health)'",
            "kubectl get jobset JOB -o jsonpath='{.status.conditions}'",
        ],
        "lost": "nothing: the step in flight finishes and is saved (the capstone's trainer "
        "too: its spot drill, 3 notices at different steps, lost 0 steps and ended bitwise "
        "equal to an uninterrupted run)",
    },
    "sigkill": {
        "symptom": "the process vanished (OOM killer, host maintenance, kill -9): no notice",
        "detection": "exit by signal SIGKILL (status -9; 137 in a container), no 'failed' event",
        "automatic": "restart; resume from the newest committed, verified checkpoint",
        "manual": "check the host's kernel log for OOM; lower batch size or memory if repeated",
        "commands": [
            "gcloud compute tpus tpu-vm ssh VM --zone=ZONE --command='sudo dmesg | tail -50'",
            "kubectl describe pod POD | grep -A3 'Last State'",
        ],
        "lost": "the steps since the last commit (at most save_every)",
    },
    "nan": {
        "symptom": "loss became NaN/inf; the job refuses to save the bad state and exits 3",
        "detection": "the job's 'failed' event: cause 'non-finite loss', last_good_step",
        "automatic": "restart from the checkpoint before the NaN (the bad state was never saved)",
        "manual": "if it recurs at the same step: inspect that batch, lower the learning rate, "
        "clip gradients",
        "commands": [
            "gsutil ls gs://BUCKET/run/checkpoints/",
            "kubectl logs POD --previous | grep '\"failed\"'",
        ],
        "lost": "the steps since the last commit, plus the NaN step",
    },
    "hang": {
        "symptom": "the process is alive, heartbeats arrive, but no step completes",
        "detection": "no 'step' event for stall_s while heartbeats continue: a stall alert",
        "automatic": "kill the whole process group (SIGKILL), restart, resume",
        "manual": "if it recurs: a py-spy dump before the kill; check ICI/DCN links, input",
        "commands": [
            "gcloud compute tpus tpu-vm ssh VM --zone=ZONE --command='py-spy dump --pid PID'",
            "kubectl exec POD -- py-spy dump --pid 1",
        ],
        "lost": "the steps since the last commit; the stall window's wall time",
    },
    "disk-full": {
        "symptom": "a checkpoint save fails with ENOSPC; the job exits 4",
        "detection": "the job's 'failed' event: cause 'save failed', errno 28",
        "automatic": "free space (partial saves removed), restart, resume from the last commit",
        "manual": "grow the disk or move checkpoints to Cloud Storage (gs://); lower max_to_keep",
        "commands": [
            "gcloud compute tpus tpu-vm ssh VM --zone=ZONE --command='df -h; du -sh CKPT_DIR/*'",
            "gcloud compute disks resize DISK --size=200GB --zone=ZONE",
        ],
        "lost": "the steps since the last commit (the failed save's step included)",
    },
}


def runbook_rows(kind: str) -> list[dict]:
    book = RUNBOOKS[kind]
    rows = [{"field": k, "value": book[k]} for k in ("symptom", "detection", "automatic")]
    rows += [{"field": "manual", "value": book["manual"]}]
    rows += [{"field": "command", "value": c} for c in book["commands"]]
    rows += [{"field": "lost", "value": book["lost"]}]
    return rows


def drill(base: pathlib.Path, kind: str, step: int, steps: int, save_every: int):
    """(recovery, reference): the failure recovered, and a fresh uninterrupted process.

    The job processes run in ``base``; the reference is ``reference(steps, save_every)``."""
    uninterrupted = reference(steps, save_every)
    result = recovery.supervise(
        base / "drill", recovery.Failure(kind, step), steps, save_every, cache_dir=jax_cache()
    )
    return result, uninterrupted


@functools.lru_cache(maxsize=16)
def reference(steps: int, save_every: int) -> recovery.Reference:
    """A fresh job process's uninterrupted run of ``steps`` steps, saving every
    ``save_every``: its losses and final state digest.

    Run once per (steps, save_every) in this process: nothing else reaches it (the failure
    and its step are the drill's), so moving the failure or its step re-runs only the
    drill's processes and compares them with the same fresh run."""
    run_dir = pathlib.Path(tempfile.mkdtemp(prefix="failure_runbooks-reference-"))
    return recovery.uninterrupted(run_dir / "reference", steps, save_every, cache_dir=jax_cache())


@functools.cache
def jax_cache() -> pathlib.Path:
    """One JAX compilation cache for every job process this process starts (recovery.job_env;
    a cache already set in the environment is used instead): a drill after the first loads
    the job's programs instead of compiling them again."""
    return pathlib.Path(tempfile.mkdtemp(prefix="failure_runbooks-jax-cache-"))


def timeline(result: recovery.Recovery) -> list[dict]:
    """One row per step event: (attempt, step, seconds since the first attempt started)."""
    t0 = min(e["ts"] for a in result.attempts for e in a.events)
    return [
        {"attempt": f"process {a.index}", "step": e["step"], "t_s": e["ts"] - t0}
        for a in result.attempts
        for e in a.events
        if e["event"] == "step"
    ]


def marks(result: recovery.Recovery) -> list[dict]:
    """The failure (detected) and each restart ('running'), as times on the same clock."""
    t0 = min(e["ts"] for a in result.attempts for e in a.events)
    rows = []
    for a in result.attempts:
        end = a.sent_at or (a.events[-1]["ts"] if a.events else None)
        if a.outcome != "succeeded" and end is not None:
            rows.append({"what": f"failure: {a.outcome}", "t_s": end - t0})
        running = [e for e in a.events if e["event"] == "running"]
        if a.index > 0 and running:
            rows.append(
                {"what": f"restart: resumed at {a.start_step}", "t_s": running[0]["ts"] - t0}
            )
    return rows
