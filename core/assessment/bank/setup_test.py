"""The item ``setup.shard_shape`` beyond the generic contract (core/assessment/items_test.py):
blocks worked out by hand, the planted mistakes stay wrong over many seeds, and too few devices are
refused."""

from __future__ import annotations

import jax
import pytest

from core.assessment.bank import setup
from core.assessment.items import rng

ITEM = setup.ShardShape()

MANY_SEEDS = range(40)


@pytest.mark.parametrize(
    ("params", "block"),
    [
        # 32/2 (data), 48 whole, 16/2 (model)
        (
            {
                "shape": (32, 48, 16),
                "dtype": "bfloat16",
                "mesh_shape": (2, 2),
                "axis_names": ("data", "model"),
                "entries": ("data", None, "model"),
            },
            (16, 48, 8),
        ),
        # 24 whole, 40/4
        (
            {
                "shape": (24, 40),
                "dtype": "int8",
                "mesh_shape": (4,),
                "axis_names": ("x",),
                "entries": (None, "x"),
            },
            (24, 10),
        ),
        # 48 over both axes: 48/(2*2)
        (
            {
                "shape": (48, 8),
                "dtype": "float32",
                "mesh_shape": (2, 2),
                "axis_names": ("x", "y"),
                "entries": (("y", "x"), None),
            },
            (12, 8),
        ),
    ],
)
def test_shard_shape_by_hand(params, block):
    item = ITEM
    assert item.live(params) == block
    assert item.derive(params)[0] == block


def test_shard_shape_mistakes_stay_wrong_and_shapes_divide():
    item = ITEM
    for seed in MANY_SEEDS:
        params = item.params(rng(item.id, seed))
        expected = item.derive(params)[0]
        for mistake, value in item.wrong(params, expected).items():
            assert tuple(value) != tuple(expected), (seed, mistake)
        assert all(n % 4 == 0 for n in params["shape"])


def test_shard_shape_refuses_too_few_devices(monkeypatch):
    item = ITEM
    params = item.params(rng(item.id, 3))
    monkeypatch.setattr(jax, "devices", lambda *a: [object(), object()])
    with pytest.raises(ValueError, match="JAX_NUM_CPU_DEVICES"):
        item.live(params)
    assert "needs 4 devices" in item.prompt(params)
    assert "needs 4 devices" in item.question(1234).prompt  # a seed not computed yet


def test_shard_shape_on_a_one_chip_host_is_checked_on_the_cpu_devices(monkeypatch):
    # A TPU host with one chip (the v5e chip run: "places an array on 4 devices; this process
    # has 1"): the default backend has 1 device, the CPU backend beside it the lab's 8. The
    # item builds its mesh there, says so, and its self-check holds.
    real = jax.devices
    monkeypatch.setattr(
        jax, "devices", lambda backend=None: real("cpu") if backend == "cpu" else real()[:1]
    )
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    params = {
        "shape": (32, 48, 16),
        "dtype": "bfloat16",
        "mesh_shape": (2, 2),
        "axis_names": ("data", "model"),
        "entries": ("data", None, "model"),
    }
    assert ITEM.live(params) == (16, 48, 8) == ITEM.derive(params)[0]
    prompt = ITEM.prompt(params)
    assert "default backend (TPU) has 1 device," in prompt and "8 CPU devices" in prompt
    assert "needs 4 devices" not in ITEM.question(1234).prompt
    for seed in range(5):
        assert ITEM.self_check(seed).errors == {f"{ITEM.id}: library vs derivation": 0.0}
