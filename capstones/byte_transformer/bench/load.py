"""Machine load during a bench run: how many cores OTHER processes kept busy (from
/proc/stat minus this process), and the warning when the machine was shared."""

from __future__ import annotations

from core.perf import records


def cpu_counters() -> dict:
    """Busy CPU seconds of the whole machine (/proc/stat; None elsewhere), this process's
    and its children's CPU seconds, and the wall clock: two readings give how many cores
    OTHER processes kept busy in between (the load average also counts this process).
    The reading is core.perf.records's, the one its records keep."""
    reading = records.read_load()
    return {key: reading[key] for key in ("machine_busy_s", "own_s", "wall_s")}


def other_processes_cores(start: dict, end: dict) -> float | None:
    """Average cores other processes used between two cpu_counters() readings."""
    if start["machine_busy_s"] is None or end["machine_busy_s"] is None:
        return None
    no_average = {"load_average": None}
    return records.measure_load({**start, **no_average}, {**end, **no_average})[
        "other_processes_cores"
    ]


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
