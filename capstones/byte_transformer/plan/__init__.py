"""The TPU plan of the byte Transformer (the ``plan`` command): which TPU, which precision,
how much memory, and one tested hypothesis.

    python -m capstones.byte_transformer plan [out=plan.json] [compile=true] [key=value ...]

1. Parameters: a closed form of TinyLM's parameter count, checked against the real
   training state (training.init_state).
2. Precision policy: the dtype of every kind of number (core.lm.transformer.Precision), its
   bytes per element and why.
3. Memory per chip, data parallel over a topology's chips: parameters, gradients, Adam
   moments, activations saved per layer (each tensor with its formula), logits, and the KV
   cache for serving; BESIDE the TPU compiler's memory_analysis() of the capstone's own
   training.train_step compiled for real TPU topologies (v5e:2x2, v6e:2x2, tpu7x:2x2x1) on
   this CPU host through libtpu (core.tpu.topology_compile). Compiling is evidence about TPU
   memory and FLOPs, never about TPU speed. Without libtpu the compiler rows say "not available".
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

plan.json (keys; model documents.Plan, docs/schemas/plan.schema.json):
    schema, created_utc, command, machine (this host), config (Config.to_dict())
    params: {parts: {name: count}, analytic, actual, matches, formula,
             budget_cross_check: {core_tpu_budget, mlp_biases, total}}
    precision: [{quantity, dtype, bytes_per_element, why}]
    memory_analytic: {chips, local_batch, tokens_per_chip, components: [{component, bytes,
             formula}], per_layer: [{tensor, bytes, formula}], saved_activations_bytes,
             saved_activations_remat_bytes, arguments_bytes, outputs_bytes, gradients_bytes,
             peak_liveness_bytes, peak_liveness_remat_bytes, peak_all_at_once_bytes,
             flops_per_step, flops_per_step_remat (remat_policy's recompute, model_math)}
    kv_cache: [{precision, bytes_per_element, serve_batch, context, bytes, formula}]
    compiler: {available, problem, topologies: {TOPO: {topology, device_kind, chips,
             compile_s, remat_policy, memory: {...memory_analysis fields}, peak_bytes,
             flops, bytes_accessed, comparison: [{quantity, unit, analytic, compiler,
             analytic_over_compiler}]}}, remat: {TOPO: {...same}},
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

The package, one module per job:
    memory.py     the analytic memory model (parameters, state, activations, KV cache);
                  FLOPs from capstones/byte_transformer/model_math.py (shared with bench)
    precision.py  the precision policy table
    compile.py    the TPU topology compile and the analytic-vs-compiler comparison rows
    remat.py      the remat train step and the hypothesis measured on CPU
    recommend.py  generation, slice, roofline bound, prices
    report.py     the text tables
    command.py    build_plan and the ``plan`` command (COMMANDS)
"""

from capstones.byte_transformer.plan.command import (
    COMMANDS,
    DEFAULT_TOPOLOGIES,
    SCHEMA,
    build_plan,
    check_options,
    params_section,
    parse_topologies,
    plan_command,
)
from capstones.byte_transformer.plan.compile import (
    GAP_EXPLANATION,
    abstract_inputs,
    comparison_rows,
    compile_for_topology,
    compiler_section,
)
from capstones.byte_transformer.plan.memory import (
    PARAM_FORMULA,
    actual_param_count,
    batch_bytes,
    budget_cross_check,
    budget_shape,
    flops_per_step,
    head_activations,
    kv_cache_bytes,
    kv_cache_rows,
    layer_activations,
    param_count,
    param_counts,
    state_bytes,
    training_memory,
)
from capstones.byte_transformer.plan.precision import precision_rows
from capstones.byte_transformer.plan.recommend import (
    PRICE_PER_CHIP_HOUR,
    PRICE_SOURCE,
    SLICE_CHIPS,
    accelerator_type,
    generation_of,
    recommendation,
)
from capstones.byte_transformer.plan.remat import (
    REMAT_POLICIES,
    compile_cpu,
    first_batch,
    hypothesis,
    hypothesis_verdict,
    interleaved_step_times,
    loss_and_grads,
    remat_loss_fn,
    remat_train_step,
    step_function,
)
from capstones.byte_transformer.plan.report import format_table, report_text

__all__ = [
    "COMMANDS",
    "DEFAULT_TOPOLOGIES",
    "GAP_EXPLANATION",
    "PARAM_FORMULA",
    "PRICE_PER_CHIP_HOUR",
    "PRICE_SOURCE",
    "REMAT_POLICIES",
    "SCHEMA",
    "SLICE_CHIPS",
    "abstract_inputs",
    "accelerator_type",
    "actual_param_count",
    "batch_bytes",
    "budget_cross_check",
    "budget_shape",
    "build_plan",
    "check_options",
    "comparison_rows",
    "compile_cpu",
    "compile_for_topology",
    "compiler_section",
    "first_batch",
    "flops_per_step",
    "format_table",
    "generation_of",
    "head_activations",
    "hypothesis",
    "hypothesis_verdict",
    "interleaved_step_times",
    "kv_cache_bytes",
    "kv_cache_rows",
    "layer_activations",
    "loss_and_grads",
    "param_count",
    "param_counts",
    "params_section",
    "parse_topologies",
    "plan_command",
    "precision_rows",
    "recommendation",
    "remat_loss_fn",
    "remat_train_step",
    "report_text",
    "state_bytes",
    "step_function",
    "training_memory",
]
