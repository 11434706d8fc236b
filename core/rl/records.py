"""Benchmark records of the RL lessons, kept in the repo (the course's record spec).

``benchmarks/records/<name>/<YYYY-MM-DD>_<machine-slug>.json``: schema_version, name, date,
machine (label, cpu, cores, platform), versions, the exact command, load average, figures,
notes. ``core.perf.records`` is the course-wide writer; until it is in the tree this module
writes the same document itself, and ``cite``/``latest`` read either.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import re

RECORDS_DIR = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "records"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def document(name: str, command: str, figures: dict, notes: str = "") -> dict:
    """The record of figures just measured on this machine (date, machine, versions, load)."""
    import jax

    from core.perf import machine

    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise ValueError(f"a record name is snake_case, got {name!r}")
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        load = None
    cpu, cores = machine.cpu_model(), machine.core_count()
    return {
        "schema_version": 1,
        "name": name,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "machine": {
            "label": machine.machine_label(),
            "cpu": cpu,
            "cores": cores,
            "platform": jax.default_backend(),
        },
        "versions": {"python": platform.python_version(), "jax": jax.__version__},
        "command": command,
        "load_average": load,
        "figures": figures,
        "notes": notes,
    }


def write(
    name: str, command: str, figures: dict, notes: str = "", root: pathlib.Path | None = None
) -> pathlib.Path:
    """Keep a record under ``root`` (the repo's records by default); the default goes through
    ``core.perf.records.write_record`` when the tree has it."""
    try:
        from core.perf import records as perf_records
    except ImportError:
        perf_records = None
    if root is None and perf_records is not None and hasattr(perf_records, "write_record"):
        return perf_records.write_record(name, command, figures, notes=notes)
    from core.documents import write_text_atomic

    doc = document(name, command, figures, notes)
    where = doc["machine"]
    slug = _slug(f"{where['cpu']} {where['cores']}core {where['platform']}")
    path = (RECORDS_DIR if root is None else root) / name / f"{doc['date']}_{slug}.json"
    return write_text_atomic(path, json.dumps(doc, indent=2) + "\n")


def latest(name: str, root: pathlib.Path = RECORDS_DIR) -> tuple[pathlib.Path, dict]:
    """(path, document) of the newest record of ``name`` (by its file name's date)."""
    paths = sorted((root / name).glob("*.json"))
    if not paths:
        raise FileNotFoundError(f"no benchmark record {name!r} under {root}")
    path = paths[-1]
    return path, json.loads(path.read_text(encoding="utf-8"))


def cite(name: str, root: pathlib.Path = RECORDS_DIR) -> str:
    """``"<path> (<date>, <machine label>)"``, the path relative to the repo."""
    path, doc = latest(name, root)
    try:
        shown = path.relative_to(root.parent.parent)
    except ValueError:
        shown = path
    return f"{shown} ({doc['date']}, {doc['machine']['label']})"
