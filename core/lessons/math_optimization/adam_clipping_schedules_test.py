import jax
import numpy as np
import pytest

from core import numerics
from core.lessons.math_optimization import adam_clipping_schedules as acs
from core.optim import references


@pytest.mark.parametrize(
    "schedule, steps, b1, b2, eps, wd, seed",
    [
        ("warmup_cosine", 100, 0.9, 0.999, 1e-8, 0.01, 0),
        ("linear", 200, 0.8, 0.99, 1e-6, 0.1, 1),
        ("constant", 150, 0.95, 0.99, 1e-4, 0.0, 2),
    ],
)
def test_three_adamws_agree_over_the_lesson_grid(schedule, steps, b1, b2, eps, wd, seed):
    ours_s, optax_s = acs.make_schedule(schedule, 3e-2, 10, steps, 1e-4)
    params, grads_S = acs.gradient_sequence(jax.random.key(seed), steps, 1.0)
    ours = acs.ours_adamw(params, grads_S, ours_s, b1, b2, eps, wd)
    theirs = acs.optax_adamw(params, grads_S, optax_s, b1, b2, eps, wd)
    assert numerics.tree_scaled_max_error(ours, theirs) <= acs.OPTAX_AGREEMENT
    lrs = acs.evaluate(optax_s, np.arange(steps))
    assert numerics.scaled_max_error(acs.evaluate(ours_s, np.arange(steps)), lrs) <= 1e-6
    torch_out = references.torch_adamw(params, grads_S, lrs, b1, b2, eps, wd)
    assert numerics.tree_scaled_max_error(ours, torch_out) <= numerics.tolerance("float32")
    moved = numerics.tree_scaled_max_error(jax.tree.map(lambda p: p[-1], ours), params)
    assert moved > 100 * acs.OPTAX_AGREEMENT  # the comparison is not of two unmoved copies


def test_clipping_matches_optax_and_bounds_the_norm():
    _, grads_S = acs.gradient_sequence(jax.random.key(3), 60, 1.0)
    ours, theirs, before, after = acs.clip_sequences(grads_S, 2.0)
    assert numerics.tree_normwise_max_error(ours, theirs) <= numerics.tolerance("float32")
    assert np.all(after <= 2.0 * (1 + 1e-6)) and np.any(before > 2.0)
    np.testing.assert_allclose(after, np.minimum(before, 2.0), rtol=1e-5)


def test_per_step_difference():
    a = {"x": np.zeros((3, 2)), "y": np.ones((3, 1))}
    b = {"x": np.array([[0, 1e-3], [0, 0], [0, 0]]), "y": np.array([[1], [1], [3.0]])}
    np.testing.assert_array_equal(acs.per_step_difference(a, b), [1e-3, 0, 2])


def test_refusals_name_the_problem():
    assert "negative" in acs.problem("constant", 0, 100, -0.1)
    assert "no step to decay" in acs.problem("warmup_cosine", 100, 100, 0.0)
    assert acs.problem("linear", 100, 100, 0.0) is None
