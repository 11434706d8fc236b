"""The TPU plan of the byte Transformer (the ``plan`` command): which TPU, which precision,
how much memory, and one tested hypothesis.

    python -m capstones.byte_transformer plan [out=plan.json] [compile=true] [key=value ...]

1. Parameters: a closed form of TinyLM's parameter count, checked against the real
   training state (training.init_state).
2. Precision policy: the dtype of every kind of number (core.transformer.Precision), its
   bytes per element and why.
3. Memory per chip, data parallel over a topology's chips: parameters, gradients, Adam
   moments, activations saved per layer (each tensor with its formula), logits, and the KV
   cache for serving; BESIDE the TPU compiler's memory_analysis() of the capstone's own
   training.train_step compiled for real TPU topologies (v5e:2x2, v6e:2x2) on this CPU host
   through libtpu (core.tpu.topology_compile). Compiling is evidence about TPU memory and
   FLOPs, never about TPU speed. Without libtpu the compiler rows say "not available".
4. Hypothesis: rematerializing each block (jax.checkpoint around every Block call, policy
   ``remat_policy``) cuts the compiler's peak training memory at the price of more FLOPs,
   with identical loss and gradients. Measured: compiled peak bytes and cost_analysis
   FLOPs before/after (TPU topology), CPU step time before/after, loss and max |grad
   difference| on a real batch.
5. Recommendation: generation and topology from the compiled per-chip footprint vs HBM,
   a roofline bound on tokens/s per chip (compiled FLOPs / bf16 peak vs compiled bytes /
   HBM bandwidth) and the list price per chip-hour; when to move up.

Dimension glossary: B global batch, b = B / chips (rows per chip), T seq_len, D d_model,
H heads, K = D / H, F MLP width, V vocabulary (256 bytes), L layers, S max_len, c bytes
per element of the compute dtype.

plan.json (keys):
    schema, created_utc, command, machine (this host), config (Config.to_dict())
    params: {parts: {name: count}, analytic, actual, matches, formula,
             budget_cross_check: {core_tpu_budget, mlp_biases, total}}
    precision: [{quantity, dtype, bytes_per_element, why}]
    memory_analytic: {chips, local_batch, tokens_per_chip, components: [{component, bytes,
             formula}], per_layer: [{tensor, bytes, formula}], saved_activations_bytes,
             saved_activations_remat_bytes, arguments_bytes, outputs_bytes, gradients_bytes,
             peak_liveness_bytes, peak_liveness_remat_bytes, peak_all_at_once_bytes,
             flops_per_step, flops_per_step_remat}
    kv_cache: [{precision, bytes_per_element, serve_batch, context, bytes, formula}]
    compiler: {available, problem, topologies: {TOPO: {topology, device_kind, chips,
             compile_s, remat_policy, memory: {...memory_analysis fields}, peak_bytes,
             flops, bytes_accessed, comparison: [{quantity, unit, analytic, compiler, analytic_over_compiler}]}}, remat: {TOPO: {...same}},
             gap_explanation: [str]}
    hypothesis: {statement, policy, topology, peak_bytes_before, peak_bytes_after,
             peak_reduction_pct, flops_before, flops_after, flops_increase_pct,
             cpu_step_s_before, cpu_step_s_after, cpu_step_change_pct,
             cpu_step_p10_p90_s_before, cpu_step_p10_p90_s_after, cpu_compile_s_before,
             cpu_compile_s_after, cpu_peak_bytes_before, cpu_peak_bytes_after, cpu_flops_before,
             cpu_flops_after, loss_before, loss_after, loss_abs_diff, max_abs_grad_diff,
             max_abs_grad, max_abs_param_diff_after_one_step, param_diff_note,
             timing_repeats, machine, verdict}
    recommendation: {choice: {generation, topology, accelerator_type, chips},
             generations: [{generation, hbm_bytes, footprint_bytes, footprint_source,
             hbm_used_pct, step_compute_s, step_memory_s, bound, tokens_per_s_per_chip,
             usd_per_chip_hour, usd_per_million_tokens, chips_for_target,
             accelerator_type_for_target, max_rows_per_chip}],
             target_tokens_per_s, reasons: [str], move_up_when: [str], price_source}
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from capstones.byte_transformer import args, data, training
from capstones.byte_transformer import config as config_lib
from core import checkpoint, cloud_tpu, slice_planner, tokenizer, transformer
from core.perf import machine, remat, timing
from core.tpu import budget, specs, topology_compile

SCHEMA = "byte_transformer plan v1"
P = jax.sharding.PartitionSpec
REMAT_POLICIES = ("nothing_saveable", "dots_saveable")
DEFAULT_TOPOLOGIES = "v5e:2x2,v6e:2x2"

# On-demand list price per chip-hour (USD), Cloud TPU pricing page (us-central1) as of
# late 2024. Prices change and differ by region and commitment: check before provisioning.
PRICE_PER_CHIP_HOUR = {"v5e": 1.20, "v6e": 2.70, "v5p": 4.20}
PRICE_SOURCE = (
    "on-demand list prices per chip-hour, cloud.google.com/tpu/pricing (us-central1, late "
    "2024): v5e $1.20, v6e $2.70, v5p $4.20; they change, check before provisioning"
)
# Slice sizes (chips) a single generation offers (core.cloud_tpu.ACCELERATOR_TYPES).
SLICE_CHIPS = {
    generation: sorted(
        t.chips for t in cloud_tpu.ACCELERATOR_TYPES.values() if t.generation == generation
    )
    for generation in specs.GENERATIONS
}


# --- parameters ----------------------------------------------------------------------------


def param_counts(config: config_lib.Config) -> dict[str, int]:
    """TinyLM's parameters by part (closed form; see core/transformer.py)."""
    v, d, f, s = tokenizer.VOCAB_SIZE, config.d_model, config.hidden, config.max_len
    per_block_attention = 4 * d * d  # wq, wk, wv (D, H, K) and wo (H, K, D); no biases
    per_block_mlp = d * f + f + f * d + d  # w_in, b_in, w_out, b_out
    per_block_norms = 2 * 2 * d  # two LayerNorms, scale and bias each
    return {
        "token embedding (V x D)": v * d,
        "position embedding (S x D)": s * d,
        "attention (L x 4 D^2)": config.num_layers * per_block_attention,
        "MLP (L x (2 D F + F + D))": config.num_layers * per_block_mlp,
        "LayerNorms (L x 4 D + 2 D)": config.num_layers * per_block_norms + 2 * d,
        "output head (D x V)": d * v,
    }


PARAM_FORMULA = "2 V D + S D + L (4 D^2 + 2 D F + F + 5 D) + 2 D"


def param_count(config: config_lib.Config) -> int:
    return sum(param_counts(config).values())


def budget_shape(config: config_lib.Config) -> budget.TransformerShape:
    """The model as core.tpu.budget sees it (LayerNorm, untied head, learned positions)."""
    return budget.TransformerShape(
        vocab=tokenizer.VOCAB_SIZE,
        d_model=config.d_model,
        layers=config.num_layers,
        heads=config.num_heads,
        d_ff=config.hidden,
        norm="layer",
        bias=False,
        tied_embeddings=False,
        learned_positions=config.max_len,
    )


def budget_cross_check(config: config_lib.Config) -> dict[str, int]:
    """core.tpu.budget's count (no biases) plus TinyLM's MLP biases: a second closed form."""
    base = budget_shape(config).param_count()
    mlp_biases = config.num_layers * (config.hidden + config.d_model)
    return {"core_tpu_budget": base, "mlp_biases": mlp_biases, "total": base + mlp_biases}


def actual_param_count(config: config_lib.Config) -> int:
    """Elements of the real training state's parameters (training.init_state)."""
    state = training.init_state(config)
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(state["params"]))


# --- precision -----------------------------------------------------------------------------


def precision_rows(config: config_lib.Config) -> list[dict]:
    """The precision policy: every kind of number, its dtype, bytes per element and why."""
    compute = config.compute_dtype
    c = budget.dtype_bytes(compute)
    k = config.head_dim
    return [
        {
            "quantity": "weights (params)",
            "dtype": "float32",
            "bytes_per_element": 4,
            "why": f"AdamW moves a weight by about lr = {config.learning_rate:g} per step (its "
            "update is ~lr * sign(g)); bfloat16 keeps 8 mantissa bits (relative spacing "
            "2^-8 = 0.0039), so an update below half a spacing of the weight rounds away. "
            "Parameters stay float32 (Precision.params).",
        },
        {
            "quantity": "activations / matmul inputs",
            "dtype": compute,
            "bytes_per_element": c,
            "why": "Precision.compute (config compute_dtype). bfloat16 halves activation "
            "memory and HBM traffic and is the MXU's native input; float32 is the exact "
            "default for this tiny model.",
        },
        {
            "quantity": "matmul accumulator",
            "dtype": "float32",
            "bytes_per_element": 4,
            "why": "preferred_element_type=float32 in every einsum (transformer._dense): a "
            f"dot product over D={config.d_model} or F={config.hidden} terms summed in "
            "bfloat16 stops growing once an increment falls below half its spacing "
            "(transformer.running_sums).",
        },
        {
            "quantity": "softmax and LayerNorm statistics",
            "dtype": "float32",
            "bytes_per_element": 4,
            "why": "scores, exp-sums, means and variances are long reductions (T keys, D "
            "channels); core.attention and transformer.LayerNorm compute them in float32 "
            "and cast the result back to the compute dtype.",
        },
        {
            "quantity": "logits and loss",
            "dtype": "float32",
            "bytes_per_element": 4,
            "why": "token_loss casts logits to float32: log-sum-exp over V=256 and the mean "
            "over B*T tokens would lose digits in bfloat16.",
        },
        {
            "quantity": "gradients",
            "dtype": "float32",
            "bytes_per_element": 4,
            "why": "jax.grad returns the parameters' dtype; the global-norm clip sums "
            "squares of every gradient.",
        },
        {
            "quantity": "optimizer moments (Adam mu, nu)",
            "dtype": "float32",
            "bytes_per_element": 4,
            "why": "nu holds squared gradients (1e-12 and smaller); optax keeps the moments "
            "in the parameters' dtype, and a bfloat16 nu would bias sqrt(nu) in every update.",
        },
        {
            "quantity": "KV cache fp32",
            "dtype": "float32",
            "bytes_per_element": 4,
            "why": "exact reference for decoding.",
        },
        {
            "quantity": "KV cache bf16",
            "dtype": "bfloat16",
            "bytes_per_element": 2,
            "why": "half the bytes read per decoded token (decoding is bandwidth-bound); "
            "keys/values are already matmul outputs rounded to the compute dtype.",
        },
        {
            "quantity": "KV cache int8 (+ float32 scale per position and head)",
            "dtype": "int8",
            "bytes_per_element": round(1 + 4 / k, 4),
            "why": f"a quarter of fp32 plus one float32 scale per K={k} values "
            f"(1 + 4/{k} bytes per element); error bounded by scale/2 per entry.",
        },
        {
            "quantity": "token ids, segment ids, positions, targets / loss weights",
            "dtype": "int32 / float32",
            "bytes_per_element": 4,
            "why": "indices for gathers and masks; weights mark the valid next-byte targets.",
        },
    ]


# --- analytic memory -----------------------------------------------------------------------


def state_bytes(config: config_lib.Config) -> dict[str, int]:
    """Bytes of the training state by part (float32 params and Adam moments)."""
    n = param_count(config)
    return {
        "parameters (f32)": 4 * n,
        "Adam mu (f32)": 4 * n,
        "Adam nu (f32)": 4 * n,
        "scalars (Adam count, step int32; dropout key uint32[2])": 4 + 4 + 8,
    }


def batch_bytes(config: config_lib.Config, rows: int) -> int:
    """tokens, segment ids, positions, targets (int32) and weights (float32) of ``rows``."""
    return 5 * rows * config.seq_len * 4


def layer_activations(config: config_lib.Config, rows: int) -> list[dict]:
    """Tensors one block saves for its backward pass (no remat) for ``rows`` rows of T."""
    t, d, f, h = config.seq_len, config.d_model, config.hidden, config.num_heads
    c = budget.dtype_bytes(config.compute_dtype)
    n = rows * t
    drop = 1 if config.dropout > 0 else 0
    items = [
        ("block input x (LN1 input)", n * d * c, "b T D c"),
        ("LayerNorm mean and rstd, 2 norms (f32)", n * 2 * 2 * 4, "b T 2 2 4"),
        ("LN1 output (q/k/v matmul input)", n * d * c, "b T D c"),
        ("q, k, v", 3 * n * d * c, "3 b T D c"),
        ("attention probabilities (f32)", rows * h * t * t * 4, "b H T^2 4"),
        ("attention output (wo input)", n * d * c, "b T D c"),
        ("h = x + attention (LN2 input)", n * d * c, "b T D c"),
        ("LN2 output (w_in input)", n * d * c, "b T D c"),
        ("MLP pre-activation (f32 accumulator + bias)", n * f * 4, "b T F 4"),
        ("GELU output (w_out input)", n * f * c, "b T F c"),
        ("dropout keep masks, 2 branches (bool)", 2 * n * d * drop, "2 b T D (dropout > 0)"),
    ]
    return [{"tensor": name, "bytes": int(value), "formula": f} for name, value, f in items]


def head_activations(config: config_lib.Config, rows: int) -> list[dict]:
    """Saved tensors outside the blocks: mask, embedding dropout, final LN, logits."""
    t, d, v = config.seq_len, config.d_model, tokenizer.VOCAB_SIZE
    c = budget.dtype_bytes(config.compute_dtype)
    n = rows * t
    drop = 1 if config.dropout > 0 else 0
    items = [
        ("attention mask, shared by layers (bool)", rows * t * t, "b T^2"),
        ("embedding dropout mask (bool)", n * d * drop, "b T D (dropout > 0)"),
        ("final LN input and statistics", n * d * c + n * 8, "b T (D c + 8)"),
        ("final LN output (head input)", n * d * c, "b T D c"),
        ("logits and log-probabilities (f32)", 2 * n * v * 4, "2 b T V 4"),
    ]
    return [{"tensor": name, "bytes": int(value), "formula": f} for name, value, f in items]


def flops_per_step(config: config_lib.Config, rows: int, remat: bool = False) -> int:
    """Matmul FLOPs of one training step on ``rows`` rows: 3x the forward (forward, and
    the backward's two matmuls per forward matmul); remat adds one more forward of every
    block. Attention is dense T x T (causality by masking)."""
    t, d, f, v = config.seq_len, config.d_model, config.hidden, tokenizer.VOCAB_SIZE
    n = rows * t
    block = n * (2 * 4 * d * d + 2 * 2 * d * f) + 2 * 2 * rows * t * t * d
    head = 2 * n * d * v
    forward = config.num_layers * block + head
    return 3 * forward + (config.num_layers * block if remat else 0)


def training_memory(config: config_lib.Config, chips: int) -> dict:
    """Analytic bytes per chip, data parallel over ``chips`` (state replicated, batch split).

    peak_liveness: arguments + max(saved activations, gradients + new state): at the end
    of the forward pass every saved activation is live; during the update the gradients
    and the new state are. peak_all_at_once adds everything (an upper estimate).
    """
    if config.batch_size % chips:
        raise ValueError(
            f"batch_size={config.batch_size} does not split over {chips} chips: make it a "
            "multiple of the chip count"
        )
    rows = config.batch_size // chips
    state = state_bytes(config)
    state_total = sum(state.values())
    n = param_count(config)
    per_layer = layer_activations(config, rows)
    layer_total = sum(item["bytes"] for item in per_layer)
    head = head_activations(config, rows)
    head_total = sum(item["bytes"] for item in head)
    c = budget.dtype_bytes(config.compute_dtype)
    saved = config.num_layers * layer_total + head_total
    # remat: only each block's input is kept; one block's activations live while it is
    # recomputed in the backward pass
    saved_remat = config.num_layers * rows * config.seq_len * config.d_model * c
    saved_remat += layer_total + head_total
    arguments = state_total + batch_bytes(config, rows)
    metrics = 3 * 4
    outputs = state_total + metrics
    gradients = 4 * n
    components = [
        *(
            {"component": name, "bytes": value, "formula": "4 N" if "f32" in name else "16"}
            for name, value in state.items()
        ),
        {
            "component": "batch shard (int32 x4, float32 weights)",
            "bytes": batch_bytes(config, rows),
            "formula": "5 b T 4",
        },
        {"component": "gradients (f32)", "bytes": gradients, "formula": "4 N"},
        {
            "component": f"saved activations, {config.num_layers} layers",
            "bytes": config.num_layers * layer_total,
            "formula": "L x per-layer table",
        },
        {"component": "head and loss activations", "bytes": head_total, "formula": "see rows"},
        {
            "component": "new state (outputs; not donated by make_train_step)",
            "bytes": outputs,
            "formula": "16 N + scalars",
        },
    ]
    return {
        "chips": chips,
        "local_batch": rows,
        "tokens_per_chip": rows * config.seq_len,
        "params": n,
        "components": components,
        "per_layer": per_layer,
        "head": head,
        "layer_activation_bytes": layer_total,
        "saved_activations_bytes": saved,
        "saved_activations_remat_bytes": saved_remat,
        "arguments_bytes": arguments,
        "outputs_bytes": outputs,
        "gradients_bytes": gradients,
        "peak_liveness_bytes": arguments + max(saved, gradients + outputs),
        "peak_liveness_remat_bytes": arguments + max(saved_remat, gradients + outputs),
        "peak_all_at_once_bytes": arguments + saved + gradients + outputs,
        "flops_per_step": flops_per_step(config, rows),
        "flops_per_step_remat": flops_per_step(config, rows, remat=True),
    }


def kv_cache_bytes(config: config_lib.Config, precision: str, batch: int, context: int) -> int:
    """Keys and values of every layer: 2 L B S H K elements (+ a float32 scale per
    (layer, k/v, row, position, head) for int8)."""
    if precision not in config_lib.CACHE_PRECISIONS:
        raise ValueError(f"cache precision must be one of {config_lib.CACHE_PRECISIONS}")
    shape = budget_shape(config)
    dtype = {"fp32": "float32", "bf16": "bfloat16", "int8": "int8"}[precision]
    values = budget.kv_cache_bytes(shape, batch, context, dtype)
    scales = 2 * config.num_layers * batch * context * config.num_heads * 4
    return values + (scales if precision == "int8" else 0)


def kv_cache_rows(config: config_lib.Config, batch: int, context: int | None = None) -> list[dict]:
    context = context or config.max_len
    rows = []
    for precision in config_lib.CACHE_PRECISIONS:
        per_element = {"fp32": 4, "bf16": 2, "int8": 1}[precision]
        formula = f"2 L B S H K {per_element}" + (" + 2 L B S H 4" if precision == "int8" else "")
        rows.append(
            {
                "precision": precision,
                "bytes_per_element": per_element,
                "serve_batch": batch,
                "context": context,
                "bytes": kv_cache_bytes(config, precision, batch, context),
                "formula": formula,
            }
        )
    return rows


# --- the remat variant of the train step ---------------------------------------------------


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
    """(state, batch) -> (state, metrics): training.train_step, or its remat variant."""
    training.make_train_step(config)  # builds the model structure outside any trace
    if policy is None:
        return functools.partial(training.train_step, config)
    return functools.partial(remat_train_step, config, policy)


def loss_and_grads(config: config_lib.Config, params, batch, key, policy: str | None):
    """(loss, grads) of the training loss (remat_loss_fn when ``policy``), jitted."""
    training.make_train_step(config)

    def loss(p):
        if policy is None:
            return training.loss_fn(config, p, batch, key)[0]
        return remat_loss_fn(config, p, batch, key, policy)[0]

    return jax.jit(jax.value_and_grad(loss))(params)


# --- compiling for TPU topologies ----------------------------------------------------------


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
    started = time.perf_counter()
    report, _compiled = topology_compile.compile_for_topology(
        step_function(config, policy),
        (state, batch),
        (state_specs, batch_specs),
        topology,
        out_specs=(state_specs, P()),
    )
    memory = dict(report.memory)
    return {
        "topology": topology,
        "device_kind": report.device_kind,
        "chips": report.devices,
        "compile_s": time.perf_counter() - started,
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


# --- measuring the hypothesis on CPU -------------------------------------------------------


def first_batch(config: config_lib.Config) -> dict:
    """The first training batch of the run (real bytes of the standard library)."""
    corpus = data.load_corpus(config)
    return data.training_stream(config, corpus).next_batch()


def compile_cpu(config: config_lib.Config, policy: str | None, state, batch) -> dict:
    """Compile the step on this host's default device (CPU) and run it once: the compiled
    program, compile seconds, the CPU compiler's peak and FLOPs, the state after one step."""
    jitted = jax.jit(step_function(config, policy))
    started = time.perf_counter()
    compiled = jitted.lower(state, batch).compile()
    compile_s = time.perf_counter() - started
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
    machine shared with other work slows both alike; every call is blocked on."""
    samples: tuple[list[float], list[float]] = ([], [])
    for index in range(repeats):
        order = (0, 1) if index % 2 == 0 else (1, 0)
        for which in order:
            program = (program_a, program_b)[which]
            start = clock()
            jax.block_until_ready(program(state, batch))
            samples[which].append(clock() - start)
    return samples


def _pct(after, before) -> float | None:
    if before in (None, 0) or after is None:
        return None
    return round(100.0 * (after - before) / before, 2)


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
    summary_before, summary_after = timing.summarize(times_before), timing.summarize(times_after)
    grad_diff = remat.max_grad_difference(grads_before, grads_after)
    grad_scale = max(float(np.max(np.abs(np.asarray(g)))) for g in jax.tree.leaves(grads_before))
    param_diff = remat.max_grad_difference(
        cpu_before["state"]["params"], cpu_after["state"]["params"]
    )
    result = {
        "statement": (
            f"rematerializing each block (jax.checkpoint, policy {policy}) cuts the "
            "compiler's peak training memory per chip at the price of more FLOPs, with "
            "identical loss and gradients"
        ),
        "policy": policy,
        "topology": topology,
        "peak_bytes_before": compiled_before["peak_bytes"] if compiled_before else None,
        "peak_bytes_after": compiled_after["peak_bytes"] if compiled_after else None,
        "flops_before": compiled_before["flops"] if compiled_before else None,
        "flops_after": compiled_after["flops"] if compiled_after else None,
        "cpu_step_s_before": summary_before.median,
        "cpu_step_s_after": summary_after.median,
        "cpu_step_p10_p90_s_before": [summary_before.p10, summary_before.p90],
        "cpu_step_p10_p90_s_after": [summary_after.p10, summary_after.p90],
        "cpu_compile_s_before": cpu_before["compile_s"],
        "cpu_compile_s_after": cpu_after["compile_s"],
        "cpu_peak_bytes_before": cpu_before["peak_bytes"],
        "cpu_peak_bytes_after": cpu_after["peak_bytes"],
        "cpu_flops_before": cpu_before["flops"],
        "cpu_flops_after": cpu_after["flops"],
        "loss_before": float(loss_before),
        "loss_after": float(loss_after),
        "loss_abs_diff": abs(float(loss_before) - float(loss_after)),
        "max_abs_grad_diff": grad_diff,
        "max_abs_grad": grad_scale,
        "max_abs_param_diff_after_one_step": param_diff,
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


def hypothesis_verdict(result: dict) -> str:
    same = result["max_abs_grad_diff"] <= 1e-6 and result["loss_abs_diff"] <= 1e-6
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


# --- recommendation ------------------------------------------------------------------------


def generation_of(topology: str) -> str:
    return topology.split(":", 1)[0]


def accelerator_type(generation: str, chips: int) -> str | None:
    """The gcloud accelerator type with ``chips`` chips of ``generation`` (None if none)."""
    for name, kind in cloud_tpu.ACCELERATOR_TYPES.items():
        if kind.generation == generation and kind.chips == chips:
            return name
    return None


def recommendation(
    config: config_lib.Config,
    analytic: dict,
    compiled: dict[str, dict],
    target_tokens_per_s: float,
) -> dict:
    """Generation and slice from footprint vs HBM and a roofline bound per chip.

    Per chip the step moves ``bytes_accessed`` through HBM and does ``flops`` (compiled
    figures when available, else the analytic FLOPs and 3x the state + activations as
    bytes); the step takes at least max(flops / bf16 peak, bytes / HBM bandwidth).
    Weak scaling: each chip keeps b = B / chips rows, so tokens/s grows with chips.
    """
    tokens = analytic["tokens_per_chip"]
    any_compiled = next(iter(compiled.values()), None)
    rows = []
    for generation in specs.GENERATIONS:
        spec = specs.chip(generation)
        own = next((c for t, c in compiled.items() if generation_of(t) == generation), None)
        source = own or any_compiled
        if source is not None:
            footprint = own["peak_bytes"] if own else analytic["peak_liveness_bytes"]
            footprint_source = (
                f"compiler ({own['topology']})" if own else "analytic (liveness estimate)"
            )
            flops, moved = source["flops"], source["bytes_accessed"]
            cost_source = f"compiled for {source['topology']}"
        else:
            footprint = analytic["peak_liveness_bytes"]
            footprint_source = "analytic (liveness estimate)"
            flops = analytic["flops_per_step"]
            # state traffic (read params, grads, mu, nu; write params, mu, nu) + saved
            # activations written once and read once
            moved = 28 * analytic["params"] + 2 * analytic["saved_activations_bytes"]
            cost_source = "analytic (28 N + 2 x saved activations bytes)"
        compute_s = flops / spec.bf16_flops.value
        memory_s = moved / spec.hbm_bandwidth.value
        step_s = max(compute_s, memory_s)
        per_chip = tokens / step_s
        price = PRICE_PER_CHIP_HOUR[generation]
        needed = max(1, math.ceil(target_tokens_per_s / per_chip))
        slice_chips = next((n for n in SLICE_CHIPS[generation] if n >= needed), None)
        # rows per chip that fit: 90% of HBM minus old state, new state and gradients,
        # divided by what one row adds (its saved activations and its batch bytes)
        fixed = 2 * sum(state_bytes(config).values()) + analytic["gradients_bytes"]
        per_row = (
            analytic["saved_activations_bytes"] + batch_bytes(config, analytic["local_batch"])
        ) / analytic["local_batch"]
        room = 0.9 * spec.hbm_bytes.value - fixed
        rows.append(
            {
                "generation": generation,
                "hbm_bytes": spec.hbm_bytes.value,
                "footprint_bytes": int(footprint),
                "footprint_source": footprint_source,
                "hbm_used_pct": round(100 * footprint / spec.hbm_bytes.value, 3),
                "step_flops": flops,
                "step_bytes": moved,
                "cost_source": cost_source,
                "step_compute_s": compute_s,
                "step_memory_s": memory_s,
                "bound": "HBM bandwidth" if memory_s > compute_s else "compute (bf16 peak)",
                "tokens_per_s_per_chip": per_chip,
                "usd_per_chip_hour": price,
                "usd_per_million_tokens": price / 3600 / per_chip * 1e6,
                "chips_for_target": needed,
                "slice_chips_for_target": slice_chips,
                "accelerator_type_for_target": accelerator_type(generation, slice_chips)
                if slice_chips
                else None,
                "max_rows_per_chip": int(room // per_row) if per_row > 0 else None,
            }
        )
    fitting = [r for r in rows if r["hbm_used_pct"] < 90]
    best = min(fitting, key=lambda r: r["usd_per_million_tokens"])
    chips = best["slice_chips_for_target"] or SLICE_CHIPS[best["generation"]][-1]
    chips = max(chips, 4)  # a 2x2 slice: one host, data parallel over 4 chips
    layout = slice_planner.TOPOLOGY_2D  # v5e and v6e slices are 2D tori
    topology = f"{best['generation']}:{layout.get(chips, str(chips))}"
    by_gen = {r["generation"]: r for r in rows}
    reasons = [
        f"footprint: the step needs {by_gen['v5e']['footprint_bytes'] / 1e6:.1f} MB per chip "
        f"({by_gen['v5e']['footprint_source']}), {by_gen['v5e']['hbm_used_pct']:.2f}% of a "
        "v5e chip's 16 GB: every generation holds it many times over, so HBM capacity does "
        "not decide.",
        f"per chip the step is bound by {best['bound']}: at least "
        f"{max(best['step_compute_s'], best['step_memory_s']) * 1e3:.3f} ms for "
        f"{tokens} tokens on {best['generation']} (a roofline bound, not a measurement; "
        "a step this small is also dominated by launch and host overheads, which favour "
        "the cheapest chip).",
        "cost per million tokens at the bound: "
        + ", ".join(f"{r['generation']} ${r['usd_per_million_tokens']:.3g}" for r in rows)
        + f" -> {best['generation']} is the cheapest that fits.",
        f"topology: {topology} ({accelerator_type(best['generation'], chips)}, one host, "
        f"{chips} chips) data parallel: global batch {config.batch_size} splits as "
        f"{config.batch_size // chips if config.batch_size % chips == 0 else 'n/a'} rows per "
        f"chip; the target {target_tokens_per_s:,.0f} tokens/s needs "
        f"{best['chips_for_target']} chip(s) at the bound; a 2x2 slice is the smallest that "
        "exercises data parallelism across chips (gradients all-reduced over ICI).",
        "v6e has 4.7x v5e's bf16 FLOP/s and 2x its HBM bandwidth for 2.25x the price: it "
        "wins once the step is compute-bound (bfloat16 compute, larger b x T per chip, "
        "wider model), not for this tiny float32 model.",
    ]
    move_up_when = [
        f"batch per chip: on v5e about {by_gen['v5e']['max_rows_per_chip']:,} rows of "
        f"{config.seq_len} bytes per chip fit (90% of 16 GB); beyond that use more chips or "
        "remat (hypothesis below), or v6e (32 GB) / v5p (96 GB).",
        "model size: data parallelism keeps 16 bytes per parameter (f32 params, grads, Adam "
        "mu and nu) on every chip; past ~0.5 B parameters (8 GB) a v5e chip has no room left "
        "for activations: shard the state (FSDP) or move to v6e / v5p.",
        "compute-bound steps (bfloat16 compute, d_model >= 1024, long sequences): move to "
        "v6e for FLOP/s per dollar; more than 256 chips or 3D model parallelism: v5p.",
        "float32 matmuls run as several bf16 passes on the MXU: the bf16 peak used here is "
        "optimistic for compute_dtype=float32.",
    ]
    return {
        "choice": {
            "generation": best["generation"],
            "topology": topology,
            "accelerator_type": accelerator_type(best["generation"], chips),
            "chips": chips,
        },
        "generations": rows,
        "target_tokens_per_s": target_tokens_per_s,
        "reasons": reasons,
        "move_up_when": move_up_when,
        "price_source": PRICE_SOURCE,
    }


# --- the whole plan ------------------------------------------------------------------------


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
        progress(f"compiling the train step for {topology} (libtpu, ~1 min)")
        compiler["topologies"][topology] = compile_for_topology(config, topology)
        if index == 0:
            progress(f"compiling the remat ({policy}) train step for {topology}")
            compiler["remat"][topology] = compile_for_topology(config, topology, policy)
    return compiler


def build_plan(
    config: config_lib.Config,
    topologies: list[str],
    compile_tpu: bool = True,
    policy: str = "nothing_saveable",
    target_tokens_per_s: float = 1e6,
    timing_repeats: int = 5,
    serve_batch: int = 0,
    progress=None,
) -> dict:
    """Everything the plan command prints and saves (see the module docstring)."""
    progress = progress or (lambda line: None)
    chips_default = 4
    compiler = compiler_section(config, topologies, compile_tpu, policy, progress)
    first = next(iter(compiler["topologies"].values()), None)
    chips = first["chips"] if first else chips_default
    analytic = training_memory(config, chips)
    for compiled in compiler["topologies"].values():
        compiled["comparison"] = comparison_rows(
            training_memory(config, compiled["chips"]), compiled
        )
    for compiled in compiler["remat"].values():
        compiled["comparison"] = comparison_rows(
            training_memory(config, compiled["chips"]), compiled, remat=True
        )
    compiler["gap_explanation"] = GAP_EXPLANATION
    progress(f"measuring remat vs no remat on this CPU ({timing_repeats} timed steps each)")
    remat_topology = next(iter(compiler["remat"]), None)
    result_hypothesis = hypothesis(
        config,
        policy,
        timing_repeats,
        compiler["topologies"].get(remat_topology),
        compiler["remat"].get(remat_topology),
        remat_topology,
    )
    actual = actual_param_count(config)
    return {
        "schema": SCHEMA,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine.machine_label(),
        "config": config.to_dict(),
        "params": {
            "parts": param_counts(config),
            "analytic": param_count(config),
            "actual": actual,
            "matches": actual == param_count(config),
            "formula": PARAM_FORMULA,
            "budget_cross_check": budget_cross_check(config),
        },
        "precision": precision_rows(config),
        "memory_analytic": analytic,
        "kv_cache": kv_cache_rows(config, serve_batch or config.batch_size),
        "compiler": compiler,
        "hypothesis": result_hypothesis,
        "recommendation": recommendation(
            config, analytic, compiler["topologies"], target_tokens_per_s
        ),
    }


# --- printing ------------------------------------------------------------------------------


def format_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A plain-text table (columns: the first row's keys unless given)."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])
    text = [[str(column) for column in columns]]
    for row in rows:
        text.append([_cell(row.get(column, "")) for column in columns])
    widths = [max(len(line[i]) for line in text) for i in range(len(columns))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in text
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _mb(value) -> str:
    return "-" if value is None else f"{value / 1e6:.3f}"


def report_text(plan: dict) -> str:
    """The plan as readable tables."""
    config = plan["config"]
    out = []
    params = plan["params"]
    out.append(
        f"== Parameters: {params['analytic']:,} analytic ({params['formula']}), "
        f"{params['actual']:,} in training.init_state -> "
        f"{'match' if params['matches'] else 'MISMATCH'}"
    )
    out.append(format_table([{"part": k, "count": f"{v:,}"} for k, v in params["parts"].items()]))
    out.append("\n== Precision policy")
    out.append(
        format_table(
            [
                {
                    "quantity": r["quantity"],
                    "dtype": r["dtype"],
                    "bytes": r["bytes_per_element"],
                    "why": r["why"][:90] + ("..." if len(r["why"]) > 90 else ""),
                }
                for r in plan["precision"]
            ]
        )
    )
    analytic = plan["memory_analytic"]
    out.append(
        f"\n== Analytic memory per chip: data parallel over {analytic['chips']} chips, "
        f"b = {analytic['local_batch']} rows x T = {config['seq_len']} "
        f"({config['compute_dtype']} activations)"
    )
    out.append(
        format_table(
            [
                {"component": c["component"], "MB": _mb(c["bytes"]), "formula": c["formula"]}
                for c in analytic["components"]
            ]
        )
    )
    out.append("per layer (saved for the backward pass, no remat):")
    out.append(
        format_table(
            [
                {"tensor": r["tensor"], "MB": _mb(r["bytes"]), "formula": r["formula"]}
                for r in analytic["per_layer"] + analytic["head"]
            ]
        )
    )
    out.append(
        f"peak (liveness estimate) {_mb(analytic['peak_liveness_bytes'])} MB, with remat "
        f"{_mb(analytic['peak_liveness_remat_bytes'])} MB, everything at once "
        f"{_mb(analytic['peak_all_at_once_bytes'])} MB"
    )
    out.append("\n== KV cache for serving (per chip, unsharded)")
    out.append(
        format_table(
            [
                {
                    "cache": r["precision"],
                    "bytes/elem": r["bytes_per_element"],
                    "batch x context": f"{r['serve_batch']} x {r['context']}",
                    "MB": _mb(r["bytes"]),
                    "formula": r["formula"],
                }
                for r in plan["kv_cache"]
            ]
        )
    )
    compiler = plan["compiler"]
    out.append("\n== Analytic vs the TPU compiler (memory_analysis, cost_analysis; one chip)")
    if not compiler["available"]:
        out.append(f"TPU compiler: {compiler['problem']}")
    for group, label in (("topologies", ""), ("remat", " + remat")):
        for topology, compiled in compiler[group].items():
            out.append(
                f"{topology}{label} ({compiled['device_kind']}, {compiled['chips']} chips, "
                f"compiled in {compiled['compile_s']:.1f} s)"
            )
            out.append(
                format_table(
                    [
                        {
                            "quantity": r["quantity"],
                            "unit": "MB" if r["unit"] == "bytes" else "MFLOP",
                            "analytic": _mb(r["analytic"]),
                            "compiler": _mb(r["compiler"]),
                            "analytic/compiler": r["analytic_over_compiler"],
                        }
                        for r in compiled["comparison"]
                    ]
                )
            )
    if compiler["available"]:
        out.append("the gap:")
        out.extend(f"  - {line}" for line in compiler["gap_explanation"])
    h = plan["hypothesis"]
    out.append(f"\n== Hypothesis: {h['statement']}")
    out.append(
        format_table(
            [
                {
                    "measure": f"compiled peak per chip ({h['topology'] or 'no TPU compile'}), MB",
                    "before": _mb(h["peak_bytes_before"]),
                    "after": _mb(h["peak_bytes_after"]),
                    "change %": None
                    if h["peak_reduction_pct"] is None
                    else -h["peak_reduction_pct"],
                },
                {
                    "measure": "compiled FLOPs per chip (cost_analysis), GFLOP",
                    "before": None if h["flops_before"] is None else h["flops_before"] / 1e9,
                    "after": None if h["flops_after"] is None else h["flops_after"] / 1e9,
                    "change %": h["flops_increase_pct"],
                },
                {
                    "measure": f"CPU step time (median of {h['timing_repeats']}, interleaved), ms",
                    "before": h["cpu_step_s_before"] * 1e3,
                    "after": h["cpu_step_s_after"] * 1e3,
                    "change %": h["cpu_step_change_pct"],
                },
                {
                    "measure": "XLA:CPU buffer peak (not TPU evidence), MB",
                    "before": _mb(h["cpu_peak_bytes_before"]),
                    "after": _mb(h["cpu_peak_bytes_after"]),
                    "change %": _pct(h["cpu_peak_bytes_after"], h["cpu_peak_bytes_before"]),
                },
                {
                    "measure": "loss on the first batch",
                    "before": h["loss_before"],
                    "after": h["loss_after"],
                    "change %": None,
                },
            ]
        )
    )
    out.append(
        f"max |grad difference| {h['max_abs_grad_diff']:.3g} (max |grad| {h['max_abs_grad']:.3g}); "
        f"max |param difference| after one AdamW step "
        f"{h['max_abs_param_diff_after_one_step']:.3g} ({h['param_diff_note']})"
    )
    out.append(f"verdict: {h['verdict']}")
    rec = plan["recommendation"]
    out.append("\n== Generation and topology")
    out.append(
        format_table(
            [
                {
                    "gen": r["generation"],
                    "HBM GB": r["hbm_bytes"] / 1e9,
                    "footprint MB": _mb(r["footprint_bytes"]),
                    "HBM used %": r["hbm_used_pct"],
                    "step >= ms": max(r["step_compute_s"], r["step_memory_s"]) * 1e3,
                    "bound": r["bound"],
                    "tok/s/chip <=": f"{r['tokens_per_s_per_chip']:,.0f}",
                    "$/chip-h": r["usd_per_chip_hour"],
                    "$/1M tok >=": f"{r['usd_per_million_tokens']:.3g}",
                    "slice for target": r["accelerator_type_for_target"],
                }
                for r in rec["generations"]
            ]
        )
    )
    choice = rec["choice"]
    out.append(
        f"recommendation: {choice['topology']} ({choice['accelerator_type']}, "
        f"{choice['chips']} chips)"
    )
    out.extend(f"  - {line}" for line in rec["reasons"])
    out.append("move up when:")
    out.extend(f"  - {line}" for line in rec["move_up_when"])
    out.append(f"prices: {rec['price_source']}")
    return "\n".join(out)


# --- command -------------------------------------------------------------------------------


def plan_command(parsed: args.Parsed) -> int:
    config = parsed.config()
    policy = args.choice("remat_policy", parsed["remat_policy"], REMAT_POLICIES)
    topologies = [t.strip() for t in parsed["topologies"].split(",") if t.strip()]
    if not topologies:
        raise args.UsageError("topologies needs at least one name, e.g. v5e:2x2")
    for topology in topologies:
        if generation_of(topology) not in specs.GENERATIONS:
            raise args.UsageError(
                f"topology {topology!r}: generation must be one of {specs.GENERATIONS}"
            )
    if parsed["timing_repeats"] < 1:
        raise args.UsageError("timing_repeats must be >= 1")
    if parsed["target_tokens_per_s"] <= 0:
        raise args.UsageError("target_tokens_per_s must be > 0")
    if config.batch_size % 4:
        raise args.UsageError(
            f"batch_size={config.batch_size} must split over the 4 chips of a 2x2 topology "
            "(use a multiple of 4)"
        )
    try:
        plan = build_plan(
            config,
            topologies,
            compile_tpu=parsed["compile"],
            policy=policy,
            target_tokens_per_s=parsed["target_tokens_per_s"],
            timing_repeats=parsed["timing_repeats"],
            serve_batch=parsed["serve_batch"],
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except ValueError as exc:
        raise args.UsageError(str(exc)) from None
    print(report_text(plan))
    out = pathlib.Path(parsed["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.write_json_atomic(out, _jsonable(plan))
    print(f"\nplan saved to {out}")
    return 0


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if dataclasses.is_dataclass(value):
        return _jsonable(dataclasses.asdict(value))
    return value


COMMANDS = {
    "plan": args.Command(
        "TPU plan: parameter count, precision policy, memory per chip (analytic beside the "
        "TPU compiler's memory_analysis of training.train_step for real topologies, compiled "
        "on this CPU host with libtpu), the remat hypothesis with before/after numbers, and a "
        "generation/topology recommendation. Prints tables, saves JSON.",
        {
            "out": args.Option(str, "plan.json", "where to save the plan (JSON)"),
            "compile": args.Option(
                bool, True, "compile for TPU topologies with libtpu (false: analytic only)"
            ),
            "topologies": args.Option(
                str, DEFAULT_TOPOLOGIES, "comma-separated topology names (first gets remat)"
            ),
            "remat_policy": args.Option(
                str, "nothing_saveable", f"jax.checkpoint policy: {', '.join(REMAT_POLICIES)}"
            ),
            "target_tokens_per_s": args.Option(
                float, 1e6, "training throughput to size the slice for"
            ),
            "timing_repeats": args.Option(int, 5, "timed CPU steps per variant (median)"),
            "serve_batch": args.Option(int, 0, "KV cache rows for serving (0: batch_size)"),
        },
        plan_command,
    ),
}
