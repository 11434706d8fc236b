"""The byte LM service's sampler against a softmax reference (scipy), at its numerical limits.
(That the service imports nothing of the capstone is lint-imports' "core never imports
capstones" contract.)"""

import numpy as np
import pytest
import scipy.special

from core.serving.byte_lm import engine


@pytest.mark.parametrize(
    "size,temperature,top_k",
    [(256, 1.0, None), (256, 0.3, 5), (7, 2.5, 3), (50, 100.0, 50), (256, 1e-3, None), (9, 7.0, 1)],
)
def test_sampling_probabilities_match_a_softmax_reference(size, temperature, top_k):
    logits = np.random.default_rng(size).normal(0, 4, size).astype(np.float32)
    got = engine.next_token_probabilities(logits, temperature, top_k)
    wide = logits.astype(np.float64)
    kept = wide >= np.sort(wide)[-(top_k or size)]  # the top_k largest (no ties here)
    want = np.zeros(size)
    want[kept] = scipy.special.softmax(wide[kept] / temperature)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


def test_sampling_limits_are_finite():
    logits = np.array([1.0, 3.0, 3.0, -1e30, 0.0], np.float32)
    for temperature in (5e-324, 1e-310, 1e-30):  # ties at the max share, the rest get 0
        np.testing.assert_array_equal(
            engine.next_token_probabilities(logits, temperature), [0, 0.5, 0.5, 0, 0]
        )
    np.testing.assert_array_equal(engine.next_token_probabilities(logits, 0.0), [0, 1, 0, 0, 0])
    top_1 = engine.next_token_probabilities(logits, 1e-310, top_k=1)  # ties: the lower id
    np.testing.assert_array_equal(top_1, [0, 1, 0, 0, 0])
    huge = engine.next_token_probabilities(np.array([1e38, -1e38], np.float32), 100.0)
    np.testing.assert_array_equal(huge, [1.0, 0.0])
