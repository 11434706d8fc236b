"""stateless_call + Optax in jax.jit against model.fit, and the optimizers' definitions."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from interop.keras_track import custom_loop as loop


def test_per_step_losses_undo_the_running_mean():
    steps = np.array([3.0, 1.0, 2.0, 5.0, 4.0, 0.5])
    running = np.concatenate(
        [np.cumsum(steps[:3]) / np.arange(1, 4), np.cumsum(steps[3:]) / np.arange(1, 4)]
    )
    assert np.allclose(loop.per_step_losses(running, 3), steps)


def _keras_adam_numpy(grads, lr, b1, b2, eps, w):
    # Keras's update_step written out in float64 (keras/src/optimizers/adam.py)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, g in enumerate(grads, start=1):
        m += (g - m) * (1 - b1)
        v += (g * g - v) * (1 - b2)
        w = w - lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (np.sqrt(v) + eps)
    return w


@pytest.mark.parametrize("shape,lr", [((3,), 0.1), ((4, 5), 0.01)])
def test_keras_adam_transform_is_keras_formula(shape, lr):
    import optax

    rng = np.random.default_rng(0)
    grads = [rng.normal(scale=1e-3, size=shape) for _ in range(5)]
    w0 = rng.normal(size=shape)
    opt = loop.keras_adam(lr)
    params = jnp.asarray(w0, jnp.float32)
    state = opt.init(params)
    for g in grads:
        updates, state = opt.update(jnp.asarray(g, jnp.float32), state, params)
        params = optax.apply_updates(params, updates)
    want = _keras_adam_numpy(grads, lr, loop.ADAM_B1, loop.ADAM_B2, loop.KERAS_EPSILON, w0)
    assert numerics.scaled_max_error(params, want) <= numerics.tolerance("float32")


@pytest.mark.parametrize(
    "changes,words",
    [
        ({"examples": 100, "batch": 32}, "do not split"),
        ({"batch": 256}, "larger than"),
        ({"optimizer": "rmsprop"}, "not one of"),
        ({"learning_rate": 0.0}, "not positive"),
    ],
)
def test_problem(changes, words):
    assert words in loop.problem(loop.Request(**changes))


def test_seeded_is_deterministic_and_digits():
    request = loop.Request(seed=3, examples=16)
    x, y, w = loop.seeded(request)
    x2, y2, _ = loop.seeded(request)
    assert x.shape == (16, 64) and y.shape == (16,) and np.array_equal(x, x2)
    assert np.array_equal(y, y2) and 0 <= x.min() and x.max() <= 1
    assert {k: v.shape for k, v in w.items()} == loop.weight_shapes(request)


@pytest.fixture(scope="module")
def adam(tmp_path_factory):
    request = loop.Request(optimizer="adam", learning_rate=0.01, epochs=2, seed=1)
    return loop.run(request, tmp_path_factory.mktemp("loop"))


def test_custom_loop_equals_fit_with_keras_adam(adam):
    tol = numerics.tolerance("float32")
    for path, fitted in adam.fit_weights.items():
        assert numerics.scaled_max_error(adam.loop_weights[path], fitted) <= tol, path
        assert numerics.scaled_max_error(adam.initial[path], fitted) > 100 * tol, "it trained"
    assert numerics.scaled_max_error(adam.loop_losses, adam.fit_losses) <= tol
    assert numerics.scaled_max_error(adam.loop_epoch_losses, adam.fit_epoch_losses) <= tol
    assert len(adam.loop_losses) == adam.request.steps


def test_optax_adam_with_the_same_eps_is_not_keras_adam(adam):
    worst = max(
        numerics.scaled_max_error(adam.optax_adam_weights[p], w)
        for p, w in adam.fit_weights.items()
    )
    assert worst > 100 * numerics.tolerance("float32")
