import json

import numpy as np
import pytest

from core.tpu import pricing, specs


def test_the_shipped_table_validates_and_cites_every_price():
    table = pricing.load()
    assert table.prices, "the table has prices"
    for price in table.prices:
        assert price.source.startswith("https://")
        assert price.retrieved >= "2026-01-01"


def test_costs_match_numpy_float64_from_the_raw_json():
    raw = json.loads(pricing.PRICES_JSON.read_text(encoding="utf-8"))
    for mfu, parameters in ((0.4, 1e9), (0.55, 7e9), (0.1, 1.3e8)):
        rows = pricing.cost_rows(pricing.load(), mfu, parameters, chips=8)
        for item in raw["prices"]:
            (row,) = [
                r
                for r in rows
                if (r["generation"], r["tier"]) == (item["generation"], item["tier"])
            ]
            peak = np.float64(specs.chip(item["generation"]).bf16_flops.value)
            tokens_per_hour = np.float64(mfu) * peak / (6.0 * np.float64(parameters)) * 3600.0
            want = np.float64(item["usd_per_chip_hour"]) / tokens_per_hour * 1e6
            assert row["USD per Mtok"] == pytest.approx(want, rel=1e-12)
            # units: USD/Mtok * Mtok/h == USD/h
            assert row["USD per Mtok"] * tokens_per_hour / 1e6 == pytest.approx(
                item["usd_per_chip_hour"], rel=1e-12
            )
            assert row["USD per hour, 8 chips"] == pytest.approx(8 * item["usd_per_chip_hour"])


def test_missing_prices_read_as_missing_never_guessed():
    rows = pricing.cost_rows(pricing.load(), 0.4, 1e9)
    assert len(rows) == len(specs.GENERATIONS) * len(pricing.TIERS)
    listed = {(p.generation, p.tier) for p in pricing.load().prices}
    for row in rows:
        if (row["generation"], row["tier"]) not in listed:
            assert row["USD per Mtok"] is None and "no cited price" in row["source"]


def test_an_edited_price_replaces_its_tier():
    table = pricing.load()
    price = pricing.Price(
        generation="v5p", tier="spot", region="us-east5", usd_per_chip_hour=1.5,
        retrieved="2026-12-03", source="https://example.org/my-quote",
    )  # fmt: skip
    edited = pricing.with_price(table, price)
    assert pricing.lookup(edited, "v5p", "spot").usd_per_chip_hour == 1.5
    assert pricing.lookup(table, "v5p", "spot") is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"usd_per_chip_hour": -1.0}, "usd_per_chip_hour"),
        ({"retrieved": "yesterday"}, "retrieved"),
        ({"source": "a friend"}, "source"),
        ({"tier": "cheap"}, "tier"),
        ({"usd_per_chip_hour": "2.70"}, "usd_per_chip_hour"),
    ],
)
def test_bad_price_files_are_refused_naming_the_field(tmp_path, change, message):
    raw = json.loads(pricing.PRICES_JSON.read_text(encoding="utf-8"))
    raw["prices"][0].update(change)
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        pricing.load(path)


def test_duplicate_prices_are_refused(tmp_path):
    raw = json.loads(pricing.PRICES_JSON.read_text(encoding="utf-8"))
    raw["prices"].append(raw["prices"][0])
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(ValueError, match="two prices"):
        pricing.load(path)


def test_bad_arguments():
    with pytest.raises(ValueError, match="MFU"):
        pricing.tokens_per_second(1e14, 1.5, 6e9)
    with pytest.raises(ValueError, match="parameters"):
        pricing.training_flops_per_token(0)
    with pytest.raises(ValueError, match="positive"):
        pricing.usd_per_mtok(0, 10)


@pytest.mark.parametrize("chips", [257, 6144, 9216])
def test_a_slice_larger_than_a_generation_allows_has_no_hourly_bill(chips):
    # Cloud's largest slices: v5e and v6e 256 chips, v5p 6144 (16x16x24), TPU7x 9216
    largest = {"v5e": 256, "v6e": 256, "v5p": 6144, "tpu7x": 9216}
    rows = pricing.cost_rows(pricing.load(), 0.4, 1e9, chips=chips)
    for row in rows:
        over = chips > largest[row["generation"]]
        assert (row["slice"] != "fits") == over
        if over:
            assert row[f"USD per hour, {chips} chips"] is None
            assert str(largest[row["generation"]]) in row["slice"]
    with pytest.raises(ValueError, match="largest slice"):
        pricing.cost_rows(pricing.load(), 0.4, 1e9, chips=9217)
