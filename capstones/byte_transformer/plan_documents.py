"""The models of the plan and the cache report: plan.json (Plan, plan/__init__.py) and
cache_report.json (CacheReport, cache_report.py). Written and read through documents.py's ``write``
and ``load``; documents.py re-exports Plan, CacheReport and their formats."""

from __future__ import annotations

from typing import ClassVar, Literal

import pydantic

from capstones.byte_transformer.document_base import Config, Document, Precision, iso

PLAN_SCHEMA = "byte_transformer plan v1"
CACHE_REPORT_FORMAT = "byte_transformer cache report"


# --- plan.json --------------------------------------------------------------------------------


class ParamsSection(Document):
    parts: dict[str, int]
    analytic: int
    actual: int
    matches: bool
    formula: str
    budget_cross_check: dict[str, int]


class PrecisionRow(Document):
    quantity: str
    dtype: str
    bytes_per_element: float
    why: str


class Component(Document):
    component: str
    bytes: float
    formula: str


class TensorBytes(Document):
    tensor: str
    bytes: float
    formula: str


class AnalyticMemory(Document):
    chips: int
    local_batch: int
    tokens_per_chip: int
    components: list[Component]
    per_layer: list[TensorBytes]
    saved_activations_bytes: float
    saved_activations_remat_bytes: float
    arguments_bytes: float
    outputs_bytes: float
    gradients_bytes: float
    peak_liveness_bytes: float
    peak_liveness_remat_bytes: float
    peak_all_at_once_bytes: float
    flops_per_step: float
    flops_per_step_remat: float


class KvCacheRow(Document):
    precision: str
    bytes_per_element: float
    serve_batch: int
    context: int
    bytes: float
    formula: str


class ComparisonRow(Document):
    quantity: str
    unit: str
    analytic: float | None
    compiler: float | None
    analytic_over_compiler: float | None


class CompiledTopology(Document):
    topology: str
    device_kind: str
    chips: int
    compile_s: float
    remat_policy: str | None
    memory: dict[str, float]
    peak_bytes: float | None
    flops: float | None
    bytes_accessed: float | None
    comparison: list[ComparisonRow]


class Compiler(Document):
    available: bool
    problem: str | None
    topologies: dict[str, CompiledTopology]
    remat: dict[str, CompiledTopology]
    gap_explanation: list[str]


class Hypothesis(Document):
    statement: str
    policy: str
    topology: str | None
    peak_bytes_before: float | None
    peak_bytes_after: float | None
    peak_reduction_pct: float | None
    flops_before: float | None
    flops_after: float | None
    flops_increase_pct: float | None
    cpu_step_s_before: float
    cpu_step_s_after: float
    cpu_step_change_pct: float | None
    cpu_step_p10_p90_s_before: list[float]
    cpu_step_p10_p90_s_after: list[float]
    cpu_compile_s_before: float
    cpu_compile_s_after: float
    cpu_peak_bytes_before: float | None
    cpu_peak_bytes_after: float | None
    cpu_flops_before: float | None
    cpu_flops_after: float | None
    loss_before: float
    loss_after: float
    loss_abs_diff: float
    max_abs_grad_diff: float
    max_abs_grad: float
    max_abs_param_diff_after_one_step: float
    param_diff_note: str
    timing_repeats: int
    machine: str
    verdict: str


class Choice(Document):
    generation: str
    topology: str
    accelerator_type: str
    chips: int


class GenerationRow(Document):
    generation: str
    hbm_bytes: float
    footprint_bytes: float
    footprint_source: str
    hbm_used_pct: float
    step_compute_s: float
    step_memory_s: float
    bound: str
    tokens_per_s_per_chip: float
    usd_per_chip_hour: float | None  # None: no published list price (TPU7x)
    usd_per_million_tokens: float | None
    chips_for_target: int
    accelerator_type_for_target: str | None
    max_rows_per_chip: int


class Recommendation(Document):
    choice: Choice
    generations: list[GenerationRow]
    target_tokens_per_s: float
    reasons: list[str]
    move_up_when: list[str]
    price_source: str


class Plan(Document):
    """plan.json: TPU generation and topology, precision, memory vs the TPU compiler."""

    what: ClassVar[str] = "plan.json"

    schema_: Literal[PLAN_SCHEMA] = pydantic.Field(alias="schema")
    created_utc: str
    command: str | None = None
    machine: str
    config: Config
    params: ParamsSection
    precision: list[PrecisionRow]
    memory_analytic: AnalyticMemory
    kv_cache: list[KvCacheRow]
    compiler: Compiler
    hypothesis: Hypothesis
    recommendation: Recommendation

    _created = iso("created_utc")


# --- cache_report.json ------------------------------------------------------------------------


class CacheModel(Document):
    d_model: int
    num_layers: int
    num_heads: int
    head_dim: int
    compute_dtype: str
    params: int


class CacheData(Document):
    source: str
    files: list[str]
    windows: int
    window_tokens: int
    prefill_len: int
    scored_tokens: int


class CacheRow(Document):
    cache: Precision
    bytes_per_token_per_layer: int
    ratio_vs_fp32: float
    target_ratio: float | None
    meets_target: bool | None
    max_abs_logit_error: float
    mean_abs_logit_error: float
    teacher_forced_top1_agreement: float
    greedy_agreement: float
    greedy_first_divergence: list[int | None]
    heldout_loss: float
    heldout_loss_delta: float


class CacheReport(Document):
    """cache_report.json: fp32/bf16/int8 KV caches: bytes, logit error, greedy agreement."""

    what: ClassVar[str] = "cache_report.json"

    format: Literal[CACHE_REPORT_FORMAT]
    version: Literal[1]
    model: CacheModel
    data: CacheData
    prompts: list[str]
    gen_tokens: int
    backend: str
    full_forward_loss: float
    fp32_cache_vs_full_forward_max_abs: float  # both at HIGHEST matmul precision
    full_forward_max_abs_logit: float
    targets: dict[str, float]
    rows: list[CacheRow]
