"""The item ``math_optimization.stable_learning_rate`` beyond the generic contract
(core/assessment/items_test.py): the limit worked out by hand, the matrix shown is exact, and
gradient descent converges just below the answer and diverges above it."""

from __future__ import annotations

import fractions

import numpy as np
import pytest

from core.assessment.bank import math_optimization
from core.assessment.items import rng

ITEM = math_optimization.StableLearningRate()

MANY_SEEDS = range(40)


def test_stable_learning_rate_by_hand():
    item = ITEM
    # A = [[2, 1], [1, 2]]: eigenvalues 1 and 3, so eta_max = 2/3
    params = {"A": ((2.0, 1.0), (1.0, 2.0)), "eigenvalues": (3.0, 1.0), "b": (1.0, -1.0)}
    assert item.live(params) == pytest.approx(2 / 3, rel=1e-12)
    assert item.derive(params)[0] == pytest.approx(2 / 3, rel=1e-12)


def test_stable_learning_rate_matrix_is_exact_and_mistakes_stay_wrong():
    item = ITEM
    for seed in MANY_SEEDS:
        params = item.params(rng(item.id, seed))
        exact = np.array(params["A_exact"], dtype=object)
        # the four decimals shown are A itself
        assert all((v * 10000).denominator == 1 for v in exact.flat), seed
        shown = np.array([[float(f"{v:.4f}") for v in row] for row in params["A"]])
        assert np.allclose(shown, shown.T)
        eigen = np.linalg.eigvalsh(shown)
        assert eigen == pytest.approx(sorted(params["eigenvalues"]), rel=1e-12)
        assert all(fractions.Fraction(v) * 16 % 1 == 0 for v in params["eigenvalues"])
        expected = item.derive(params)[0]
        for mistake, value in item.wrong(params, expected).items():
            assert abs(value - expected) > 0.03 * expected, (seed, mistake)


def test_gradient_descent_converges_just_below_the_answer_and_diverges_above():
    item = ITEM
    params = item.params(rng(item.id, 3))
    a, b = np.asarray(params["A"]), np.asarray(params["b"])
    limit = item.live(params)
    for factor, converges in ((0.97, True), (1.03, False)):
        x = np.ones(len(b))
        for _ in range(2000):
            x = x - factor * limit * (a @ x + b)
        assert np.allclose(a @ x + b, 0, atol=1e-6) == converges
