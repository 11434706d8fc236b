"""Shared output for benchmarks: a machine label, a plain-text table, and a JSON file."""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import sys

from core.perf import records  # imported with the benchmark: its load reading starts the run

RESULTS_DIR = pathlib.Path(__file__).resolve().parent / "results"


def machine_label() -> dict:
    """What the figures were measured on (CPU model, cores, JAX backend)."""
    import jax

    cpu_model = platform.processor() or platform.machine()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "jax_backend": jax.default_backend(),
        "jax_version": jax.__version__,
        "measured_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def format_table(rows: list[dict], columns: list[str]) -> str:
    def show(value) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    cells = [[show(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def keep_record(name, command, figures, notes, root=None) -> int:
    """Write the benchmark record (core.perf.records): exit status 0; 1, with the refusal on
    stderr and nothing written, when other processes kept the machine busy during the run
    (measured from this module's import, before the benchmark measures anything)."""
    try:
        print(f"recorded {records.write_record(name, command, figures, notes, root)}")
    except records.BusyMachine as refused:
        print(refused, file=sys.stderr)
        return 1
    return 0


def write_json(document: dict, path: str | os.PathLike) -> pathlib.Path:
    """Write atomically (tmp + rename): a crash never leaves half a result file."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
