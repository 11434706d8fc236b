"""The item ``tpu_setup.slice_chips`` against chip counts worked out by hand (many seeds:
bank_test.py)."""

from __future__ import annotations

import pytest

from core.assessment.bank import tpu_setup

SLICE_CHIPS = tpu_setup.SliceChips()


@pytest.mark.parametrize(
    ("name", "chips"),
    [
        ("v5p-32", 16),  # 32 TensorCores, 2 per chip
        ("v5p-8", 4),
        ("v5litepod-16", 16),  # v5e names count chips
        ("v6e-8", 8),
        ("tpu7x:2x2x4", 16),  # a topology: 2 x 2 x 4 chips
    ],
)
def test_slice_chips_by_hand(name, chips):
    params = {"name": name}
    assert SLICE_CHIPS.live(params) == chips
    assert SLICE_CHIPS.derive(params)[0] == chips
