"""The analytic memory model of the plan: parameters, training state, saved activations,
peak per chip (data parallel) and the KV cache for serving, each tensor with its formula.

Dimension glossary: b = B / chips rows per chip, T seq_len, D d_model, H heads, K = D / H,
F MLP width, V vocabulary (256 bytes), L layers, S max_len, N parameters, c bytes per
element of the compute dtype.
"""

from __future__ import annotations

import jax
import numpy as np

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import model_math, training
from core.lm import tokenizer
from core.tpu import budget

PARAM_FORMULA = model_math.PARAM_FORMULA
param_counts = model_math.param_counts
param_count = model_math.param_count


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


def flops_per_step(config: config_lib.Config, rows: int, remat: bool | str = False) -> int:
    """Matmul FLOPs of one training step on ``rows`` rows (model_math.train_flops): 3x the
    forward; remat (True: nothing_saveable, or a policy name) adds what the backward pass
    recomputes. Attention is dense T x T (causality by masking)."""
    return model_math.train_flops(config, rows, remat or None)["total"]


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


def _rows(items) -> list[dict]:
    return [{"tensor": name, "bytes": int(value), "formula": f} for name, value, f in items]


def layer_activations(config: config_lib.Config, rows: int) -> list[dict]:
    """Tensors one block saves for its backward pass (no remat) for ``rows`` rows of T."""
    t, d, f, h = config.seq_len, config.d_model, config.hidden, config.num_heads
    c = budget.dtype_bytes(config.compute_dtype)
    n = rows * t
    drop = 1 if config.dropout > 0 else 0
    if config.attention == "flash":  # the kernel saves its log-sum-exp, never P
        attention_saved = ("flash log-sum-exp (f32)", rows * h * t * 4, "b H T 4")
    else:
        attention_saved = ("attention probabilities (f32)", rows * h * t * t * 4, "b H T^2 4")
    return _rows(
        [
            ("block input x (LN1 input)", n * d * c, "b T D c"),
            ("LayerNorm mean and rstd, 2 norms (f32)", n * 2 * 2 * 4, "b T 2 2 4"),
            ("LN1 output (q/k/v matmul input)", n * d * c, "b T D c"),
            ("q, k, v", 3 * n * d * c, "3 b T D c"),
            attention_saved,
            ("attention output (wo input)", n * d * c, "b T D c"),
            ("h = x + attention (LN2 input)", n * d * c, "b T D c"),
            ("LN2 output (w_in input)", n * d * c, "b T D c"),
            ("MLP pre-activation (f32 accumulator + bias)", n * f * 4, "b T F 4"),
            ("GELU output (w_out input)", n * f * c, "b T F c"),
            ("dropout keep masks, 2 branches (bool)", 2 * n * d * drop, "2 b T D (dropout > 0)"),
        ]
    )


def head_activations(config: config_lib.Config, rows: int) -> list[dict]:
    """Saved tensors outside the blocks: mask, embedding dropout, final LN, logits."""
    t, d, v = config.seq_len, config.d_model, tokenizer.VOCAB_SIZE
    c = budget.dtype_bytes(config.compute_dtype)
    n = rows * t
    drop = 1 if config.dropout > 0 else 0
    mask = ("attention mask, shared by layers (bool)", rows * t * t, "b T^2")
    if config.attention == "flash":  # the kernel masks from the segment ids in VMEM
        mask = ("segment ids (int32; the flash kernel builds its mask)", rows * t * 4, "b T 4")
    return _rows(
        [
            mask,
            ("embedding dropout mask (bool)", n * d * drop, "b T D (dropout > 0)"),
            ("final LN input and statistics", n * d * c + n * 8, "b T (D c + 8)"),
            ("final LN output (head input)", n * d * c, "b T D c"),
            ("logits and log-probabilities (f32)", 2 * n * v * 4, "2 b T V 4"),
        ]
    )


def _components(
    config: config_lib.Config, rows: int, layer_total: int, head_total: int, outputs: int
) -> list[dict]:
    """The memory components table of training_memory (bytes per chip, with formulas)."""
    return [
        *(
            {"component": name, "bytes": value, "formula": "4 N" if "f32" in name else "16"}
            for name, value in state_bytes(config).items()
        ),
        {
            "component": "batch shard (int32 x4, float32 weights)",
            "bytes": batch_bytes(config, rows),
            "formula": "5 b T 4",
        },
        {"component": "gradients (f32)", "bytes": 4 * param_count(config), "formula": "4 N"},
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


def training_memory(
    config: config_lib.Config, chips: int, policy: str = "nothing_saveable"
) -> dict:
    """Analytic bytes per chip, data parallel over ``chips`` (state replicated, batch split).

    peak_liveness: arguments + max(saved activations, gradients + new state): at the end
    of the forward pass every saved activation is live; during the update the gradients
    and the new state are. peak_all_at_once adds everything (an upper estimate).
    flops_per_step_remat: with remat ``policy`` (model_math.REMAT_RECOMPUTE).
    """
    if config.batch_size % chips:
        raise ValueError(
            f"batch_size={config.batch_size} does not split over {chips} chips: make it a "
            "multiple of the chip count"
        )
    rows = config.batch_size // chips
    state_total = sum(state_bytes(config).values())
    n = param_count(config)
    per_layer, head = layer_activations(config, rows), head_activations(config, rows)
    layer_total = sum(item["bytes"] for item in per_layer)
    head_total = sum(item["bytes"] for item in head)
    c = budget.dtype_bytes(config.compute_dtype)
    saved = config.num_layers * layer_total + head_total
    # remat: only each block's input is kept; one block's activations live while it is
    # recomputed in the backward pass
    saved_remat = config.num_layers * rows * config.seq_len * config.d_model * c
    saved_remat += layer_total + head_total
    arguments = state_total + batch_bytes(config, rows)
    outputs = state_total + 3 * 4  # new state + three float32 metrics
    gradients = 4 * n
    return {
        "chips": chips,
        "local_batch": rows,
        "tokens_per_chip": rows * config.seq_len,
        "params": n,
        "components": _components(config, rows, layer_total, head_total, outputs),
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
        "flops_per_step_remat": flops_per_step(config, rows, remat=policy),
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
