"""The assessment item of the phase "Workload operations".

- ``operations.model_flops_utilization`` (predict): model FLOP utilization of a training run.

Every figure a question uses comes from the course's TPU library (core/tpu/specs.py, with
its sources; core/tpu/cloud_tpu.py for slice names) and every expected answer is computed:
``live`` with the library, ``derive`` by the closed form in plain Python, independently.
"""

from __future__ import annotations

from core.assessment.bank.common import cite, pick
from core.assessment.items import Item, PredictItem
from core.tpu import cloud_tpu, pricing, specs
from core.workload import health


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
        generation = pick(generator, specs.GENERATIONS)
        name = pick(
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
            f"(bf16 peak per chip, {cite(spec.bf16_flops)})\n\n"
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


ITEMS: tuple[Item, ...] = (ModelFlopsUtilization(),)
