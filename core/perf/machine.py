"""Measure this machine's sustained matmul FLOP/s and memory bandwidth, labelled with the machine.

Used by benchmarks/machine.py (full measurement, JSON to benchmarks/results/machine.json)
and by the roofline lesson (reads that JSON when present, else a quick small measurement).
Every number is a measurement of THIS machine (a CPU here); it says nothing about a TPU.

Method: jit the kernel, warm up (compile) outside the clock, time ``repeats`` blocked calls,
report the median. Matmul: n x n @ n x n, 2 n^3 FLOPs. Bandwidth: ``x + 1`` over a large
float32 array (larger than the caches), which reads and writes every byte: 2 * nbytes.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import re

import jax
import jax.numpy as jnp

from core import runtime
from core.perf import timing

DEFAULT_JSON = (
    pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "machine.json"
)


def cpu_model(cpuinfo_text: str | None = None) -> str:
    """The CPU model name from /proc/cpuinfo (or ``cpuinfo_text``); platform info elsewhere."""
    if cpuinfo_text is None:
        try:
            cpuinfo_text = pathlib.Path("/proc/cpuinfo").read_text(
                encoding="utf-8", errors="replace"
            )
        except OSError:
            cpuinfo_text = ""
    match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo_text, flags=re.MULTILINE)
    if match:
        return match.group(1).strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def core_count() -> int:
    """CPU cores this process may run on (the affinity mask, else os.cpu_count())."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_label() -> str:
    """``"<CPU model>, N cores (this CPU)"``: the label every measured figure carries."""
    return f"{cpu_model()}, {core_count()} cores (this CPU)"


def measure_matmul(n: int = 1024, dtype: str = "float32", repeats: int = 5) -> dict:
    """Sustained FLOP/s of an n x n matmul in ``dtype`` (median of ``repeats``)."""
    if n < 1 or repeats < 1:
        raise ValueError(f"n and repeats must be >= 1, got {n}, {repeats}")
    key_a, key_b = jax.random.split(jax.random.key(0))
    cpu = runtime.cpu_device()  # this CPU's figure, on a TPU host too: operands committed there
    a = jax.device_put(jax.random.normal(key_a, (n, n), jnp.float32).astype(dtype), cpu)
    b = jax.device_put(jax.random.normal(key_b, (n, n), jnp.float32).astype(dtype), cpu)
    matmul = jax.jit(jnp.matmul)
    # one warm-up call compiles and warms the caches outside the clock
    seconds = timing.median_seconds(lambda: matmul(a, b), repeats, warmup=1)
    flops = 2.0 * n**3
    return {
        "kernel": f"matmul {n}x{n} {dtype}",
        "flops": flops,
        "seconds": seconds,
        "flop_per_s": flops / seconds,
    }


def measure_bandwidth(megabytes: float = 256, repeats: int = 5) -> dict:
    """Sustained bytes/s of ``x + 1`` on a float32 array of ``megabytes`` (read + write).

    The input is donated and the output fed back in, so each call updates one buffer in
    place instead of allocating (and page-faulting) a fresh one.
    """
    n = int(megabytes * 1e6 / 4)
    if n < 1 or repeats < 1:
        raise ValueError(f"array size and repeats must be positive, got {megabytes} MB, {repeats}")
    add_one = jax.jit(lambda v: v + 1, donate_argnums=0)
    start = jax.device_put(jnp.zeros((n,), jnp.float32), runtime.cpu_device())  # this CPU's
    buffer = {"x": jax.block_until_ready(add_one(start))}  # compiles

    def step():
        buffer["x"] = add_one(buffer["x"])
        return buffer["x"]

    seconds = timing.median_seconds(step, repeats)
    moved = 2.0 * n * 4
    return {
        "kernel": f"x + 1, {n * 4 / 1e6:.0f} MB float32",
        "bytes": moved,
        "seconds": seconds,
        "bytes_per_s": moved / seconds,
    }


def measure(quick: bool = False, bf16: bool = True) -> dict:
    """The machine report: f32 (and bf16) matmul FLOP/s and copy bandwidth, with labels."""
    n, megabytes, repeats = (256, 32, 3) if quick else (2048, 512, 7)
    report = {
        "machine": machine_label(),
        "cpu_model": cpu_model(),
        "cores": core_count(),
        "backend": "cpu",  # measured on the host's CPU whatever the default backend
        "jax": jax.__version__,
        "quick": quick,
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "matmul_float32": measure_matmul(n, "float32", repeats),
        "bandwidth": measure_bandwidth(megabytes, repeats),
    }
    if bf16:
        report["matmul_bfloat16"] = measure_matmul(n, "bfloat16", repeats)
    report["peak_flop_per_s"] = report["matmul_float32"]["flop_per_s"]
    report["bytes_per_s"] = report["bandwidth"]["bytes_per_s"]
    return report


def load(path: str | pathlib.Path = DEFAULT_JSON) -> dict | None:
    """A saved report, or None when there is none (or it lacks the two roofline numbers)."""
    path = pathlib.Path(path)
    if not path.is_file():
        return None
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable, not JSON, nested too deeply
        return None
    if not all(
        isinstance(report.get(k), (int, float)) and report[k] > 0
        for k in ("peak_flop_per_s", "bytes_per_s")
    ):
        return None
    return report


def report_rows(report: dict) -> list[dict]:
    """Table rows: one per measured kernel, labelled with the machine."""
    rows = []
    for key in ("matmul_float32", "matmul_bfloat16", "bandwidth"):
        if key in report:
            item = report[key]
            value = item.get("flop_per_s") or item.get("bytes_per_s")
            unit = "GFLOP/s" if "flop_per_s" in item else "GB/s"
            rows.append(
                {
                    "kernel": item["kernel"],
                    "median time (ms)": f"{item['seconds'] * 1e3:.3g}",
                    "sustained": f"{value / 1e9:.3g} {unit}",
                    "machine": report["machine"],
                }
            )
    return rows
