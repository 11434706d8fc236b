"""The JSON documents the capstone writes and reads, one pydantic model each (core.documents).

    bench.json              BenchResult        bench          (bench/__init__.py lists its keys)
    profile/profile.json    ProfileResult      profile        (bench/__init__.py)
    plan.json               Plan               plan           (plan/__init__.py)
    cache_report.json       CacheReport        cache-report   (kv_cache.py)
    artifacts/manifest.json ExportManifest     export         (export.py; with its own sha256)
    run_manifest.json       RunManifest        run-manifest   (run_manifest.py)
    metrics.jsonl (a line)  MetricsRecord      train          (training.py)
    eval.json               EvalResult         eval
    corpus.json             CorpusIdentity     train
    report/report.json      Report             report
    runtime.json            Runtime            tpu_scripts/byte_transformer_tpu.py
    tpu_result.json         JobResult          tpu_scripts/byte_transformer_tpu.py

Every writer validates its document before it writes (``write``: a document that breaks its
model is a bug and raises ValueError, nothing is written), and every reader verifies what it
loads (``load``): a file that is not JSON or breaks its model raises DocumentError, a
UsageError naming the file and the first bad field (exit status 2 through the CLI, no
traceback). The models are strict (a JSON ``true`` is not a count) and keep fields they do
not know. The formats with a documented key list are exported as JSON Schema to
docs/schemas/<name>.schema.json (``python -m capstones.byte_transformer.documents``
rewrites them; documents_test fails while one is stale).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, ClassVar, Literal

import pydantic

from capstones.byte_transformer import args
from core import documents

BENCH_FORMAT = "byte_transformer bench"
PROFILE_FORMAT = "byte_transformer profile"
PLAN_SCHEMA = "byte_transformer plan v1"
CACHE_REPORT_FORMAT = "byte_transformer cache report"
EXPORT_FORMAT = "byte_transformer exported endpoints"
RUN_MANIFEST_SCHEMA = "byte_transformer run manifest v1"
SCHEMA_DIR = pathlib.Path(__file__).resolve().parents[2] / "docs" / "schemas"

Config = dict[str, Any]  # Config.to_dict(): checked by config.Config.from_dict where it is used
Precision = Literal["fp32", "bf16", "int8"]


class Document(documents.Document):
    """A capstone document: core.documents' strict model, named for its messages."""

    what: ClassVar[str] = "document"


class DocumentError(args.UsageError):
    """A document that is not JSON or not what its model says; the message names the file
    and the first bad field (a UsageError: exit status 2 through the CLI)."""


def _iso(field: str):
    return pydantic.field_validator(field)(documents.iso_time)


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

    _created = _iso("created_utc")


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
    fp32_cache_vs_full_forward_max_abs: float
    targets: dict[str, float]
    rows: list[CacheRow]


# --- artifacts/manifest.json ------------------------------------------------------------------


class Leaf(Document):
    name: str
    shape: list[pydantic.NonNegativeInt]
    dtype: str


class FileEntry(Document):
    file: str
    sha256: str
    bytes: int


class WeightsEntry(FileEntry):
    leaves: list[Leaf]


class ArtifactEntry(FileEntry):
    kind: Literal["prefill", "decode"]
    precision: Precision
    platforms: list[str]
    inputs: list[Leaf]
    outputs: list[Leaf]


class Shapes(Document):
    batch: int
    prefill_len: int
    capacity: int
    vocab_size: int


class ExportManifest(Document):
    """artifacts/manifest.json: the exported endpoints, each file's size and sha256, and
    manifest_sha256 over the rest (export.read_manifest checks it)."""

    what: ClassVar[str] = "manifest"

    format: str
    format_version: int
    created: str
    config: Config
    shapes: Shapes
    weights: WeightsEntry
    artifacts: dict[str, ArtifactEntry]
    versions: dict[str, Any]
    manifest_sha256: str


# --- run_manifest.json ------------------------------------------------------------------------


class Device(Document):
    platform: str
    device_kind: str
    id: int | None = None
    process_index: int | None = None
    coords: list[int] | None = None
    core_on_chip: int | None = None


class Environment(Document):
    python: str | None = None
    packages: dict[str, str | None] | None = None
    platform: str | None = None
    hostname: str | None = None
    tpu_vm: bool | None = None


class Runtime(Document):
    """runtime.json (run_manifest.capture_runtime, written on the TPU VM): the backend and
    the devices a job saw."""

    what: ClassVar[str] = "the record"

    backend: str
    devices: list[Device]
    captured_utc: str | None = None
    environment: Environment | None = None


class TpuIdentity(Document):
    name: str | None
    zone: str | None
    project: str | None
    accelerator_type: str | None
    runtime_version: str | None
    state: str | None
    topology: str | None
    source: str
    conflicts: list[str]


class Event(Document):
    line: int
    kinds: list[str]
    text: str


class BackendEvents(Document):
    log: str | None
    log_sha256: str
    lines: int
    counts: dict[str, int]
    events: list[Event]
    truncated: bool


class ResultRecord(Document):
    path: str
    kind: str | None
    is_tpu_result: bool
    file_says_tpu: bool


class FileRecord(Document):
    path: str
    bytes: int
    sha256: str


class StepRecord(Document):
    directory: str
    step: int
    verified: bool
    problems: list[str]


class CheckpointRecords(Document):
    files: list[FileRecord]
    file_count: int
    total_bytes: int
    steps: list[StepRecord]
    partial_saves: list[str]


class Teardown(Document):
    deleted: bool
    applicable: bool
    proof: str
    names_tpu: bool | None


class RunManifest(Document):
    """run_manifest.json: what ran where, and whether it may be called a TPU run."""

    what: ClassVar[str] = "run manifest"

    schema_: Literal[RUN_MANIFEST_SCHEMA] = pydantic.Field(alias="schema")
    created_utc: str
    run_dir: str
    tpu: TpuIdentity
    runtime_source: str
    environment: Environment
    devices: list[Device]
    backend: str
    backend_events: BackendEvents | None
    results: list[ResultRecord]
    checkpoints: CheckpointRecords
    teardown: Teardown
    is_tpu_run: bool
    verdict: str

    _created = _iso("created_utc")


class JobResult(Document):
    """tpu_result.json / cpu_rehearsal_result.json (tpu_scripts/byte_transformer_tpu.py):
    a job's train-step timing and training summary, marked TPU only when JAX said so.
    run_manifest reads only its claim (is_tpu_result, kind), from any JSON object."""

    what: ClassVar[str] = "job result"

    kind: str
    is_tpu_result: bool
    created_utc: str
    command: list[str]
    backend: str
    device_kind: str
    device_count: int
    config: Config
    train_step: dict[str, Any]
    training: dict[str, Any]
    note: str

    _created = _iso("created_utc")


# --- train and eval: metrics.jsonl, corpus.json, eval.json -------------------------------------


class MetricsRecord(Document):
    """One line of metrics.jsonl: one training step."""

    what: ClassVar[str] = "metrics record"

    step: int
    loss: float
    tokens: int
    step_time_s: float
    grad_norm: float
    tokens_per_s: float
    elapsed_s: float
    heldout_loss: float | None = None  # every eval_every steps
    heldout_bpb: float | None = None


class CorpusIdentity(Document):
    """corpus.json: which files were trained on and which held out, with their sha256."""

    what: ClassVar[str] = "corpus.json"

    directory: str
    seed: int
    train_files: list[str]
    heldout_files: list[str]
    train_sha256: str
    heldout_sha256: str


class EvalResult(Document):
    """eval.json: the held-out loss of the newest checkpoint."""

    what: ClassVar[str] = "eval.json"

    loss: float
    bits_per_byte: float
    tokens: int
    step: int
    heldout_files: int
    heldout_sha256: str
    train_files: int
    overlap_files: list[str]
    uniform_bits_per_byte: float


# --- report/report.json -----------------------------------------------------------------------


class Check(Document):
    passed: bool


class Report(Document):
    """report.json: every piece of the run (each as loaded, or None when missing)."""

    what: ClassVar[str] = "report.json"

    run_dir: str
    config: Config
    parameters: int
    corpus: dict[str, Any]
    training: dict[str, Any]
    checkpoints: list[dict[str, Any]]
    pieces: dict[str, dict[str, Any] | None]
    missing: dict[str, str]
    charts: dict[str, str]
    checks: dict[str, Check] | None = None


# --- writing, loading, the exported schemas ------------------------------------------------------

# The formats with a key list in their module's docstring: docs/schemas/<name>.schema.json.
SCHEMAS: dict[str, type[Document]] = {
    "bench": BenchResult,
    "profile": ProfileResult,
    "plan": Plan,
    "cache_report": CacheReport,
    "export_manifest": ExportManifest,
    "run_manifest": RunManifest,
    "metrics_record": MetricsRecord,
}


def _where(location: tuple) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def problem(model: type[Document], document: Any) -> str | None:
    """The first thing ``model`` refuses in ``document``, in words ("weights lacks 'sha256'",
    "shapes.batch: Input should be a valid integer, got '8'"); None when it accepts it."""
    if not isinstance(document, dict):
        return f"{model.what} must be a JSON object, got {type(document).__name__}"
    try:
        model.model_validate(document)
    except pydantic.ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        location = tuple(error["loc"])
        if error["type"] == "missing":
            return f"{_where(location[:-1]) or model.what} lacks {location[-1]!r}"
        message = error["msg"].removeprefix("Value error, ")
        return f"{_where(location)}: {message}, got {error.get('input')!r}"
    return None


def check(model: type[Document], document: Any, path: str | pathlib.Path) -> dict:
    """``document`` if ``model`` accepts it, else DocumentError naming ``path``."""
    found = problem(model, document)
    if found is not None:
        raise DocumentError(f"{path}: {found}")
    return document


def write(path: str | pathlib.Path, model: type[Document], document: dict) -> pathlib.Path:
    """Validate ``document`` and write it atomically as JSON (ValueError, nothing written,
    when it breaks its model: a bug in the writer)."""
    from core.state import checkpoint

    found = problem(model, document)
    if found is not None:
        raise ValueError(f"refusing to write {path}: {found}")
    path = pathlib.Path(path)
    checkpoint.write_json_atomic(path, document)
    return path


def json_line(model: type[Document], record: dict) -> str:
    """``record`` as one validated line of a JSON Lines file (ValueError when it breaks
    ``model``: a bug in the writer)."""
    found = problem(model, record)
    if found is not None:
        raise ValueError(f"refusing to write a {model.what}: {found}")
    return json.dumps(record) + "\n"


def load(path: str | pathlib.Path, model: type[Document]) -> dict:
    """The verified document at ``path``: DocumentError when it is unreadable, not JSON or
    not what ``model`` says (FileNotFoundError when it is not there)."""
    path = pathlib.Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentError(f"{path} is unreadable: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(f"{path} is not JSON: {exc}") from None
    return check(model, document, path)


def load_optional(path: str | pathlib.Path, model: type[Document]) -> dict | None:
    """``load``, or None when there is no file at ``path``."""
    try:
        return load(path, model)
    except FileNotFoundError:
        return None


def schema_text(model: type[Document]) -> str:
    """The model's JSON Schema as the committed file holds it."""
    return json.dumps(documents.json_schema(model), indent=2, sort_keys=True) + "\n"


def write_schemas(directory: pathlib.Path = SCHEMA_DIR) -> list[pathlib.Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in SCHEMAS.items():
        path = directory / f"{name}.schema.json"
        path.write_text(schema_text(model), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_schemas():
        print(f"wrote {written_path}")
