"""Chart pieces the lesson apps share: readable heatmaps, distinct colours, label placement.

Each helper fixes one way a chart goes wrong in the browser, and its test checks the
property in the Vega-Lite spec rather than the look:

- ``tick_values``: at most ``max_labels`` ticks on an axis of ``n`` positions, so labels
  never run together (every k-th position is labelled).
- ``heatmap``: a matrix as coloured cells with thinned ticks; values are written in only
  while the cells are large enough, in white on dark cells and black on light ones.
- ``distinct_colors``: ``n`` colours no two alike (Vega's default category scheme repeats
  after 10, so an 11th op would share the first op's colour).
- ``label_rows``: the row each text label goes in so that labels along an axis never overlap.
- ``log_domain``: a log-axis domain in whole decades with headroom above the largest value.
"""

from __future__ import annotations

import colorsys
import math
from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd

# Vega's tableau10 (its default categorical scheme), then 8 colours from d3's category20b/c
# and tableau20 picked greedily to be as far (in RGB) from all before them as possible:
# no two of the 18 are closer than tableau10's own closest pair (purple and grey).
TABLEAU10 = (
    "#4c78a8",
    "#f58518",
    "#e45756",
    "#72b7b2",
    "#54a24b",
    "#eeca3b",
    "#b279a2",
    "#ff9da6",
    "#9d755d",
    "#bab0ac",
)
EXTRA_COLORS = (
    "#17becf",
    "#393b79",
    "#9edae5",
    "#843c39",
    "#98df8a",
    "#b79a20",
    "#dbdb8d",
    "#7b4173",
)
PALETTE = TABLEAU10 + EXTRA_COLORS  # the colours that stay easy to tell apart
DARK_FRACTION = 0.55  # a cell this far along its colour ramp is dark enough for white text


def tick_values(n: int, max_labels: int = 12) -> list[int]:
    """Positions 0..n-1 to label on an axis: all of them up to ``max_labels``, else every k-th."""
    if n < 0 or max_labels < 1:
        raise ValueError(
            f"tick_values needs n >= 0 and max_labels >= 1, got n={n}, max_labels={max_labels}"
        )
    step = max(1, math.ceil(n / max_labels))
    return list(range(0, n, step))


def dark_cell_test(values: np.ndarray, diverging: bool) -> str:
    """A Vega expression, true for the cells whose colour is dark (they get white text).

    A diverging scale with its midpoint at 0 darkens towards both ends; a sequential one
    from 0 darkens towards the largest value. Hidden cells (null) are never dark.
    """
    finite = values[np.isfinite(values)]
    high = float(finite.max()) if finite.size else 0.0
    low = float(finite.min()) if finite.size else 0.0
    if diverging:
        upper, lower = DARK_FRACTION * max(high, 0.0), DARK_FRACTION * min(low, 0.0)
        return f"datum.value !== null && (datum.value > {upper!r} || datum.value < {lower!r})"
    start = min(low, 0.0)
    return f"datum.value !== null && datum.value > {start + DARK_FRACTION * (high - start)!r}"


def heatmap(
    matrix,
    title: str,
    row_title: str = "row",
    col_title: str = "column",
    scheme: str = "redblue",
    hidden=None,
    size: int | None = None,
    max_labels: int = 12,
):
    """A small matrix as coloured cells; ``hidden`` cells are drawn grey.

    ``redblue`` is diverging around 0; any other scheme is sequential from 0. Axes label at
    most ``max_labels`` positions; values are written in only when neither side exceeds
    ``max_labels`` cells, white on dark cells and black on light ones.
    """
    matrix = np.asarray(matrix, np.float64)
    if matrix.ndim != 2 or 0 in matrix.shape:
        raise ValueError(f"heatmap needs a non-empty 2-D matrix, got shape {matrix.shape}")
    hidden = np.zeros(matrix.shape, bool) if hidden is None else np.asarray(hidden, bool)
    if hidden.shape != matrix.shape:
        raise ValueError(f"hidden has shape {hidden.shape}, the matrix {matrix.shape}")
    rows, cols = matrix.shape
    cells = pd.DataFrame(
        [
            {
                "r": r,
                "c": c,
                "value": None if hidden[r, c] else float(v),
                "label": "·" if hidden[r, c] else f"{v:.2f}",
            }
            for (r, c), v in np.ndenumerate(matrix)
        ]
    )
    size = size or max(4, min(30, 300 // max(rows, cols)))
    diverging = scheme == "redblue"
    if diverging:
        scale = alt.Scale(scheme=scheme, domainMid=0)
    else:
        scale = alt.Scale(scheme=scheme, domainMin=0)
    x_axis = alt.Axis(labelAngle=0, values=tick_values(cols, max_labels))
    base = alt.Chart(cells, title=title).encode(
        x=alt.X("c:O", title=col_title, axis=x_axis),
        y=alt.Y("r:O", title=row_title, axis=alt.Axis(values=tick_values(rows, max_labels))),
    )
    colour = alt.Color("value:Q", scale=scale, title=None)
    rects = base.mark_rect(stroke="white", strokeWidth=0.5).encode(
        color=alt.condition("datum.value === null", alt.value("#e8e8e8"), colour),
        tooltip=[
            alt.Tooltip("r:O", title=row_title),
            alt.Tooltip("c:O", title=col_title),
            alt.Tooltip("value:Q", format=".4f"),
        ],
    )
    chart = rects
    if max(rows, cols) <= max_labels:
        shown = np.where(hidden, np.nan, matrix)
        text = base.mark_text(fontSize=max(7, size // 3)).encode(
            text="label:N",
            color=alt.condition(
                dark_cell_test(shown, diverging), alt.value("white"), alt.value("black")
            ),
        )
        chart = rects + text
    return chart.properties(width=size * cols, height=size * rows)


def distinct_colors(n: int) -> list[str]:
    """``n`` colours, no two alike: tableau10, 8 companions, then evenly spread hues."""
    if n < 0:
        raise ValueError(f"distinct_colors needs n >= 0, got {n}")
    palette = list(PALETTE)[:n]
    for i in range(n - len(palette)):
        hue = (i * 0.618033988749895) % 1.0  # golden-ratio steps never repeat a hue
        lightness, saturation = (0.45, 0.65) if i % 2 == 0 else (0.68, 0.55)
        r, g, b = colorsys.hls_to_rgb(hue, lightness, saturation)
        palette.append(f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}")
    return palette


def label_rows(starts: Sequence[float], widths: Sequence[float], gap: float = 4.0) -> list[int]:
    """A row for each label (0 = first row) so that labels sharing a row never overlap.

    Label i spans ``starts[i] .. starts[i] + widths[i]`` (pixels); labels are placed from
    left to right, each in the lowest row whose last label ends ``gap`` before it starts.
    """
    if len(starts) != len(widths):
        raise ValueError(
            f"label_rows needs one width per start, got {len(starts)} and {len(widths)}"
        )
    ends: list[float] = []  # right end of the last label in each row
    rows = [0] * len(starts)
    for i in sorted(range(len(starts)), key=lambda i: starts[i]):
        row = next((k for k, end in enumerate(ends) if end + gap <= starts[i]), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = starts[i] + widths[i]
        rows[i] = row
    return rows


def text_width(text: str, font_size: float = 10.0) -> float:
    """A generous estimate of a label's width in pixels (sans-serif: ~0.62 em per character)."""
    return 0.62 * font_size * len(text)


def log_domain(values: Sequence[float], headroom_decades: float = 0.5) -> list[float]:
    """[low, high] in whole decades around positive ``values``, at least ``headroom_decades``
    above the largest, so the highest line is not drawn on the chart's top edge."""
    positive = [float(v) for v in values if v is not None and np.isfinite(v) and v > 0]
    if not positive:
        raise ValueError("log_domain needs at least one positive, finite value")
    low = 10.0 ** math.floor(math.log10(min(positive)))
    high = 10.0 ** math.ceil(math.log10(max(positive)) + headroom_decades)
    return [low, high]
