"""Chart pieces the lesson apps share: readable heatmaps, distinct colours, label placement.

Each helper fixes one way a chart goes wrong in the browser, and its test checks the
property in the Vega-Lite spec rather than the look:

- ``tick_values``: at most ``max_labels`` ticks on an axis of ``n`` positions, so labels
  never run together (every k-th position is labelled).
- ``heatmap``: a matrix as coloured cells with thinned ticks; values are written in only
  while the cells are large enough, each in black or white, whichever contrasts more with its
  own cell's colour (computed here from the scheme's colours, ``scheme_color``).
- ``distinct_colors``: ``n`` colours no two alike (Vega's default category scheme repeats
  after 10, so an 11th op would share the first op's colour).
- ``label_rows``: the row each text label goes in so that labels along an axis never overlap.
- ``log_domain``: a log-axis domain in whole decades with headroom above the largest value.
- ``spec_problems``: what is wrong with a Vega-Lite spec as a reader sees it (a log scale over
  zeros, a label that does not contrast with its cell, a title that names the wrong dash, a
  time axis that reads ".500" at every tick, a line chart of single points, an axis over one
  value or labelled with raw floats); every app's headless charts are held to it.
"""

from __future__ import annotations

import colorsys
import math
import re
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
# Vega's continuous schemes (vega-scale's schemes.js): colours spaced evenly from 0 to 1 and
# interpolated linearly in RGB between them, as Vega does. The heatmap's schemes; another
# scheme is refused by ``heatmap`` and left unchecked by ``spec_problems``.
SCHEMES = {
    "blues": "cfe1f2bed8eca8cee58fc1de74b2d75ba3cf4592c63181bd206fb2125ca40a4a90",
    "greens": "d3eecdc0e6baabdda594d3917bc77d60ba6c46ab5e329a512089430e7735036429",
    "greys": "e2e2e2d4d4d4c4c4c4b1b1b19d9d9d8888887575756262624d4d4d3535351e1e1e",
    "redblue": "8c0d25bf363adf745ef4ae91fbdbc9f2efeed2e5ef9dcae15da2cb2f78b3134b85",
    "viridis": "440154470e61481a6c482575472f7d443a834144873d4e8a39568c35608d31688e2d708e2a788e27"
    "818e23888e21918d1f988b1fa08822a8842ab07f35b77943bf7154c56866cc5d7ad1518fd744a5db36bcdf27"
    "d2e21be9e51afde725",
}
DIVERGING = ("redblue",)  # centred on 0: the domain is symmetric around it
HIDDEN_FILL = "#e8e8e8"  # a hidden cell
# WCAG 2's contrast ratio for normal text (AA). Black or white always reaches 4.58 against
# some colour, so a label in the better of the two never falls below this.
MIN_CONTRAST = 4.5
INKS = ["black", "white"]  # a label's colours, mapped to themselves


def tick_values(n: int, max_labels: int = 12) -> list[int]:
    """Positions 0..n-1 to label on an axis: all of them up to ``max_labels``, else every k-th."""
    if n < 0 or max_labels < 1:
        raise ValueError(
            f"tick_values needs n >= 0 and max_labels >= 1, got n={n}, max_labels={max_labels}"
        )
    step = max(1, math.ceil(n / max_labels))
    return list(range(0, n, step))


def _hex_colors(scheme: str) -> np.ndarray:
    stops = SCHEMES[scheme]
    return np.array([[int(stops[i + k : i + k + 2], 16) for k in (0, 2, 4)]
                     for i in range(0, len(stops), 6)], np.float64)  # fmt: skip


def scheme_color(scheme: str, t: float) -> str:
    """The colour Vega draws at fraction ``t`` (clamped to [0, 1]) of ``scheme``'s ramp."""
    colors = _hex_colors(scheme)
    position = min(max(float(t), 0.0), 1.0) * (len(colors) - 1)
    i = min(int(position), len(colors) - 2)
    rgb = colors[i] + (position - i) * (colors[i + 1] - colors[i])
    return "#" + "".join(f"{round(c):02x}" for c in rgb)


def _luminance(color: str) -> float:
    named = {"white": "#ffffff", "black": "#000000"}
    color = named.get(color, color)
    channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    """WCAG 2's contrast ratio of two colours ("#rrggbb", "white" or "black"): 1 to 21."""
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def ink(fill: str) -> str:
    """ "black" or "white", whichever contrasts more with ``fill``."""
    return "black" if contrast("black", fill) >= contrast("white", fill) else "white"


def ink_color(field: str = "ink") -> alt.Color:
    """A text mark's colour read from ``field`` (each row's "black" or "white", ``ink``).

    An identity scale (black -> black, white -> white), not ``scale=None``: Vega-Lite reads
    null as "use the value", but marimo's react-vega then fails to create the view ("Cannot
    read properties of null (reading 'type')", a console error in every heatmap app)."""
    return alt.Color(f"{field}:N", scale=alt.Scale(domain=INKS, range=INKS), legend=None)


def _reads_its_colour_from_the_data(color: dict) -> bool:
    scale = color.get("scale", "unset")
    identity = isinstance(scale, dict) and scale.get("domain") == scale.get("range") is not None
    return bool(color.get("field")) and (scale is None or identity)


def inks(values, scheme: str, domain: Sequence[float], scale_type: str = "linear") -> list[str]:
    """The label colour ("black" or "white") for each value's cell under ``scheme`` over
    ``domain``: the colour of a value's text written on its own cell."""
    return [ink(scheme_color(scheme, scale_fraction(v, domain, scale_type))) for v in values]


def color_domain(values: np.ndarray, scheme: str) -> list[float]:
    """The heatmap's colour domain: symmetric around 0 for a diverging scheme, from
    min(0, lowest) to the highest value for a sequential one (never empty)."""
    finite = values[np.isfinite(values)]
    high = float(finite.max()) if finite.size else 0.0
    low = float(finite.min()) if finite.size else 0.0
    if scheme in DIVERGING:
        bound = max(abs(high), abs(low)) or 1.0
        return [-bound, bound]
    start = min(low, 0.0)
    return [start, high if high > start else start + 1.0]


def scale_fraction(value: float, domain: Sequence[float], scale_type: str = "linear") -> float:
    """Where ``value`` falls along a colour scale's ramp (0 to 1), as Vega maps it: linear, or
    symlog (sign(x) log1p(|x|), Vega's default constant 1)."""
    if scale_type not in ("linear", "symlog"):
        raise ValueError(f"scale_type must be linear or symlog, got {scale_type!r}")

    def f(x: float) -> float:
        return math.copysign(math.log1p(abs(x)), x) if scale_type == "symlog" else x

    low, high = f(domain[0]), f(domain[1])
    return (f(value) - low) / (high - low)


def heatmap(
    matrix,
    title: str,
    row_title: str = "row",
    col_title: str = "column",
    scheme: str = "redblue",
    hidden=None,
    size: int | None = None,
    max_labels: int = 12,
    scale_type: str = "linear",
    labels=None,
):
    """A small matrix as coloured cells; ``hidden`` cells are drawn grey.

    ``redblue`` is diverging around 0 (its domain symmetric); any other scheme of ``SCHEMES``
    is sequential from min(0, lowest value); ``scale_type="symlog"`` spreads small counts.
    Axes label at most ``max_labels`` positions; values are written in (``labels``, a matrix
    of text, replaces the default two decimals) only when neither side exceeds ``max_labels``
    cells, each in black or white, whichever contrasts more with its cell's colour.
    """
    matrix = np.asarray(matrix, np.float64)
    if matrix.ndim != 2 or 0 in matrix.shape:
        raise ValueError(f"heatmap needs a non-empty 2-D matrix, got shape {matrix.shape}")
    hidden = np.zeros(matrix.shape, bool) if hidden is None else np.asarray(hidden, bool)
    if hidden.shape != matrix.shape:
        raise ValueError(f"hidden has shape {hidden.shape}, the matrix {matrix.shape}")
    if scheme not in SCHEMES:
        raise ValueError(f"heatmap knows the schemes {sorted(SCHEMES)}, got {scheme!r}")
    rows, cols = matrix.shape
    domain = color_domain(np.where(hidden, np.nan, matrix), scheme)

    def fill(value: float) -> str:
        return scheme_color(scheme, scale_fraction(value, domain, scale_type))

    texts = np.vectorize(lambda v: f"{v:.2f}")(matrix) if labels is None else np.asarray(labels)
    if texts.shape != matrix.shape:
        raise ValueError(f"labels has shape {texts.shape}, the matrix {matrix.shape}")

    cells = pd.DataFrame(
        [
            {
                "r": r,
                "c": c,
                "value": None if hidden[r, c] else float(v),
                "label": "·" if hidden[r, c] else str(texts[r, c]),
                "ink": ink(HIDDEN_FILL if hidden[r, c] or not np.isfinite(v) else fill(v)),
            }
            for (r, c), v in np.ndenumerate(matrix)
        ]
    )
    size = size or max(4, min(30, 300 // max(rows, cols)))
    scale = alt.Scale(type=scale_type, scheme=scheme, domain=domain)
    x_axis = alt.Axis(labelAngle=0, values=tick_values(cols, max_labels))
    base = alt.Chart(cells, title=title).encode(
        x=alt.X("c:O", title=col_title, axis=x_axis),
        y=alt.Y("r:O", title=row_title, axis=alt.Axis(values=tick_values(rows, max_labels))),
    )
    colour = alt.Color("value:Q", scale=scale, title=None)
    rects = base.mark_rect(stroke="white", strokeWidth=0.5).encode(
        color=alt.condition("datum.value === null", alt.value(HIDDEN_FILL), colour),
        tooltip=[
            alt.Tooltip("r:O", title=row_title),
            alt.Tooltip("c:O", title=col_title),
            alt.Tooltip("value:Q", format=".4f"),
        ],
    )
    chart = rects
    if max(rows, cols) <= max_labels:
        text = base.mark_text(fontSize=max(7, size // 3)).encode(
            text="label:N", color=ink_color()
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


def log_floor(values: Sequence[float], floor: float) -> tuple[list[float], int]:
    """``values`` raised to at least ``floor`` (> 0) so a log axis can draw them, and how many
    were raised: a chart that draws them says so ("0 drawn at 1e-12")."""
    if not floor > 0:
        raise ValueError(f"a log axis floor must be positive, got {floor}")
    raised = [max(float(v), floor) for v in values]
    return raised, sum(float(v) < floor for v in values)


def log_domain(values: Sequence[float], headroom_decades: float = 0.5) -> list[float]:
    """[low, high] in whole decades around positive ``values``, at least ``headroom_decades``
    above the largest, so the highest line is not drawn on the chart's top edge."""
    positive = [float(v) for v in values if v is not None and np.isfinite(v) and v > 0]
    if not positive:
        raise ValueError("log_domain needs at least one positive, finite value")
    low = 10.0 ** math.floor(math.log10(min(positive)))
    high = 10.0 ** math.ceil(math.log10(max(positive)) + headroom_decades)
    return [low, high]


# ---- spec_problems: a chart as its reader sees it ------------------------------------------

# Vega-Lite's default strokeDash range: the first value of the domain is drawn solid.
DEFAULT_DASHES = ([1, 0], [4, 2], [2, 1], [1, 1], [1, 2, 4, 2])
POSITION = ("x", "y", "x2", "y2")
MIN_TIME_SPAN_MS = 1000.0  # under a second, Vega's time ticks read ".500", ".600", ...
MAX_LABEL_DIGITS = 6  # a nominal tick with more significant digits reads as noise


def unit_views(spec: dict, data=None, encoding=None, title="", layered=False):
    """Every unit view of ``spec`` with the data, encoding and title it inherits (and whether
    it is one layer of several: its axes are shared with the others)."""
    data = spec.get("data", data)
    encoding = {**(encoding or {}), **spec.get("encoding", {})}
    title = spec.get("title", title)
    if isinstance(title, dict):
        title = title.get("text", "")
    if isinstance(title, list):
        title = " ".join(map(str, title))
    for key in ("layer", "hconcat", "vconcat", "concat"):
        children = spec.get(key, [])
        for child in children:
            if key == "layer":
                yield from unit_views(child, data, encoding, title, layered or len(children) > 1)
            else:
                yield from unit_views(child, data, None, title)
    if "spec" in spec:  # facet or repeat
        yield from unit_views(spec["spec"], data, None, title, layered)
    if "mark" in spec:
        yield {
            "spec": spec,
            "data": data,
            "encoding": encoding,
            "title": str(title or ""),
            "layered": layered,
        }


def _rows(view: dict, datasets: dict) -> list[dict] | None:
    """The view's data rows, or None when they cannot be read as drawn (a transform)."""
    data = view["data"] or {}
    if view["spec"].get("transform"):
        return None
    if "values" in data:
        return data["values"]
    return datasets.get(data.get("name"))


def _mark(spec: dict) -> str:
    mark = spec["mark"]
    return mark.get("type", "") if isinstance(mark, dict) else mark


def _field(channel) -> str | None:
    if isinstance(channel, dict):
        return channel.get("field")
    return None


def _numbers(rows: list[dict], field: str) -> list[float]:
    out = []
    for row in rows:
        value = row.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(float(value))
    return out


def _log_problems(view, rows) -> list[str]:
    problems = []
    for name, channel in view["encoding"].items():
        if not isinstance(channel, dict) or (channel.get("scale") or {}).get("type") != "log":
            continue
        field = _field(channel)
        bad = [v for v in _numbers(rows, field) if v <= 0] if field else []
        if bad:
            problems.append(
                f"{name} is a log scale over {len(bad)} value(s) <= 0 of {field!r} (e.g. "
                f"{bad[0]:g}): they are not drawn; clip to a stated floor or use symlog"
            )
    return problems


def _mark_color(spec: dict, default: str | None) -> str | None:
    mark = spec["mark"] if isinstance(spec["mark"], dict) else {}
    return mark.get("fill") or mark.get("color") or default


def _fill_of(rect: dict, row: dict, rows: list[dict]) -> str | None:
    """The colour a rect draws for ``row``, or None when this module cannot tell: a fixed
    colour, a quantitative scale of a scheme in SCHEMES (linear or symlog; its explicit
    domain, else the data's extent), or a nominal scale with an explicit range (or Vega's
    default category colours, tableau10, over the sorted values)."""
    channel = rect["encoding"].get("color")
    if not isinstance(channel, dict):
        return _mark_color(rect["spec"], TABLEAU10[0])
    condition = channel.get("condition")
    if isinstance(condition, dict):
        test = condition.get("test", "")
        match = re.fullmatch(r"datum\.(\w+) === null", test)
        if match is None or "value" not in condition:
            return None
        if row.get(match.group(1)) is None:
            return condition["value"]
    field, scale = channel.get("field"), channel.get("scale") or {}
    if field is None:
        return channel.get("value")
    value = row.get(field)
    if channel.get("type") in ("nominal", "ordinal"):
        domain = scale.get("domain") or sorted({str(r.get(field)) for r in rows})
        colors = scale.get("range") or (TABLEAU10 if "scheme" not in scale else None)
        if not isinstance(domain, list) or not colors or str(value) not in map(str, domain):
            return None
        return colors[[str(d) for d in domain].index(str(value)) % len(colors)]
    kind = scale.get("type", "linear")
    if scale.get("scheme") not in SCHEMES or kind not in ("linear", "symlog"):
        return None
    numbers_ = _numbers(rows, field)
    domain = scale.get("domain") or ([min(numbers_), max(numbers_)] if numbers_ else None)
    if not isinstance(value, (int, float)) or not domain or domain[0] == domain[1]:
        return None
    return scheme_color(scale["scheme"], scale_fraction(value, domain, kind))


def _contrast_problems(views: list[dict], datasets: dict) -> list[str]:
    """Text drawn over rects of the same layer group must contrast with its own cell."""
    problems = []
    rects = [v for v in views if _mark(v["spec"]) == "rect"]
    texts = [v for v in views if _mark(v["spec"]) == "text"]
    for text_view in texts:
        under = [r for r in rects if r["data"] == text_view["data"]]
        if not under:
            continue
        color = text_view["encoding"].get("color")
        rows = _rows(text_view, datasets) or []
        text_field = _field(text_view["encoding"].get("text"))
        for row in rows:
            if text_field is None or row.get(text_field) in (None, ""):
                continue  # no text drawn on this cell
            fill = _fill_of(under[0], row, rows)
            if not isinstance(color, dict):
                label = _mark_color(text_view["spec"], "black")
            elif _reads_its_colour_from_the_data(color):
                label = row.get(color["field"])
            else:
                label = color.get("value") if "condition" not in color else None
            if fill is None or label is None:
                problems.append(
                    "a text label over a coloured cell has a colour that cannot be checked: "
                    "give each label its ink in the data (charts.heatmap does)"
                )
                break
            ratio = contrast(label, fill)
            if ratio < MIN_CONTRAST:
                problems.append(
                    f"a label in {label} on {fill}: contrast {ratio:.2f} < {MIN_CONTRAST} "
                    "(charts.ink picks black or white for a fill)"
                )
                break
    return problems


def dash_of(view: dict, rows: list[dict]) -> dict:
    """Each value of the view's strokeDash field -> its dash array, as Vega-Lite assigns it."""
    channel = view["encoding"].get("strokeDash")
    field = _field(channel)
    if not field:
        return {}
    scale = channel.get("scale") or {}
    domain = (
        scale.get("domain")
        or channel.get("sort")
        or sorted({str(r.get(field)) for r in rows if r.get(field) is not None})
    )
    if not isinstance(domain, list):
        return {}
    dashes = scale.get("range") or DEFAULT_DASHES
    return {str(v): list(dashes[i % len(dashes)]) for i, v in enumerate(domain)}


def _is_solid(dash) -> bool:
    return not dash or all(d == 0 for d in dash[1::2])


def _title_problems(view: dict, rows: list[dict]) -> list[str]:
    """A title that says "X (solid)" or "X (dashed)" must draw X that way."""
    dashes = dash_of(view, rows)
    problems = []
    for words, style in re.findall(
        r"([\w-]+(?: [\w-]+)?) \((solid|dashed|dotted)\)", view["title"]
    ):
        named = next((v for v in dashes if words.endswith(v) or v.endswith(words)), None)
        if named is None:
            continue
        solid = _is_solid(dashes[named])
        if solid != (style == "solid"):
            problems.append(
                f"the title says {named!r} is {style}, the chart draws it "
                f"{'solid' if solid else 'dashed'}"
            )
    return problems


def _time_ms(value) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return pd.Timestamp(value).value / 1e6
    except (ValueError, TypeError):
        return None


def _raw_float(value) -> bool:
    """A float (or a float written as text) with more significant digits than a tick needs."""
    if isinstance(value, str):
        try:
            value = float(value) if re.fullmatch(r"-?\d+\.\d+(e-?\d+)?", value) else None
        except ValueError:
            value = None
    if not isinstance(value, float) or not math.isfinite(value):
        return False
    return len(f"{value:.12g}".split("e")[0].lstrip("-0.").replace(".", "")) > MAX_LABEL_DIGITS


def _axis_problems(view: dict, rows: list[dict]) -> list[str]:
    problems = []
    for name in POSITION:
        channel = view["encoding"].get(name)
        field = _field(channel)
        if not field or channel.get("aggregate") or channel.get("bin"):
            continue
        kind = channel.get("type")
        axis = channel.get("axis") or {}
        values = [r.get(field) for r in rows if r.get(field) is not None]
        if kind == "temporal" and "format" not in axis and len(values) > 1:
            times = [t for t in map(_time_ms, values) if t is not None]
            if times and max(times) - min(times) < MIN_TIME_SPAN_MS:
                problems.append(
                    f"{name}: a time axis over {max(times) - min(times):.0f} ms reads like "
                    "'.500' at every tick: plot seconds from the start instead"
                )
        alone = not view["layered"]  # a layer's single value (a rule, a bound) is fine
        if kind == "quantitative" and alone and len(set(values)) == 1 and name in ("x", "y"):
            problems.append(
                f"{name}: an axis over the single value {values[0]!r} of {field!r} "
                "(nothing to compare; show it as a number or a bar)"
            )
        if kind in ("nominal", "ordinal"):
            long = [v for v in values if _raw_float(v)]
            if long:
                problems.append(
                    f"{name}: tick labels are raw floats (e.g. {long[0]!r}): format them"
                )
    return problems


def _series_problems(view: dict, rows: list[dict]) -> list[str]:
    """A line (or area) chart whose every line is a single point draws no line."""
    if _mark(view["spec"]) not in ("line", "area", "trail") or not rows:
        return []
    keys = [
        _field(view["encoding"].get(c))
        for c in ("color", "strokeDash", "detail", "shape", "size", "opacity", "row", "column")
    ]
    keys = [k for k in keys if k]
    counts: dict[tuple, int] = {}
    for row in rows:
        key = tuple(str(row.get(k)) for k in keys)
        counts[key] = counts.get(key, 0) + 1
    if counts and max(counts.values()) < 2:
        return [f"every line of this {_mark(view['spec'])} chart is one point: draw points"]
    return []


def spec_problems(spec: dict) -> list[str]:
    """What misleads a reader of this Vega-Lite spec (``chart.to_dict()``), or []."""
    datasets = spec.get("datasets", {})
    views = list(unit_views(spec))
    problems = []
    for view in views:
        rows = _rows(view, datasets)
        if rows is None:
            continue
        problems += _log_problems(view, rows)
        problems += _title_problems(view, rows)
        problems += _axis_problems(view, rows)
        problems += _series_problems(view, rows)
    problems += _contrast_problems(views, datasets)
    return list(dict.fromkeys(problems))
