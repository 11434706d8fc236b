"""artifact timing-placement: written once at a tiny size; the expected slices by hand."""

import json

import pytest

from core.state import artifacts as catalogue
from tpu_scripts import artifacts
from tpu_scripts.artifacts import timing_placement as tp


@pytest.fixture(scope="module")
def document(tmp_path_factory):
    out = tmp_path_factory.mktemp("timing")
    rc = artifacts.main(["timing-placement", "--out", str(out), "--size", "32", "--repeats", "3"])
    assert rc == 0
    assert catalogue.load_verified(out / "timing-placement.json")
    return json.loads((out / "timing-placement.json").read_text()), out


def test_the_report_times_apart_and_checks_every_shard(document):
    doc, out = document
    timing = doc["timing"]
    assert len(timing["blocked_samples_s"]) == len(timing["unblocked_samples_s"]) == 3
    assert timing["compile_s"] > 0 and timing["error_vs_float64"] < 1e-5
    assert len(doc["placement"]) == 8 * len(tp.SPECS) and all(
        r["matches"] for r in doc["placement"]
    )
    assert [c["passed"] for c in doc["checks"]] == [True] * (1 + len(tp.SPECS))
    assert doc["label"] == catalogue.CPU_LABEL and not doc["tpu_result"]
    report = (out / "timing-placement.md").read_text()
    assert "NOT blocked" in report and "P('data', 'model')" in report


SIZES = {"data": 2, "model": 4}


@pytest.mark.parametrize(
    ("spec", "position", "rows", "cols"),
    [
        (("data", "model"), {"data": 1, "model": 2}, (4, 8), (8, 12)),
        (("model", "data"), {"data": 1, "model": 3}, (6, 8), (8, 16)),
        ((None, "model"), {"data": 1, "model": 0}, (0, 8), (0, 4)),
        ((None, None), {"data": 1, "model": 3}, (0, 8), (0, 16)),
        ((("data", "model"), None), {"data": 1, "model": 2}, (6, 7), (0, 16)),
    ],
)
def test_expected_index_by_hand(spec, position, rows, cols):
    index = tp.expected_index((8, 16), spec, position, SIZES)
    assert (index[0].start, index[0].stop) == rows and (index[1].start, index[1].stop) == cols


def test_bad_sizes_exit_2(tmp_path, capsys):
    assert artifacts.main(["timing-placement", "--out", str(tmp_path / "x"), "--size", "2"]) == 2
    assert artifacts.main(["timing-placement", "--out", str(tmp_path / "x"), "--repeats", "1"]) == 2
    assert "a median and a spread" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
