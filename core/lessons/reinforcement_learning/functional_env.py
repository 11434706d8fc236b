"""Lesson code of "Write a functional environment": pictures of the cart and pole."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from core.rl import cartpole, gymnasium_parity

CART_WIDTH, CART_HEIGHT = 0.5, 0.3  # metres, as drawn (gymnasium draws 50 x 30 pixels)
# The check's bound: the 1e-6 in float64. Both sides compute the same float64
# equations, so they agree to rounding (~1e-16): far inside it.
PARITY_TOLERANCE = 1e-6


def pole_tip(physics_4, params: cartpole.Params = cartpole.DEFAULT) -> tuple[float, float]:
    """(x, y) in metres of the pole's tip, the pivot at (cart x, cart height)."""
    x, _, theta, _ = (float(v) for v in physics_4)
    pole = 2 * params.length  # gymnasium's `length` is half the pole
    return x + pole * math.sin(theta), CART_HEIGHT + pole * math.cos(theta)


def frame_chart(physics_4, params: cartpole.Params = cartpole.DEFAULT, title: str = ""):
    """An Altair picture of one state: the track, its limits, the cart and the pole."""
    import altair as alt

    x = float(physics_4[0])
    tip_x, tip_y = pole_tip(physics_4, params)
    limit = params.x_threshold
    xs = alt.Scale(domain=[-limit - 0.6, limit + 0.6])
    ys = alt.Scale(domain=[-0.1, 1.6])
    track = (
        alt.Chart(pd.DataFrame({"x": [-limit, limit], "y": [0.0, 0.0]}))
        .mark_line(color="gray")
        .encode(x=alt.X("x:Q", scale=xs, title="x (m)"), y=alt.Y("y:Q", scale=ys, title=None))
    )
    limits = (
        alt.Chart(pd.DataFrame({"x": [-limit, limit]}))
        .mark_rule(color="firebrick", strokeDash=[4, 4])
        .encode(x="x:Q")
    )
    cart = (
        alt.Chart(
            pd.DataFrame(
                {"x": [x - CART_WIDTH / 2], "x2": [x + CART_WIDTH / 2], "y": [0.0]}
                | {"y2": [CART_HEIGHT]}
            )
        )
        .mark_rect(color="steelblue")
        .encode(x="x:Q", x2="x2:Q", y="y:Q", y2="y2:Q")
    )
    pole = (
        alt.Chart(pd.DataFrame({"x": [x, tip_x], "y": [CART_HEIGHT, tip_y], "order": [0, 1]}))
        .mark_line(color="darkorange", strokeWidth=6)
        .encode(x="x:Q", y="y:Q", order="order:O")
    )
    return (track + limits + cart + pole).properties(width=520, height=190, title=title)


def states_frame(states_S4: np.ndarray) -> pd.DataFrame:
    """Long-form rows (frame, variable, value) of a run's states, for a line chart."""
    states = np.asarray(states_S4, np.float64)
    return pd.DataFrame(
        [
            {"frame": i, "variable": name, "value": float(states[i, j])}
            for i in range(states.shape[0])
            for j, name in enumerate(cartpole.OBS_NAMES)
        ]
    )


def states_chart(states_S4: np.ndarray):
    """The four state variables against the frame, one line each. One row per frame, folded
    into (variable, value) by Vega-Lite: the 1500-step run has ~1,600 frames, and four rows
    per frame would pass Altair's 5,000-row limit (it raised at the steps slider's top)."""
    import altair as alt

    states = np.asarray(states_S4, np.float64)
    wide = pd.DataFrame(states, columns=list(cartpole.OBS_NAMES))
    wide.insert(0, "frame", np.arange(states.shape[0]))
    return (
        alt.Chart(wide)
        .transform_fold(list(cartpole.OBS_NAMES), as_=["variable", "value"])
        .mark_line()
        .encode(
            x=alt.X("frame:Q"),
            y=alt.Y("value:Q", title=None),
            color=alt.Color("variable:N"),
            tooltip=["frame:Q", "variable:N", "value:Q"],
        )
        .properties(width=520, height=160, title="The four state variables, frame by frame")
    )


def parity_rows(parity: gymnasium_parity.Parity) -> list[dict]:
    """The side-by-side run as table rows."""
    return [
        {"measured": "steps compared", "value": parity.steps},
        {
            "measured": "episodes ended (terminated / truncated)",
            "value": (f"{parity.episodes_ended} ({parity.terminations} / {parity.truncations})"),
        },
        {"measured": "max |state - gymnasium state| (float64)", "value": parity.state_error},
        {"measured": "max obs error vs gymnasium's float32 obs", "value": parity.obs_error},
        {"measured": "steps whose terminated/truncated differ", "value": parity.flag_mismatches},
        {"measured": "max |reward difference|", "value": parity.reward_error},
    ]
