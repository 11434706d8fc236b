"""The report: its JSON validates on load, its Markdown has every section, a missing section
is named, and a broken document is refused. Sections here are small hand-made ones (the
commands that make real ones are tested beside them)."""

from __future__ import annotations

import copy
import json

import pytest

from capstones.pallas_kernel import cli, common, report

HW = {"backend": "cpu", "device_kind": "cpu", "device_count": 8, "host": "test CPU", "jax": "0"}
BASE = {"created_utc": "2026-12-02T01:00:00+00:00", "hardware": HW}
SECTIONS = {
    "agreement": {
        **BASE,
        "section": "agreement",
        "label": common.INTERPRET_LABEL,
        "rows": [
            {
                "shape (B,H,T,D)": "1x2x32x16",
                "blocks (bq,bk)": "16,16",
                "dtype": "float32",
                "causal": True,
                "O error": 1e-7,
                "dQ error": 2e-7,
                "dK error": 2e-7,
                "dV error": 1e-7,
                "tolerance": 1e-5,
                "worst / tolerance": 0.02,
                "pass": True,
            }
        ],  # fmt: skip
        "all_pass": True,
        "property_tests": {"test": "t", "ci_examples": 5, "benchmark": None},
        "property_line": "Property tests: t.",
    },
    "profile": {
        **BASE,
        "section": "profile",
        "config": {
            "d_model": 64,
            "num_layers": 2,
            "num_heads": 4,
            "seq_len": 256,
            "batch_size": 4,
            "compute_dtype": "float32",
            "dropout": 0.1,
        },  # fmt: skip
        "timing": {
            "lower_s": 0.5,
            "compile_s": 5.0,
            "steps": 5,
            "median_step_s": 0.1,
            "traced_median_step_s": 0.12,
            "profiler_inflation": 0.2,
        },  # fmt: skip
        "trace": {
            "method": "m",
            "by_category": [{"category": "c", "ms_per_step": 1.0, "share": 1.0}],
            "top_ops": [{"op": "dot.1", "share": 0.5}],
        },  # fmt: skip
        "attention_share": 0.4,
        "amdahl": {
            "bound": 1 / 0.6,
            "rows": [{"kernel speed-up s": 2.0, "whole-step speed-up": 1.25}],
        },  # fmt: skip
        "memory": {
            "compiled": {"temp": 1000},
            "scores share of temporaries": 0.5,
            "attention_closed_form": {"scores per layer": 4, "probabilities kept, all layers": 8},
        },  # fmt: skip
        "caveat": "op time, not wall time",
    },
    "partition": {
        **BASE,
        "section": "partition",
        "label": common.INTERPRET_LABEL,
        "sharded": {
            "mesh": {"shape": [4, 2], "axes": ["batch", "heads"], "devices": 8},
            "shape (B,H,T,D)": [4, 2, 32, 16],
            "per-device shape": [1, 1, 32, 16],
            "equal": True,
            "tolerance": 1e-5,
            "sharded vs unsharded": {"O": 0.0},
            "sharded vs float64": {"O": 1e-7},
            "collectives": {"attention": {"all-reduce": 0}, "step": {"all-reduce": 1}},
            "why": "rows are whole",
        },  # fmt: skip
        "before_after": {
            "label": common.INTERPRET_LABEL,
            "what": "w",
            "shape (B,H,T,D)": [1],
            "rows": [{"program": "x", "median (ms)": 1.0}],
        },  # fmt: skip
        "tpu_memory": {
            "what": "w",
            "shape (B,H,T,D)": "1 x 4 x T x 64",
            "blocks": [128, 128],
            "rows": [{"topology": "v5e:2x2", "result": "not compiled: no libtpu"}],
        },
    },
    "objective": {
        **BASE,
        "section": "objective",
        "label": common.INTERPRET_LABEL,
        "how": "value_and_grad",
        "tolerance": 1e-5,
        "cases": [{"seed": 0, "loss error (relative)": 0.0, "per_leaf": {"a": 0.0}}],
        "worst": {"loss": 0.0, "gradients": 1e-7},
        "all_pass": True,
    },
}


def test_report_validates_and_has_every_section(tmp_path):
    built = report.build(copy.deepcopy(SECTIONS), tmp_path)
    assert built["missing"] == [] and built["charts"] == {"amdahl": "amdahl.vl.json"}
    loaded = report.load(tmp_path / "report.json")
    assert loaded["profile"]["attention_share"] == 0.4
    chart = json.loads((tmp_path / "amdahl.vl.json").read_text())
    assert "bound 1.67x" in json.dumps(chart)
    text = (tmp_path / "report.md").read_text()
    for heading in ("## 1. Reference agreement", "## 2. Profile", "## 3. Partitioning",
                    "### Mosaic compile results per TPU generation", "## 4. The global objective",
                    "## What this does not show"):  # fmt: skip
        assert heading in text
    assert text.count("*Ran on: test CPU") == 4  # every section names its hardware
    assert common.INTERPRET_LABEL in text and "not compiled: no libtpu" in text


def test_missing_sections_are_named(tmp_path):
    built = report.build({"agreement": copy.deepcopy(SECTIONS["agreement"])}, tmp_path)
    assert built["missing"] == ["profile", "partition", "objective"]
    text = (tmp_path / "report.md").read_text()
    assert "Not run: `python -m capstones.pallas_kernel profile`" in text
    assert not (tmp_path / "amdahl.vl.json").exists()


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        (("profile", "attention_share"), 1.5, "attention_share"),
        (("objective", "all_pass"), "yes", "all_pass"),
        (("agreement", "created_utc"), "yesterday", "ISO time"),
        (("format",), "other", "format"),
    ],
)
def test_a_broken_report_is_refused(tmp_path, path, value, words):
    report.build(copy.deepcopy(SECTIONS), tmp_path)
    document = json.loads((tmp_path / "report.json").read_text())
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    (tmp_path / "report.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match=words):
        report.load(tmp_path / "report.json")


def test_report_reads_sections_from_out(tmp_path, capsys):
    for name in ("profile", "objective"):
        common.write_json(tmp_path, f"{name}.json", SECTIONS[name])
    assert cli.main(["report", "rerun=false", f"out={tmp_path}"]) == 0
    assert "missing: ['agreement', 'partition']" in capsys.readouterr().out
    assert report.load(tmp_path / "report.json")["objective"]["all_pass"] is True
    broken = {**SECTIONS["objective"], "all_pass": False}
    common.write_json(tmp_path, "objective.json", broken)
    assert cli.main(["report", "rerun=false", f"out={tmp_path}"]) == 1  # a failed section fails
