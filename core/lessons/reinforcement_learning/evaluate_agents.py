"""Lesson code of "Evaluate agents across seeds": the two configurations and the charts."""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.rl import ppo


def band_frame(bands_by_name: dict[str, np.ndarray], batch_size: int) -> pd.DataFrame:
    """Rows (env steps, configuration, mean, low, high) from ``evaluation.curve_bands``."""
    rows = []
    for name, bands in bands_by_name.items():
        for u in range(bands.shape[1]):
            rows.append(
                {
                    "env steps": (u + 1) * batch_size,
                    "configuration": name,
                    "mean": float(bands[0, u]),
                    "low": float(bands[1, u]),
                    "high": float(bands[2, u]),
                }
            )
    return pd.DataFrame(rows)


def band_chart(frame: pd.DataFrame, confidence: float):
    """Learning curves: the mean over seeds as a line, its bootstrap interval as a band."""
    import altair as alt

    base = alt.Chart(frame).encode(x="env steps:Q", color=alt.Color("configuration:N", title=None))
    band = base.mark_area(opacity=0.25).encode(
        y=alt.Y("low:Q", title="episode return"), y2="high:Q"
    )
    line = base.mark_line().encode(y="mean:Q")
    return (band + line).properties(
        width=460,
        height=240,
        title=f"Training return: mean over seeds and its {confidence:.0%} bootstrap interval",
    )


def final_outcomes(metrics: dict, seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """(A_S, B_S): each run's greedy evaluation mean return; runs are [A seeds, B seeds]."""
    eval_mean = np.asarray(metrics["eval_returns_E"]).mean(axis=1)
    return eval_mean[:seeds], eval_mean[seeds:]


def training_curves(metrics: dict, seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """(A_SU, B_SU) learning curves of the two configurations."""
    curve = ppo.learning_curve(metrics["return_sum_U"], metrics["episodes_U"])
    return curve[:seeds], curve[seeds:]
