"""The build's plan from the real lock, its parts from tiny wheels; nothing is downloaded."""

import json
import pathlib

import pytest

from core import envlock
from tpu_scripts.wheelhouse import build, fake_wheels, inventory, manifest, profiles

LOCK = envlock.COURSE_LOCK.read_text()
# A v5e TPU VM without internet, CPython 3.11.7, a local index (/opt/pypi) and /opt/wheels
OFFLINE_V5E = pathlib.Path(__file__).with_name("hosts") / "tpu-v5e-offline-py311.json"


def _sha(name):
    return build._sha(envlock.pin_lines(LOCK)[name])


def _host(index=(), find_links=(), first=("jax",)):
    return {
        "schema": inventory.SCHEMA,
        "installed": {name: {"version": "x", "first": True} for name in first},
        "index": "file:///opt/pypi/simple",
        "index_files": {name: [{"file": f"{name}.whl", "sha256": _sha(name)}] for name in index},
        "find_links": ["/opt/wheels"],
        "find_links_files": {
            name: [{"file": f"{name}.whl", "sha256": _sha(name)}] for name in find_links
        },
    }


def test_without_an_inventory_everything_but_the_host_s_jax_stack_is_carried():
    plan = build.plan(["core"], LOCK)
    assert {"marimo", "flax", "optax", "grain", "chex", "pydantic"} <= set(plan.carried)
    assert not set(plan.carried) & set(profiles.HOST_FIRST) and plan.from_host == {}
    assert plan.host_first["jax"] == "0.10.2" and "libtpu" in plan.host_first
    assert plan.layers[0][0] == "core"


def test_the_host_s_own_files_are_left_out_only_when_they_are_the_lock_s_files():
    host = _host(index=["flax"], find_links=["torch"])
    host["index_files"]["optax"] = [{"file": "optax-0.2.7.whl", "sha256": "0" * 64}]  # other
    plan = build.plan(["core", "torch"], LOCK, host)
    assert "flax" in plan.from_host and "torch" in plan.from_host
    assert "optax" in plan.carried  # the host's optax is another version
    assert plan.host_index == "file:///opt/pypi/simple" and plan.host_find_links == ["/opt/wheels"]


def test_include_carries_what_the_host_has_first():
    plan = build.plan(["core"], LOCK, include=["jax", "jaxlib"])
    assert {"jax", "jaxlib"} <= set(plan.carried) and "jax" not in plan.host_first
    assert plan.layers[0][0] == "include"


def test_an_offline_v5e_host_s_inventory_leaves_its_torch_and_index_behind():
    host = inventory.load(OFFLINE_V5E)
    assert {n for n, e in host["installed"].items() if e["first"]} == set(profiles.HOST_FIRST)
    plan = build.plan(["all"], LOCK, host)
    # the host's index lacks chex, grain, marimo, mlflow; torch lies in /opt/wheels
    assert {"chex", "grain", "marimo", "mlflow"} <= set(plan.carried)
    assert "torch" in plan.from_host and "flax" in plan.from_host


def test_fetch_reuses_wheels_whose_sha256_is_the_lock_s_and_checks_their_tags(tmp_path):
    downloads = tmp_path / "downloads"
    good = fake_wheels.make_wheel(downloads, "alpha")
    found = build.fetch({"alpha": fake_wheels.lock_line(good, "alpha")}, downloads)
    assert found == {"alpha": good}
    bad = fake_wheels.make_wheel(downloads, "beta", tag="cp312-cp312-manylinux_2_17_x86_64")
    with pytest.raises(RuntimeError, match="beta-1.0-cp312.*built for Python cp312"):
        build.fetch({"beta": fake_wheels.lock_line(bad, "beta")}, downloads)
    with pytest.raises(RuntimeError, match="has the sha256 the lock gives gamma"):
        build.fetch({"gamma": fake_wheels.lock_line(good, "gamma")}, downloads)


def test_the_download_is_hash_checked_for_the_tpu_host_s_python():
    argv = build.download_command(pathlib.Path("r.txt"), pathlib.Path("d"))
    for flag in ("--require-hashes", "--no-deps", "--only-binary=:all:"):
        assert flag in argv
    assert argv[argv.index("--python-version") + 1] == "3.11"
    assert "manylinux_2_36_x86_64" in argv and "manylinux_2_37_x86_64" not in argv


def test_parts_have_manifests_under_the_limit_and_the_host_s_pins_travel_with_their_profile(
    tmp_path,
):
    src = tmp_path / "src"
    wheels = {name: fake_wheels.make_wheel(src, name, padding=size)
              for name, size in [("a", 4000), ("b", 3000), ("c", 2500), ("d", 500)]}  # fmt: skip
    lines = {name: fake_wheels.lock_line(path, name) for name, path in wheels.items()}
    hosted = fake_wheels.make_wheel(tmp_path / "h", "h")
    plan = build.Plan(
        ["core", "rl"], lines, {"h": fake_wheels.lock_line(hosted, "h")}, {}, "file:///i", [],
        [("core", ["a", "b", "c"], []), ("rl", ["d"], ["h"])],
    )  # fmt: skip
    folders = build.write_parts(tmp_path / "wh", wheels, plan, "lock", 6000)
    docs = [manifest.read(folder) for folder in folders]
    assert all(doc["size_bytes"] <= 6000 and manifest.problems(f, doc) == []
               for f, doc in zip(folders, docs, strict=True))  # fmt: skip
    assert sorted(w["name"] for doc in docs for w in doc["wheels"]) == ["a", "b", "c", "d"]
    assert [doc["parts"] for doc in docs] == [len(docs)] * len(docs)
    holder = next(doc for doc in docs if "d" in [w["name"] for w in doc["wheels"]])
    assert [p["name"] for p in holder["from_host_index"]] == ["h"]
    assert sum(len(doc["from_host_index"]) for doc in docs) == 1
    # a second build replaces the parts; another lock is another build
    again = build.write_parts(tmp_path / "wh", wheels, plan, "other lock", 6000)
    assert sorted(p.name for p in (tmp_path / "wh").glob("part-*")) == [f.name for f in again]
    assert manifest.read(again[0])["build"] != docs[0]["build"]
    assert json.loads((again[0] / "manifest.json").read_text())["target"].startswith("CPython 3.11")


def test_a_wheel_and_its_exact_pin_travel_in_one_part(tmp_path):
    """An offline v5e host's lesson: pydantic-core in part 1 and pydantic in part 3 broke the
    host's own pydantic (its import checks pydantic-core's exact version) until part 3 came.
    Split alone, the first-fit packing would part them; exact pins keep them together."""
    from packaging.requirements import Requirement

    src = tmp_path / "src"
    pins = {"api": ("api-core==2.0",), "other": ("api>=1.0", "extra-thing==1.0; extra == 'x'")}

    def requires(name):  # as profiles.requirements_of gives them: markers for the host
        found = [Requirement(text) for text in pins.get(name, ())]
        return [r for r in found if r.marker is None or r.marker.evaluate({"extra": ""})]

    wheels = {name: fake_wheels.make_wheel(src, name, padding=size)
              for name, size in [("big", 5000), ("api-core", 3000), ("other", 2500),
                                 ("api", 1500)]}  # fmt: skip
    assert build.exact_pins(requires("api")) == {"api-core"}
    assert build.exact_pins(requires("other")) == set()  # a range, and an extra's pin
    together = build.exact_pin_groups(wheels, requires)
    assert together == [{wheels["api"].name, wheels["api-core"].name}]
    lines = {name: fake_wheels.lock_line(path, name) for name, path in wheels.items()}
    layers = [("core", ["api-core", "big"], []), ("ops", ["api", "other"], [])]
    plan = build.Plan(["core", "ops"], lines, {}, {}, None, [], layers)
    sizes = [{wheels[n].name: wheels[n].stat().st_size for n in names} for _, names, _ in layers]
    apart = manifest.split(sizes, 8000)  # without the pins: api-core and api in different parts
    assert not any({wheels["api"].name, wheels["api-core"].name} <= set(p) for p in apart)
    folders = build.write_parts(tmp_path / "wh", wheels, plan, "lock", 8000, together)
    held = [{w["name"] for w in manifest.read(folder)["wheels"]} for folder in folders]
    assert any({"api", "api-core"} <= names for names in held)
    assert sorted(n for names in held for n in names) == sorted(wheels)


def test_the_lock_s_pydantic_pins_its_core_exactly_here():
    """exact_pins on this environment's own metadata (the lock's): the pair that broke."""
    from tpu_scripts.wheelhouse import profiles

    assert "pydantic-core" in build.exact_pins(profiles.requirements_of("pydantic"))
