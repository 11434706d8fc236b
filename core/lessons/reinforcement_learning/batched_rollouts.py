"""Lesson code of "Batch environments and scan rollouts": the throughput sweep and its chart."""

from __future__ import annotations

import math

import numpy as np

from core.rl import gymnasium_parity, rollout

# The check's bound: float64 on both sides, each env running free within an episode; random
# actions end episodes after ~20 steps, so rounding (1e-16) grows by at most a few decades.
ROLLOUT_TOLERANCE = 1e-6
GYM_STEPS = 3000  # steps of the gymnasium loop per env count: its rate hardly depends on N


def sweep_problem(lo: int, hi: int, points: int) -> str | None:
    """Why the sweep ``env_counts(lo, hi, points)`` cannot be run as asked, or None."""
    if lo > hi:
        return (
            f"min envs ({lo}) is larger than max envs ({hi}): the sweep runs from the "
            "smallest count to the largest."
        )
    if points < 1:
        return f"points must be >= 1, got {points}"
    available = hi - lo + 1
    if available < points:
        counts = "1 env count" if available == 1 else f"{available} env counts"
        return (
            f"{lo} .. {hi} holds {counts}; points {points} needs {points} different ones. "
            f"Lower points to {available} or widen the range."
        )
    return None


def env_counts(lo: int, hi: int, points: int) -> list[int]:
    """``points`` different env counts from ``lo`` to ``hi`` (both included), spaced evenly
    in log scale and rounded to integers (1 .. 256 in 3 points is 1, 16, 256); one point is
    ``hi``. Raises ValueError where ``sweep_problem`` names one."""
    if not 1 <= lo <= hi:
        raise ValueError(f"need 1 <= min envs <= max envs, got {lo}, {hi}")
    problem = sweep_problem(lo, hi, points)
    if problem:
        raise ValueError(problem)
    if points == 1:
        return [hi]
    targets = np.exp(np.linspace(math.log(lo), math.log(hi), points))
    counts: list[int] = []
    for i, target in enumerate(targets):
        # distinct and increasing, leaving room for the points still to come below hi
        count = max(int(round(target)), counts[-1] + 1 if counts else lo)
        counts.append(min(count, hi - (points - 1 - i)))
    return counts


def sweep(counts: list[int], num_steps: int, repeats: int = 3) -> list[dict]:
    """One row per env count: steps/s of the scanned, vmapped JAX rollout and of the Python
    loop over gymnasium envs, and their ratio."""
    rows = []
    for n in counts:
        ours = rollout.jax_steps_per_second(n, num_steps, repeats=repeats)
        theirs = gymnasium_parity.gymnasium_steps_per_second(n, max(GYM_STEPS, n))
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
