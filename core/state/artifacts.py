"""The learning paths' first artifacts: files a learner keeps, each with its content hash.

Four artifacts, each written by ``python -m tpu_scripts artifact NAME --out DIR`` (the
commands live in tpu_scripts/artifacts/): a JSON document (``NAME.json``), its sha256
(``NAME.json.sha256``: the hash of the document's canonical JSON, sorted keys and no
spaces, so re-indenting the file keeps it while changing any value breaks it) and a
Markdown report (``NAME.md``). This module is the catalogue (which path each belongs to,
what it is, its command), the default place they go, the hash, and the lookup the course
home uses to show what exists locally. No marimo, no JAX: the home and the CLIs share it.

Labelling: an artifact is a TPU result only when it ran on the TPU backend. The label comes
from ``label(backend)`` alone, so nothing else can call a CPU figure a TPU result.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import pathlib

from core import curriculum, documents

SCHEMA = "jax-tpu-lab artifact"
VERSION = 1
TPU_LABEL = "TPU RESULT"
CPU_LABEL = "CPU REHEARSAL (not a TPU result)"
GPU_LABEL = "GPU REHEARSAL (not a TPU result)"
ROOT = curriculum.REPO_ROOT / "runs" / "artifacts"  # runs/ is git-ignored


@dataclasses.dataclass(frozen=True)
class Artifact:
    name: str  # the sub-command and the file stem
    path_title: str  # the learning path (curriculum.LEARNING_PATHS) it belongs to
    title: str
    what: str  # one sentence: what the file proves

    @property
    def command(self) -> str:
        return f"python -m tpu_scripts artifact {self.name}"


_TPU_PATH, _FAST_PATH = (p.title for p in curriculum.LEARNING_PATHS)
ARTIFACTS: tuple[Artifact, ...] = (
    Artifact(
        "runtime-receipt",
        _TPU_PATH,
        "A verified TPU runtime receipt",
        "devices, topology and versions checked against the expected topology, a psum "
        "checked against its closed form, and a content hash that the verify command re-checks",
    ),
    Artifact(
        "experiment-log",
        _TPU_PATH,
        "A checkpoint-resumed experiment log",
        "a training run killed mid-way and resumed from its checkpoint in a fresh process, "
        "its per-step losses compared with an uninterrupted run",
    ),
    Artifact(
        "decision-dossier",
        _TPU_PATH,
        "A memory/precision/XProf decision dossier",
        "compiled memory against the analytic budget, bf16/fp8/int8 matmul error against "
        "float64 and the top ops of a captured trace, each ending in a decision",
    ),
    Artifact(
        "timing-placement",
        _FAST_PATH,
        "A synchronized timing report and a checked array placement",
        "compile vs steady-state time, blocked vs unblocked timings (median and spread), "
        "and every device's shard of several shardings checked against NumPy slices",
    ),
)
NAMES = tuple(a.name for a in ARTIFACTS)


def get(name: str) -> Artifact:
    for artifact in ARTIFACTS:
        if artifact.name == name:
            return artifact
    raise ValueError(f"unknown artifact {name!r}: choose one of {NAMES}")


def for_path(path_title: str) -> list[Artifact]:
    """The artifacts a learning path names first, in order."""
    return [a for a in ARTIFACTS if a.path_title == path_title]


def label(backend: str) -> str:
    """The headline of an artifact measured on ``backend``: a TPU result only on "tpu"."""
    if backend == "tpu":
        return TPU_LABEL
    return GPU_LABEL if backend in ("gpu", "cuda", "rocm") else CPU_LABEL


def default_dir(name: str, now: datetime.datetime | None = None) -> pathlib.Path:
    """runs/artifacts/<name>/<YYYY-MM-DD-HHMMSS>/ (UTC)."""
    get(name)
    now = now or datetime.datetime.now(datetime.UTC)
    return ROOT / name / now.strftime("%Y-%m-%d-%H%M%S")


def canonical_sha256(document: dict) -> str:
    """sha256 of the document as canonical JSON (sorted keys, no whitespace, UTF-8)."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hash_path(json_path: pathlib.Path) -> pathlib.Path:
    return json_path.with_name(json_path.name + ".sha256")


def load_verified(json_path: str | os.PathLike) -> dict:
    """The document at ``json_path`` if its stored sha256 matches, else ValueError saying why.

    Checks the envelope (schema, version, artifact name, tpu_result agreeing with the
    backend's label); the artifact's own schema is checked by its command's ``verify``.
    """
    json_path = pathlib.Path(json_path)
    if not json_path.is_file():
        raise ValueError(f"no artifact file at {json_path}")
    document = documents.read_json(json_path)
    sidecar = hash_path(json_path)
    if not sidecar.is_file():
        raise ValueError(f"{json_path} has no hash file {sidecar.name}: it cannot be verified")
    words = sidecar.read_text(encoding="utf-8").split()  # "<hex>  <file name>", like sha256sum
    stored = words[0] if words else ""
    actual = canonical_sha256(document)
    if stored != actual:
        raise ValueError(
            f"{json_path} was changed after it was written: sha256 {actual[:16]}... "
            f"does not match the stored {stored[:16] or '(empty)'}..."
        )
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise ValueError(f"{json_path} is not a {SCHEMA} document")
    if document.get("version") != VERSION:
        raise ValueError(f"{json_path}: version {document.get('version')!r}, expected {VERSION}")
    get(document.get("artifact", ""))
    backend = document.get("receipt", {}).get("backend")
    if document.get("tpu_result") is not (backend == "tpu") or document.get("label") != label(
        str(backend)
    ):
        raise ValueError(
            f"{json_path}: tpu_result/label {document.get('tpu_result')!r}/"
            f"{document.get('label')!r} disagree with backend {backend!r}"
        )
    return document


@dataclasses.dataclass(frozen=True)
class Found:
    """The newest local copy of an artifact and what verifying it said."""

    json_path: pathlib.Path
    markdown_path: pathlib.Path
    created_utc: str
    label: str
    verified: bool
    problem: str  # "" when verified


def latest(name: str, root: pathlib.Path = ROOT) -> Found | None:
    """The newest runs/artifacts/<name>/*/<name>.json, verified, or None if there is none."""
    get(name)
    candidates = sorted((root / name).glob(f"*/{name}.json"), key=lambda p: p.parent.name)
    if not candidates:
        return None
    path = candidates[-1]
    try:
        document = load_verified(path)
    except ValueError as exc:
        return Found(path, path.with_suffix(".md"), "", "", False, str(exc))
    return Found(
        path, path.with_suffix(".md"), document["created_utc"], document["label"], True, ""
    )
