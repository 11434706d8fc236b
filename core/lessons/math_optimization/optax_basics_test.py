import jax
import numpy as np
import optax
import pytest

from core import numerics
from core.lessons.math_optimization import optax_basics as ob
from core.nn import chunked


@pytest.mark.parametrize(
    "beta, wd, clip, lr, steps",
    [(0.9, 0.01, 1.0, 0.05, 100), (0.0, 0.0, 100.0, 0.1, 50), (0.5, 0.1, 0.1, 0.2, 200)],
)
def test_composed_equals_optax_trace_chain_and_float64(beta, wd, clip, lr, steps):
    x, y, params = ob.make_data(jax.random.key(3), 64, 5)
    hyper = (lr, beta, wd, clip)
    ours, losses, state = ob.train("composed (lesson momentum)", hyper, params, x, y, steps)
    builtin, _, _ = ob.train(ob.TRACE_CHAIN, hyper, params, x, y, steps)
    assert numerics.tree_scaled_max_error(ours, builtin) <= 1e-6
    reference = ob.reference_training(params, x, y, steps, lr, beta, wd, clip)
    assert numerics.tree_scaled_max_error(ours, reference) <= numerics.tolerance("float32")
    assert losses[-1] < losses[0]


def test_a_different_beta_is_caught():
    x, y, params = ob.make_data(jax.random.key(0), 32, 3)
    ours, _, _ = ob.train("composed (lesson momentum)", (0.05, 0.9, 0.0, 10.0), params, x, y, 50)
    other = ob.reference_training(params, x, y, 50, 0.05, 0.8, 0.0, 10.0)
    assert numerics.tree_scaled_max_error(ours, other) > 100 * numerics.tolerance("float32")


def test_state_is_a_pytree_with_the_momentum_inside():
    x, y, params = ob.make_data(jax.random.key(0), 16, 4)
    _, _, state = ob.train("composed (lesson momentum)", (0.1, 0.9, 0.0, 1.0), params, x, y, 3)
    rows = ob.state_rows(state)
    assert sum(r["values"] for r in rows) == 5  # velocity of w (4) and b (1); the rest empty
    assert any("velocity" in r["leaf"] for r in rows)
    _, _, adam_state = ob.train("adam", (0.1, 0.9, 0.0, 1.0), params, x, y, 3)
    assert sum(r["values"] for r in ob.state_rows(adam_state)) == 2 * 5 + 1  # mu, nu, count


def test_new_steps_and_hyperparameters_compile_nothing():
    # one program per optimizer serves every step count (chunks of 10: the control moves by
    # 10) and every lr, beta, weight decay and clip norm (traced); a jitted closure over a
    # fresh chain compiled on every call. The trained params still meet optax's own chain.
    x, y, params = ob.make_data(jax.random.key(4), 32, 3)
    names = ("composed (lesson momentum)", ob.TRACE_CHAIN, "sgd", "adam")
    for name in names:
        ob.train(name, (0.05, 0.9, 0.01, 1.0), params, x, y, 2 * ob.STEPS_CHUNK)
    with chunked.counting_compiles() as compiled:
        runs = {
            n: ob.train(n, (0.1, 0.5, 0.02, 2.0), params, x, y, 5 * ob.STEPS_CHUNK) for n in names
        }
    assert compiled == []
    tx = optax.chain(
        optax.clip_by_global_norm(2.0),
        optax.trace(0.5),
        optax.add_decayed_weights(0.02),
        optax.scale_by_learning_rate(0.1),
    )
    p, state = params, tx.init(params)
    for _ in range(5 * ob.STEPS_CHUNK):
        updates, state = tx.update(jax.grad(ob.loss)(p, x, y), state, p)
        p = optax.apply_updates(p, updates)
    final = jax.tree.map(lambda leaf: leaf[-1], runs["composed (lesson momentum)"][0])
    assert numerics.tree_scaled_max_error(final, p) <= 1e-6


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
