"""The JSON documents the capstone writes and reads, one pydantic model each (core.documents).

    bench.json              BenchResult        bench          (bench/__init__.py lists its keys)
    profile/profile.json    ProfileResult      profile        (bench/__init__.py)
    plan.json               Plan               plan           (plan/__init__.py)
    cache_report.json       CacheReport        cache-report   (cache_report.py)
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

This module holds the models of what a run leaves (from artifacts/manifest.json on), the
writing and loading, and the schema list; bench_documents.py holds bench.json's and
profile.json's models, plan_documents.py plan.json's and cache_report.json's, document_base.py
the Document base they share.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, ClassVar, Literal

import pydantic

# bench.json and profile.json, plan.json and cache_report.json have their models in their own
# modules; the callers import the documents and their formats from here.
from capstones.byte_transformer.bench_documents import (
    BENCH_FORMAT as BENCH_FORMAT,
)
from capstones.byte_transformer.bench_documents import (
    PROFILE_FORMAT as PROFILE_FORMAT,
)
from capstones.byte_transformer.bench_documents import BenchResult, ProfileResult
from capstones.byte_transformer.document_base import (
    Config,
    Document,
    DocumentError,
    Precision,
    iso,
)
from capstones.byte_transformer.plan_documents import (
    CACHE_REPORT_FORMAT as CACHE_REPORT_FORMAT,
)
from capstones.byte_transformer.plan_documents import PLAN_SCHEMA as PLAN_SCHEMA
from capstones.byte_transformer.plan_documents import CacheReport, Plan
from core import documents

EXPORT_FORMAT = "byte_transformer exported endpoints"
RUN_MANIFEST_SCHEMA = "byte_transformer run manifest v1"
SCHEMA_DIR = pathlib.Path(__file__).resolve().parents[2] / "docs" / "schemas"


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
    manifest_sha256 over the rest (artifact_files.read_manifest checks it)."""

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

    _created = iso("created_utc")


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

    _created = iso("created_utc")


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
        document = documents.parse_json(text, str(path))
    except ValueError as exc:
        raise DocumentError(str(exc)) from None
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
