"""The models of what the bench measures: bench.json (BenchResult, bench/__init__.py lists its
keys) and profile/profile.json (ProfileResult). Written and read through documents.py's
``write`` and ``load``; documents.py re-exports BenchResult, ProfileResult and the formats."""

from __future__ import annotations

from typing import ClassVar, Literal

import pydantic

from capstones.byte_transformer.document_base import Config, Document, Precision

BENCH_FORMAT = "byte_transformer bench"
PROFILE_FORMAT = "byte_transformer profile"


# --- bench.json -------------------------------------------------------------------------------


class Step(Document):
    median_s: float
    p10_s: float
    p90_s: float
    min_s: float
    samples_s: list[float]
    cpu_median_s: float
    tokens_per_s: float
    valid_tokens_per_s: float
    minor_faults_per_step: float
    system_s_per_step: float
    mfu: float | None


class Category(Document):
    category: str
    ms_per_step: float
    share: float


class Breakdown(Document):
    method: str
    wall_step_s: float
    categories: list[Category]


class JaxStep(Document):
    lower_s: float
    compile_s: float
    step: Step
    mfu: float | None
    breakdown: Breakdown


class JaxVariantStep(Document):
    changes: list[str]
    lower_s: float
    compile_s: float
    step: Step
    mfu: float | None


class TorchStep(Document):
    step: Step
    mfu: float | None


class TorchCompiled(TorchStep):
    first_step_s: float
    caches: str
    compile_s_estimate: float


class Failed(Document):
    error: str


class CachedDecode(Document):
    prefill_s: float
    seconds: float
    tokens_per_s: float | None
    tokens: list[int]


class LoopDecode(Document):
    seconds: float
    tokens_per_s: float
    tokens: list[int]


class RecomputeDecode(Document):
    seconds: float
    tokens_per_s: float
    forward_len: int
    tokens: list[int]


class Decode(Document):
    context: int
    new_tokens: int
    capacity: int
    method: str
    cached: dict[Precision, CachedDecode]
    cached_device_loop: dict[Precision, LoopDecode]
    recompute: RecomputeDecode
    # from the fp32 cache, when it was timed
    prefill_s: float | None = None
    tokens: list[int] | None = None
    speedup: float | None = None
    speedup_device_loop: float | None = None
    end_to_end_speedup: float | None = None
    greedy_tokens_identical: bool | None = None


class CacheBytes(Document):
    closed_form: int
    measured: float
    ratio_vs_fp32: float


class CacheBytesSection(Document):
    fp32: CacheBytes
    bf16: CacheBytes
    int8: CacheBytes
    formula: str


class Target(Document):
    value: float | None
    target: float
    op: Literal[">=", "<="]
    passed: bool = pydantic.Field(alias="pass")


class LoadAverage(Document):
    start: list[float]
    end: list[float]
    other_processes_cores: float | None


class Batch(Document):
    batch_size: int
    seq_len: int
    tokens_per_step: int
    valid_tokens_per_step: float


class TimingMethod(Document):
    method: str
    rounds: int
    warmup: int


class PeakCandidate(Document):
    framework: Literal["xla", "torch"]
    m: int
    k: int
    n: int
    flop_per_s: float


class Peak(Document):
    kernel: str
    flops: float
    seconds: float
    flop_per_s: float
    method: str
    xla_best_flop_per_s: float
    torch_best_flop_per_s: float
    candidates: list[PeakCandidate]


class Allocator(Document):
    mechanism: Literal["mallopt", "GLIBC_TUNABLES", "none"]
    settings: dict[str, int]
    reason: str


class MallocChild(Document):
    allocator: Allocator
    median_s: float
    samples_s: list[float]
    minor_faults_per_step: float
    system_s_per_step: float
    load_average_1m: list[float]


class MallocComparison(Document):
    method: str
    glibc_defaults: MallocChild | None = None
    tuned: MallocChild | None = None
    speedup: float | None = None
    error: str | None = None


class Flops(Document):
    formula: str
    matmul_params: int
    matmul: float
    attention: float
    total: float
    attention_skipped: float
    xla_cost_analysis_flops: float | None


class JaxVsTorch(Document):
    speedup: float
    faster_torch: Literal["torch_eager", "torch_compile"]
    dense_attention_speedup: float
    median_of_round_ratios: float


class Spread(Document):
    median: float
    p10: float
    p90: float
    min: float | None = None
    max: float | None = None


class SweepStep(Document):
    median_s: float
    p10_s: float
    p90_s: float
    samples_s: list[float]


class SweepRow(Document):
    blocks: Literal["dense"] | int
    skipped_fraction: float
    step: SweepStep
    vs_dense: Spread | None = None


class BlockSweep(Document):
    """block_sweep=...: the train step per attention core (bench/variants.py)."""

    method: str
    rounds: int
    warmup: int
    seq_len: int
    default_blocks: int
    rows: list[SweepRow]
    fastest: Literal["dense"] | int


class Bf16Row(SweepStep):
    loss_curve: list[float]


class Ratio(Document):
    of_medians: float
    rounds: Spread


class Bf16Policy(Document):
    """bf16=true: float32 vs the bf16 compute policy, JAX and torch (bench/variants.py)."""

    method: str
    rounds: int
    warmup: int
    rows: dict[Literal["jax_f32", "jax_bf16", "torch_f32", "torch_bf16"], Bf16Row]
    jax_bf16_vs_torch_bf16: Ratio
    jax_f32_vs_torch_f32: Ratio
    jax_bf16_vs_jax_f32: Ratio
    torch_bf16_vs_torch_f32: Ratio
    loss_gap_jax_bf16_vs_f32: float
    loss_gap_torch_bf16_vs_f32: float
    loss_gap_jax_vs_torch_f32: float


class DecodeRounds(Document):
    tokens_per_s: dict[str, Spread]
    ratio_vs_recompute: dict[str, Spread]
    loop_eigen_off_vs_on: Spread | None = None


class DecodeAB(Document):
    """decode_ab=N: the decode loop's Eigen A/B and arena_max=1 vs default (bench/decode_ab.py);
    ``arena`` is {mode: {"glibc_tunables", "children", "per_token_ratio", "loop_ratio"},
    "<way>_arena_max_1_vs_default": float} or {"error": str}."""

    method: str
    context: int
    new_tokens: int
    rounds: int
    in_process: DecodeRounds
    arena: dict[str, dict | float | str]
    faster: dict[str, bool]


class BenchResult(Document):
    """bench.json: the train step of JAX vs the PyTorch twin, MFU, decoding, cache bytes."""

    what: ClassVar[str] = "bench.json"

    format: Literal[BENCH_FORMAT]
    version: Literal[2]
    command: str
    machine: str
    cpu_model: str
    cores: int
    load_average: LoadAverage
    versions: dict[str, str | None]
    xla_flags: str
    allocator: Allocator
    torch_threads: int
    jax_devices: list[str]
    config: Config
    batch: Batch
    timing: TimingMethod
    peak: Peak
    flops: Flops
    jax: JaxStep
    jax_dense_attention: JaxVariantStep
    torch_eager: TorchStep
    torch_compile: TorchCompiled | Failed
    jax_vs_torch: JaxVsTorch
    decode: Decode
    allocator_comparison: MallocComparison
    cache_bytes: CacheBytesSection
    targets: dict[str, Target]
    defects: list[str]
    warnings: list[str]
    total_s: float
    block_sweep: BlockSweep | None = None  # the optional parts, present when they ran
    bf16: Bf16Policy | None = None
    decode_ab: DecodeAB | None = None


# --- profile/profile.json ---------------------------------------------------------------------


class OpRow(Document):
    op: str
    count: int
    total_ms: float
    ms_per_step: float
    share: float
    hlo: str
    source: str


class SourceShare(Document):
    source: str
    ms_per_step: float
    share: float


class PhaseShare(Document):
    phase: str
    ms_per_step: float
    share: float


class ProfileResult(Document):
    """profile.json: where a warmed train step's op time goes, from a profiler trace."""

    what: ClassVar[str] = "profile.json"

    format: Literal[PROFILE_FORMAT]
    version: Literal[1]
    machine: str
    config: Config
    trace_dir: str
    xplane: str
    steps: int
    wall_step_s: list[float]
    wall_total_s: float
    module: str
    threads: int
    op_time_total_s: float
    op_busy_s: float
    op_table: list[OpRow]
    ops: int
    by_source: list[SourceShare]
    by_category: list[Category]
    by_phase: list[PhaseShare]
