"""The distributed items beyond the generic contract (core/assessment/items_test.py): every wrong
byte count misses on every seed, the HLO holds the whole gradient, and the sharded step's feedback
names the factor."""

from __future__ import annotations

import jax

from core.assessment.bank import distributed
from core.assessment.items import rng


def test_allreduce_wrong_answers_miss_on_every_seed():
    item = distributed.AllReduceBytes()
    for seed in range(300):
        params = item.params(rng(item.id, seed))
        assert 3 <= params["devices"] <= 8, "D = 2 makes the ring factor 1"
        expected = item.live(params)
        derived, _text = item.derive(params)
        assert abs(expected - derived) <= 1e-9 * derived
        for mistake, value in item.wrong(params, expected).items():
            assert not item.matches(value, expected), (seed, mistake)


def test_allreduce_hlo_holds_the_whole_gradient():
    item = distributed.AllReduceBytes()
    text, holds = item.hlo_evidence(3)
    assert holds and "all-reduce" in text


def test_sharded_step_feedback_names_the_factor():
    item = distributed.ShardedStep()
    planted = item.planted_wrong()
    messages = " ".join(
        t.message for t in item.run_tests(3, planted["psum instead of pmean (gradient × D)"])
    )
    assert "4x the right one" in messages and "2x the right one" in messages
    source = planted["each shard's loss divided by the global batch, then pmean (gradient / D)"]
    messages = " ".join(t.message for t in item.run_tests(3, source))
    assert "1/4 of the right one" in messages
    source = planted["no collective: each device steps on its own shard's gradient"]
    messages = " ".join(t.message for t in item.run_tests(3, source))
    assert "differ from device 0's" in messages


def test_a_one_chip_host_builds_the_meshes_on_the_cpu_devices(monkeypatch):
    # A TPU host with one chip: the default backend has 1 device, the CPU backend the lab's 8.
    # The sharded step's hidden tests run the course's solution (in this process) and the stub
    # (in the answer's process) on a CPU mesh, and the all-reduce evidence is compiled for the
    # CPU's devices, as its text says: the self-checks hold.
    real = jax.devices
    monkeypatch.setattr(
        jax, "devices", lambda backend=None: real("cpu") if backend == "cpu" else real()[:1]
    )
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    step = distributed.ShardedStep()
    assert "8 CPU devices" in step.prompt(5)
    check = step.self_check(5)
    assert all(check.facts.values()) and check.facts, check.facts
    allreduce = distributed.AllReduceBytes()
    check = allreduce.self_check(5)
    assert all(check.facts.values()) and max(check.errors.values()) <= 1e-9, check
