"""Assessment items of the TPU phases: slice names, job scripts, KV-cache HBM, the roofline, MFU.

Every figure a question uses comes from the course's TPU library (core/tpu/specs.py, with its
sources; core/tpu/cloud_tpu.py for slice names) and every expected answer is computed:
``live`` with the library, ``derive`` by the closed form in plain Python, independently.
"""

from __future__ import annotations

import builtins
import math
import re
import tempfile
from typing import Any

import numpy as np

from core.assessment.items import DiagnoseItem, Evidence, Item, PredictItem
from core.perf import roofline
from core.tpu import budget, cloud_tpu, pricing, specs
from core.workload import health

GIB = 2**30
GB = 1e9


def _pick(generator: np.random.Generator, options):
    """One of ``options`` (a sequence), drawn with the item's own generator."""
    options = list(options)
    return options[int(generator.integers(len(options)))]


def _cite(*figures: specs.Figure) -> str:
    """The sources of spec figures as the learner reads them: "key: text", each once."""
    keys = dict.fromkeys(f.source for f in figures)
    return "; ".join(f"{key}: {specs.SOURCES[key]}" for key in keys)


def _distinct(wrong: dict[str, float], expected: float, margin: float) -> dict[str, float]:
    """The planted mistakes that give another number than the right one for these params
    (forgetting the 2 of 2MNK changes nothing when the matmul is memory-bound)."""
    return {
        name: value
        for name, value in wrong.items()
        if abs(value - expected) > margin * max(abs(expected), 1e-300)
    }


def _alternatives(figure: specs.Figure, name: str) -> str:
    """Other published values of a figure, named with their sources ("" when none)."""
    if not figure.alternatives:
        return ""
    others = ", ".join(f"{value:.4g} ({source})" for value, source in figure.alternatives)
    return f" (other published {name}: {others}; the course uses {figure.value:.4g})"


# -- 1. TPU Setup: chips in a slice name --


class SliceChips(PredictItem):
    """How many chips a slice name means: v5p names count TensorCores, v5e/v6e names count
    chips, TPU7x slices are named by their chip topology."""

    id = "tpu_setup.slice_chips"
    phase = "TPU Setup: Provisioning & Runtime Verification"
    lesson = "select_tpu_slice"
    title = "Chips in a TPU slice name"
    units = ""
    rel_tol = 0.0
    abs_tol = 0.5  # a count: the nearest integer

    def params(self, generator):
        generation = _pick(generator, specs.GENERATIONS)
        names = [
            name
            for name, kind in cloud_tpu.ACCELERATOR_TYPES.items()
            if kind.generation == generation and kind.chips >= 4
        ]
        return {"name": _pick(generator, names)}

    def prompt(self, params):
        name = params["name"]
        if name.startswith("tpu7x:"):
            given = (
                f"A TPU7x (Ironwood) slice has the topology `{name}` (the name libtpu and GKE "
                "use: TPU7x has no Cloud TPU API accelerator type)."
            )
        else:
            given = f"You create a Cloud TPU VM with `--accelerator-type={name}`."
        return f"{given}\n\nHow many TPU **chips** does the slice have?"

    def live(self, params):
        return float(cloud_tpu.ACCELERATOR_TYPES[params["name"]].chips)

    def _by_rule(self, name: str) -> tuple[str, int, str]:
        """(generation, chips, the rule in words) from the name alone."""
        if name.startswith("tpu7x:"):
            dims = [int(d) for d in name.split(":", 1)[1].split("x")]
            chips = math.prod(dims)
            product = " x ".join(str(d) for d in dims)
            return "tpu7x", chips, f"a TPU7x topology counts chips per axis: {product} = {chips}"
        prefix, number = name.rsplit("-", 1)
        count = int(number)
        if prefix == "v5p":
            return (
                "v5p",
                count // 2,
                f"a v5p name counts TensorCores, 2 per chip: {count} / 2 = {count // 2}",
            )
        generation = "v5e" if prefix == "v5litepod" else prefix
        return generation, count, f"a {generation} name counts chips (1 TensorCore each): {count}"

    def derive(self, params):
        generation, chips, rule = self._by_rule(params["name"])
        spec = specs.chip(generation)
        hosts = -(-chips // spec.chips_per_host)
        devices = chips * spec.devices_per_chip
        text = (
            f"**{params['name']}**: {rule} chips.\n\n"
            f"- TensorCores: {chips} chips x {spec.tensorcores} = {chips * spec.tensorcores}\n"
            f"- JAX devices: {chips} x {spec.devices_per_chip} per chip = {devices}"
            + (" (each TPU7x TensorCore is its own device)" if spec.devices_per_chip > 1 else "")
            + "\n"
            f"- hosts (gcloud workers): ceil({chips} / {spec.chips_per_host} chips per host) "
            f"= {hosts}\n\n"
            "Lesson: read the generation's naming rule before you size a slice. v5p names "
            "count TensorCores, v5e (`v5litepod-N`) and v6e names count chips, TPU7x is named "
            "by its chip topology; chips, TensorCores, JAX devices and hosts are four "
            "different counts."
        )
        return float(chips), text

    def wrong(self, params, expected):
        generation, chips, _rule = self._by_rule(params["name"])
        spec = specs.chip(generation)
        hosts = -(-chips // spec.chips_per_host)
        wrong = {"hosts taken for chips": float(hosts)}
        if generation == "v5p":
            wrong["the name's number taken as chips (it counts TensorCores)"] = float(2 * chips)
        elif generation == "tpu7x":
            dims = [int(d) for d in params["name"].split(":", 1)[1].split("x")]
            wrong["TensorCores / JAX devices taken for chips"] = float(2 * chips)
            wrong["the topology's dimensions added, not multiplied"] = float(sum(dims))
        else:
            wrong["v5p's rule applied: the number halved"] = float(chips / 2)
        return {k: v for k, v in wrong.items() if abs(v - expected) > self.abs_tol}


# -- 2. TPU Workflows: a job script with one defect --

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
        name = _pick(generator, sorted(slices))
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


# -- 3. TPU Systems: KV cache in HBM --

_KV_DTYPES = ("bfloat16", "int8", "float32")
_KV_DTYPE_BYTES = {"bfloat16": 2, "int8": 1, "float32": 4}  # the derivation's own table


class KvCacheHbm(PredictItem):
    """One chip's share of a GQA decoder's KV cache as a percent of that chip's HBM."""

    id = "tpu_systems.kv_cache_hbm"
    phase = "TPU Systems: Generations, Memory, Precision & XProf"
    lesson = "tpu_generations_hbm"
    title = "KV-cache HBM on a TPU generation"
    units = "%"
    rel_tol = 0.01  # tight: GiB against GB is a 7.4% mistake

    def params(self, generator):
        for _ in range(1000):  # resample until one chip's share is a plausible 2-95% of HBM
            kv_heads = _pick(generator, (4, 8, 16))
            p = {
                "generation": _pick(generator, specs.GENERATIONS),
                "layers": _pick(generator, (16, 24, 32, 40, 48, 64, 80)),
                "kv_heads": kv_heads,
                "heads": kv_heads * _pick(generator, (2, 4, 8)),
                "head_dim": _pick(generator, (64, 128, 256)),
                "batch": _pick(generator, (1, 2, 4, 8, 16, 32, 64)),
                "context": _pick(generator, (4096, 8192, 16384, 32768, 65536, 131072)),
                "kv_dtype": _pick(generator, _KV_DTYPES),
                "chips": _pick(generator, [c for c in (1, 2, 4, 8) if kv_heads % c == 0]),
            }
            if 2.0 <= self.derive(p)[0] <= 95.0:
                return p
        raise RuntimeError("no KV-cache parameters in range")  # never reached in practice

    def _shape(self, p) -> budget.TransformerShape:
        d_model = p["heads"] * p["head_dim"]
        return budget.TransformerShape(
            vocab=32000,
            d_model=d_model,
            layers=p["layers"],
            heads=p["heads"],
            d_ff=4 * d_model,
            kv_heads=p["kv_heads"],
            head_dim=p["head_dim"],
        )

    def _hbm_text(self, generation: str) -> str:
        """One chip's HBM in the unit its source uses, with the source's key."""
        figure = specs.chip(generation).hbm_bytes
        if figure.unit == "GiB":
            return f"{figure.value / GIB:.0f} GiB (source: {figure.source})"
        return f"{figure.value / GB:.0f} GB (source: {figure.source})"

    def prompt(self, p):
        return (
            f"A decoder with **{p['layers']} layers**, **{p['heads']} query heads** and "
            f"**{p['kv_heads']} KV heads** (grouped-query attention), head dim "
            f"**{p['head_dim']}**, serves a batch of **{p['batch']}** sequences at a context "
            f"of **{p['context']:,}** tokens, with its KV cache in **{p['kv_dtype']}**. It runs "
            f"on **{p['chips']} {p['generation']} chip{'s' if p['chips'] > 1 else ''}**, the KV "
            "heads split evenly over the chips (tensor parallel). One "
            f"{p['generation']} chip has {self._hbm_text(p['generation'])} of HBM "
            "(GB = 1e9 bytes, GiB = 2^30 bytes).\n\n"
            "What **percent of one chip's HBM** does that chip's share of the KV cache fill?"
        )

    def live(self, p):
        setup = budget.ServingSetup(
            batch=p["batch"], context=p["context"], kv_dtype=p["kv_dtype"], chips=p["chips"]
        )
        per_chip = budget.serving_budget(self._shape(p), setup)["KV cache"]
        return 100.0 * per_chip / specs.chip(p["generation"]).hbm_bytes.value

    def derive(self, p):
        itemsize = _KV_DTYPE_BYTES[p["kv_dtype"]]
        elements = 2 * p["layers"] * p["batch"] * p["context"] * p["kv_heads"] * p["head_dim"]
        total = elements * itemsize
        per_chip = total / p["chips"]
        hbm = specs.chip(p["generation"]).hbm_bytes.value
        percent = 100.0 * per_chip / hbm
        text = (
            "KV cache = 2 (K and V) x layers x batch x context x KV heads x head dim x bytes\n\n"
            f"= 2 x {p['layers']} x {p['batch']} x {p['context']:,} x {p['kv_heads']} x "
            f"{p['head_dim']} x {itemsize} B ({p['kv_dtype']}) = {total:,} B "
            f"= {total / GIB:.4g} GiB\n\n"
            f"Per chip (KV heads split over {p['chips']}): {total / GIB:.4g} / {p['chips']} "
            f"= {per_chip / GIB:.4g} GiB = {per_chip / GB:.4g} GB\n\n"
            f"One {p['generation']} chip's HBM: {self._hbm_text(p['generation'])} = "
            f"{hbm:.4g} B\n\n"
            f"Share: {per_chip:.4g} B / {hbm:.4g} B = **{percent:.4g}%**, leaving "
            f"{(hbm - per_chip) / GIB:.4g} GiB for the weights and the rest.\n\n"
            f"Source of the HBM figure: {_cite(specs.chip(p['generation']).hbm_bytes)}.\n\n"
            "Lesson: count both K and V, use the KV heads (not the query heads: grouped-query "
            f"attention shrinks the cache {p['heads'] // p['kv_heads']}x here), and keep bytes "
            "in one unit: HBM is published in GB for some generations and in GiB for others."
        )
        return percent, text

    def wrong(self, p, expected):
        hbm = specs.chip(p["generation"]).hbm_bytes
        # the cache in GiB over an HBM figure read in GB, or the cache in GB over HBM in GiB
        units = GB / GIB if hbm.unit == "GB" else GIB / GB
        wrong = {
            "K or V only (the factor 2 forgotten)": expected / 2,
            "units: GiB and GB mixed": expected * units,
            "query heads used instead of KV heads": expected * p["heads"] / p["kv_heads"],
        }
        if p["chips"] > 1:
            wrong["the cache not split over the chips"] = expected * p["chips"]
        return wrong


# -- 4. Performance diagnosis: the roofline bound of a matmul --


class RooflineBound(PredictItem):
    """The roofline lower bound on a bf16 matmul's time on one TPU chip."""

    id = "performance.roofline_bound"
    phase = "Performance diagnosis"
    lesson = "hlo_roofline"
    title = "Roofline bound of a matmul on a TPU chip"
    units = "µs"
    rel_tol = 0.02
    itemsize = 2  # bfloat16 inputs and output

    def params(self, generator):
        generation = _pick(generator, specs.GENERATIONS)
        spec = specs.chip(generation)
        compute_bound = bool(generator.integers(2))  # both kinds occur over the seeds
        for _ in range(1000):
            m = int(2 ** generator.integers(3, 14))
            k = int(2 ** generator.integers(10, 15))
            n = int(2 ** generator.integers(10, 15))
            intensity = (m * n * k) / (m * k + k * n + m * n)  # 2MNK / (2 bytes x elements)
            ratio = intensity / spec.ridge_point
            # away from the ridge, so the "other bound" mistake is a different number
            if (compute_bound and ratio > 1.5) or (not compute_bound and ratio < 0.67):
                return {"generation": generation, "m": m, "k": k, "n": n}
        raise RuntimeError("no matmul shape in range")  # never reached in practice

    def prompt(self, p):
        spec = specs.chip(p["generation"])
        return (
            f"A **bfloat16** matmul (M, K) @ (K, N) with M = **{p['m']}**, K = **{p['k']}**, "
            f"N = **{p['n']}** (the output is bfloat16 too) runs on one **{p['generation']}** "
            f"chip: bf16 peak {spec.bf16_flops.value:.4g} FLOP/s, HBM bandwidth "
            f"{spec.hbm_bandwidth.value:.4g} B/s (source: "
            f"{', '.join(dict.fromkeys((spec.bf16_flops.source, spec.hbm_bandwidth.source)))})."
            "\n\n"
            "What is the **roofline lower bound** on its time, in **microseconds**? "
            "(Each operand and the result cross HBM once.)"
        )

    def live(self, p):
        spec = specs.chip(p["generation"])
        cost = roofline.matmul_cost(p["m"], p["n"], p["k"], self.itemsize)
        seconds = roofline.roofline_seconds(cost, spec.bf16_flops.value, spec.hbm_bandwidth.value)
        return seconds * 1e6

    def _times(self, p) -> tuple[float, float, float, float]:
        """(FLOPs, bytes, compute µs, memory µs) by the closed form."""
        spec = specs.chip(p["generation"])
        flops = 2.0 * p["m"] * p["n"] * p["k"]
        moved = float(p["m"] * p["k"] + p["k"] * p["n"] + p["m"] * p["n"]) * self.itemsize
        return (
            flops,
            moved,
            flops / spec.bf16_flops.value * 1e6,
            moved / spec.hbm_bandwidth.value * 1e6,
        )

    def derive(self, p):
        spec = specs.chip(p["generation"])
        flops, moved, compute_us, memory_us = self._times(p)
        bound_us = max(compute_us, memory_us)
        intensity = flops / moved
        ridge = spec.bf16_flops.value / spec.hbm_bandwidth.value
        kind = "compute-bound" if compute_us >= memory_us else "memory-bound"
        m, k, n = p["m"], p["k"], p["n"]
        text = (
            f"FLOPs = 2 M N K = 2 x {m} x {n} x {k} = {flops:.4g}\n\n"
            f"Bytes = (M K + K N + M N) x 2 B = ({m * k:,} + {k * n:,} + {m * n:,}) x 2 "
            f"= {moved:.4g} B\n\n"
            f"Compute time = {flops:.4g} / {spec.bf16_flops.value:.4g} FLOP/s "
            f"= {compute_us:.4g} µs; memory time = {moved:.4g} / "
            f"{spec.hbm_bandwidth.value:.4g} B/s = {memory_us:.4g} µs\n\n"
            f"Bound = max of the two = **{bound_us:.4g} µs**: **{kind}**. Arithmetic "
            f"intensity {flops:.4g} / {moved:.4g} = {intensity:.4g} FLOP/byte against the "
            f"{p['generation']} ridge point {spec.bf16_flops.value:.4g} / "
            f"{spec.hbm_bandwidth.value:.4g} = {ridge:.4g} FLOP/byte.\n\n"
            f"Sources of the peak and the bandwidth: {_cite(spec.bf16_flops, spec.hbm_bandwidth)}"
            f"{_alternatives(spec.hbm_bandwidth, 'HBM bandwidth')}.\n\n"
            "Lesson: a kernel can be no faster than the slower of computing and moving its "
            "bytes; below the ridge point the bandwidth sets the time (a small-M matmul, as "
            "in decoding), above it the MXUs do."
        )
        return bound_us, text

    def wrong(self, p, expected):
        flops, moved, compute_us, memory_us = self._times(p)
        spec = specs.chip(p["generation"])
        wrong = {
            "the other bound (min instead of max)": min(compute_us, memory_us),
            "MNK FLOPs (the 2 forgotten)": max(compute_us / 2, memory_us),
            "bits for bytes": max(compute_us, moved * 8 / spec.hbm_bandwidth.value * 1e6),
        }
        return _distinct(wrong, expected, margin=2.5 * self.rel_tol)


# -- 5. Workload operations: model FLOP utilization --


class ModelFlopsUtilization(PredictItem):
    """MFU of a training job from its measured tokens/s over the whole slice."""

    id = "operations.model_flops_utilization"
    phase = "Workload operations"
    lesson = "capacity_cost"
    title = "Model FLOP utilization of a training job"
    units = "%"
    rel_tol = 0.02
    steps = 6  # step events the simulated job log holds (the first one compiles)

    def params(self, generator):
        generation = _pick(generator, specs.GENERATIONS)
        name = _pick(
            generator,
            [
                n
                for n, t in cloud_tpu.ACCELERATOR_TYPES.items()
                if t.generation == generation and t.chips >= 4  # "one chip's peak" is wrong
            ],
        )
        chips = cloud_tpu.ACCELERATOR_TYPES[name].chips
        parameters = float(f"{10 ** generator.uniform(8.5, 11.0):.2g}")
        true_mfu = generator.uniform(0.2, 0.65)
        peak = specs.chip(generation).bf16_flops.value
        # the measured rate, rounded as a dashboard shows it; the answer follows from it
        tokens_per_s = float(f"{true_mfu * chips * peak / (6 * parameters):.3g}")
        return {
            "generation": generation,
            "slice": name,
            "chips": chips,
            "parameters": parameters,
            "tokens_per_s": tokens_per_s,
            "tokens_per_step": 2048 * int(2 ** generator.integers(6, 11)),
        }

    def prompt(self, p):
        spec = specs.chip(p["generation"])
        return (
            f"A dense transformer with **{p['parameters'] / 1e9:.3g} billion parameters** "
            "trains on a "
            f"**{p['slice']}** slice ({p['chips']} {p['generation']} chips). Its steady-state "
            f"throughput, measured over the whole slice, is **{p['tokens_per_s']:,.0f} "
            f"tokens/s**. One {p['generation']} chip's bf16 peak is "
            f"{spec.bf16_flops.value / 1e12:.4g} TFLOP/s (source: {spec.bf16_flops.source}).\n\n"
            "What is its **model FLOP utilization (MFU), in percent**? (Count the model's "
            "training FLOPs per token; no rematerialization.)"
        )

    def live(self, p):
        # the job's step log: a compile step, then steady steps at the measured rate
        step_s = p["tokens_per_step"] / p["tokens_per_s"]
        events = [
            {"event": "step", "step": i, "tokens": p["tokens_per_step"],
             "step_time_s": step_s * (30.0 if i == 0 else 1.0)}
            for i in range(self.steps)
        ]  # fmt: skip
        flops_per_step = pricing.training_flops_per_token(p["parameters"]) * p["tokens_per_step"]
        peak = p["chips"] * specs.chip(p["generation"]).bf16_flops.value
        measured = health.throughput(events, flops_per_step, peak, p["slice"], skip_first=1)
        return 100.0 * measured.mfu

    def derive(self, p):
        spec = specs.chip(p["generation"])
        peak = spec.bf16_flops.value
        achieved = 6.0 * p["parameters"] * p["tokens_per_s"]
        slice_peak = p["chips"] * peak
        percent = 100.0 * achieved / slice_peak
        text = (
            "MFU = model FLOP/s achieved / peak FLOP/s of the slice\n\n"
            f"achieved = 6 N x tokens/s = 6 x {p['parameters']:.4g} x {p['tokens_per_s']:.4g} "
            f"= {achieved:.4g} FLOP/s (training: 2N forward + 4N backward per token)\n\n"
            f"slice peak = {p['chips']} chips x {peak:.4g} FLOP/s = {slice_peak:.4g} FLOP/s "
            f"(bf16 peak per chip, {_cite(spec.bf16_flops)})\n\n"
            f"MFU = {achieved:.4g} / {slice_peak:.4g} = **{percent:.4g}%**\n\n"
            "Lesson: the tokens/s of the whole slice go against the peak of the whole slice; a "
            "training token costs 6N FLOPs (2N is inference); keep every figure in FLOP/s."
        )
        return percent, text

    def wrong(self, p, expected):
        return {
            "2N FLOPs per token (inference, not training)": expected / 3,
            "one chip's peak instead of the slice's": expected * p["chips"],
            "peak in TFLOP/s used as FLOP/s": expected * 1e12,
            "a fraction, not a percent": expected / 100,
        }


ITEMS: tuple[Item, ...] = (
    SliceChips(),
    JobDefect(),
    KvCacheHbm(),
    RooflineBound(),
    ModelFlopsUtilization(),
)
