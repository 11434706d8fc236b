import jax
import numpy as np
import optax
import pytest

from core import numerics
from core.lessons.math_optimization import optax_basics as ob


@pytest.mark.parametrize(
    "beta, wd, clip, lr, steps",
    [(0.9, 0.01, 1.0, 0.05, 100), (0.0, 0.0, 100.0, 0.1, 50), (0.5, 0.1, 0.1, 0.2, 200)],
)
def test_composed_equals_optax_trace_chain_and_float64(beta, wd, clip, lr, steps):
    x, y, params = ob.make_data(jax.random.key(3), 64, 5)
    ours, losses, state = ob.train(ob.composed(lr, beta, wd, clip), params, x, y, steps)
    builtin, _, _ = ob.train(
        ob.composed(lr, beta, wd, clip, optax.trace(beta)), params, x, y, steps
    )
    assert numerics.tree_scaled_max_error(ours, builtin) <= 1e-6
    reference = ob.reference_training(params, x, y, steps, lr, beta, wd, clip)
    assert numerics.tree_scaled_max_error(ours, reference) <= numerics.tolerance("float32")
    assert losses[-1] < losses[0]


def test_a_different_beta_is_caught():
    x, y, params = ob.make_data(jax.random.key(0), 32, 3)
    ours, _, _ = ob.train(ob.composed(0.05, 0.9, 0.0, 10.0), params, x, y, 50)
    other = ob.reference_training(params, x, y, 50, 0.05, 0.8, 0.0, 10.0)
    assert numerics.tree_scaled_max_error(ours, other) > 100 * numerics.tolerance("float32")


def test_state_is_a_pytree_with_the_momentum_inside():
    x, y, params = ob.make_data(jax.random.key(0), 16, 4)
    _, _, state = ob.train(ob.composed(0.1, 0.9, 0.0, 1.0), params, x, y, 3)
    rows = ob.state_rows(state)
    assert sum(r["values"] for r in rows) == 5  # velocity of w (4) and b (1); the rest empty
    assert any("velocity" in r["leaf"] for r in rows)
    _, _, adam_state = ob.train(optax.adam(0.1), params, x, y, 3)
    assert sum(r["values"] for r in ob.state_rows(adam_state)) == 2 * 5 + 1  # mu, nu, count


def test_refusals_and_validation():
    assert "climbs" in ob.problem(-0.1, 1.0)
    assert "nothing" in ob.problem(0.1, 0.0)
    assert ob.problem(0.1, 1.0) is None
    with pytest.raises(ValueError):
        ob.lesson_momentum(1.0)
    assert np.isfinite(
        float(
            ob.loss(
                ob.make_data(jax.random.key(1), 8, 2)[2], *ob.make_data(jax.random.key(1), 8, 2)[:2]
            )
        )
    )
