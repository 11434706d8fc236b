"""The item ``transformations.recompiles`` beyond the generic contract
(core/assessment/items_test.py): trace counts worked out by hand, and the planted mistakes stay
wrong over many seeds."""

from __future__ import annotations

from core.assessment.bank import transformations
from core.assessment.items import rng

ITEM = transformations.Recompiles()

MANY_SEEDS = range(40)


def test_recompiles_by_hand():
    item = ITEM
    calls = (
        ((4,), "float32", 2),
        ((4,), "float32", 2),  # cached
        ((4,), "int32", 2),  # new dtype
        ((4,), "float32", 3),  # new static value
        ((2, 4), "float32", 2),  # new shape
    )
    params = {"calls": calls}
    assert item.live(params) == 4.0
    assert item.derive(params)[0] == 4.0
    assert item.wrong(params, 4.0) == {
        "one trace per call": 5.0,
        "distinct shapes only (dtype and static value ignored)": 2.0,
        "distinct shapes and dtypes (the static argument ignored)": 3.0,
    }


def test_recompiles_mistakes_stay_wrong_over_seeds():
    item = ITEM
    answers = set()
    for seed in MANY_SEEDS:
        params = item.params(rng(item.id, seed))
        assert 6 <= len(params["calls"]) <= 10
        expected = item.derive(params)[0]
        answers.add(expected)
        for mistake, value in item.wrong(params, expected).items():
            assert abs(value - expected) >= 1, (seed, mistake)
    assert len(answers) >= 3
