"""The profile that misled: page faults inside every op, and the allocator settings that remove
them (lesson "Read an XProf trace", its last section).

The story (issue 19, the capstone's JAX train step losing to its PyTorch twin): XLA:CPU
allocates each step's temporary buffers and frees them at the end of the step. With glibc's
default malloc a block over the mmap threshold is mmapped, page-faulted and zeroed on first
touch, then unmapped again, every step. The faults happen inside whichever op first touches
the memory, so a profile shows every op slower and nothing in the op table points at the
allocator. The signals that do: minor page faults and system CPU per step (getrusage), and
``compiled.memory_analysis().temp_size_in_bytes`` (how much is churned). The fix is
core/perf/allocator.py's glibc tunables.

malloc settings are fixed when a process starts, and the lab's own process already runs tuned
(the Makefile exports GLIBC_TUNABLES), so the demo runs a small workload with one wide
temporary in two FRESH child processes, one per allocator mode:

    python -m core.lessons.performance.read_xprof_trace TEMP_MIB STEPS   # prints one JSON line

The workload, ``wide_intermediate(x_MK, w_KN) = sin(x @ w) @ w.T``: its (M, N) float32
intermediate cannot be fused away (a dot's output feeding another dot), so it is the step's
temporary buffer, ``M * N * 4`` bytes by closed form.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

from core import numerics

ROWS = 1024  # M: rows of x; the intermediate is (ROWS, columns)
INNER = 16  # K: the contraction; small, so the two dots are cheap next to the faults
FLOAT32_BYTES = 4
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MODES = ("glibc defaults", "tuned")
# Untimed warm-up steps first: the compile, the first touch, and the tuned heap's growth to
# its working size. XLA's threads allocate the step's buffer in turn and small allocations
# split freed blocks, so for a while a step's buffer finds no free block big enough and the
# heap grows once more (strace shows several growths, quiet steps between them, then none).
# So each child warms up until
# SETTLE_STEPS steps in a row fault less than STORM_FAULTS_PER_STEP times (at least
# WARMUP_MIN steps, at most WARMUP_MAX: glibc's defaults never settle), and reports them.
WARMUP_MIN, WARMUP_MAX, SETTLE_STEPS = 8, 24, 6  # the steps are short: warming is cheap
CHILD_TIMEOUT_S = 120
# A page-fault storm: glibc's defaults fault at least this often per step before it counts
# as one. Below it (transparent huge pages, a non-glibc C library) there is nothing to remove.
STORM_FAULTS_PER_STEP = 1000
NO_STORM_REASONS = (
    "a block under glibc's dynamic mmap threshold (after the first free of an mmapped block "
    "the threshold rises to its size, up to 32 MiB on 64-bit, and later blocks come from the "
    "heap), transparent huge pages, or another C library"
)
# The tuned child must fault less than this fraction of the defaults' (a settled tuned heap
# faults next to never, the defaults every page of the buffer); the margin leaves room for a
# few faults of Python's own allocations.
TUNED_FAULT_FRACTION = 0.1
# XLA's temp buffer vs the closed-form (M, N) float32 intermediate: measured equal (one buffer,
# sin in place). 0.5 leaves room for small scratch buffers; a second full-size copy (+100%)
# or a fused-away intermediate (-100%) fails.
TEMP_TOLERANCE = 0.5
# Defaults' faults per step vs the intermediate's pages: each page faulted once per step (the
# demo prints the ratio). The bounds allow other allocations and partial huge-page backing.
FAULTS_PER_PAGE_RANGE = (0.5, 2.0)
BENCH_PATHS = ("runs/capstone/bench.json", "bench/bench.json")
REPO = pathlib.Path(__file__).resolve().parents[3]


@dataclasses.dataclass(frozen=True)
class Demo:
    """The workload: a (ROWS, columns) float32 intermediate of ``temp_mib`` MiB, ``steps``
    timed steps after the warm-up (WARMUP_MIN to WARMUP_MAX untimed steps). The data is
    deterministic: its values do not matter to the allocator, and a PRNG's first use would
    compile for seconds."""

    temp_mib: int
    steps: int

    def __post_init__(self):
        if not 1 <= self.temp_mib <= 1024:
            raise ValueError(f"temp_mib must be in [1, 1024] MiB, got {self.temp_mib}")
        if not 1 <= self.steps <= 100:
            raise ValueError(f"steps must be in [1, 100], got {self.steps}")

    @property
    def columns(self) -> int:
        """N: the intermediate's columns, so that ROWS * N float32 are temp_mib MiB."""
        return self.temp_mib * 2**20 // (FLOAT32_BYTES * ROWS)

    @property
    def intermediate_bytes(self) -> int:
        """Closed form: the (M, N) float32 intermediate of sin(x @ w)."""
        return ROWS * self.columns * FLOAT32_BYTES


def wide_intermediate(x_MK, w_KN):
    """sin(x @ w) @ w.T: (M, K), (K, N) -> (M, K), through an (M, N) intermediate."""
    import jax.numpy as jnp

    return jnp.sin(x_MK @ w_KN) @ w_KN.T


def child_environment(mode: str) -> dict[str, str]:
    """The environment of a fresh child process with glibc's defaults or the tuned settings."""
    from core.perf import allocator

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    tuned = mode == "tuned"
    return allocator.child_env(tuned, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="1")


def run_child(demo: Demo, mode: str) -> dict:
    """Run ``demo`` in a fresh process under ``mode``; its JSON result plus "mode".

    {"mode", "allocator": allocator.in_force(), "temp_bytes" (memory_analysis), "step_s":
    [s], "faults": [per timed step], "warmup_faults": [per warm-up step], "median_step_s",
    "minor_faults_per_step", "refaults_per_step" (faults heap growth does not explain),
    "system_s_per_step" (medians over the timed steps), "growth_pages" (per timed step),
    "page_bytes", "peak_rss_bytes" (the child's maximum resident set)}. Raises RuntimeError
    with the child's stderr when it fails.
    """
    argv = [sys.executable, "-m", __name__, str(demo.temp_mib), str(demo.steps)]
    done = subprocess.run(
        argv,
        env=child_environment(mode),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{mode} child failed ({done.returncode}): {done.stderr[-800:]}")
    return {"mode": mode, **json.loads(done.stdout.strip().splitlines()[-1])}


def compare(demo: Demo) -> dict[str, dict]:
    """Both modes, one fresh process after the other: {mode: run_child(demo, mode)}."""
    return {mode: run_child(demo, mode) for mode in MODES}


def _measure(demo: Demo) -> dict:
    """In the child: warm up once, then time ``demo.steps`` blocked steps with getrusage."""
    from core.perf import allocator

    state = allocator.configure()  # a no-op in both modes (defaults, or GLIBC_TUNABLES)

    import jax
    import numpy as np

    x_MK = np.cos(np.arange(ROWS * INNER, dtype=np.float32)).reshape(ROWS, INNER)
    w_KN = np.sin(np.arange(INNER * demo.columns, dtype=np.float32)).reshape(INNER, -1) / 4
    x_MK, w_KN = jax.device_put(x_MK), jax.device_put(w_KN)
    step = jax.jit(wide_intermediate).lower(x_MK, w_KN).compile()
    memory = step.memory_analysis()
    warmup, quiet, warmup_faults = 0, 0, []
    while warmup < WARMUP_MIN or (quiet < SETTLE_STEPS and warmup < WARMUP_MAX):
        before = allocator.page_faults()["minor_faults"]
        jax.block_until_ready(step(x_MK, w_KN))
        warmup_faults.append(allocator.page_faults()["minor_faults"] - before)
        quiet = quiet + 1 if warmup_faults[-1] < STORM_FAULTS_PER_STEP else 0
        warmup += 1
    wall, faults, system, growth = [], [], [], []
    for _ in range(demo.steps):
        resident_before = allocator.resident_anon_bytes()
        before, start = allocator.page_faults(), time.perf_counter()
        jax.block_until_ready(step(x_MK, w_KN))
        wall.append(time.perf_counter() - start)
        after = allocator.page_faults()
        resident_after = allocator.resident_anon_bytes()
        faults.append(after["minor_faults"] - before["minor_faults"])
        system.append(after["system_s"] - before["system_s"])
        if resident_before is not None and resident_after is not None:
            growth.append(max(0, resident_after - resident_before) // PAGE_BYTES)
        else:
            growth.append(0)
    return {
        "allocator": state,
        "temp_bytes": int(memory.temp_size_in_bytes),
        "step_s": wall,
        "faults": faults,
        "warmup_faults": warmup_faults,
        "median_step_s": statistics.median(wall),
        "minor_faults_per_step": float(statistics.median(faults)),
        "growth_pages": growth,
        "refaults_per_step": float(statistics.median(refaults(faults, growth))),
        "system_s_per_step": float(statistics.median(system)),
        "page_bytes": PAGE_BYTES,
        "peak_rss_bytes": peak_rss_bytes(),
    }


def refaults(faults: list[int], growth_pages: list[int]) -> list[int]:
    """Per step, the faults that lasting heap growth does not explain: ``faults`` minus the
    pages the step left resident (``growth_pages``), at least 0.

    A storm faults the same pages every step and leaves nothing behind (glibc unmaps the
    buffer at its free); a heap that grows faults new pages once and keeps them. On a loaded
    machine XLA's threads allocate in a different order and the tuned heap can still grow in
    the timed steps (seen: thousands of faults a step, all of them growth): those faults are not a
    storm, and the comparison of storms counts refaults only."""
    return [max(0, f - g) for f, g in zip(faults, growth_pages, strict=True)]


def peak_rss_bytes() -> int:
    """This process's peak resident set: VmHWM of /proc/self/status (Linux), else ru_maxrss.

    Not ru_maxrss first: Linux carries it across execve from the process that spawned a child
    (a vfork-ed child records its parent's peak), so a fresh child would report the lab's."""
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def rows(results: dict[str, dict]) -> list[dict]:
    """The table of the two modes."""
    return [
        {
            "allocator": mode,
            "in force": r["allocator"]["mechanism"],
            "median step (s)": r["median_step_s"],
            "minor faults / step": round(r["minor_faults_per_step"]),
            "refaults / step (not heap growth)": round(r["refaults_per_step"]),
            "system CPU / step (s)": r["system_s_per_step"],
            "temp (MiB)": r["temp_bytes"] / 2**20,
            "warm-up steps": len(r["warmup_faults"]),
            "peak RSS (MiB)": r["peak_rss_bytes"] / 2**20,
        }
        for mode, r in results.items()
    ]


def chart_rows(results: dict[str, dict]) -> list[dict]:
    """Long form for a side-by-side chart: one row per (mode, measure)."""
    measures = {
        "minor faults per step": "minor_faults_per_step",
        "median step (ms)": "median_step_s",
        "system CPU per step (ms)": "system_s_per_step",
    }
    scale = {"minor_faults_per_step": 1.0, "median_step_s": 1e3, "system_s_per_step": 1e3}
    return [
        {"allocator": mode, "measure": name, "value": r[field] * scale[field]}
        for mode, r in results.items()
        for name, field in measures.items()
    ]


def verdict(demo: Demo, results: dict[str, dict]) -> dict:
    """What the check judges: the temp error against the closed form, and the fault facts.

    The comparison of faults is gated on a storm existing: when glibc's defaults fault fewer
    than STORM_FAULTS_PER_STEP times per step (transparent huge pages, a non-glibc C library)
    there is nothing for the settings to remove, and the facts say so instead of failing.
    """
    defaults, tuned = results["glibc defaults"], results["tuned"]
    storm = defaults["minor_faults_per_step"] >= STORM_FAULTS_PER_STEP
    pages = demo.intermediate_bytes / defaults["page_bytes"]
    temp_error = {
        f"temp bytes, memory_analysis vs closed form ({mode} child)": (
            numerics.elementwise_relative_error(r["temp_bytes"], demo.intermediate_bytes)
        )
        for mode, r in results.items()
    }
    facts = {
        "the defaults child ran with glibc's defaults": defaults["allocator"]["mechanism"]
        == "none",
    }
    if storm:
        low, high = FAULTS_PER_PAGE_RANGE
        ratio = defaults["minor_faults_per_step"] / pages
        facts[
            f"defaults faulted >= {STORM_FAULTS_PER_STEP:,} times per step "
            f"({defaults['minor_faults_per_step']:,.0f})"
        ] = True
        facts[
            f"defaults' faults per step are {low}-{high}x the intermediate's {pages:,.0f} pages "
            f"({ratio:.2f}x)"
        ] = low <= ratio <= high
        facts["the tuned child ran with the tunables"] = (
            tuned["allocator"]["mechanism"] == "GLIBC_TUNABLES"
        )
        grew = sum(1 for g in tuned["growth_pages"] if g)
        growth_note = (
            f"; {grew} of the tuned child's {len(tuned['growth_pages'])} steps grew the heap "
            f"(median {tuned['minor_faults_per_step']:,.0f} faults with growth)"
            if grew
            else ""
        )
        facts[
            f"tuned refaults per step < {TUNED_FAULT_FRACTION:g} x defaults' "
            f"({tuned['refaults_per_step']:,.0f} vs "
            f"{defaults['refaults_per_step']:,.0f}{growth_note})"
        ] = tuned["refaults_per_step"] < TUNED_FAULT_FRACTION * (defaults["refaults_per_step"])
    else:
        facts[
            f"defaults faulted only {defaults['minor_faults_per_step']:,.0f} times per step "
            f"(< {STORM_FAULTS_PER_STEP:,}: {NO_STORM_REASONS}): no storm to remove, fault "
            "comparison skipped"
        ] = True
    return {"storm": storm, "temp_error": temp_error, "facts": facts, "pages": pages}


def capstone_bench(root: pathlib.Path = REPO) -> dict | None:
    """The newest capstone bench.json (BENCH_PATHS) as plain JSON, with "path" and "written"
    (its modification time, UTC), or None when there is none or it cannot be read."""
    found = [root / p for p in BENCH_PATHS if (root / p).is_file()]
    if not found:
        return None
    newest = max(found, key=lambda p: p.stat().st_mtime)
    try:
        bench = json.loads(newest.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(bench, dict):
        return None
    written = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(newest.stat().st_mtime))
    return {**bench, "path": str(newest.relative_to(root)), "written": written}


def bench_rows(bench: dict) -> list[dict]:
    """The allocator before/after of a bench.json, one row per mode (empty when absent)."""
    comparison = bench.get("allocator_comparison") or {}
    out = []
    for mode in ("glibc_defaults", "tuned"):
        child = comparison.get(mode)
        if isinstance(child, dict) and "median_s" in child:
            out.append(
                {
                    "capstone step, allocator": mode.replace("_", " "),
                    "median step (s)": child["median_s"],
                    "minor faults / step": round(child.get("minor_faults_per_step", 0)),
                    "system CPU / step (s)": child.get("system_s_per_step", "not recorded"),
                }
            )
    return out


if __name__ == "__main__":
    print(json.dumps(_measure(Demo(int(sys.argv[1]), int(sys.argv[2])))))
