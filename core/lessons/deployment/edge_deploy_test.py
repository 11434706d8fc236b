"""The edge-deployment lesson's own code: budget verdicts, calibration sets, the cached run.

The conversion and LiteRT figures are tested in interop/tflite_test.py (core may not
import interop).
"""

from __future__ import annotations

import numpy as np
import pytest

from core.data import digits
from core.lessons.deployment import edge_deploy as lesson
from core.nn import nnx_models
from core.post_training import cache


def _row(variant, size, latency, accuracy):
    return {"variant": variant, "size (bytes)": size, "latency (ms)": latency, "accuracy": accuracy}


def test_verdicts_against_hand_cases():
    budget = lesson.Budget(max_kb=16.0, max_latency_ms=1.0, min_accuracy=0.95)
    rows = [
        _row("fits exactly", 16_000, 1.0, 0.95),  # every limit is inclusive
        _row("too big", 16_001, 0.5, 0.99),
        _row("too slow and wrong", 1_000, 1.5, 0.90),
    ]
    out = lesson.verdicts(rows, budget)
    assert [r["meets budget"] for r in out] == [True, False, False]
    assert out[0]["misses"] == "-"
    assert out[1]["misses"] == "16.0 KB > 16 KB" and not out[1]["size ok"]
    assert out[2]["latency ok"] is False and out[2]["accuracy ok"] is False
    assert out[2]["misses"] == "1.500 ms > 1 ms; 90.00% < 95%"
    # a looser budget lets the same rows through
    loose = lesson.verdicts(rows, lesson.Budget(100.0, 10.0, 0.5))
    assert all(r["meets budget"] for r in loose)


@pytest.mark.parametrize(
    "args, match",
    [
        ((0.0, 1.0, 0.9), "max size"),
        ((1.0, -1.0, 0.9), "max latency"),
        ((1.0, 1.0, 1.1), "accuracy"),
    ],
)
def test_a_budget_that_cannot_hold_is_refused(args, match):
    with pytest.raises(ValueError, match=match):
        lesson.Budget(*args)


def test_calibration_sets_and_the_leaking_one():
    split = digits.load(0.2, 0)
    np.testing.assert_array_equal(
        lesson.calibration_inputs(split, lesson.RIGHT_CALIBRATION), split.x_train
    )
    assert len(lesson.calibration_inputs(split, "200 training images")) == 200
    dim = lesson.calibration_inputs(split, lesson.DIM_CALIBRATION)
    assert dim.max() == pytest.approx(0.1 * split.x_train.max())
    assert lesson.calibration_problem(lesson.RIGHT_CALIBRATION) is None
    assert "leaks the held-out digits" in lesson.calibration_problem(lesson.LEAKING_CALIBRATION)
    with pytest.raises(ValueError, match="leaks"):
        lesson.calibration_inputs(split, lesson.LEAKING_CALIBRATION)
    with pytest.raises(ValueError, match="calibration must be one of"):
        lesson.calibration_inputs(split, "whatever")


def test_training_is_cached_and_the_baseline_row_adds_up(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    split, model, origin = lesson.train((4, 8), epochs=1, seed=3)
    assert origin == cache.ORIGIN_TRAINED
    again_split, again, origin = lesson.train((4, 8), epochs=1, seed=3)
    assert origin == cache.ORIGIN_CACHE
    np.testing.assert_array_equal(again(split.x_test[:9]), model(split.x_test[:9]))
    np.testing.assert_array_equal(again_split.y_test, split.y_test)
    # another setting is another entry
    assert lesson.train((4, 8), epochs=2, seed=3)[2] == cache.ORIGIN_TRAINED

    row, logits = lesson.jax_row(model, split.x_test, split.y_test, repeats=3)
    assert row["size (bytes)"] == 4 * nnx_models.count_params(model)  # float32, no statistics
    assert row["accuracy"] == pytest.approx(np.mean(logits.argmax(1) == split.y_test))
    assert row["latency (ms)"] > 0
    # one epoch of Adam is far from chance (10%) already: the weights were trained, not initial
    assert row["accuracy"] > 0.5
    with pytest.raises(ValueError, match="epochs"):
        lesson.train((4, 8), epochs=0, seed=3)
