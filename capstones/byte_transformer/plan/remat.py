"""The remat experiment of the plan: the train step with every block under jax.checkpoint,
and the hypothesis "remat cuts the compiler's peak training memory at the price of more
FLOPs, with identical loss and gradients", measured (compiled peak and FLOPs for a TPU
topology, CPU step time, loss and gradients on a real batch)."""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import data, training
from core.lm import tokenizer, transformer
from core.perf import machine, timing
from core.perf import remat as remat_lib
from core.tpu import topology_compile

REMAT_POLICIES = ("nothing_saveable", "dots_saveable")


def remat_loss_fn(
    config: config_lib.Config,
    params: dict,
    batch: dict,
    dropout_key,
    policy: str = "nothing_saveable",
):
    """training.loss_fn with every Block call under jax.checkpoint(policy).

    The same computation as TinyLM.__call__ (embedding dropout from fold_in(key, 0), block
    l's dropout from fold_in(key, l + 1)), so the loss and gradients are the same numbers;
    only which forward values the backward pass keeps (and recomputes) differs.
    """
    if policy not in REMAT_POLICIES:
        raise ValueError(f"remat policy must be one of {REMAT_POLICIES}, got {policy!r}")
    model = training.model_from_params(config, params)
    tokens_BT = jnp.asarray(batch["tokens_BT"])
    mask = tokenizer.segment_mask_BTS(jnp.asarray(batch["segment_ids_BT"]), causal=True)[:, None]
    x_BTD = model.embed(tokens_BT, jnp.asarray(batch["positions_BT"]))
    if dropout_key is not None:
        x_BTD = transformer.dropout(x_BTD, config.dropout, jax.random.fold_in(dropout_key, 0))

    def run_block(graphdef, block_state, x_BTD, mask, key):
        block = nnx.merge(graphdef, block_state)
        return block(x_BTD, mask, dropout_rate=config.dropout, dropout_key=key)[0]

    checkpointed = jax.checkpoint(
        run_block, static_argnums=(0,), policy=getattr(jax.checkpoint_policies, policy)
    )
    for layer, block in enumerate(model.blocks):
        graphdef, block_state = nnx.split(block)
        key = None if dropout_key is None else jax.random.fold_in(dropout_key, layer + 1)
        x_BTD = checkpointed(graphdef, block_state, x_BTD, mask, key)
    logits_BTV = model.unembed(x_BTD)
    return transformer.token_loss(logits_BTV, batch["targets_BT"], batch["weights_BT"])


def remat_train_step(
    config: config_lib.Config, policy: str, state: dict, batch: dict
) -> tuple[dict, dict]:
    """training.train_step with remat_loss_fn in place of training.loss_fn (same update)."""

    def loss(config, params, batch, dropout_key):
        return remat_loss_fn(config, params, batch, dropout_key, policy)

    return training.train_step(config, state, batch, loss=loss)


def step_function(config: config_lib.Config, policy: str | None):
    """(state, batch) -> (state, metrics): training.train_step, or its remat variant.

    One function object per (program key, policy): jax.jit of it reuses the program another
    caller in this process already compiled (jit caches by function identity)."""
    return _step_function(config.program_key(), policy)


@functools.lru_cache(maxsize=16)
def _step_function(config: config_lib.Config, policy: str | None):
    training.make_train_step(config)  # builds the model structure outside any trace
    if policy is None:
        return functools.partial(training.train_step, config)
    return functools.partial(remat_train_step, config, policy)


def step_program(config: config_lib.Config, policy: str):
    """jax.jit(step_function(config, policy)), one per (program key, policy)."""
    return _step_program(config.program_key(), policy)


@functools.lru_cache(maxsize=16)
def _step_program(config: config_lib.Config, policy: str):
    return jax.jit(step_function(config, policy))


def loss_and_grads(config: config_lib.Config, params, batch, key, policy: str | None):
    """(loss, grads) of the training loss (remat_loss_fn when ``policy``), jitted.

    The batch and key are arguments of the program, not constants in it, so every batch and
    key of one (program key, policy) runs the program compiled once in this process."""
    return _loss_and_grads_program(config.program_key(), policy)(params, batch, key)


@functools.lru_cache(maxsize=16)
def _loss_and_grads_program(config: config_lib.Config, policy: str | None):
    training.make_train_step(config)  # builds the model structure outside any trace

    def loss(params, batch, key):
        if policy is None:
            return training.loss_fn(config, params, batch, key)[0]
        return remat_loss_fn(config, params, batch, key, policy)[0]

    return jax.jit(jax.value_and_grad(loss))


def first_batch(config: config_lib.Config) -> dict:
    """The first training batch of the run (real bytes of the standard library)."""
    corpus = data.load_corpus(config)
    return data.training_stream(config, corpus).next_batch()


def compile_cpu(config: config_lib.Config, policy: str | None, state, batch) -> dict:
    """Compile the step on this host's default device (CPU) and run it once: the compiled
    program, compile seconds, the CPU compiler's peak and FLOPs, the state after one step."""
    # policy None: the trainer's own program (training.make_train_step), compiled once per
    # process; a program compiled earlier in this process is reused, not compiled again
    jitted = training.make_train_step(config) if policy is None else step_program(config, policy)
    ahead = timing.lower_and_compile(jitted, state, batch)
    compiled, compile_s = ahead.executable, ahead.total_s
    new_state, metrics = compiled(state, batch)
    jax.block_until_ready(new_state)
    memory = topology_compile.memory_dict(compiled)
    return {
        "compiled": compiled,
        "compile_s": compile_s,
        "peak_bytes": topology_compile.peak_bytes(memory),
        "flops": topology_compile.cost_dict(compiled).get("flops"),
        "loss": float(metrics["loss"]),
        "state": new_state,
    }


def interleaved_step_times(
    program_a, program_b, state, batch, repeats: int, clock=time.perf_counter
):
    """Seconds per call of two programs, timed in alternating order (A B, B A, ...) so a
    machine shared with other work slows both alike; every call is blocked on
    (core.perf.timing.interleaved)."""
    wall, _ = timing.interleaved(
        {"a": lambda: program_a(state, batch), "b": lambda: program_b(state, batch)},
        repeats,
        alternate=True,
        clock=clock,
    )
    return wall["a"], wall["b"]


def _pct(after, before) -> float | None:
    if before in (None, 0) or after is None:
        return None
    return round(100.0 * (after - before) / before, 2)


def measure_on_cpu(config: config_lib.Config, policy: str, repeats: int) -> dict:
    """Remat vs no remat on this host, the run's first batch and step 1's dropout key: loss
    and gradients, the compiled CPU programs' figures, interleaved step times."""
    state = training.init_state(config)
    batch = first_batch(config)
    key = jax.random.wrap_key_data(state["rng"]["dropout"])
    _, dropout_key = jax.random.split(key)
    loss_before, grads_before = loss_and_grads(config, state["params"], batch, dropout_key, None)
    loss_after, grads_after = loss_and_grads(config, state["params"], batch, dropout_key, policy)
    cpu_before = compile_cpu(config, None, state, batch)
    cpu_after = compile_cpu(config, policy, state, batch)
    times_before, times_after = interleaved_step_times(
        cpu_before["compiled"], cpu_after["compiled"], state, batch, repeats
    )
    grad_scale = max(float(np.max(np.abs(np.asarray(g)))) for g in jax.tree.leaves(grads_before))
    return {
        "loss": (float(loss_before), float(loss_after)),
        "grad_diff": remat_lib.max_grad_difference(grads_before, grads_after),
        "grad_scale": grad_scale,
        "param_diff": remat_lib.max_grad_difference(
            cpu_before["state"]["params"], cpu_after["state"]["params"]
        ),
        "cpu": (cpu_before, cpu_after),
        "summaries": (timing.summarize(times_before), timing.summarize(times_after)),
    }


def _before_after(name: str, before, after) -> dict:
    return {f"{name}_before": before, f"{name}_after": after}


def _compiled_figures(before: dict | None, after: dict | None) -> dict:
    """Peak bytes and FLOPs of the TPU compiles before/after remat (None: not compiled)."""
    out = {}
    for key in ("peak_bytes", "flops"):
        out.update(_before_after(key, *(c[key] if c else None for c in (before, after))))
    return out


def _cpu_figures(measured: dict) -> dict:
    """The CPU figures of measure_on_cpu, before/after remat."""
    (cpu_before, cpu_after), (before, after) = measured["cpu"], measured["summaries"]
    out = {
        **_before_after("cpu_step_s", before.median, after.median),
        **_before_after("cpu_step_p10_p90_s", [before.p10, before.p90], [after.p10, after.p90]),
    }
    for key in ("compile_s", "peak_bytes", "flops"):
        out.update(_before_after(f"cpu_{key}", cpu_before[key], cpu_after[key]))
    return out


def hypothesis(
    config: config_lib.Config,
    policy: str,
    repeats: int,
    compiled_before: dict | None,
    compiled_after: dict | None,
    topology: str | None,
) -> dict:
    """Remat vs no remat: compiled peak/FLOPs (TPU topology, when given), CPU step time,
    loss and gradients on the run's first batch (same dropout key as step 1)."""
    measured = measure_on_cpu(config, policy, repeats)
    loss_before, loss_after = measured["loss"]
    result = {
        "statement": (
            f"rematerializing each block (jax.checkpoint, policy {policy}) cuts the "
            "compiler's peak training memory per chip at the price of more FLOPs, with "
            "identical loss and gradients"
        ),
        "policy": policy,
        "topology": topology,
        **_compiled_figures(compiled_before, compiled_after),
        **_cpu_figures(measured),
        **_before_after("loss", loss_before, loss_after),
        "loss_abs_diff": abs(loss_before - loss_after),
        "max_abs_grad_diff": measured["grad_diff"],
        "max_abs_grad": measured["grad_scale"],
        "max_abs_param_diff_after_one_step": measured["param_diff"],
        "param_diff_note": "Adam's first update is lr * g / (|g| + eps): entries whose gradient "
        "is ~1e-8 turn reduction-order differences of ~1e-8 into update differences up to "
        f"lr = {config.learning_rate}; compare the gradients, not the updated parameters",
        "timing_repeats": repeats,
        "machine": machine.machine_label(),
    }
    result["peak_reduction_pct"] = (
        None
        if result["peak_bytes_after"] is None
        else -_pct(result["peak_bytes_after"], result["peak_bytes_before"])
    )
    result["flops_increase_pct"] = _pct(result["flops_after"], result["flops_before"])
    result["cpu_step_change_pct"] = _pct(result["cpu_step_s_after"], result["cpu_step_s_before"])
    result["verdict"] = hypothesis_verdict(result)
    return result


# Remat recomputes the same float32 ops in the backward pass; XLA may fuse them differently,
# so "identical" allows this much absolute difference in the loss and every gradient.
SAME_RESULT_BOUND = 1e-6


def hypothesis_verdict(result: dict) -> str:
    bound = SAME_RESULT_BOUND
    same = result["max_abs_grad_diff"] <= bound and result["loss_abs_diff"] <= bound
    quality = (
        f"loss {result['loss_before']:.6f} vs {result['loss_after']:.6f}, max |grad diff| "
        f"{result['max_abs_grad_diff']:.2e} ({'identical' if same else 'DIFFERENT'})"
    )
    cpu = (
        f"CPU step {result['cpu_step_s_before'] * 1e3:.1f} -> "
        f"{result['cpu_step_s_after'] * 1e3:.1f} ms ({result['cpu_step_change_pct']:+.1f}%)"
    )
    if result["peak_bytes_after"] is None:
        return (
            f"TPU part not measured (no topology compile); {quality}; {cpu}. "
            "The memory claim needs the TPU compiler: run with compile=true and libtpu."
        )
    cut = result["peak_reduction_pct"]
    more = result["flops_increase_pct"]
    supported = cut > 0 and same
    return (
        f"{'SUPPORTED' if supported else 'NOT SUPPORTED'} on {result['topology']}: peak "
        f"{result['peak_bytes_before'] / 1e6:.1f} -> {result['peak_bytes_after'] / 1e6:.1f} MB "
        f"per chip ({cut:.1f}% less), FLOPs {more:+.1f}%; {quality}; {cpu}"
    )
