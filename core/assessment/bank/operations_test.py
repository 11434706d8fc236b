"""The item ``operations.model_flops_utilization`` against a figure worked out by hand and its
source."""

from __future__ import annotations

import pytest

from core.assessment.bank import operations
from core.tpu import specs

MFU = operations.ModelFlopsUtilization()


def test_mfu_by_hand():
    # 6 x 7e9 x 40,000 = 1.68e15 FLOP/s over 8 x 9.2e14 = 7.36e15 FLOP/s: 22.826 %
    params = {
        "generation": "v6e",
        "slice": "v6e-8",
        "chips": 8,
        "parameters": 7e9,
        "tokens_per_s": 40000.0,
        "tokens_per_step": 2048 * 64,
    }
    assert MFU.live(params) == pytest.approx(100 * 1.68e15 / 7.36e15, rel=1e-9)
    value, text = MFU.derive(params)
    assert value == pytest.approx(22.826087, rel=1e-6)
    assert specs.SOURCES["scaling-book"] in text
