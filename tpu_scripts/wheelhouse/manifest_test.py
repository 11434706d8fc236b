"""Parts under the size limit, and a part's folder checked against its manifest."""

import json
import random

import pytest

from tpu_scripts.wheelhouse import fake_wheels, manifest


def test_split_keeps_every_part_under_the_limit_and_every_file_once():
    rng = random.Random(0)
    for _ in range(50):
        limit = rng.randint(100, 1000)
        layers = [
            {f"l{j}-f{i}": rng.randint(1, limit) for i in range(rng.randint(0, 30))}
            for j in range(rng.randint(1, 4))
        ]
        parts = manifest.split(layers, limit)
        sizes = {name: size for layer in layers for name, size in layer.items()}
        assert sorted(name for part in parts for name in part) == sorted(sizes)
        assert all(sum(sizes[name] for name in part) <= limit for part in parts)
        # the first layer is whole in the first parts: no part after them holds any of it
        first = set(layers[0])
        holding = [i for i, part in enumerate(parts) if set(part) & first]
        assert holding == list(range(len(holding)))


def test_split_refuses_a_file_larger_than_a_part():
    with pytest.raises(ValueError, match=r"big.whl \(0.0 MB\).*--part-mb"):
        manifest.split([{"big.whl": 101, "small.whl": 5}], 100)


def _part(tmp_path):
    folder = tmp_path / "part-01"
    wheel = fake_wheels.make_wheel(folder, "alpha", padding=100)
    entry = {"name": "alpha", "version": "1.0", "file": wheel.name,
             "sha256": fake_wheels.sha256(wheel), "size": wheel.stat().st_size}  # fmt: skip
    doc = manifest.part_manifest({"build": "b1", "target": "t"}, 1, 1, [entry], [])
    manifest.write(folder, doc)
    return folder, wheel


def test_a_whole_part_has_no_problems(tmp_path):
    folder, _ = _part(tmp_path)
    doc = manifest.read(folder)
    assert doc["size_bytes"] == doc["wheels"][0]["size"] > 100
    assert manifest.problems(folder, doc) == []


def test_a_damaged_missing_or_extra_wheel_is_named(tmp_path):
    folder, wheel = _part(tmp_path)
    doc = manifest.read(folder)
    data = bytearray(wheel.read_bytes())
    data[-30] ^= 1  # same size, other bytes
    wheel.write_bytes(bytes(data))
    assert any("sha256" in p and "copy it again" in p for p in manifest.problems(folder, doc))
    fake_wheels.make_wheel(folder, "stowaway")
    assert any("stowaway" in p and "not in its manifest" in p
               for p in manifest.problems(folder, doc))  # fmt: skip
    wheel.unlink()
    assert any("missing" in p for p in manifest.problems(folder, doc))


def test_read_refuses_what_is_not_a_part(tmp_path):
    with pytest.raises(ValueError, match="no manifest.json"):
        manifest.read(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ValueError, match="not a jax-tpu-lab/wheelhouse-part"):
        manifest.read(tmp_path)
    folder, _ = _part(tmp_path / "x")
    doc = json.loads((folder / "manifest.json").read_text())
    doc["wheels"][0]["file"] = "../escape.whl"
    (folder / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="bad file name"):
        manifest.read(folder)


def test_split_keeps_each_together_set_in_one_part_under_the_limit():
    rng = random.Random(1)
    for _ in range(50):
        limit = rng.randint(200, 1000)
        layers = [
            {f"l{j}-f{i}": rng.randint(1, limit // 2) for i in range(rng.randint(2, 20))}
            for j in range(rng.randint(1, 3))
        ]
        names = sorted(name for layer in layers for name in layer)
        pair = set(rng.sample(names, 2))
        parts = manifest.split(layers, limit, [pair])
        sizes = {name: size for layer in layers for name, size in layer.items()}
        assert sorted(name for part in parts for name in part) == names
        assert all(sum(sizes[name] for name in part) <= limit for part in parts)
        assert sum(pair <= set(part) for part in parts) == 1
    with pytest.raises(ValueError, match="no layer"):
        manifest.split([{"a": 1}], 10, [{"a", "b"}])
