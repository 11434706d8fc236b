import hashlib
import json
import pathlib

import numpy as np
import pytest

from core.workload import provenance

CONFIG = {"seed": 0, "steps": 30, "learning_rate": 0.1}
DATA = hashlib.sha256(b"the data").hexdigest()
ENV = provenance.environment({"numpy": "2.0.0", "jax": "0.10.2"}, python="3.11.9")


def _artifact(root: pathlib.Path, name: str = "v1") -> pathlib.Path:
    d = root / name
    (d / "checkpoint" / "5").mkdir(parents=True)
    (d / "checkpoint" / "5" / "state.bin").write_bytes(np.arange(100, dtype=np.uint8).tobytes())
    (d / "weights.npz").write_bytes(b"weights" * 10)
    (d / "predict.jax_exported").write_bytes(b"program" * 20)
    provenance.record(
        d, name, CONFIG, DATA, ["checkpoint", "weights.npz"], ["predict.jax_exported"],
        revision="abc123", env=ENV,
    )  # fmt: skip
    return d


def test_record_then_verify_round_trip(tmp_path):
    d = _artifact(tmp_path)
    on_disk = json.loads((d / provenance.MANIFEST).read_text())
    assert sorted(on_disk["checkpoint"]) == ["checkpoint/5/state.bin", "weights.npz"]
    assert list(on_disk["export"]) == ["predict.jax_exported"]
    # sizes and hashes recomputed here with hashlib: the independent reference
    blob = (d / "predict.jax_exported").read_bytes()
    assert on_disk["export"]["predict.jax_exported"] == {
        "sha256": hashlib.sha256(blob).hexdigest(),
        "bytes": len(blob),
    }
    got = provenance.verify(d, config=CONFIG, data_sha256=DATA, env=ENV, revision="abc123")
    assert got == on_disk


@pytest.mark.parametrize("offset", [0, 57, 99])
def test_one_flipped_byte_is_refused_naming_the_file(tmp_path, offset):
    d = _artifact(tmp_path)
    path = d / "checkpoint" / "5" / "state.bin"
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(provenance.ProvenanceError) as err:
        provenance.verify(d, env=ENV)
    assert err.value.kinds == ["file"]
    assert "checkpoint/5/state.bin was changed" in str(err.value)


def test_missing_resized_and_extra_files(tmp_path):
    d = _artifact(tmp_path)
    (d / "weights.npz").unlink()
    (d / "predict.jax_exported").write_bytes(b"short")
    (d / "notes.txt").write_text("left behind")
    with pytest.raises(provenance.ProvenanceError) as err:
        provenance.verify(d, env=ENV)
    text = str(err.value)
    assert "weights.npz is missing" in text
    assert "predict.jax_exported has 5 bytes, the manifest says 140" in text
    assert "files not in the manifest: notes.txt" in text
    assert len(err.value.problems) == 3


@pytest.mark.parametrize(
    "kwargs, kind, words",
    [
        ({"config": {**CONFIG, "learning_rate": 0.5}}, "config", "learning_rate 0.1 -> 0.5"),
        (
            {"config": {"seed": 0, "steps": 30}},
            "config",
            "learning_rate (recorded 0.1, now absent)",
        ),
        ({"data_sha256": hashlib.sha256(b"other").hexdigest()}, "data", "other data"),
        (
            {"env": provenance.environment({"numpy": "2.1.0", "jax": "0.10.2"}, "3.11.9")},
            "environment",
            "numpy '2.0.0' -> '2.1.0'",
        ),
        (
            {"env": provenance.environment({"numpy": "2.0.0", "jax": "0.10.2"}, "3.12.1")},
            "environment",
            "python 3.11.9 -> 3.12.1",
        ),
        (
            {"env": provenance.environment({"numpy": "2.0.0"}, "3.11.9")},
            "environment",
            "jax (recorded '0.10.2', now absent)",
        ),
        ({"revision": "def456"}, "revision", "built by abc123"),
    ],
)
def test_each_mismatch_is_refused_with_what_differs(tmp_path, kwargs, kind, words):
    d = _artifact(tmp_path)
    kwargs = {"env": ENV, **kwargs}
    with pytest.raises(provenance.ProvenanceError) as err:
        provenance.verify(d, **kwargs)
    assert err.value.kinds == [kind]
    assert words in str(err.value)


def test_an_edited_manifest_is_refused(tmp_path):
    d = _artifact(tmp_path)
    path = d / provenance.MANIFEST
    manifest = json.loads(path.read_text())
    manifest["config"]["learning_rate"] = 0.2  # edited to look like another run
    path.write_text(json.dumps(manifest))
    with pytest.raises(provenance.ProvenanceError, match="edited after it was written"):
        provenance.verify(d, env=ENV)
    manifest["format"] = "something else"
    with pytest.raises(provenance.ProvenanceError, match="field 'format'"):
        provenance.verify(d, manifest, env=ENV)


def test_another_artifacts_manifest_is_refused(tmp_path):
    v1, v2 = _artifact(tmp_path, "v1"), _artifact(tmp_path, "v2")
    (v2 / "weights.npz").write_bytes(b"other weights")
    manifest = provenance.read(v2)
    manifest = {**manifest}
    with pytest.raises(provenance.ProvenanceError):
        provenance.verify(v1, provenance.read(v1) | {"export": {}}, env=ENV)
    with pytest.raises(provenance.ProvenanceError, match="weights.npz"):
        provenance.verify(v2, manifest, env=ENV)


def test_current_environment_is_the_installed_distributions():
    import importlib.metadata

    env = provenance.current_environment()
    assert env["packages"]["numpy"] == importlib.metadata.version("numpy")
    assert env["packages"]["jax"] == importlib.metadata.version("jax")
    assert env["sha256"] == provenance.lock_sha256(env["python"], env["packages"])
    # normalization: PEP 503 names
    assert provenance.environment({"Foo_Bar.baz": "1"})["packages"] == {"foo-bar-baz": "1"}


def test_record_validates_before_writing(tmp_path):
    d = tmp_path / "a"
    d.mkdir()
    (d / "f").write_bytes(b"x")
    with pytest.raises(ValueError, match="not a file or folder"):
        provenance.record(d, "a", CONFIG, DATA, ["nope"], ["f"], revision="r", env=ENV)
    with pytest.raises(ValueError, match="either checkpoint or export"):
        provenance.record(d, "a", CONFIG, DATA, ["f"], ["f"], revision="r", env=ENV)
    with pytest.raises(ValueError, match="field 'name'"):
        provenance.record(d, "bad name!", CONFIG, DATA, ["f"], [], revision="r", env=ENV)
    with pytest.raises(ValueError, match="field 'data_sha256'"):
        provenance.record(d, "a", CONFIG, "not-a-hash", ["f"], [], revision="r", env=ENV)
    assert not (d / provenance.MANIFEST).exists()
    with pytest.raises(provenance.ProvenanceError, match="no provenance.json"):
        provenance.verify(d)
