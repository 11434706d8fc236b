"""Machine load during a bench run: how many cores OTHER processes kept busy (from
/proc/stat minus this process), and the warning when the machine was shared."""

from __future__ import annotations

import os
import pathlib
import time


def cpu_counters() -> dict:
    """Busy CPU seconds of the whole machine (/proc/stat; None elsewhere), this process's
    and its children's CPU seconds, and the wall clock: two readings give how many cores
    OTHER processes kept busy in between (the load average also counts this process)."""
    busy = None
    try:
        fields = [int(v) for v in pathlib.Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        busy = (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    own = os.times()
    return {
        "machine_busy_s": busy,
        "own_s": own.user + own.system + own.children_user + own.children_system,
        "wall_s": time.perf_counter(),
    }


def other_processes_cores(start: dict, end: dict) -> float | None:
    """Average cores other processes used between two cpu_counters() readings."""
    if start["machine_busy_s"] is None or end["machine_busy_s"] is None:
        return None
    wall = end["wall_s"] - start["wall_s"]
    others = (end["machine_busy_s"] - start["machine_busy_s"]) - (end["own_s"] - start["own_s"])
    return max(0.0, others / wall) if wall > 0 else None


def load_warnings(report: dict) -> list[str]:
    """A warning when other processes shared the cores during the run: the figures then
    measure the frameworks under contention, not the machine."""
    cores = report["cores"]
    others = report["load_average"].get("other_processes_cores")
    start = report["load_average"]["start"][0]
    if (others is None and start <= 0.5 * cores) or (others is not None and others <= 0.25):
        return []
    measured = (
        f"other processes kept {others:.2f} of {cores} cores busy on average"
        if others is not None
        else f"1-minute load average {start:.2f} on {cores} cores at the start"
    )
    return [
        f"the machine was shared: {measured}. Under contention a framework whose worker "
        "threads wait for each other at barriers "
        "(torch's OpenMP) loses more than one whose threads take independent work (XLA), "
        "so the JAX/torch ratio and the peak differ from a quiet machine's; compare "
        "cpu_median_s (process CPU seconds per step) and rerun on an idle machine"
    ]
