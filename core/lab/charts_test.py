import itertools
import math

import numpy as np
import pytest

from core.lab import charts


def _layers(spec: dict) -> list[dict]:
    return spec.get("layer", [spec])


def _mark(layer: dict) -> str:
    mark = layer["mark"]
    return mark["type"] if isinstance(mark, dict) else mark


@pytest.mark.parametrize(
    ("n", "max_labels", "expected"),
    [
        (0, 12, []),
        (1, 12, [0]),
        (8, 12, list(range(8))),
        (12, 12, list(range(12))),
        (13, 12, list(range(0, 13, 2))),
        (24, 12, list(range(0, 24, 2))),
        (25, 12, [0, 3, 6, 9, 12, 15, 18, 21, 24]),
        (128, 12, list(range(0, 128, 11))),
        (10, 3, [0, 4, 8]),
    ],
)
def test_tick_values_label_at_most_max_labels_evenly(n, max_labels, expected):
    ticks = charts.tick_values(n, max_labels)
    assert ticks == expected
    assert len(ticks) <= max_labels and all(0 <= t < n for t in ticks)


@pytest.mark.parametrize(("n", "max_labels"), [(-1, 12), (8, 0)])
def test_tick_values_refuses_bad_arguments(n, max_labels):
    with pytest.raises(ValueError, match="tick_values"):
        charts.tick_values(n, max_labels)


def _cells(spec: dict) -> list[dict]:
    return next(iter(spec["datasets"].values()))


def _fills(spec: dict) -> list[str]:
    """Each cell's colour as Vega draws it: the rect layer's scale (scheme and domain)."""
    rect = next(layer for layer in _layers(spec) if _mark(layer) == "rect")
    colour = rect["encoding"]["color"]
    low, high = colour["scale"]["domain"]
    return [
        charts.HIDDEN_FILL
        if cell["value"] is None
        else charts.scheme_color(colour["scale"]["scheme"], (cell["value"] - low) / (high - low))
        for cell in _cells(spec)
    ]


MATRICES = {
    # framework_interop's case: every judged pair passes (log10 bound/error from 2 to 6), so
    # every value is positive; the old rule wrote white on the pale middle of redblue
    "all positive, diverging": (np.array([[0.0, 2.0, 4.0], [3.5, 0.0, 6.0]]), "redblue"),
    "both signs, diverging": (np.array([[-3.0, -0.1, 0.0], [0.1, 1.0, 2.0]]), "redblue"),
    # viridis is dark at its low end: the old rule (dark = high) wrote white on yellow
    "viridis": (np.array([[0.0, 0.25], [0.5, 1.0]]), "viridis"),
    "blues": (np.array([[1.0, 0.0], [0.5, 0.5], [0.97, 0.03]]), "blues"),
    "greys": (np.array([[-1.0, 0.0], [2.0, 5.0]]), "greys"),
}


@pytest.mark.parametrize("name", sorted(MATRICES))
def test_every_heatmap_label_contrasts_with_its_own_cell(name):
    matrix, scheme = MATRICES[name]
    hidden = np.eye(*matrix.shape, dtype=bool) if name.startswith("all positive") else None
    spec = charts.heatmap(matrix, name, scheme=scheme, hidden=hidden).to_dict()
    text = [layer for layer in _layers(spec) if _mark(layer) == "text"]
    assert text[0]["encoding"]["color"] == {
        "field": "ink",
        "legend": None,
        "scale": {"domain": ["black", "white"], "range": ["black", "white"]},
        "type": "nominal",
    }
    for cell, fill in zip(_cells(spec), _fills(spec), strict=True):
        assert charts.contrast(cell["ink"], fill) >= charts.MIN_CONTRAST, (cell, fill)
    assert charts.spec_problems(spec) == []


def test_the_diverging_domain_is_symmetric_so_zero_is_the_pale_middle():
    spec = charts.heatmap(np.array([[2.0, 4.0, 6.0]]), "positive").to_dict()
    rect = next(layer for layer in _layers(spec) if _mark(layer) == "rect")
    assert rect["encoding"]["color"]["scale"]["domain"] == [-6.0, 6.0]
    fills = _fills(spec)  # 6 is the saturated blue end; 2 is a pale blue, never red
    assert fills[2] == charts.scheme_color("redblue", 1.0)
    red, _, blue = (int(fills[0][i : i + 2], 16) for i in (1, 3, 5))
    assert blue > red


def test_scheme_colors_are_vegas_stops_and_their_linear_mix():
    assert charts.scheme_color("greys", 0.0) == "#e2e2e2"
    assert charts.scheme_color("greys", 1.0) == "#1e1e1e"
    assert charts.scheme_color("viridis", 0.0) == "#440154"
    assert charts.scheme_color("viridis", 2.0) == "#fde725"  # clamped
    # halfway between the first two of redblue's 11 stops (8c0d25, bf363a)
    assert charts.scheme_color("redblue", 0.05) == "#a62230"


def test_contrast_is_wcags_ratio():
    assert charts.contrast("black", "white") == pytest.approx(21.0)
    assert charts.contrast("#777777", "#777777") == pytest.approx(1.0)
    assert charts.contrast("white", "#777777") == pytest.approx(4.48, abs=0.01)  # WCAG's example
    assert charts.ink("#fde725") == "black" and charts.ink("#440154") == "white"


def test_hidden_cells_are_grey_and_do_not_set_the_scale():
    matrix = np.array([[5.0, 9.0], [1.0, 2.0]])
    hidden = np.array([[False, True], [False, False]])
    spec = charts.heatmap(matrix, "masked", scheme="greens", hidden=hidden).to_dict()
    rect = next(layer for layer in _layers(spec) if _mark(layer) == "rect")
    assert rect["encoding"]["color"]["condition"]["value"] == charts.HIDDEN_FILL
    assert [row["value"] for row in _cells(spec)].count(None) == 1
    # the hidden 9.0 does not set the scale's top: 5.0 is the darkest visible cell
    assert rect["encoding"]["color"]["scale"]["domain"] == [0.0, 5.0]


def test_heatmap_refuses_a_scheme_it_cannot_check():
    with pytest.raises(ValueError, match="schemes"):
        charts.heatmap(np.zeros((2, 2)), "m", scheme="plasma")


@pytest.mark.parametrize("shape", [(13, 13), (24, 24), (4, 128)])
def test_large_heatmap_thins_its_ticks_and_drops_the_cell_text(shape):
    spec = charts.heatmap(np.arange(math.prod(shape), dtype=float).reshape(shape), "big").to_dict()
    layers = _layers(spec)
    assert [_mark(layer) for layer in layers] == ["rect"]
    encoding = layers[0]["encoding"]
    assert encoding["x"]["axis"]["values"] == charts.tick_values(shape[1])
    assert encoding["y"]["axis"]["values"] == charts.tick_values(shape[0])
    assert len(encoding["x"]["axis"]["values"]) <= 12
    assert spec["width"] <= 600 and spec["height"] <= 600


def test_heatmap_refuses_what_it_cannot_draw():
    with pytest.raises(ValueError, match="2-D"):
        charts.heatmap(np.zeros(3), "vector")
    with pytest.raises(ValueError, match="hidden"):
        charts.heatmap(np.zeros((2, 2)), "m", hidden=np.zeros((3, 3), bool))


def _rgb(color: str) -> np.ndarray:
    return np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)], float)


def test_distinct_colors_start_with_vegas_default_and_never_repeat():
    assert charts.distinct_colors(10) == list(charts.TABLEAU10)
    eleven = charts.distinct_colors(11)
    assert eleven[10] not in eleven[:10]  # Vega's default would give the 11th op the 1st colour
    for n in (0, 1, 18, 19, 40, 100):
        colors = charts.distinct_colors(n)
        assert len(colors) == n and len(set(colors)) == n
    curated = charts.distinct_colors(18)
    closest = min(np.linalg.norm(_rgb(a) - _rgb(b)) for a, b in itertools.combinations(curated, 2))
    pairs = itertools.combinations(charts.TABLEAU10, 2)
    own = min(np.linalg.norm(_rgb(a) - _rgb(b)) for a, b in pairs)
    assert closest >= own > 50, f"two of the first 18 colours are {closest:.0f} apart in RGB"


def test_label_rows_never_overlap_within_a_row():
    # the HBM chart's case: 16 GB and 32 GB labels 40 px apart, each 90 px wide
    assert charts.label_rows([40, 80, 240], [90, 90, 90]) == [0, 1, 0]
    assert charts.label_rows([0, 100, 200], [50, 50, 50]) == [0, 0, 0]
    rng = np.random.default_rng(0)
    for _ in range(50):
        starts, widths = rng.uniform(0, 500, 8), rng.uniform(10, 120, 8)
        rows = charts.label_rows(starts, widths)
        for i, j in itertools.combinations(range(8), 2):
            if rows[i] == rows[j]:
                a, b = sorted((i, j), key=lambda k: starts[k])
                assert starts[a] + widths[a] + 4 <= starts[b]


def test_label_rows_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="one width per start"):
        charts.label_rows([1, 2], [3])


def test_log_domain_leaves_headroom_above_the_top_value():
    low, high = charts.log_domain([2.3e8, 2.5e10, 9.18e14])
    assert (low, high) == (1e8, 1e16)
    assert math.log10(high) - math.log10(9.18e14) >= 0.5
    low, high = charts.log_domain([1e14, 3.0])  # an exact decade still gets half a decade more
    assert (low, high) == (1.0, 1e15)
    for lo, hi in [charts.log_domain([v]) for v in (3e-3, 7.0, 4.2e12)]:
        assert math.log10(lo).is_integer() and math.log10(hi).is_integer()


def test_log_domain_refuses_no_positive_values():
    with pytest.raises(ValueError, match="positive"):
        charts.log_domain([0.0, -1.0, float("nan")])


def _problems(chart) -> list[str]:
    return charts.spec_problems(chart.to_dict())


def test_spec_problems_catches_a_log_scale_over_zeros():
    import altair as alt
    import pandas as pd

    errors = pd.DataFrame({"batch": ["1", "8"], "error": [0.0, 3e-8]})
    bad = alt.Chart(errors).mark_bar().encode(x="batch:N", y=alt.Y("error:Q").scale(type="log"))
    assert any("log scale over 1 value(s) <= 0" in p for p in _problems(bad))
    floored = errors.assign(error=errors["error"].clip(lower=1e-12))
    good = alt.Chart(floored).mark_bar().encode(x="batch:N", y=alt.Y("error:Q").scale(type="log"))
    assert _problems(good) == []


def test_spec_problems_catches_a_title_that_names_the_wrong_dash():
    import altair as alt
    import pandas as pd

    rows = pd.DataFrame(
        {"step": [0, 1, 0, 1], "loss": [1.0, 0.5, 1.1, 0.7], "run": ["train"] * 2 + ["eval"] * 2}
    )
    title = "train (solid) and eval (dashed) loss"
    # Vega-Lite sorts the domain: "eval" comes first and gets the solid line
    bad = alt.Chart(rows, title=title).mark_line().encode(x="step", y="loss", strokeDash="run:N")
    assert _problems(bad) == [
        "the title says 'train' is solid, the chart draws it dashed",
        "the title says 'eval' is dashed, the chart draws it solid",
    ]
    dash = alt.StrokeDash("run:N", scale=alt.Scale(domain=["train", "eval"]))
    good = alt.Chart(rows, title=title).mark_line().encode(x="step", y="loss", strokeDash=dash)
    assert _problems(good) == []


def test_spec_problems_catches_a_time_axis_under_a_second():
    import altair as alt
    import pandas as pd

    at = pd.to_datetime(["2026-01-01T00:00:00.100", "2026-01-01T00:00:00.700"])
    bad = (
        alt.Chart(pd.DataFrame({"at": at, "op": ["a", "b"]}))
        .mark_point()
        .encode(x="at:T", y="op:N")
    )
    assert any("reads like '.500'" in p for p in _problems(bad))
    hours = pd.to_datetime(["2026-01-01T00:00", "2026-01-01T05:00"])
    good = (
        alt.Chart(pd.DataFrame({"at": hours, "op": ["a", "b"]}))
        .mark_point()
        .encode(x="at:T", y="op:N")
    )
    assert _problems(good) == []


def test_spec_problems_catches_lines_of_one_point_and_axes_over_one_value():
    import altair as alt
    import pandas as pd

    one = pd.DataFrame({"rps": [258.865414] * 3, "ms": [3.0, 5.0, 9.0], "p": ["50", "95", "99"]})
    bad = alt.Chart(one).mark_line().encode(x="rps:Q", y="ms:Q", color="p:N")
    problems = _problems(bad)
    assert any("every line of this line chart is one point" in p for p in problems)
    assert any("single value 258.865414" in p for p in problems)
    two = pd.DataFrame({"rps": [100.0, 250.0] * 3, "ms": [3, 4, 5, 6, 9, 12], "p": list("aabbcc")})
    assert _problems(alt.Chart(two).mark_line().encode(x="rps:Q", y="ms:Q", color="p:N")) == []


def test_spec_problems_catches_raw_floats_as_tick_labels():
    import altair as alt
    import pandas as pd

    frame = pd.DataFrame({"users": [258.865414, 12.5], "n": [1, 2]})
    assert any(
        "raw floats" in p
        for p in _problems(alt.Chart(frame).mark_bar().encode(x="users:N", y="n:Q"))
    )
    text = pd.DataFrame({"rps": ["258.865414", "12.5"], "n": [1, 2]})  # str() of a float
    assert any(
        "raw floats" in p for p in _problems(alt.Chart(text).mark_bar().encode(x="rps:N", y="n:Q"))
    )
    frame = pd.DataFrame({"users": [1.5, 12.25], "n": [1, 2], "v": ["1.5", "v2.10"]})
    assert _problems(alt.Chart(frame).mark_bar().encode(x="users:N", y="n:Q")) == []
    assert _problems(alt.Chart(frame).mark_bar().encode(x="v:N", y="n:Q")) == []


def test_spec_problems_catches_a_label_colour_it_cannot_check_over_a_cell():
    import altair as alt
    import pandas as pd

    cells = pd.DataFrame({"r": [0, 1], "value": [0.1, 0.9], "label": ["a", "b"]})
    base = alt.Chart(cells).encode(x="r:O")
    rects = base.mark_rect().encode(color=alt.Color("value:Q", scale=alt.Scale(scheme="blues")))
    text = base.mark_text().encode(
        text="label:N",
        color=alt.condition("datum.value > 0.5", alt.value("white"), alt.value("black")),
    )
    assert any("cannot be checked" in p for p in _problems(rects + text))


def test_log_floor_raises_what_a_log_axis_cannot_draw_and_counts_it():
    assert charts.log_floor([0.0, 3e-8, -1.0, 2.0], 1e-12) == ([1e-12, 3e-8, 1e-12, 2.0], 2)
    assert charts.log_floor([1.0], 1e-12) == ([1.0], 0)
    with pytest.raises(ValueError, match="positive"):
        charts.log_floor([1.0], 0.0)


def test_a_symlog_heatmap_with_its_own_labels_contrasts_too():
    counts = np.array([[35, 0, 2], [1, 40, 0], [0, 3, 28]])
    labels = np.where(counts > 0, counts, "").astype(str)
    spec = charts.heatmap(counts, "confusion", scheme="blues", scale_type="symlog", labels=labels)
    spec = spec.to_dict()
    assert [c["label"] for c in _cells(spec)][:3] == ["35", "", "2"]
    assert charts.spec_problems(spec) == []
    low = charts.scheme_color("blues", charts.scale_fraction(2, [0, 40], "symlog"))
    assert low != charts.scheme_color("blues", 2 / 40)  # symlog lifts the small counts
    with pytest.raises(ValueError, match="labels"):
        charts.heatmap(counts, "c", scheme="blues", labels=labels[:2])


def test_spec_problems_reads_text_colours_from_the_mark_and_fills_from_nominal_ranges():
    import altair as alt
    import pandas as pd

    cells = pd.DataFrame({"x": [0, 1, 2], "kind": ["a", "b", "pad"], "n": ["1", "2", None]})
    base = alt.Chart(cells).encode(x="x:O")
    scale = alt.Scale(domain=["a", "b", "pad"], range=["#4c78a8", "#eeca3b", "#dddddd"])
    colour = alt.Color("kind:N", scale=scale)
    rects = base.mark_rect().encode(color=colour)
    # white on yellow fails; the padding cell has no text, so its colour does not matter
    problems = _problems(rects + base.mark_text(color="white").encode(text="n:N"))
    assert len(problems) == 1 and problems[0].startswith(
        "a label in white on #eeca3b: contrast 1.6"
    )
    cells["ink"] = [charts.ink(c) for c in ("#4c78a8", "#eeca3b", "#dddddd")]
    base = alt.Chart(cells).encode(x="x:O")
    text = base.mark_text().encode(text="n:N", color=charts.ink_color())
    assert _problems(base.mark_rect().encode(color=colour) + text) == []


def test_inks_follow_the_scheme_viridis_is_dark_at_its_low_end():
    assert charts.inks([0, 10], "viridis", [0, 10]) == ["white", "black"]
    assert charts.inks([0, 10], "blues", [0, 10]) == ["black", "white"]
