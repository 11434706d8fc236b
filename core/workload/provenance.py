"""Artifact provenance: what produced a model artifact, and a check of it before every use.

A provenance manifest (``provenance.json`` inside the artifact's directory) records

- ``git_revision``: the commit of the code that built it (``+dirty`` with local changes);
- ``config`` (and its canonical sha256): the training/export settings;
- ``data_sha256``: the identity of the training data (``core.state.tracking.dataset_sha256``);
- ``environment``: the environment lock, every installed distribution and its version, and
  the lock's sha256 (an equal hash is an equal environment);
- ``checkpoint`` and ``export``: the size and sha256 of every file of the trained state and of
  the exported program (paths relative to the artifact directory);
- ``created`` (UTC, ISO 8601) and ``manifest_sha256``, the canonical sha256 of everything
  else, so a manifest edited by hand is refused too.

``verify(directory, manifest, config=..., data_sha256=..., environment=...)`` runs before an
artifact is loaded. It refuses (``ProvenanceError``, whose ``problems`` name each difference)
a manifest that fails its schema or its own hash, a file that is missing, resized, changed
(one flipped byte changes its sha256) or not in the manifest, a config, data set or
environment other than the one given. Like the checkpoint manifests, it detects damage and
mix-ups, not an attacker who can rewrite the manifest too (that needs a signature).
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import pathlib
import platform
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import pydantic

from core import documents, envlock
from core.state import artifacts as state_artifacts
from core.state import checkpoint as state_checkpoint
from core.state import tracking

FORMAT = "jax-tpu-lab provenance manifest"
VERSION = 1
MANIFEST = "provenance.json"
SHOWN = 4  # differing packages / config keys named in one problem before "... and N more"

Sha256 = Annotated[str, pydantic.Field(pattern=r"^[0-9a-f]{64}$")]


class _Closed(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid")


class FileDigest(_Closed):
    sha256: Sha256
    bytes: Annotated[int, pydantic.Field(ge=0)]


class Environment(_Closed):
    python: str
    packages: dict[str, str]
    sha256: Sha256


class ProvenanceManifest(_Closed):
    format: Literal["jax-tpu-lab provenance manifest"]
    version: Literal[1]
    name: Annotated[str, pydantic.Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")]
    created: Annotated[str, pydantic.AfterValidator(documents.iso_time)]
    git_revision: str
    config: dict[str, Any]
    config_sha256: Sha256
    data_sha256: Sha256
    environment: Environment
    checkpoint: dict[str, FileDigest]
    export: dict[str, FileDigest]
    manifest_sha256: Sha256


class ProvenanceError(ValueError):
    """An artifact failed verification against its manifest; nothing was loaded.

    ``problems``: [(kind, detail)], kind one of "manifest", "file", "config", "data",
    "environment", "revision"."""

    def __init__(self, directory: pathlib.Path, problems: list[tuple[str, str]]):
        self.directory = pathlib.Path(directory)
        self.problems = list(problems)
        super().__init__(
            f"artifact {self.directory.name} refused: " + "; ".join(d for _, d in self.problems)
        )

    @property
    def kinds(self) -> list[str]:
        return sorted({k for k, _ in self.problems})


# --- the pieces -------------------------------------------------------------------------------


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def lock_sha256(python: str, packages: Mapping[str, str]) -> str:
    return state_artifacts.canonical_sha256({"python": python, "packages": dict(packages)})


def environment(packages: Mapping[str, str], python: str | None = None) -> dict:
    """An environment lock document for ``packages`` {name: version} (names PEP 503 normalized)."""
    python = python or platform.python_version()
    normalized = {_normalize(n): str(v) for n, v in sorted(packages.items())}
    return {"python": python, "packages": normalized, "sha256": lock_sha256(python, normalized)}


@functools.lru_cache(maxsize=1)
def _installed() -> tuple[tuple[str, str], ...]:
    found = {}
    for dist in envlock.distributions():  # not a package's vendored tree (setuptools/_vendor)
        name = dist.metadata["Name"]
        if name:
            found.setdefault(_normalize(name), dist.version)  # first on sys.path wins, as import
    return tuple(sorted(found.items()))


def current_environment() -> dict:
    """This interpreter's environment lock: every installed distribution and its version."""
    return environment(dict(_installed()))


def config_sha256(config: Mapping[str, Any]) -> str:
    return state_artifacts.canonical_sha256(dict(config))


def _files(directory: pathlib.Path, entries: Sequence[str]) -> dict[str, dict]:
    """{relative path: {sha256, bytes}} of each entry, a directory standing for its files."""
    out = {}
    for entry in entries:
        path = directory / entry
        if path.is_dir():
            paths = sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            paths = [path]
        else:
            raise ValueError(f"{entry!r} is not a file or folder in {directory}")
        for p in paths:
            rel = p.relative_to(directory).as_posix()
            out[rel] = {"sha256": state_checkpoint.sha256_file(p), "bytes": p.stat().st_size}
    return out


def _digest(manifest: Mapping[str, Any]) -> str:
    return state_artifacts.canonical_sha256(
        {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    )


# --- writing ---------------------------------------------------------------------------------


def record(
    directory: str | os.PathLike,
    name: str,
    config: Mapping[str, Any],
    data_sha256: str,
    checkpoint: Sequence[str],
    export: Sequence[str],
    revision: str | None = None,
    env: Mapping[str, Any] | None = None,
    now: datetime.datetime | None = None,
) -> dict:
    """Hash the artifact in ``directory`` and write its manifest there atomically (last).

    ``checkpoint`` and ``export`` are paths relative to ``directory`` (a folder stands for
    every file under it). Everything is validated before anything is written."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        raise ValueError(f"no artifact directory at {directory}")
    overlap = set(checkpoint) & set(export)
    if overlap:
        raise ValueError(f"a file is either checkpoint or export, not both: {sorted(overlap)}")
    if MANIFEST in set(checkpoint) | set(export):
        raise ValueError(f"{MANIFEST} is the manifest itself, not a file of the artifact")
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "created": (now or datetime.datetime.now(datetime.UTC)).isoformat(timespec="seconds"),
        "git_revision": revision if revision is not None else tracking.git_revision(),
        "config": dict(config),
        "config_sha256": config_sha256(config),
        "data_sha256": data_sha256,
        "environment": dict(env) if env is not None else current_environment(),
        "checkpoint": _files(directory, checkpoint),
        "export": _files(directory, export),
    }
    manifest["manifest_sha256"] = _digest(manifest)
    documents.validate(ProvenanceManifest, manifest, "provenance manifest")
    documents.write_text_atomic(directory / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return manifest


def read(directory: str | os.PathLike) -> dict:
    """The manifest in ``directory`` (ValueError if it is missing or not JSON)."""
    path = pathlib.Path(directory) / MANIFEST
    if not path.is_file():
        raise ValueError(f"no {MANIFEST} in {directory}: the artifact has no provenance")
    return documents.read_json(path)


# --- verifying -------------------------------------------------------------------------------


def _named(items: list[str]) -> str:
    shown = ", ".join(items[:SHOWN])
    return shown + (f" ... and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _mapping_diff(recorded: Mapping[str, Any], given: Mapping[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(recorded) | set(given)):
        if key not in given:
            out.append(f"{key} (recorded {recorded[key]!r}, now absent)")
        elif key not in recorded:
            out.append(f"{key} (not recorded, now {given[key]!r})")
        elif recorded[key] != given[key]:
            out.append(f"{key} {recorded[key]!r} -> {given[key]!r}")
    return out


def file_problems(directory: pathlib.Path, manifest: Mapping[str, Any]) -> list[str]:
    """How the files in ``directory`` differ from the manifest's (missing, size, sha256, extra)."""
    problems = []
    listed = {**manifest["checkpoint"], **manifest["export"]}
    for rel, want in sorted(listed.items()):
        path = directory / rel
        if not path.is_file():
            problems.append(f"{rel} is missing")
            continue
        size = path.stat().st_size
        if size != want["bytes"]:
            problems.append(f"{rel} has {size} bytes, the manifest says {want['bytes']}")
            continue
        actual = state_checkpoint.sha256_file(path)
        if actual != want["sha256"]:
            problems.append(
                f"{rel} was changed: sha256 {actual[:12]}... is not the recorded "
                f"{want['sha256'][:12]}..."
            )
    extra = sorted(
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file() and p.name != MANIFEST and p.relative_to(directory).as_posix() not in listed
    )
    if extra:
        problems.append(f"files not in the manifest: {_named(extra)}")
    return problems


def verify(
    directory: str | os.PathLike,
    manifest: Mapping[str, Any] | None = None,
    *,
    config: Mapping[str, Any] | None = None,
    data_sha256: str | None = None,
    env: Mapping[str, Any] | None = None,
    revision: str | None = None,
) -> dict:
    """The manifest, once the artifact in ``directory`` matches it; else ProvenanceError.

    ``manifest``: default the directory's own ``provenance.json``. ``config``/``data_sha256``:
    what the caller is about to use it with (None: not checked). ``env``: the environment it
    will run in (default: this interpreter's lock; pass {} to skip). ``revision``: a git
    revision it must come from (None: recorded only; serving a model built by an older
    commit is normal)."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        raise ProvenanceError(directory, [("file", f"no artifact directory at {directory}")])
    try:
        document = dict(manifest) if manifest is not None else read(directory)
    except ValueError as exc:
        raise ProvenanceError(directory, [("manifest", str(exc))]) from None
    try:
        documents.validate(ProvenanceManifest, document, "provenance manifest")
    except ValueError as exc:
        raise ProvenanceError(directory, [("manifest", str(exc))]) from None
    if _digest(document) != document["manifest_sha256"]:
        raise ProvenanceError(
            directory,
            [("manifest", "the manifest was edited after it was written (manifest_sha256)")],
        )
    problems: list[tuple[str, str]] = [("file", p) for p in file_problems(directory, document)]
    if config is not None and config_sha256(config) != document["config_sha256"]:
        diff = _mapping_diff(document["config"], config)
        problems.append(("config", f"config differs: {_named(diff) or 'key order/types'}"))
    if data_sha256 is not None and data_sha256 != document["data_sha256"]:
        problems.append(
            (
                "data",
                f"other data: sha256 {data_sha256[:12]}... is not the recorded "
                f"{document['data_sha256'][:12]}...",
            )
        )
    env = current_environment() if env is None else env
    if env and env.get("sha256") != document["environment"]["sha256"]:
        recorded = document["environment"]
        diff = _mapping_diff(recorded["packages"], env.get("packages", {}))
        if recorded["python"] != env.get("python"):
            diff.insert(0, f"python {recorded['python']} -> {env.get('python')}")
        problems.append(("environment", f"other environment: {_named(diff) or 'lock hash'}"))
    if revision is not None and revision != document["git_revision"]:
        problems.append(
            ("revision", f"built by {document['git_revision']}, expected revision {revision}")
        )
    if problems:
        raise ProvenanceError(directory, problems)
    return document
