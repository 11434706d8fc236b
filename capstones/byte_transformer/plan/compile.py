"""The plan's TPU compile: the capstone's own train step (and its remat variant) compiled
for real TPU topologies on this CPU host through libtpu (core.tpu.topology_compile), and
its memory_analysis() / cost_analysis() beside the analytic figures. Compiling is evidence
about TPU memory and FLOPs, never about TPU speed."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import training
from capstones.byte_transformer.plan import remat as plan_remat
from core.perf import timing
from core.tpu import topology_compile

P = jax.sharding.PartitionSpec

GAP_EXPLANATION = [
    "arguments and outputs agree to a fraction of a percent: the state is 16 bytes per "
    "parameter plus scalars; the rest is TPU tile padding (minor dimensions padded to 128 "
    "lanes, scalars to a small tile).",
    "the compiler's peak lies between the liveness estimate and everything-at-once: XLA "
    "frees each saved activation as soon as its backward use is done and writes gradients "
    "into the update as they appear, but also keeps fusion temporaries and may save tensors "
    "the per-layer table does not list (or fuse away ones it does, e.g. LayerNorm outputs "
    "recomputed inside a matmul fusion).",
    "the state is not donated (training.make_train_step does not donate), so the old and the "
    "new state are both live at the end of the step; donate_argnums=0 would alias them.",
    "FLOPs: the analytic count is matmuls only; the compiler also counts softmax, LayerNorm, "
    "GELU, dropout, the loss and the AdamW update (elementwise work), hence a ratio below 1.",
]


def abstract_inputs(config: config_lib.Config):
    """(state, batch) as ShapeDtypeStructs without device placement."""
    state = jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype), training.abstract_state(config)
    )
    shape = (config.batch_size, config.seq_len)
    batch = {
        name: jax.ShapeDtypeStruct(shape, jnp.float32 if name == "weights_BT" else jnp.int32)
        for name in ("tokens_BT", "segment_ids_BT", "positions_BT", "targets_BT", "weights_BT")
    }
    return state, batch


def compile_for_topology(config: config_lib.Config, topology: str, policy: str | None = None):
    """Compile the train step (or its remat variant) for ``topology``: batch split over the
    chips ("data"), state replicated, as data-parallel training runs it. ValueError when
    libtpu is missing or the batch does not split."""
    chips = len(topology_compile.topology_devices(topology))
    if config.batch_size % chips:
        raise ValueError(
            f"batch_size={config.batch_size} does not split over the {chips} chips of "
            f"{topology}: use a multiple of {chips}"
        )
    state, batch = abstract_inputs(config)
    state_specs = jax.tree.map(lambda leaf: P(), state)
    batch_specs = jax.tree.map(lambda leaf: P("data"), batch)
    (report, _compiled), compile_s = timing.timed_call(
        lambda: topology_compile.compile_for_topology(
            plan_remat.step_function(config, policy),
            (state, batch),
            (state_specs, batch_specs),
            topology,
            out_specs=(state_specs, P()),
        )
    )
    memory = dict(report.memory)
    return {
        "topology": topology,
        "device_kind": report.device_kind,
        "chips": report.devices,
        "compile_s": compile_s,
        "remat_policy": policy,
        "memory": memory,
        "peak_bytes": topology_compile.peak_bytes(memory),
        "flops": report.cost.get("flops"),
        "bytes_accessed": report.cost.get("bytes accessed"),
    }


def comparison_rows(analytic: dict, compiled: dict, remat: bool = False) -> list[dict]:
    """Analytic figures per chip beside the compiler's (bytes, and FLOPs), with the ratio."""
    memory = compiled["memory"]
    peak_key = "peak_liveness_remat_bytes" if remat else "peak_liveness_bytes"
    flops_key = "flops_per_step_remat" if remat else "flops_per_step"
    pairs = [
        (
            "arguments (state + batch shard)",
            "bytes",
            analytic["arguments_bytes"],
            memory["argument_size_in_bytes"],
        ),
        (
            "outputs (new state + metrics)",
            "bytes",
            analytic["outputs_bytes"],
            memory["output_size_in_bytes"],
        ),
        ("peak (liveness estimate)", "bytes", analytic[peak_key], compiled["peak_bytes"]),
    ]
    if not remat:
        pairs.append(
            (
                "peak (everything at once)",
                "bytes",
                analytic["peak_all_at_once_bytes"],
                compiled["peak_bytes"],
            )
        )
    pairs.append(
        ("FLOPs per step (analytic: matmuls only)", "FLOP", analytic[flops_key], compiled["flops"])
    )
    return [
        {
            "quantity": name,
            "unit": unit,
            "analytic": int(a),
            "compiler": None if b is None else int(b),
            "analytic_over_compiler": None if not b else round(a / b, 3),
        }
        for name, unit, a, b in pairs
    ]


def compiler_section(
    config: config_lib.Config,
    topologies: list[str],
    compile_tpu: bool,
    policy: str,
    progress=None,
) -> dict:
    """The TPU compiler's reports per topology (and the remat variant for the first one),
    or, without libtpu or with compile_tpu False, the reason there are none."""
    progress = progress or (lambda line: None)
    compiler: dict = {"available": False, "problem": None, "topologies": {}, "remat": {}}
    if not compile_tpu:
        compiler["problem"] = "not run (compile=false)"
        return compiler
    if (problem := topology_compile.libtpu_problem()) is not None:
        compiler["problem"] = f"not available: {problem}"
        return compiler
    compiler["available"] = True
    for index, topology in enumerate(topologies):
        progress(f"compiling the train step for {topology} (libtpu: a while)")
        compiler["topologies"][topology] = compile_for_topology(config, topology)
        if index == 0:
            progress(f"compiling the remat ({policy}) train step for {topology}")
            compiler["remat"][topology] = compile_for_topology(config, topology, policy)
    return compiler
