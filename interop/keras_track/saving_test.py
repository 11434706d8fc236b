"""The .keras archive listing, the tamper control and the request checks (one jax worker)."""

from __future__ import annotations

import json
import zipfile

import pytest

from core import numerics
from interop import keras_bridge
from interop.keras_track import saving


def _fake_keras(path):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("metadata.json", json.dumps({"keras_version": "3"}))
        zf.writestr("config.json", json.dumps({"config": {"layers": []}}))
        zf.writestr("model.weights.h5", b"\0" * 100)
    keras_bridge.manifest_path(path).write_text(json.dumps({"file": path.name}))
    return path


def test_archive_lists_members_and_reads_config(tmp_path):
    rows, config = saving.archive(_fake_keras(tmp_path / "m.keras"))
    assert [r["member"] for r in rows] == ["metadata.json", "config.json", "model.weights.h5"]
    assert rows[2]["bytes"] == 100 and config == {"config": {"layers": []}}


def test_tamper_changes_one_byte_and_keeps_the_manifest(tmp_path):
    original = _fake_keras(tmp_path / "m.keras")
    bad = saving.tamper(original, tmp_path / "bad.keras")
    a, b = original.read_bytes(), bad.read_bytes()
    assert len(a) == len(b) and sum(x != y for x, y in zip(a, b, strict=True)) == 1
    assert json.loads(keras_bridge.manifest_path(bad).read_text())["file"] == "bad.keras"


@pytest.mark.parametrize(
    "saved_by,loaders,words",
    [("jax", ["jax"], "nothing is moved"), ("mxnet", ["jax"], "unknown"), ("jax", ["x"], "")],
)
def test_problem(saved_by, loaders, words):
    assert words in saving.problem(saved_by, loaders)


def test_saved_under_tensorflow_loads_under_jax_and_a_tampered_copy_is_refused(tmp_path):
    # two children (tensorflow saves, jax loads); the app's headless run adds torch
    result = saving.run("tensorflow", ["jax"], tmp_path, seed=3, batch=2)
    reference = result.reference[saving.OUTPUT_LAYER]
    for backend in ("tensorflow", "jax"):
        error = numerics.scaled_max_error(result.logits[backend], reference)
        assert error <= numerics.tolerance("float32"), (backend, error)
    assert "sha256 differs" in result.refusals["jax"]
    assert result.config_differences == {"jax": []}
    assert [r["member"] for r in result.archive] == [
        "metadata.json",
        "config.json",
        "model.weights.h5",
    ]
    assert "fc2" in result.config_layers and result.loaders == ("jax",)
