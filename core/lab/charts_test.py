import itertools
import math

import numpy as np
import pytest

from core.lab import charts


def _vega_test(expression: str, value) -> bool:
    """Evaluate the small Vega expressions dark_cell_test writes, for one cell's value."""
    python = (
        expression.replace("datum.value", "v")
        .replace("!==", "is not")
        .replace("null", "None")
        .replace("&&", " and ")
        .replace("||", " or ")
    )
    return bool(eval(python, {}, {"v": value}))  # noqa: S307  (our own expression, in a test)


def _layers(spec: dict) -> list[dict]:
    return spec.get("layer", [spec])


def _mark(layer: dict) -> str:
    mark = layer["mark"]
    return mark["type"] if isinstance(mark, dict) else mark


def _text_color(spec: dict) -> dict:
    return next(layer for layer in _layers(spec) if _mark(layer) == "text")["encoding"]["color"]


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


def test_small_heatmap_writes_values_white_on_dark_cells_black_on_light():
    matrix = np.array([[-3.0, -0.1, 0.0], [0.1, 1.0, 2.0]])
    spec = charts.heatmap(matrix, "scores").to_dict()
    text = [layer for layer in _layers(spec) if _mark(layer) == "text"]
    assert len(text) == 1
    color = text[0]["encoding"]["color"]
    assert color["condition"]["value"] == "white" and color["value"] == "black"
    test = color["condition"]["test"]
    # the saturated ends of the diverging scale get white, the pale middle black
    assert _vega_test(test, -3.0) and _vega_test(test, 2.0) and _vega_test(test, -2.0)
    assert not any(_vega_test(test, v) for v in (-0.1, 0.0, 0.1, 1.0))
    assert not _vega_test(test, None)


def test_sequential_heatmap_darkens_towards_its_largest_value():
    probs = np.array([[1.0, 0.0], [0.5, 0.5], [0.97, 0.03]])
    spec = charts.heatmap(probs, "p", scheme="blues").to_dict()
    test = _text_color(spec)["condition"]["test"]
    assert _vega_test(test, 1.0) and _vega_test(test, 0.97)
    assert not _vega_test(test, 0.0) and not _vega_test(test, 0.5)


def test_hidden_cells_are_grey_and_never_dark():
    matrix = np.array([[5.0, 9.0], [1.0, 2.0]])
    hidden = np.array([[False, True], [False, False]])
    spec = charts.heatmap(matrix, "masked", scheme="greens", hidden=hidden).to_dict()
    rect = next(layer for layer in _layers(spec) if _mark(layer) == "rect")
    assert rect["encoding"]["color"]["condition"]["value"] == "#e8e8e8"
    values = [row["value"] for row in next(iter(spec["datasets"].values()))]
    assert values.count(None) == 1
    test = _text_color(spec)["condition"]["test"]
    # the hidden 9.0 does not set the scale's top: 5.0 is the darkest visible cell
    assert _vega_test(test, 5.0) and not _vega_test(test, 2.0)


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
