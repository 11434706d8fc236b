"""The predict artifact: it trains (over seeds, with margin), its exported shapes keep the
symbolic batch, it is refused when any file or the manifest is touched (before anything is
deserialized), its contract refuses each kind of violating input with a message naming it,
a fresh process reloads it to bitwise-equal outputs, and its outputs equal a NumPy float64
forward pass of the same weights (a deliberately wrong reference is caught)."""

import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from core import numerics
from core.serving import artifacts as files
from core.serving.predict import export


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_digits_mlp_learns_on_every_seed(seed):
    # Measured 0.955-0.97 test accuracy at 300 steps; 0.9 leaves a margin of ~20 images.
    trained = export.train(seed=seed, steps=300)
    assert trained.info["test_accuracy"] >= 0.9
    assert trained.info["train_accuracy"] >= 0.95
    untrained = export.train(seed=seed, steps=1)
    assert untrained.info["test_accuracy"] < 0.7


def test_the_manifest_records_the_symbolic_contract(artifact_dir):
    manifest = export.read_manifest(artifact_dir)
    entry = manifest["exported"]
    assert entry["inputs"][-1] == {"name": "x_BF", "shape": ["b", 64], "dtype": "float32"}
    assert entry["outputs"] == [
        {"name": "labels_B", "shape": ["b"], "dtype": "int32"},
        {"name": "probabilities_BC", "shape": ["b", 10], "dtype": "float32"},
    ]
    assert entry["platforms"] == [jax.default_backend()]
    assert entry["calling_convention_version"] == manifest["versions"]["calling_convention_version"]
    assert manifest["contract"]["max_batch"] == 16
    for name in (export.WEIGHTS, export.EXPORTED):
        data = (artifact_dir / name).read_bytes()
        listed = manifest["weights"] if name == export.WEIGHTS else entry
        assert listed["sha256"] == files.sha256_bytes(data) and listed["bytes"] == len(data)
    assert manifest["model_version"].startswith("digits-mlp-")


def test_one_artifact_serves_every_batch_size(artifact_dir, trained):
    a = export.load_artifacts(artifact_dir)
    x, _ = export.test_inputs(0, 16)
    all_labels, all_probs = a.predict(x)
    for rows in (1, 3, 5, 16):
        labels, probs = a.predict(x[:rows])
        assert labels.shape == (rows,) and probs.shape == (rows, 10)
        np.testing.assert_array_equal(labels, all_labels[:rows])
        np.testing.assert_allclose(probs, all_probs[:rows], rtol=1e-6, atol=1e-7)


def _flip_a_byte(path, where: float = 0.5):
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", [export.WEIGHTS, export.EXPORTED, export.MANIFEST])
def test_a_flipped_byte_in_any_file_is_refused(fresh_copy, name, monkeypatch):
    deserialized = []
    monkeypatch.setattr(jax.export, "deserialize", lambda *a: deserialized.append(a))
    if name == export.MANIFEST:  # a flipped digit of a recorded hash: still valid JSON
        text = (fresh_copy / name).read_text()
        digest = json.loads(text)["weights"]["sha256"]
        swapped = digest[:10] + ("0" if digest[10] != "0" else "1") + digest[11:]
        (fresh_copy / name).write_text(text.replace(digest, swapped))
    else:
        _flip_a_byte(fresh_copy / name)
    with pytest.raises(files.ChecksumError, match="sha256|manifest was edited"):
        export.load_artifacts(fresh_copy)
    assert deserialized == []  # refused before anything was deserialized


def test_manifest_edits_are_refused_even_when_rehashed(fresh_copy):
    path = fresh_copy / export.MANIFEST
    manifest = json.loads(path.read_text())
    manifest["contract"]["max_value"] = 255.0  # an edit without re-hashing
    path.write_text(json.dumps(manifest))
    with pytest.raises(files.ChecksumError, match="the manifest was edited"):
        export.load_artifacts(fresh_copy)
    manifest["contract"]["max_value"] = 16.0
    manifest["exported"]["inputs"][-1]["shape"] = ["b", 32]  # a consistent hash, a lie
    manifest["manifest_sha256"] = files.manifest_digest(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(files.SignatureMismatchError, match="x_BF: manifest says float32"):
        export.load_artifacts(fresh_copy)
    manifest["exported"]["inputs"][-1]["shape"] = ["b", 64]
    manifest["exported"]["file"] = "../predict.jax_exported"
    manifest["manifest_sha256"] = files.manifest_digest(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(files.ManifestSchemaError, match="plain file name"):
        export.load_artifacts(fresh_copy)
    manifest["exported"]["file"] = export.EXPORTED
    manifest["unexpected"] = 1
    manifest["manifest_sha256"] = files.manifest_digest(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(files.ManifestSchemaError, match="unexpected"):
        export.load_artifacts(fresh_copy)
    path.write_text("{not json")
    with pytest.raises(files.ManifestSchemaError, match="not JSON"):
        export.load_artifacts(fresh_copy)
    path.unlink()
    with pytest.raises(files.MissingArtifactError, match="no manifest.json"):
        export.load_artifacts(fresh_copy)


def test_another_platform_is_refused(artifact_dir):
    with pytest.raises(files.UnsupportedPlatformError, match="this process runs tpu"):
        export.load_artifacts(artifact_dir, expected_platform="tpu")


@pytest.fixture(scope="module")
def loaded(artifact_dir):
    return export.load_artifacts(artifact_dir)


GOOD = np.full((2, 64), 3.0, np.float32)
VIOLATIONS = [
    (np.full((2, 63), 3.0, np.float32), files.InputMismatchError, "64 features per row"),
    (GOOD.astype(np.float64), files.InputMismatchError, "must be float32, got float64"),
    (GOOD.astype(np.int32), files.InputMismatchError, "must be float32, got int32"),
    (GOOD[0], files.InputMismatchError, "rank 2"),
    (GOOD[None], files.InputMismatchError, "rank 2"),
    (np.zeros((17, 64), np.float32), files.InputOutOfRangeError, "1 to max_batch=16 rows, got 17"),
    (np.zeros((0, 64), np.float32), files.InputOutOfRangeError, "got 0"),
    (np.where(np.eye(2, 64) > 0, np.nan, GOOD), files.InputOutOfRangeError, r"x_BF\[0, 0\] is nan"),
    (np.where(np.eye(2, 64) > 0, np.inf, GOOD), files.InputOutOfRangeError, "finite"),
    (GOOD + 14, files.InputOutOfRangeError, r"\[0, 16\].*is 17 \(128 values outside\)"),
    (GOOD - 3.5, files.InputOutOfRangeError, "is -0.5"),
    ([[1.0] * 64], files.InputMismatchError, "must be an array"),
]


@pytest.mark.parametrize("x,error,message", VIOLATIONS)
def test_the_contract_refuses_each_violation_naming_it(loaded, x, error, message):
    if isinstance(x, np.ndarray) and x.dtype == np.float32 and x.ndim == 2:
        x = x.astype(np.float32)
    with pytest.raises(error, match=message):
        loaded.predict(x)


def test_the_contract_accepts_its_edges(loaded):
    edges = np.stack([np.zeros(64), np.full(64, 16.0)]).astype(np.float32)
    labels, probs = loaded.predict(edges)
    assert labels.shape == (2,)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-5)
    loaded.predict(np.zeros((16, 64), np.float32))


def test_predictions_equal_a_numpy_float64_forward_pass(loaded):
    x, y = export.test_inputs(0, 16)
    labels, probs = loaded.predict(x)
    ref_labels, ref_probs = export.reference_forward(loaded.numpy_weights(), x)
    tol = numerics.tolerance("float32")
    assert numerics.scaled_max_error(probs, ref_probs) <= tol
    np.testing.assert_array_equal(labels, ref_labels)
    assert np.mean(labels == y) >= 0.8
    # The check can fail: the same reference on unscaled inputs (x * 16) is far off.
    wrong = export.reference_forward(loaded.numpy_weights(), x * 16.0)[1]
    assert numerics.scaled_max_error(probs, wrong) > 100 * tol


def test_a_fresh_process_reloads_to_bitwise_equal_outputs(artifact_dir, loaded, tmp_path):
    x, _ = export.test_inputs(1, 13)
    np.save(tmp_path / "x.npy", x)
    command = [
        sys.executable, "-m", "core.serving.predict", "predict", "--artifacts",
        str(artifact_dir), "--inputs", str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npz"),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    labels, probs = export.load_replay(tmp_path / "y.npz")
    here_labels, here_probs = loaded.predict(x)
    np.testing.assert_array_equal(labels, here_labels)
    assert probs.dtype == np.float32 and probs.tobytes() == here_probs.tobytes()
    x[0, 0] = 17.0  # and it refuses a violating input there too
    np.save(tmp_path / "x.npy", x)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "InputOutOfRangeError" in done.stderr


def test_bucket_sizes_cover_every_batch():
    assert export.bucket_sizes(1) == [1]
    assert export.bucket_sizes(16) == [1, 2, 4, 8, 16]
    assert export.bucket_sizes(20) == [1, 2, 4, 8, 16, 20]
