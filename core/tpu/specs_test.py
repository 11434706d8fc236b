import math

import pytest

from core.tpu import specs


@pytest.mark.parametrize(
    ("generation", "expected"), [("v5e", 240), ("v5p", 164), ("v6e", 575), ("tpu7x", 313)]
)
def test_ridge_points_follow_from_the_table(generation, expected):
    spec = specs.chip(generation)
    # independent arithmetic: FLOP/s over bytes/s from the reference figures
    assert spec.ridge_point == pytest.approx(spec.bf16_flops.value / spec.hbm_bandwidth.value)
    assert spec.ridge_point == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("generation", specs.GENERATIONS)
def test_ridge_range_spans_every_source(generation):
    spec = specs.chip(generation)
    low, high = specs.ridge_point_range(spec)
    assert low <= spec.ridge_point <= high
    all_points = [
        f / b for f, _ in spec.bf16_flops.values() for b, _ in spec.hbm_bandwidth.values()
    ]
    assert (low, high) == (min(all_points), max(all_points))


def test_v5p_bandwidth_sources_disagree_and_are_all_kept():
    values = dict((source, value) for value, source in specs.chip("v5p").hbm_bandwidth.values())
    assert values == {"scaling-book": 2.8e12, "scaling-book-text": 2.5e12, "cloud-v5p": 2.765e12}
    low, high = specs.ridge_point_range(specs.chip("v5p"))
    assert low == pytest.approx(4.59e14 / 2.8e12) and high == pytest.approx(4.59e14 / 2.5e12)


@pytest.mark.parametrize(("generation", "links"), [("v5e", 4), ("v5p", 6), ("v6e", 4)])
def test_per_chip_ici_is_links_times_per_link(generation, links):
    spec = specs.chip(generation)
    assert spec.ici_links == links
    assert spec.ici_link_bidirectional.value == 2 * spec.ici_link_one_way.value
    derived = spec.ici_chip_bidirectional_derived
    assert derived == links * spec.ici_link_bidirectional.value
    # the per-link figures are rounded: the product lands within 15% of Cloud's per-chip figure
    assert math.isclose(derived, spec.ici_chip_bidirectional.value, rel_tol=0.15)


def test_every_figure_names_a_known_source():
    with pytest.raises(ValueError, match="unknown source"):
        specs.Figure(1.0, "a blog")
    for row in specs.spec_rows():
        assert row["source"]


def test_tables_have_one_column_per_generation():
    rows = specs.spec_rows(("v5e", "v6e"))
    assert all(set(row) == {"per chip", "v5e", "v6e", "source"} for row in rows)
    derived = specs.derived_rows()
    assert [r["generation"] for r in derived] == list(specs.GENERATIONS)
    assert derived[0]["bf16 ridge point (FLOP/byte)"] == "240"


def test_unknown_generation_names_the_choices():
    with pytest.raises(ValueError, match="v5e"):
        specs.chip("v7x")
    with pytest.raises(ValueError, match="positive"):
        specs.ridge_point(1.0, 0.0)


def test_ironwood_figures_are_the_cloud_tables_and_the_rest_is_not_published():
    spec = specs.chip("tpu7x")
    # The Cloud TPU7x page's table, per chip: 2307 TFLOP/s bf16, 4614 fp8, 192 GiB HBM at
    # 7380 GB/s, 1200 GB/s bidirectional ICI, 2 TensorCores; 4 chips per VM.
    assert spec.bf16_flops.value == 2307e12 and spec.fp8_flops.value == 4614e12
    assert spec.hbm_bytes.value == 192 * 2**30 and spec.hbm_bandwidth.value == 7380e9
    assert spec.ici_chip_bidirectional.value == 1200e9
    assert (spec.tensorcores, spec.chips_per_host, spec.devices_per_chip) == (2, 4, 2)
    assert spec.ridge_point == pytest.approx(2307e12 / 7380e9)
    assert spec.ici_chip_bidirectional_derived is None
    rows = {row["per chip"]: row for row in specs.spec_rows()}
    assert rows["int8 OP/s"]["tpu7x"] == rows["PCIe"]["tpu7x"] == specs.NOT_PUBLISHED
    assert rows["HBM capacity"]["tpu7x"] == "192 GiB"
    assert rows["fp8 FLOP/s"]["v5e"] == specs.NOT_PUBLISHED
    derived = {row["generation"]: row for row in specs.derived_rows()}
    assert derived["tpu7x"]["derived / published"] == specs.NOT_PUBLISHED
