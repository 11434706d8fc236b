"""Lesson code of "Batch environments and scan rollouts": the throughput sweep and its chart."""

from __future__ import annotations

import math

import numpy as np

from core.rl import rollout

# The check's bound: float64 on both sides, each env running free within an episode; random
# actions end episodes after ~20 steps, so rounding (1e-16) grows by at most a few decades.
ROLLOUT_TOLERANCE = 1e-6
GYM_STEPS = 3000  # steps of the gymnasium loop per env count: its rate hardly depends on N


def env_counts(lo: int, hi: int, points: int) -> list[int]:
    """``points`` powers of two from ``lo`` to ``hi``, spaced evenly in log scale."""
    if not 1 <= lo <= hi:
        raise ValueError(f"need 1 <= min envs <= max envs, got {lo}, {hi}")
    if points < 1:
        raise ValueError(f"points must be >= 1, got {points}")
    if points == 1 or lo == hi:
        return [hi]
    exps = np.linspace(math.log2(lo), math.log2(hi), points)
    return sorted({int(2 ** round(e)) for e in exps})


def sweep(counts: list[int], num_steps: int, repeats: int = 3) -> list[dict]:
    """One row per env count: steps/s of the scanned, vmapped JAX rollout and of the Python
    loop over gymnasium envs, and their ratio."""
    rows = []
    for n in counts:
        ours = rollout.jax_steps_per_second(n, num_steps, repeats=repeats)
        theirs = rollout.gymnasium_steps_per_second(n, max(GYM_STEPS, n))
        rows.append(
            {
                "envs": n,
                "jax steps/s": ours["steps_per_s"],
                "gymnasium steps/s": theirs["steps_per_s"],
                "jax / gymnasium": ours["steps_per_s"] / theirs["steps_per_s"],
                "jax compile (s)": ours["compile_s"],
            }
        )
    return rows


def crossover(rows: list[dict]) -> float | None:
    """The env count where the JAX rollout overtakes the gymnasium loop (interpolated in log
    scale between the two rows around it); the smallest count if JAX is ahead from the start
    (then the crossover is at or below it); None if it never gets ahead."""
    ratios = [(r["envs"], r["jax / gymnasium"]) for r in rows]
    if all(q < 1 for _, q in ratios):
        return None
    if ratios[0][1] >= 1:
        return float(ratios[0][0])
    for (n0, q0), (n1, q1) in zip(ratios, ratios[1:], strict=False):
        if q0 < 1 <= q1:
            f = (0 - math.log(q0)) / (math.log(q1) - math.log(q0))
            return float(math.exp(math.log(n0) + f * (math.log(n1) - math.log(n0))))
    return None


def throughput_chart(rows: list[dict], machine: str):
    """Steps per second against env count, log-log, one line per way of stepping."""
    import altair as alt
    import pandas as pd

    long = pd.DataFrame(
        [
            {"envs": r["envs"], "way": way, "steps/s": r[f"{key} steps/s"]}
            for r in rows
            for way, key in (
                ("JAX: vmap + lax.scan", "jax"),
                ("Python loop over gymnasium", "gymnasium"),
            )
        ]
    )
    return (
        alt.Chart(long, title=f"Environment steps per second ({machine})")
        .mark_line(point=True)
        .encode(
            x=alt.X("envs:Q", scale=alt.Scale(type="log", base=2), title="environments N"),
            y=alt.Y("steps/s:Q", scale=alt.Scale(type="log"), title="steps per second"),
            color="way:N",
            tooltip=["envs", "way", alt.Tooltip("steps/s:Q", format=",.0f")],
        )
        .properties(width=460, height=260)
    )
