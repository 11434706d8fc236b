"""The bench's train steps as steppers (one blocked step per call): the JAX step as
``train`` runs it, the same step with the dense attention core (the before of issue 19's
change), the PyTorch twin eager and under torch.compile; their interleaved timing
(core.perf.timing.interleaved) and per-step page faults (``with_usage``)."""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import torch_twin, training
from core.perf import allocator, timing

PAUSE_S = 0.05  # before each timed sample: lets the other framework's spinning threads sleep
DENSE_ATTENTION_CHANGES = (
    "attention: the dense core (every T x T score computed, masked and multiplied; "
    "jax.grad's backward) instead of the causal blocked core with its hand-written backward "
    "(core/lm/causal_blocked.py): the train step before the bench's issue 19 changes",
)


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def step_summary(
    samples: list[float], cpu: list[float], tokens: int, valid: float, usage: list[dict]
) -> dict:
    """bench.json's STEP figures of one stepper's wall and CPU samples (core.perf.timing) and
    its per-step process usage (``with_usage``: minor page faults, system CPU seconds)."""
    wall = timing.summarize(samples)
    return {
        "median_s": wall.median,
        "p10_s": wall.p10,
        "p90_s": wall.p90,
        "min_s": wall.minimum,
        "samples_s": list(samples),
        "cpu_median_s": timing.summarize(cpu).median,
        "tokens_per_s": tokens / wall.median,
        "valid_tokens_per_s": valid / wall.median,
        "minor_faults_per_step": float(statistics.median(u["minor_faults"] for u in usage)),
        "system_s_per_step": float(statistics.median(u["system_s"] for u in usage)),
    }


def with_usage(step: Callable[[], None], record: list[dict]) -> Callable[[], None]:
    """``step`` (which blocks until its work is done) that appends its minor page faults and
    system CPU seconds (getrusage of the whole process) to ``record`` on every call."""

    def measured():
        before = allocator.page_faults()
        step()
        after = allocator.page_faults()
        record.append(
            {
                "minor_faults": after["minor_faults"] - before["minor_faults"],
                "system_s": after["system_s"] - before["system_s"],
            }
        )

    return measured


def interleaved(
    steppers: dict[str, Callable[[], None]], rounds: int, warmup: int, progress=stderr_progress
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU (process) seconds of each blocked stepper, one sample each per round,
    a PAUSE_S sleep before each sample (core.perf.timing.interleaved)."""
    return timing.interleaved(steppers, rounds, warmup, pause_s=PAUSE_S, progress=progress)


def _cost_analysis_flops(compiled) -> float | None:
    with contextlib.suppress(Exception):  # cost_analysis is best effort on some backends
        analysis = compiled.cost_analysis()
        analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
        return float(analysis.get("flops")) if analysis and "flops" in analysis else None
    return None


def jax_stepper(
    config: config_lib.Config, state: dict, batch: dict, step_fn=None
) -> tuple[Callable, dict]:
    """(step(): one blocked training step that advances the state, compile figures).
    ``step_fn``: a jitted (state, batch) -> (state, metrics), default the capstone's own
    training.make_train_step(config). figures["compiled"] is the executable."""
    step_fn = step_fn or training.make_train_step(config)
    batch = jax.device_put(batch)
    ahead = timing.lower_and_compile(step_fn, state, batch)
    compiled = ahead.executable
    holder = {"state": state}

    def step():
        new_state, metrics = compiled(holder["state"], batch)
        jax.block_until_ready((new_state, metrics))
        holder["state"] = new_state

    figures = {
        "lower_s": ahead.lower_s,
        "compile_s": ahead.compile_s,
        "xla_cost_analysis_flops": _cost_analysis_flops(compiled),
        "compiled": compiled,
        "batch": batch,
        "holder": holder,
    }
    return step, figures


def jax_dense_attention_stepper(config: config_lib.Config, state: dict, batch: dict):
    """The train step with the dense attention core (DENSE_ATTENTION_CHANGES): the same
    math, the previous program; (step, compile figures). Its own copy of the state."""
    step_fn = training.make_train_step(config, dense_attention=True)
    return jax_stepper(config, jax.tree.map(jnp.copy, state), batch, step_fn)


def torch_stepper(config: config_lib.Config, params: dict, batch: dict, compile_: bool):
    """step(): one twin training step (eager or torch.compile'd), waited for."""
    import torch

    model = torch_twin.from_jax_params(config, params)
    model.train()
    optimizer = torch_twin.make_optimizer(config, model)
    torch_batch = torch_twin.batch_to_torch(batch)
    loss_fn = torch.compile(model.loss) if compile_ else model.loss

    def step():
        metrics = torch_twin.train_step(model, optimizer, torch_batch, config.clip_norm, loss_fn)
        float(metrics["loss"])  # CPU tensors: a host read waits for the step

    return step


def torch_compile_stepper(config: config_lib.Config, params: dict, batch: dict):
    """(stepper, {"first_step_s", "caches"}) after one compiling step, or (None, {"error":
    str}) when torch.compile fails (e.g. no C++ compiler): the error is a result, not a
    crash. Inductor's caches are disabled for the first step, so its time is a cold compile
    (what a fresh machine pays), not a cache hit from an earlier run."""
    try:
        import torch._inductor.config as inductor_config

        step = torch_stepper(config, params, batch, True)
        with inductor_config.patch(force_disable_caches=True):
            _, first = timing.timed_call(step)
        return step, {"first_step_s": first, "caches": "disabled for the first step (cold)"}
    except Exception as exc:  # noqa: BLE001 - any failure of the compiler stack is recorded
        message = " ".join(f"{type(exc).__name__}: {exc}".split())
        return None, {"error": message[:2000]}
