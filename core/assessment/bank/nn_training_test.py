"""The item ``nn_training.parameter_count`` beyond the generic contract
(core/assessment/items_test.py): counts worked out by hand, and the source runs as shown."""

from __future__ import annotations

from core.assessment.bank import nn_training
from core.assessment.bank.common import run_source
from core.assessment.items import rng

ITEM = nn_training.ParameterCount()


def test_parameter_count_by_hand():
    item = ITEM
    params = {"sizes": (8, 16, 4, 3), "layer_norm": (True, False), "no_bias": 1, "dropout": True}
    # linear0 8*16+16 = 144, norm0 2*16 = 32, linear1 16*4 (no bias) = 64, linear2 4*3+3 = 15
    assert item.live(params) == 255.0
    assert item.derive(params)[0] == 255.0
    assert item.wrong(params, 255.0) == {
        "biases forgotten": 255.0 - 16 - 3,
        "the output layer left out (hidden layers only)": 255.0 - 15,
        "LayerNorm's scale and bias left out": 255.0 - 32,
    }


def test_parameter_count_source_runs_as_shown():
    """The abstract build counts what the real model (the source exactly as shown) holds."""
    from core.nn import nnx_models

    item = ITEM
    for seed in (3, 17):
        params = item.params(rng(item.id, seed))
        namespace, _ = run_source(item.source(params))
        assert nnx_models.count_params(namespace["model"]) == item.live(params)
        expected = item.derive(params)[0]
        for mistake, value in item.wrong(params, expected).items():
            assert value != expected, mistake
