"""The assessment item of the phase "TPU Workflows: Launching Jobs & Checkpointed Experiments".

- ``tpu_workflows.job_defect`` (diagnose): a multi-host job script with one defect.
"""

from __future__ import annotations

import builtins
import math
import re
import tempfile
from typing import Any

import numpy as np

from core.assessment.bank.common import pick
from core.assessment.items import DiagnoseItem, Evidence, Item
from core.tpu import cloud_tpu

_JOB_FIXED = """\
import json, os
import numpy as np

def save(path, step, w):
    with open(path + ".tmp", "w") as f:
        f.write(json.dumps({"step": step, "w": w}))
    os.replace(path + ".tmp", path)

def restore(path):
    try:
        ckpt = json.loads(open(path).read())
    except (FileNotFoundError, ValueError):  # no checkpoint yet, or an unreadable one
        return 0, 0.0
    return ckpt["step"], ckpt["w"]

def train(worker, ckpt_dir, data, clock):  # what `python train.py` runs on each worker
    path = os.path.join(ckpt_dir, f"worker{worker}.json")
    start, w = restore(path)
    times = []
    for step in range(start, len(data)):
        t0 = clock()
        w = w + 0.25 * (data[step] - w)  # one step of a tiny, deterministic job
        times.append(clock() - t0)
        save(path, step + 1, w)
    return {"w": w, "steps run": len(times), "step time s": float(np.mean(times[1:]))}

LAUNCH = ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "NAME", "--zone=ZONE",
          "--worker=all", "--command=python train.py"]
"""

# defect id -> (the fixed text, the defective text that replaces it)
_JOB_PLANTS = {
    "timing_compile_step": (
        '"step time s": float(np.mean(times[1:]))',
        '"step time s": float(np.mean(times))',
    ),
    "checkpoint_in_place": (
        '    with open(path + ".tmp", "w") as f:\n'
        '        f.write(json.dumps({"step": step, "w": w}))\n'
        '    os.replace(path + ".tmp", path)\n',
        '    with open(path, "w") as f:\n        f.write(json.dumps({"step": step, "w": w}))\n',
    ),
    "resume_from_zero": (
        "for step in range(start, len(data)):",
        "for step in range(len(data)):",
    ),
    "launch_worker_0": ('"--worker=all"', '"--worker=0"'),
}


class Preempted(Exception):
    """The simulated kill: raised in the middle of a checkpoint write."""


class JobDefect(DiagnoseItem):
    """A checkpointed job script for a Pod slice with one of the lesson's defects planted."""

    id = "tpu_workflows.job_defect"
    phase = "TPU Workflows: Launching Jobs & Checkpointed Experiments"
    lesson = "stage_launch_jobs"
    title = "A checkpointed Pod-slice job with one defect"
    defects = {
        "timing_compile_step": (
            "The reported step time averages in the first step, which compiles",
            "The first step of every process traces and compiles the program (seconds to "
            "minutes on a TPU); averaging it in reports a step time that is mostly compile "
            "time, and worse the fewer steps the process runs. Warm up first and time the "
            "steady state: drop the first step (`times[1:]`) or time it apart as compile time.",
        ),
        "checkpoint_in_place": (
            "The checkpoint is written in place, not to a temporary file that is then renamed",
            "`open(path, 'w')` truncates the last good checkpoint before the new one is "
            "written; a kill in the middle of the write (a preemption) leaves a torn file. "
            "Here the resume reads it as unreadable and silently starts over from step 0, "
            "losing every step. Write to `path + '.tmp'` and `os.replace` it onto `path`: the "
            "rename is atomic, so a reader sees the old checkpoint or the new one, never half.",
        ),
        "resume_from_zero": (
            "The resumed job starts its loop at step 0 instead of the restored step",
            "The job restores the weights and the step but then loops from step 0: it "
            "re-applies steps already in the weights (a different result from the "
            "uninterrupted run) and spends the time of every step again. Loop from the "
            "restored step: `range(start, len(data))`.",
        ),
        "launch_worker_0": (
            "The launch runs the script on worker 0 only, not on every worker",
            "A multi-host slice has one VM (worker) per host and each must run the same "
            "script: `--worker=0` starts it on the first host only, so the other hosts' data "
            "shards are never trained (a real multi-host JAX job would wait at "
            "`jax.distributed.initialize` for the missing processes). Launch with "
            "`--worker=all`.",
        ),
    }

    def params(self, generator):
        slices = [
            name
            for name in cloud_tpu.CREATABLE_TYPES
            if 2 <= cloud_tpu.ACCELERATOR_TYPES[name].hosts <= 4
        ]
        name = pick(generator, sorted(slices))
        kind = cloud_tpu.ACCELERATOR_TYPES[name]
        steps = int(generator.integers(8, 13))
        return {
            "slice": name,
            "zone": cloud_tpu.ZONES[kind.generation][0],
            "hosts": kind.hosts,
            "steps": steps,
            # the kill lands while checkpoint ``kill_at`` is being written: kill_at - 1 steps
            # are committed, and the resumed process has steps - kill_at + 1 >= 3 left to run
            "kill_at": int(generator.integers(3, steps - 1)),
            "compile_s": round(float(generator.uniform(20.0, 90.0)), 1),
            "step_s": round(float(generator.uniform(0.05, 0.5)), 3),
            "data": np.round(generator.normal(1.0, 0.5, size=(kind.hosts, steps)), 3).tolist(),
        }

    def prompt(self, params):
        return (
            f"This training job runs on a **{params['slice']}** slice ({params['hosts']} hosts, "
            "one worker VM each): `LAUNCH` is the command that starts `python train.py` on "
            f"the workers, and each worker trains {params['steps']} steps on its own data "
            "shard, checkpointing after every step. A preemption kills every worker in the "
            "middle of a checkpoint write; the same launch then runs again and the job "
            "resumes. The program is correct except for **one** defect that the lessons on "
            "launching checkpointed jobs teach. Which one?"
        )

    def program(self, defect, params):
        fixed, planted = _JOB_PLANTS[defect]
        return self._source(params).replace(fixed, planted)

    def _source(self, params) -> str:
        """The fixed program for these params (the slice's name and zone filled in)."""
        source = _JOB_FIXED.replace('"NAME"', '"lab-slice"')
        return source.replace('"--zone=ZONE"', f'"--zone={params["zone"]}"')

    def _run(self, source: str, params) -> dict[int, dict | None]:
        """Execute ``source`` as the slice would: the launch on the workers it names, each
        worker killed while writing checkpoint ``kill_at``, then relaunched. Returns the
        resumed run's output per worker (None: that worker never ran)."""
        namespace: dict[str, Any] = {"__name__": "job_defect"}
        exec(compile(source, "<job script>", "exec"), namespace)  # noqa: S102 (our own text)
        workers = _launched_workers(namespace["LAUNCH"], params["hosts"])
        outputs: dict[int, dict | None] = dict.fromkeys(range(params["hosts"]))
        with tempfile.TemporaryDirectory() as ckpt_dir:
            for worker in workers:
                data = params["data"][worker]
                namespace["open"] = _killing_open(params["kill_at"])
                try:
                    namespace["train"](worker, ckpt_dir, data, self._clock(params))
                except Preempted:
                    pass
                del namespace["open"]  # the relaunched process: the real open
                outputs[worker] = namespace["train"](worker, ckpt_dir, data, self._clock(params))
        return outputs

    @staticmethod
    def _clock(params):
        """A simulated clock, so the evidence never depends on this machine's speed: the
        process's first step (the compile) takes compile_s, every later step step_s."""
        state = {"now": 0.0, "calls": 0}

        def clock() -> float:
            if state["calls"] % 2:  # the call that ends a step
                state["now"] += params["compile_s"] if state["calls"] == 1 else params["step_s"]
            state["calls"] += 1
            return state["now"]

        return clock

    def evidence(self, defect, params):
        fixed = self._run(self._source(params), params)
        planted = self._run(self.program(defect, params), params)
        steps, kill_at = params["steps"], params["kill_at"]
        committed = kill_at - 1
        uninterrupted = [_uninterrupted(row) for row in params["data"]]
        lines = [
            f"Both programs were executed here: {params['hosts']} workers, {steps} steps each, "
            f"killed while writing checkpoint {kill_at} ({committed} steps committed), then "
            f"relaunched. Simulated clock: a process's first step (compile) "
            f"{params['compile_s']} s, every later step {params['step_s']} s.",
            "",
            "| worker | run | final w | loop started at step | steps run after the restart "
            "| reported step time |",
            "|---|---|---|---|---|---|",
        ]
        for worker in range(params["hosts"]):
            for label, outputs in (("with the defect", planted), ("fixed", fixed)):
                out = outputs[worker]
                if out is None:
                    lines.append(f"| {worker} | {label} | never ran | - | - | - |")
                else:
                    lines.append(
                        f"| {worker} | {label} | {out['w']:.6f} | {steps - out['steps run']} | "
                        f"{out['steps run']} | "
                        f"{out['step time s']:.4g} s |"
                    )
        lines.append("")
        lines.append(
            "An uninterrupted run ends at w = "
            + ", ".join(f"{w:.6f}" for w in uninterrupted)
            + f" (workers 0..{params['hosts'] - 1}); the fixed program resumes at step "
            f"{committed}, runs the {steps - committed} steps left and reports the steady "
            f"{params['step_s']} s."
        )
        fixed_ok = all(
            out is not None
            and math.isclose(out["w"], want, rel_tol=1e-12)
            and out["steps run"] == steps - committed
            and math.isclose(out["step time s"], params["step_s"], rel_tol=1e-9)
            for out, want in zip(fixed.values(), uninterrupted, strict=True)
        )
        return Evidence(
            "\n".join(lines),
            {
                "the defect changes the result": planted != fixed,
                "the fixed program equals an uninterrupted run and times the steady state": (
                    fixed_ok
                ),
            },
        )


def _launched_workers(argv: list[str], hosts: int) -> list[int]:
    """The workers gcloud's ``--worker`` flag names: "all" or an index list."""
    flag = next(a for a in argv if a.startswith("--worker="))
    value = flag.split("=", 1)[1]
    if value == "all":
        return list(range(hosts))
    if not re.fullmatch(r"\d+(,\d+)*", value):
        raise ValueError(f"unexpected --worker value {value!r}")
    return [int(v) for v in value.split(",")]


def _killing_open(kill_at: int):
    """``open`` for a process that is killed during its ``kill_at``-th write-mode open: the
    write puts half its text on disk, then the process dies (Preempted)."""
    state = {"writes": 0}

    def killing_open(path, mode="r", *args, **kwargs):
        handle = builtins.open(path, mode, *args, **kwargs)
        if "w" not in mode:
            return handle
        state["writes"] += 1
        if state["writes"] != kill_at:
            return handle
        original_write = handle.write

        def torn_write(text):
            original_write(text[: len(text) // 2])
            handle.flush()
            raise Preempted(f"killed while writing {path}")

        handle.write = torn_write
        return handle

    return killing_open


def _uninterrupted(data: list[float]) -> float:
    """The job's final weight with no kill: w <- w + 0.25 (x - w) from w = 0."""
    w = 0.0
    for x in data:
        w = w + 0.25 * (x - w)
    return w


ITEMS: tuple[Item, ...] = (JobDefect(),)
