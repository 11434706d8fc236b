"""What every command of the capstone shares: the output folder, the hardware label, JSON and
Markdown writing, and the words that label CPU interpret-mode figures."""

from __future__ import annotations

import datetime
import json
import math
import pathlib
from typing import Any

from core import documents

DEFAULT_OUT = "runs/pallas_kernel"
INTERPRET_LABEL = "CPU, Pallas interpret mode: measures semantics, not speed"
INTERPRETS = ("tpu", "hlo")  # TPU interpret mode (races, NaN-poisoned memory) or jax's HLO one


def interpret_mode(name: str):
    """The ``interpret=`` value of a Pallas call: "tpu" (pltpu.InterpretParams that detect
    races and poison uninitialized memory) or "hlo" (jax's plain HLO interpreter, ~2x
    cheaper per kernel, no race detector). On a TPU backend both compile through Mosaic."""
    from core.kernels import matmul

    if name not in INTERPRETS:
        raise ValueError(f"interpret must be one of {INTERPRETS}, got {name!r}")
    # this flag's "tpu" is TPU interpret mode, matmul's "interpret" (its "tpu" is Mosaic)
    return matmul.default_interpret("interpret" if name == "tpu" else "hlo")


def hardware() -> dict[str, Any]:
    """Where a section ran: JAX's backend and devices, and the host's CPU."""
    import jax

    from core.perf import machine

    devices = jax.devices()
    return {
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind,
        "device_count": len(devices),
        "host": machine.machine_label(),
        "jax": jax.__version__,
    }


def now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def finite(value: float | None) -> float | None:
    """``value`` if it is a finite number, else None (JSON has no inf or NaN)."""
    return value if value is not None and math.isfinite(value) else None


def write_json(out: pathlib.Path, name: str, document: dict) -> pathlib.Path:
    """``document`` as ``out/name`` (atomic: a reader sees the old file or the new one)."""
    text = json.dumps(document, indent=2, sort_keys=False, allow_nan=False) + "\n"
    return documents.write_text_atomic(pathlib.Path(out) / name, text)


def read_json(path: pathlib.Path) -> dict | None:
    """The JSON object in ``path``, or None when there is no such file."""
    path = pathlib.Path(path)
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def md_table(rows: list[dict]) -> str:
    """A Markdown table of ``rows`` (the keys of the first row are the columns)."""
    if not rows:
        return "(no rows)"
    columns = list(rows[0])

    def cell(value):
        if isinstance(value, float):
            return f"{value:.3g}"
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def print_rows(rows: list[dict], title: str = "") -> None:
    if title:
        print(title)
    print(md_table(rows))
