"""The NNX -> Keras move: the mapping table, the planted mistakes, and over seeds 0-2 (one jax
child) the correct move agrees with NNX at every layer while each mistake diverges first where
it is planted, far above float32's tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from core import numerics
from interop import keras_bridge, torch_flax, twins
from interop.keras_track import nnx_twin

SEEDS = (0, 1, 2)
# A planted mistake must be caught with margin, not by rounding: its worst layer's scaled
# error is at least this many float32 tolerances (measured 2026-12-03 at the logits alone, the
# smallest over seeds 0-2: tanh GELU at act1 12.6x, Keras's BN epsilon 696x, the rest >4e4x).
CAUGHT_MARGIN = 10.0


def test_mapping_rows_cover_every_rule_with_equal_shapes():
    rows = nnx_twin.mapping_rows()
    assert len(rows) == len(keras_bridge.KERAS_RULES)
    assert all(r["NNX shape"] == r["Keras shape"] and r["rule"] == "copy" for r in rows)
    assert {"NNX": "bn1.var", "Keras": "bn1.moving_variance"}.items() <= rows[5].items()


def test_plant_changes_only_what_it_names():
    weights = keras_bridge.nnx_to_keras(torch_flax.seeded_nnx(0))
    same, config = nnx_twin.plant(weights, "none")
    assert config == twins.SPEC and all(np.array_equal(same[k], weights[k]) for k in weights)
    moved, _ = nnx_twin.plant(weights, "conv1_kernel_transposed")
    assert moved["conv1.kernel"].shape == weights["conv1.kernel"].shape
    assert not np.array_equal(moved["conv1.kernel"], weights["conv1.kernel"])
    _, eps = nnx_twin.plant(weights, "keras_bn_epsilon")
    assert eps.differences(twins.SPEC) == ["bn_epsilon: 0.001 vs 1e-05"]
    with pytest.raises(ValueError, match="unknown mistake"):
        nnx_twin.plant(weights, "typo")


@pytest.mark.parametrize(
    "backends,mistake,words",
    [([], "none", "no backend"), (["jax", "jax"], "none", "twice"), (["mx"], "none", "unknown")],
)
def test_problem(backends, mistake, words):
    assert words in nnx_twin.problem(backends, mistake)


def test_correct_move_agrees_and_every_mistake_is_caught_over_seeds(tmp_path):
    mistakes = [m for m in nnx_twin.MISTAKES if m != "none"]
    result = nnx_twin.run(["jax"], tmp_path, seeds=SEEDS, batch=8, mistakes=mistakes)
    tolerance = numerics.tolerance("float32")
    for seed in SEEDS:
        correct = result.diff("jax", seed, "none")
        assert correct.agrees, (seed, correct.rows())
        for mistake in mistakes:
            planted = result.diff("jax", seed, mistake)
            assert planted.first_divergent == nnx_twin.FIRST_DIVERGENT[mistake], (seed, mistake)
            worst = max(e.scaled for e in planted.layers)
            assert worst > CAUGHT_MARGIN * tolerance, (seed, mistake, worst)
