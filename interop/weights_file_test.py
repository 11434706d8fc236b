"""safetensors + manifest: bitwise round trip, and every kind of bad file refused before load."""

import json

import numpy as np
import pytest

from interop import torch_flax, twins, weights_file


@pytest.fixture
def saved(tmp_path):
    return weights_file.save(tmp_path / "digits_net", twins.seeded_weights(0))


def test_round_trip_is_bitwise_and_loads_into_nnx(saved):
    assert saved.weights.name == "digits_net.safetensors"
    assert saved.manifest.name == "digits_net.manifest.json"
    loaded = weights_file.load(saved.weights, weights_file.digitsnet_expected(), "DigitsNet")
    original = twins.seeded_weights(0)
    assert sorted(loaded) == sorted(original)
    for name, array in original.items():
        assert loaded[name].dtype == array.dtype and loaded[name].tobytes() == array.tobytes()
    model = torch_flax.torch_to_nnx(loaded)
    assert (
        torch_flax.nnx_to_torch(model)["fc1.weight"].tobytes() == original["fc1.weight"].tobytes()
    )
    manifest = json.loads(saved.manifest.read_text())
    assert manifest["format_version"] == weights_file.FORMAT_VERSION
    assert manifest["file_bytes"] == saved.weights.stat().st_size
    assert {t["name"] for t in manifest["tensors"]} == set(original)
    assert [p.name for p in saved.weights.parent.iterdir()].count(saved.weights.name) == 1
    assert not [p for p in saved.weights.parent.iterdir() if p.name.endswith(".tmp")]


def test_torch_tensors_save_too(tmp_path):
    import torch

    state = twins.seeded_torch(1).state_dict()
    saved = weights_file.save(tmp_path / "w.safetensors", state)
    loaded = weights_file.load(saved.weights)
    assert all(np.array_equal(loaded[k], v.numpy()) for k, v in state.items())
    assert isinstance(state["fc1.bias"], torch.Tensor)


def test_one_flipped_byte_is_refused(saved):
    data = bytearray(saved.weights.read_bytes())
    data[-3] ^= 0x01  # inside the last tensor's bytes
    saved.weights.write_bytes(bytes(data))
    with pytest.raises(weights_file.WeightsFileError, match="tampered or replaced, not loaded"):
        weights_file.load(saved.weights)


def test_a_tensor_changed_with_the_file_hash_updated_is_still_refused(saved):
    data = bytearray(saved.weights.read_bytes())
    data[-3] ^= 0x01
    saved.weights.write_bytes(bytes(data))
    manifest = json.loads(saved.manifest.read_text())
    import hashlib

    manifest["file_sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    saved.manifest.write_text(json.dumps(manifest))
    with pytest.raises(weights_file.WeightsFileError, match="bytes differ from the manifest"):
        weights_file.load(saved.weights)


@pytest.mark.parametrize(
    "drop,add,message",
    [
        ("ln1.bias", None, r"tensor 'ln1.bias' is missing from the file \(the model lists it"),
        (None, "fc3.weight", r"tensor 'fc3.weight' in the file is not in the model"),
    ],
)
def test_a_missing_or_extra_tensor_is_refused(tmp_path, drop, add, message):
    state = dict(twins.seeded_weights(0))
    if drop:
        del state[drop]
    if add:
        state[add] = np.zeros((2, 2), np.float32)
    saved = weights_file.save(tmp_path / "w", state)
    weights_file.load(saved.weights)  # consistent with its own manifest
    with pytest.raises(weights_file.WeightsFileError, match=message):
        weights_file.load(saved.weights, weights_file.digitsnet_expected())


def test_a_wrong_dtype_or_shape_is_refused(tmp_path):
    state = dict(twins.seeded_weights(0))
    state["fc2.weight"] = state["fc2.weight"].astype(np.float64)
    saved = weights_file.save(tmp_path / "w", state)
    with pytest.raises(weights_file.WeightsFileError, match="fc2.weight: dtype float64, the model"):
        weights_file.load(saved.weights, weights_file.digitsnet_expected())
    state = dict(twins.seeded_weights(0))
    state["fc2.bias"] = state["fc2.bias"][None]
    saved = weights_file.save(tmp_path / "v", state)
    with pytest.raises(weights_file.WeightsFileError, match=r"fc2.bias: shape \(1, 10\)"):
        weights_file.load(saved.weights, weights_file.digitsnet_expected())


def test_a_manifest_that_lies_about_a_dtype_is_refused(saved):
    manifest = json.loads(saved.manifest.read_text())
    entry = next(t for t in manifest["tensors"] if t["name"] == "conv1.bias")
    entry["dtype"] = "float64"
    saved.manifest.write_text(json.dumps(manifest))
    with pytest.raises(weights_file.WeightsFileError, match="conv1.bias: the file holds float32"):
        weights_file.load(saved.weights)


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda m: m.update(format_version=2), "format_version"),
        (lambda m: m.update(format="pickle"), "field 'format'"),
        (lambda m: m.pop("file_sha256"), "required field 'file_sha256' is missing"),
        (lambda m: m.update(file_bytes="12"), "file_bytes"),
        (lambda m: m["tensors"][0].update(sha256="xyz"), r"tensors\[0\].sha256"),
        (lambda m: m.update(unexpected=1), "unexpected"),
        (lambda m: m.update(file="other.safetensors"), "describes 'other.safetensors'"),
        (lambda m: m.update(model="ResNet"), "holds a 'ResNet', expected 'DigitsNet'"),
        (lambda m: m["tensors"].append(dict(m["tensors"][0])), "lists a tensor twice"),
    ],
)
def test_a_bad_manifest_is_refused_before_the_weights_are_read(saved, edit, message):
    manifest = json.loads(saved.manifest.read_text())
    edit(manifest)
    saved.manifest.write_text(json.dumps(manifest))
    with pytest.raises(weights_file.WeightsFileError, match=message):
        weights_file.load(saved.weights, model="DigitsNet")


def test_missing_files_and_bad_json(saved, tmp_path):
    saved.manifest.write_text("{not json")
    with pytest.raises(weights_file.WeightsFileError, match="is not JSON"):
        weights_file.load(saved.weights)
    saved.manifest.unlink()
    with pytest.raises(weights_file.WeightsFileError, match="no manifest digits_net.manifest"):
        weights_file.load(saved.weights)
    other = weights_file.save(tmp_path / "x", {"a": np.zeros(2, np.float32)})
    other.weights.unlink()
    with pytest.raises(weights_file.WeightsFileError, match="no weights file"):
        weights_file.load(other.weights)


def test_bad_tensors_are_not_saved(tmp_path):
    with pytest.raises(weights_file.WeightsFileError, match="no tensors"):
        weights_file.save(tmp_path / "w", {})
    with pytest.raises(weights_file.WeightsFileError, match="dtype complex64"):
        weights_file.save(tmp_path / "w", {"a": np.zeros(2, np.complex64)})
    assert list(tmp_path.iterdir()) == []
