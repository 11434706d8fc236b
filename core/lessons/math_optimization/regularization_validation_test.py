import jax
import numpy as np
import pytest

from core import numerics
from core.lessons.math_optimization import regularization_validation as rv
from core.nn import chunked


@pytest.mark.parametrize(
    "n_train, features, l2, fraction, steps",
    [
        (40, 40, 0.0, 0.9, 2000),
        (100, 20, 0.1, 0.5, 500),
        (20, 60, 0.0, 0.95, 3000),
        (10, 100, 0.0, 0.95, 5000),
        (50, 5, 1.0, 0.3, 100),
    ],
)
def test_gd_path_equals_the_closed_form(n_train, features, l2, fraction, steps):
    splits, path, _ = rv.run_split(
        jax.random.key(features), n_train, 30, 50, features, 1.0, l2, fraction, steps
    )
    lr = fraction * rv.stability_limit(*splits["train"], l2)
    reference = rv.closed_form_path(*splits["train"], l2, lr, steps)
    assert numerics.scaled_max_error(path, reference) <= numerics.tolerance("float32")
    if l2 > 0:  # converged runs end at the ridge solution A^-1 b
        a, b = rv.quadratic(*splits["train"], l2)
        assert numerics.scaled_max_error(reference[-1], np.linalg.solve(a, b)) <= 1e-3


def test_a_new_step_count_compiles_nothing():
    # the steps control moves by 50: every count it offers reuses the compiled chunk (one scan
    # of the whole run compiled again for every count); the path still meets the closed form
    rv.run_split(jax.random.key(1), 30, 20, 20, 10, 1.0, 0.1, 0.9, 2 * rv.STEPS_CHUNK)
    with chunked.counting_compiles() as compiled:
        splits, path, _ = rv.run_split(
            jax.random.key(2), 30, 20, 20, 10, 1.0, 0.1, 0.8, 7 * rv.STEPS_CHUNK
        )
    assert compiled == [] and path.shape == (7 * rv.STEPS_CHUNK + 1, 10)
    lr = 0.8 * rv.stability_limit(*splits["train"], 0.1)
    reference = rv.closed_form_path(*splits["train"], 0.1, lr, 7 * rv.STEPS_CHUNK)
    assert numerics.scaled_max_error(path, reference) <= numerics.tolerance("float32")


def test_closed_form_is_not_the_same_formula_twice():
    splits, path, _ = rv.run_split(jax.random.key(0), 40, 40, 40, 10, 1.0, 0.0, 0.5, 50)
    lr = 0.5 * rv.stability_limit(*splits["train"], 0.0)
    other = rv.closed_form_path(*splits["train"], 0.0, 1.05 * lr, 50)
    assert numerics.scaled_max_error(path, other) > 100 * numerics.tolerance("float32")


def test_early_stopping_helps_over_every_seed():
    for seed in rv.CLAIM_SEEDS:
        _, _, curves = rv.run_split(
            jax.random.key(seed), 40, 40, 200, 40, 1.0, 0.0, rv.DEFAULT_LR_FRACTION, 2000
        )
        result = rv.early_stopping(curves)
        assert result["test at best"] * rv.EARLY_STOP_MARGIN <= result["test at end"], seed


def test_leakage_inflates_the_validation_score_over_seeds():
    summary = rv.leak_summary(rv.LEAK_CLAIM_SEEDS, 60, 1000, 10)
    assert summary["inflation"] >= rv.LEAK_MIN_INFLATION
    assert summary["leaky wins"] >= 0.9
    assert abs(summary["honest"].mean() - 0.5) < 0.06  # the honest score is a coin flip


@pytest.mark.parametrize("seed, examples, features, k", [(0, 60, 1000, 10), (3, 40, 50, 5)])
def test_leak_pipelines_match_sklearn(seed, examples, features, k):
    ours = rv.leak_trial(seed, examples, features, k)
    theirs = rv.leak_trial_sklearn(seed, examples, features, k)
    assert ours == theirs


def test_refusals():
    assert "negative" in rv.problem(0.5, -0.01, 5, 100)
    assert "stability limit" in rv.problem(1.05, 0.0, 5, 100)
    assert "cannot select" in rv.problem(0.5, 0.0, 50, 10)
    assert "never settles" in rv.problem(1.0, 0.0, 5, 100)
    assert rv.problem(0.95, 0.0, 5, 100) is None
    splits, path, _ = rv.run_split(jax.random.key(0), 40, 10, 10, 10, 1.0, 0.0, 1.05, 200)
    assert not np.isfinite(path).all() or np.abs(path).max() > 1e6  # past the limit: diverges
