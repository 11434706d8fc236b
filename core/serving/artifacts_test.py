"""The shared artifact pieces: symbolic dimensions by name, file checks that catch a flipped
byte and a truncation, the manifest's own hash, bfloat16's bit view, and a weights file that
is read without pickle and refused when its leaves differ from the manifest's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.serving import artifacts


def test_named_leaves_write_a_symbolic_batch_by_name():
    (b,) = jax.export.symbolic_shape("b")
    specs = (
        {"w": jax.ShapeDtypeStruct((3, 2), jnp.float32)},
        jax.ShapeDtypeStruct((b, 3), jnp.bfloat16),
    )
    assert artifacts.named_leaves(("weights", "x"), specs) == [
        {"name": "weights/w", "shape": [3, 2], "dtype": "float32"},
        {"name": "x", "shape": ["b", 3], "dtype": "bfloat16"},
    ]
    exported = jax.export.export(jax.jit(lambda w, x: x @ w["w"].astype(x.dtype)))(*specs)
    assert artifacts.aval_list(exported.out_avals) == [(["b", 2], "bfloat16")]
    assert (
        artifacts.leaf_diff(
            [(["b", 2], "bfloat16")], artifacts.aval_list(exported.out_avals), ["y"]
        )
        == ""
    )
    assert "y: manifest says float32[4, 2]" in artifacts.leaf_diff(
        [([4, 2], "float32")], artifacts.aval_list(exported.out_avals), ["y"]
    )


def test_check_file_catches_a_flipped_byte_a_truncation_and_a_missing_file(tmp_path):
    data = bytes(range(200))
    (tmp_path / "f.bin").write_bytes(data)
    entry = {"file": "f.bin", "bytes": len(data), "sha256": artifacts.sha256_bytes(data)}
    assert artifacts.check_file(tmp_path, entry, "blob") == data
    flipped = bytearray(data)
    flipped[100] ^= 1
    (tmp_path / "f.bin").write_bytes(bytes(flipped))
    with pytest.raises(artifacts.ChecksumError, match="sha256 of f.bin"):
        artifacts.check_file(tmp_path, entry, "blob")
    (tmp_path / "f.bin").write_bytes(data[:-1])
    with pytest.raises(artifacts.ChecksumError, match="199 bytes, the manifest says 200"):
        artifacts.check_file(tmp_path, entry, "blob")
    with pytest.raises(artifacts.MissingArtifactError, match="missing"):
        artifacts.check_file(tmp_path, {**entry, "file": "g.bin"}, "blob")


def test_manifest_digest_ignores_its_own_key_and_sees_every_edit():
    manifest = {"a": 1, "b": {"c": [1, 2]}}
    manifest["manifest_sha256"] = artifacts.manifest_digest(manifest)
    artifacts.check_manifest_digest("m.json", manifest)
    edited = {**manifest, "b": {"c": [1, 3]}}
    with pytest.raises(artifacts.ChecksumError, match="the manifest was edited"):
        artifacts.check_manifest_digest("m.json", edited)


def test_weights_round_trip_bfloat16_without_pickle_and_refuse_other_leaves():
    weights = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": jnp.asarray([1.5, -2.25], jnp.bfloat16),
    }
    data = artifacts.npz_bytes({n: artifacts.storable(a) for n, a in weights.items()})
    leaves = artifacts.weight_leaves(weights)
    back = artifacts.load_npz_weights(data, leaves, "w.npz")
    assert back["b"].dtype.name == "bfloat16"
    np.testing.assert_array_equal(back["a"], weights["a"])
    np.testing.assert_array_equal(back["b"].astype(np.float32), [1.5, -2.25])
    with pytest.raises(artifacts.WeightsMismatchError, match=r"lacks \['c'\]"):
        artifacts.load_npz_weights(
            data, [*leaves, {"name": "c", "shape": [1], "dtype": "float32"}], "w.npz"
        )
    wrong = [{**leaves[0], "shape": [3, 2]}, leaves[1]]
    with pytest.raises(artifacts.WeightsMismatchError, match=r"a is float32\[2, 3\]"):
        artifacts.load_npz_weights(data, wrong, "w.npz")
    with pytest.raises(artifacts.WeightsMismatchError, match="without pickle"):
        artifacts.load_npz_weights(b"not a zip", leaves, "w.npz")


def test_plain_names_only():
    assert artifacts.plain_name_problem("weights.npz") is None
    for name in ("../x", "a/b", "", ".", ".."):
        assert "plain file name" in artifacts.plain_name_problem(name)
