"""The item ``self_supervised.masked_loss_count`` beyond the generic contract
(core/assessment/items_test.py): it uses the course's masking."""

from __future__ import annotations

import numpy as np

from core.assessment.bank import self_supervised


def test_masked_loss_uses_the_course_masking():
    """The shown kinds obey the rule: padding never selected, labels = the original byte at
    selected positions only, [MASK] positions show MASK_ID."""
    from core.lm import ssl_masking

    item = self_supervised.MaskedLossCount()
    for seed in range(10):
        params = item.seeded(seed)[0]
        real = params["segments"] != 0
        selected = params["kind"] != ssl_masking.NOT_SELECTED
        assert not np.any(selected & ~real)
        np.testing.assert_array_equal(params["labels"][selected], params["tokens"][selected])
        assert np.all(params["labels"][~selected] == ssl_masking.IGNORE_LABEL)
        masked = params["kind"] == ssl_masking.MASKED
        assert np.all(params["inputs"][masked] == ssl_masking.MASK_ID)
