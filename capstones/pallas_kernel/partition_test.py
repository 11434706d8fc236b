"""The kernel inside shard_map over 8 devices equals the unsharded kernel and float64; the
collectives its programs need; the TPU compiler's memory rows (one generation here)."""

from __future__ import annotations

import jax
import pytest

from capstones.pallas_kernel import partition
from core.tpu import topology_compile

needs_8 = pytest.mark.skipif(
    jax.device_count() < 8, reason="needs 8 devices (conftest sets JAX_NUM_CPU_DEVICES=8)"
)


def test_counts_collectives_in_hlo_text():
    text = """
  %all-reduce.1 = f32[4]{0} all-reduce(f32[4]{0} %x), replica_groups={}
  %ag = f32[8]{0} all-gather-start(f32[4]{0} %y), dimensions={0}
  %agd = f32[8]{0} all-gather-done(%ag)
  %cp = f32[4]{0} collective-permute(f32[4]{0} %z), source_target_pairs={{0,1}}
  %add = f32[4]{0} add(%x, %x)
"""
    counts = partition.count_collectives(text)
    assert counts == {
        "all-reduce": 1, "all-gather": 1, "reduce-scatter": 0, "all-to-all": 0,
        "collective-permute": 1,
    }  # fmt: skip
    assert sum(partition.count_collectives("%a = f32[] add(%b, %c)").values()) == 0


def test_mesh_needs_eight_devices():
    with pytest.raises(ValueError, match="needs 8 devices"):
        partition.make_mesh(jax.devices()[:1])


@needs_8
def test_sharded_equals_unsharded_and_collectives():
    check = partition.sharded_check(interpret=True)  # jax's HLO interpreter: cheaper
    assert check["equal"]
    assert max(check["sharded vs unsharded"].values()) <= check["tolerance"]
    assert max(check["sharded vs float64"].values()) <= check["tolerance"]
    assert check["output sharding"] == str(jax.sharding.PartitionSpec(*partition.AXES))
    attention, step = check["collectives"].values()
    assert sum(attention.values()) == 0  # each device owns whole (b, h) rows
    assert step["all-reduce"] >= 1  # the replicated weights' gradient is a sum over devices


def test_tpu_rows_say_when_libtpu_is_missing(monkeypatch):
    monkeypatch.setattr(topology_compile, "libtpu_problem", lambda: "libtpu is not installed")
    rows = partition.tpu_memory_rows(("v5e:2x2",), (256,))
    assert len(rows) == 2
    assert all(r["result"] == "not compiled: libtpu is not installed" for r in rows)
    assert all("peak (MiB)" not in r for r in rows)  # no number is made up


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
def test_tpu_memory_for_one_generation():
    kernel, xla = partition.tpu_memory_rows(("v5e:2x2",), (512,), heads=2, d=128)
    assert kernel["result"] == xla["result"] == "compiled"
    assert kernel["Mosaic call in HLO"] == "yes"
    assert kernel["device kind"].startswith("TPU v5")
    scores = 2 * 512 * 512 * 4 / 2**20
    assert kernel["closed-form scores (MiB)"] == scores
    assert xla["peak (MiB)"] >= scores  # XLA's attention holds the T x T scores
    assert kernel["peak (MiB)"] < xla["peak (MiB)"]
