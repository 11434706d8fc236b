"""The distributed items beyond the generic contract (core/assessment/items_test.py): every wrong
byte count misses on every seed, the HLO holds the whole gradient, and the sharded step's feedback
names the factor."""

from __future__ import annotations

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
