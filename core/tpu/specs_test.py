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
    # Not rounding: on every generation the scaling book's link rate is 0.90 of the one
    # Cloud's per-chip figure implies (published / links / 2 directions: 100 GB/s one way,
    # 50 on v5e), the same ratio on all three (TPU7x has no per-link figure)
    cloud_one_way = spec.ici_chip_bidirectional.value / links / 2
    assert spec.ici_link_one_way.value / cloud_one_way == pytest.approx(0.90)
    assert cloud_one_way == (5e10 if generation == "v5e" else 1e11)
    row = {r["generation"]: r for r in specs.derived_rows()}[generation]
    assert row["derived / published"] == "0.90"


def test_the_ici_ratio_is_explained_as_two_sources_not_rounding():
    assert "rounded" not in specs.__doc__ and "rounding" not in specs.ICI_RATIO_REASON
    assert "100 GB/s" in specs.ICI_RATIO_REASON and "90" in specs.ICI_RATIO_REASON
    row = {r["generation"]: r for r in specs.derived_rows()}["tpu7x"]
    assert row["derived / published"] == specs.NOT_PUBLISHED


def test_v5p_hbm_is_clouds_95_gib():
    figure = specs.chip("v5p").hbm_bytes
    # Cloud's v5p table: 95 GiB (user-allocatable; 96 GiB physical), about 102e9 bytes
    assert (figure.value, figure.source, figure.unit) == (95 * 2**30, "cloud-v5p", "GiB")
    assert figure.value == pytest.approx(102e9, rel=0.001)
    assert dict((s, v) for v, s in figure.values())["scaling-book"] == 96e9
    row = {r["per chip"]: r for r in specs.spec_rows()}["HBM capacity"]
    assert row["v5p"] == "95 GiB (scaling-book: 96 GB)"


@pytest.mark.parametrize(
    ("generation", "chips"), [("v5e", 256), ("v5p", 6144), ("v6e", 256), ("tpu7x", 9216)]
)
def test_largest_slice_per_generation_has_a_source(generation, chips):
    spec = specs.chip(generation)
    assert spec.max_slice_chips == chips
    assert spec.max_slice_source in specs.SOURCES and spec.max_slice_source in specs.SOURCE_URLS


def test_every_source_has_a_public_url():
    assert set(specs.SOURCE_URLS) == set(specs.SOURCES)
    assert all(url.startswith("https://") for url in specs.SOURCE_URLS.values())


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


def test_ironwood_figures_come_from_cloud_the_scaling_book_and_jax():
    spec = specs.chip("tpu7x")
    # The Cloud TPU7x page's table, per chip: 2307 TFLOP/s bf16, 4614 fp8, 192 GiB HBM at
    # 7380 GB/s, 1200 GB/s bidirectional ICI, 2 TensorCores; 4 chips per VM.
    assert spec.bf16_flops.value == 2307e12 and spec.fp8_flops.value == 4614e12
    assert spec.hbm_bytes.value == 192 * 2**30 and spec.hbm_bandwidth.value == 7380e9
    assert spec.ici_chip_bidirectional.value == 1200e9
    assert (spec.tensorcores, spec.chips_per_host, spec.devices_per_chip) == (2, 4, 2)
    assert spec.ridge_point == pytest.approx(2307e12 / 7380e9)
    # no source gives TPU7x's per-link ICI or its link count (the scaling book's ICI table
    # stops at v6e; Cloud's page gives the per-chip figure only): not typed in from v5p
    assert spec.ici_link_one_way is None and spec.ici_link_bidirectional is None
    assert spec.ici_links is None and spec.ici_chip_bidirectional_derived is None
    assert "tpu7x" not in specs.generations_with_link_figures()
    assert specs.generations_with_link_figures() == ("v5e", "v5p", "v6e")
    assert "256x256" in spec.mxus  # JAX's tpu_info: mxu_column_size 256
    rows = {row["per chip"]: row for row in specs.spec_rows()}
    # JAX's tpu_info: no int8 matmul on TPU7x, which is not the same as "not published"
    assert rows["int8 OP/s"]["tpu7x"] == specs.NOT_SUPPORTED
    assert rows["PCIe"]["tpu7x"] == specs.NOT_PUBLISHED
    assert rows["HBM capacity"]["tpu7x"] == "192 GiB"
    assert rows["fp8 FLOP/s"]["v5e"] == specs.NOT_PUBLISHED
    assert rows["ICI links per chip"]["tpu7x"].startswith(specs.NOT_PUBLISHED)
    assert rows["ICI per link, one way"]["tpu7x"] == specs.NOT_PUBLISHED
