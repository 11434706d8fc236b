import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.tpu import budget, model

# jit everything: eager execution dispatches (and compiles) op by op, which is slow.
init = jax.jit(model.init_params, static_argnums=(1, 2))
grad = jax.jit(jax.grad(model.loss_fn), static_argnums=(3, 4, 5))
forward = jax.jit(model.forward, static_argnums=(2,))
loss_fn = jax.jit(model.loss_fn, static_argnums=(3,))

SHAPES = [
    budget.TransformerShape(vocab=32, d_model=16, layers=2, heads=4, d_ff=24),
    budget.TransformerShape(
        vocab=40,
        d_model=16,
        layers=1,
        heads=4,
        kv_heads=2,
        d_ff=8,
        mlp="swiglu",
        norm="layer",
        bias=True,
        tied_embeddings=True,
        learned_positions=12,
    ),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_real_parameter_tree_has_the_analytic_count(shape):
    assert model.count_params(model.param_shapes(shape)) == shape.param_count()
    params = init(jax.random.key(0), shape)
    assert model.count_params(params) == shape.param_count()


@pytest.mark.parametrize("shape", SHAPES[1:])  # the shape that uses every feature
def test_remat_changes_nothing_numerically(shape):
    params = init(jax.random.key(1), shape)
    tokens = jax.random.randint(jax.random.key(2), (2, 6), 0, shape.vocab)
    plain = grad(params, tokens, tokens, shape, "float32", False)
    remat = grad(params, tokens, tokens, shape, "float32", True)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(remat), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_attention_is_causal():
    shape = SHAPES[0]
    params = init(jax.random.key(3), shape)
    tokens = jnp.array([[1, 2, 3, 4, 5]])
    changed = tokens.at[0, 4].set(9)
    a = forward(params, tokens, shape)
    b = forward(params, changed, shape)
    np.testing.assert_allclose(
        a[0, :4], b[0, :4], rtol=1e-6
    )  # earlier positions cannot see the change
    assert not np.allclose(a[0, 4], b[0, 4])


def test_initial_loss_is_near_log_vocab():
    shape = SHAPES[0]
    params = init(jax.random.key(4), shape)
    tokens = jax.random.randint(jax.random.key(5), (4, 8), 0, shape.vocab)
    loss = loss_fn(params, tokens, tokens, shape)
    assert abs(float(loss) - np.log(shape.vocab)) < 0.1  # small init: nearly uniform logits


def test_train_step_lowers_the_loss():
    shape = dataclasses.replace(SHAPES[0], layers=1)
    step, optimizer = model.make_train_step(shape, learning_rate=1e-2)
    params = init(jax.random.key(6), shape)
    opt_state = optimizer.init(params)
    tokens = jax.random.randint(jax.random.key(7), (4, 8), 0, shape.vocab)
    step = jax.jit(step)
    losses = []
    for _ in range(5):
        params, opt_state, loss = step(params, opt_state, tokens, tokens)
        losses.append(float(loss))
    assert losses[-1] < losses[0]
