"""The .keras archive listing, the tamper control and the request checks (one jax worker)."""

from __future__ import annotations

import json
import zipfile

import pytest

from interop import keras_bridge, twins
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


def test_a_tampered_file_is_refused_before_load(tmp_path):
    # save under jax (one worker), then a one-byte change: the loader refuses it by sha256
    x = twins.digits_batch(2, 0)
    weights = tmp_path / "w.safetensors"
    keras_bridge.write_weights(weights, keras_bridge.nnx_to_keras(twins.seeded_nnx(0)))
    inputs = keras_bridge.write_inputs(tmp_path / "x.npz", {"x": x})
    kfile = tmp_path / "m.keras"
    job = keras_bridge.Job(
        name="save",
        inputs=str(inputs),
        output=str(tmp_path / "o.npz"),
        weights=str(weights),
        save_keras=str(kfile),
    )
    keras_bridge.run_backend("jax", [job], tmp_path)
    rows, config = saving.archive(kfile)
    assert {r["member"] for r in rows} >= {"config.json", "model.weights.h5"}
    bad = saving.tamper(kfile, tmp_path / "bad.keras")
    load = keras_bridge.Job(
        name="load", inputs=str(inputs), output=str(tmp_path / "b.npz"), load_keras=str(bad)
    )
    with pytest.raises(keras_bridge.WorkerError, match="sha256 differs"):
        keras_bridge.run_backend("jax", [load], tmp_path)
