import jax
import pytest

from core.lessons.transformations import jit as lesson


@pytest.mark.parametrize("devices", [1, 8])
@pytest.mark.needs_devices("devices")
def test_observed_retraces_follow_the_signature_rule(devices):
    rows = lesson.retrace_table(devices)
    names = [row["call"] for row in rows]
    assert ("new sharding" in names) == (devices > 1)
    for row in rows:
        # the closed-form table, the rule applied to the written-out signatures, and JAX
        expected = "yes" if lesson.EXPECTED[row["call"]] else "no"
        assert row["rule says"] == expected, row["call"]
        assert row["traced again?"] == expected, row["call"]
        assert row["result error"] < 1e-6


def test_each_cause_traces_again_and_a_repeat_does_not():
    rows = {row["call"]: row["traced again?"] for row in lesson.retrace_table(len(jax.devices()))}
    for cause in ("new shape", "new dtype", "new pytree structure", "new static argument value"):
        assert rows[cause] == "yes"
    assert rows["typed scalar, not a Python float"] == "yes"  # weak type differs
    assert rows["another Python float"] == "no"  # the value of a weak scalar is not traced
    assert rows["same signature, new values"] == "no"


def test_the_rule_alone_marks_only_unseen_signatures():
    sequence = lesson.calls(1)  # no mesh: runs on any host
    unsharded = [v for k, v in lesson.EXPECTED.items() if k != "new sharding"]
    assert lesson.expected_retraces(sequence + sequence[:3]) == unsharded + [False] * 3
