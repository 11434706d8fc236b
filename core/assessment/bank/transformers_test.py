"""The item ``transformers.causal_attention`` beyond the generic contract
(core/assessment/items_test.py): the reference against the course library, and shapes that include
one position and a non-power of two."""

from __future__ import annotations

import numpy as np
import pytest

from core.assessment.bank import transformers
from core.assessment.solutions import causal_attention

MANY_SEEDS = range(60)


@pytest.mark.parametrize("shape", [(1, 1, 1, 4), (2, 5, 2, 8), (1, 13, 3, 8)])
def test_attention_reference_matches_the_course_library(shape):
    from core.lm import attention

    generator = np.random.default_rng(shape[1])
    q, k, v = (generator.normal(size=shape).astype(np.float32) for _ in range(3))
    mine = transformers.causal_attention_reference(q, k, v)
    np.testing.assert_allclose(mine, attention.reference_float64(q, k, v, causal=True), atol=1e-12)
    np.testing.assert_allclose(
        np.asarray(causal_attention.causal_attention(q, k, v)), mine, atol=1e-5
    )


def test_attention_shapes_include_one_position_and_a_non_power_of_two():
    for seed in MANY_SEEDS:
        lengths = [
            s[1] for s in transformers._attention_shapes(seed, transformers.CausalAttention.id)
        ]
        assert 1 in lengths and any(t > 1 and t & (t - 1) for t in lengths)
