"""Benchmark records kept in the repo: dated, per machine, validated, citable.

A number an app or a doc quotes as measured points at a record here, not at a JSON that
lived in the git-ignored ``benchmarks/results/`` of the machine that made it. One record is a
small JSON file ``benchmarks/records/<name>/<YYYY-MM-DD>_<machine-slug>.json`` validated by
``core.documents.BenchmarkRecord``: what was measured (``figures``), the exact ``command``, the
machine (label, CPU model, cores, JAX platform), the versions (python, jax, jaxlib, and torch
when the process imported it) and the load average during the run (others may have been busy).

    path = write_record("byte_transformer_bench", "python -m ... bench", {"decode_ratio": 21.5})
    latest("byte_transformer_bench").figures["decode_ratio"]
    cite("byte_transformer_bench")   # "benchmarks/records/... (2026-12-02, AMD EPYC, 2 cores ...)"

The root is ``benchmarks/records`` of this checkout; ``root=`` (or the environment variable
``JAX_LAB_RECORDS_DIR``) points elsewhere, so tests and trial runs do not touch the repo.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import re
import sys

from core import documents

REPO = pathlib.Path(__file__).resolve().parents[2]
RECORDS_DIR = REPO / "benchmarks" / "records"
ROOT_ENV = "JAX_LAB_RECORDS_DIR"
NAME = re.compile(r"[a-z0-9]+(_[a-z0-9]+)*")
WHAT = "benchmark record"


def records_root(root: str | os.PathLike | None = None) -> pathlib.Path:
    """``root`` if given, else ``$JAX_LAB_RECORDS_DIR`` if set, else the repo's records."""
    if root is not None:
        return pathlib.Path(root)
    return pathlib.Path(os.environ.get(ROOT_ENV) or RECORDS_DIR)


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"a benchmark record name is snake_case ([a-z0-9_]), got {name!r}")
    return name


def machine_slug(machine: dict) -> str:
    """``"amd-epyc-2core-cpu"``: the file-name part naming the machine (CPU, cores, platform)."""
    text = f"{machine['cpu']} {machine['cores']}core {machine['platform']}"
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _versions() -> dict[str, str]:
    import jax
    import jaxlib

    versions = {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
    }
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(getattr(torch, "__version__", None), str):
        versions["torch"] = str(torch.__version__)
    return versions


def _load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def make_record(name: str, command: str, figures: dict, notes: str = "") -> dict:
    """The record document of ``figures`` just measured here (validated; nothing written)."""
    import jax

    from core.perf import machine

    _check_name(name)
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"a benchmark record needs the exact command that ran, got {command!r}")
    if not isinstance(figures, dict) or not figures:
        raise ValueError(f"a benchmark record needs figures (a non-empty dict), got {figures!r}")
    document = {
        "schema_version": 1,
        "name": name,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "machine": {
            "label": machine.machine_label(),
            "cpu": machine.cpu_model(),
            "cores": machine.core_count(),
            "platform": jax.default_backend(),
        },
        "versions": _versions(),
        "command": command,
        "load_average": _load_average(),
        "figures": figures,
        "notes": notes,
    }
    return documents.validate(documents.BenchmarkRecord, document, WHAT)


def write_record(
    name: str,
    command: str,
    figures: dict,
    notes: str = "",
    root: str | os.PathLike | None = None,
) -> pathlib.Path:
    """Validate, then write the record atomically; returns its path.

    ``<root>/<name>/<YYYY-MM-DD>_<machine-slug>.json``: a second run on the same day on the
    same machine replaces that day's record (one record per machine per day).
    """
    document = make_record(name, command, figures, notes)
    file_name = f"{document['date']}_{machine_slug(document['machine'])}.json"
    path = records_root(root) / name / file_name
    return documents.write_text_atomic(path, json.dumps(document, indent=2) + "\n")


def load(path: str | os.PathLike) -> documents.BenchmarkRecord:
    """The record in ``path``, validated; ValueError naming the file (and the field) if not."""
    path = pathlib.Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the benchmark record ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    try:
        documents.validate(documents.BenchmarkRecord, document, WHAT)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    record = documents.BenchmarkRecord.model_validate(document)
    if path.parent.name != record.name:
        raise ValueError(f"{path}: field 'name' is {record.name!r}, its folder says otherwise")
    if not path.name.startswith(f"{record.date}_"):
        raise ValueError(f"{path}: field 'date' is {record.date!r}, its file name says otherwise")
    return record


def paths(name: str, root: str | os.PathLike | None = None) -> list[pathlib.Path]:
    """Every record file of ``name`` (sorted by file name: date, then machine)."""
    return sorted((records_root(root) / _check_name(name)).glob("*.json"))


def _newest(name: str, root) -> tuple[pathlib.Path, documents.BenchmarkRecord]:
    found = paths(name, root)
    if not found:
        raise FileNotFoundError(
            f"no benchmark record {name!r} under {records_root(root)} (run its benchmark with "
            "the option that writes a record)"
        )
    loaded = [(path, load(path)) for path in found]  # every file validated, not just the last
    return max(loaded, key=lambda item: (item[1].date, item[0].name))


def latest(name: str, root: str | os.PathLike | None = None) -> documents.BenchmarkRecord:
    """The newest record of ``name`` (by its date; the same date: by file name).

    FileNotFoundError when there is none; ValueError naming the file and field when any
    record of ``name`` is damaged.
    """
    return _newest(name, root)[1]


def latest_path(name: str, root: str | os.PathLike | None = None) -> pathlib.Path:
    """The file of ``latest(name)``."""
    return _newest(name, root)[0]


def cite(name: str, root: str | os.PathLike | None = None) -> str:
    """``"<path> (<date>, <machine label>)"`` of the newest record, the path repo-relative."""
    path, record = _newest(name, root)
    try:
        shown = path.resolve().relative_to(REPO)
    except ValueError:
        shown = path
    return f"{shown} ({record.date}, {record.machine.label})"
