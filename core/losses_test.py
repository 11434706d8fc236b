import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import losses

SHAPES = [(1, 1, 2), (8, 7, 5), (64, 3, 10)]  # (batch, features, outputs)


@pytest.mark.parametrize("loss", losses.LOSSES)
@pytest.mark.parametrize("batch, features, outputs", SHAPES)
def test_value_and_grad_matches_closed_form_float64(loss, batch, features, outputs):
    params, x, y = losses.example_problem(jax.random.key(batch), loss, batch, features, outputs)
    (value, metrics), grads = losses.value_and_grad(params, x, y, loss)
    ref_value, ref_grads = losses.numpy_value_and_grad(params, x, y, loss)
    tol = losses.tolerance(batch)
    assert abs(float(value) - ref_value) <= tol * max(1.0, abs(ref_value))
    assert losses.max_relative_error(grads, ref_grads) <= tol
    assert jax.tree.structure(grads) == jax.tree.structure(params)


@pytest.mark.parametrize("loss", losses.LOSSES)
@pytest.mark.parametrize("dtype", losses.TORCH_DTYPES)
@pytest.mark.parametrize("batch, features, outputs", SHAPES[1:])
def test_value_and_grad_matches_torch_autograd(loss, dtype, batch, features, outputs):
    params, x, y = losses.example_problem(jax.random.key(7), loss, batch, features, outputs)
    (value, _), grads = losses.value_and_grad(params, x, y, loss)
    torch_value, torch_grads = losses.torch_value_and_grad(params, x, y, loss, dtype)
    tol = losses.tolerance(batch)
    assert abs(float(value) - torch_value) <= tol * max(1.0, abs(torch_value))
    assert losses.max_relative_error(grads, torch_grads) <= tol


def test_torch_and_closed_form_agree_in_float64():
    params, x, y = losses.example_problem(jax.random.key(3), "cross_entropy", 16, 4, 6)
    torch_value, torch_grads = losses.torch_value_and_grad(params, x, y, "cross_entropy")
    ref_value, ref_grads = losses.numpy_value_and_grad(params, x, y, "cross_entropy")
    assert torch_value == pytest.approx(ref_value, rel=1e-12)
    assert losses.max_relative_error(torch_grads, ref_grads) < 1e-12


def test_metrics_match_numpy():
    params, x, y = losses.example_problem(jax.random.key(4), "cross_entropy", 32, 5, 4)
    (_, metrics), _ = losses.value_and_grad(params, x, y, "cross_entropy")
    logits = np.asarray(x, np.float64) @ np.asarray(params["w_DK"], np.float64) + np.asarray(
        params["b_K"]
    )
    assert float(metrics["accuracy"]) == pytest.approx(np.mean(logits.argmax(1) == np.asarray(y)))
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert float(metrics["mean p(true class)"]) == pytest.approx(
        np.mean(probs[np.arange(32), y]), rel=1e-5
    )
    params, x, y = losses.example_problem(jax.random.key(4), "mse", 6, 3, 2)
    (_, metrics), _ = losses.value_and_grad(params, x, y, "mse")
    residual = np.asarray(losses.predict(params, x), np.float64) - np.asarray(y)
    assert float(metrics["mean abs error"]) == pytest.approx(np.abs(residual).mean(), rel=1e-5)
    assert float(metrics["max abs error"]) == pytest.approx(np.abs(residual).max(), rel=1e-5)


def test_cross_entropy_of_uniform_logits_is_log_classes():
    logits = jnp.zeros((3, 7))
    assert float(losses.softmax_cross_entropy(logits, jnp.array([0, 3, 6]))) == pytest.approx(
        np.log(7)
    )
    assert float(losses.mse(jnp.ones((2, 2)), jnp.zeros((2, 2)))) == 1.0


def test_jit_equals_eager():
    params, x, y = losses.example_problem(jax.random.key(5), "mse", 4, 3, 2)
    jitted = losses.value_and_grad(params, x, y, "mse")
    with jax.disable_jit():
        eager = losses.value_and_grad(params, x, y, "mse")
    for a, b in zip(jax.tree.leaves(jitted), jax.tree.leaves(eager), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_grad_without_has_aux_is_refused():
    params, x, y = losses.example_problem(jax.random.key(6), "mse", 2, 2, 2)
    assert "scalar-output" in losses.has_aux_error_message(params, x, y, "mse")


@pytest.mark.parametrize("loss", losses.LOSSES)
def test_stepping_against_the_gradient_follows_the_tangent(loss):
    params, x, y = losses.example_problem(jax.random.key(8), loss, 16, 4, 3)
    rows = losses.loss_along_gradient(params, x, y, loss, [0.0, 1e-3, 0.5])
    actual = {r["t"]: r["loss"] for r in rows if r["curve"].startswith("loss(")}
    tangent = {r["t"]: r["loss"] for r in rows if r["curve"].startswith("tangent")}
    assert actual[0.0] == pytest.approx(tangent[0.0])
    slope_actual = (actual[1e-3] - actual[0.0]) / 1e-3
    slope_tangent = (tangent[1e-3] - tangent[0.0]) / 1e-3
    assert slope_actual < 0 and slope_actual == pytest.approx(slope_tangent, rel=2e-2)
    assert actual[0.5] >= tangent[0.5] - 1e-6  # both losses are convex in the params


def test_bad_inputs_name_the_problem():
    assert "at least 2" in losses.problem("cross_entropy", 1)
    assert losses.problem("mse", 1) is None
    with pytest.raises(ValueError, match="at least 2"):
        losses.example_problem(jax.random.key(0), "cross_entropy", 4, 3, 1)
    with pytest.raises(ValueError, match="loss must be one of"):
        losses.example_problem(jax.random.key(0), "hinge", 4, 3, 2)
    params, x, y = losses.example_problem(jax.random.key(0), "mse", 4, 3, 2)
    with pytest.raises(ValueError, match="torch dtype"):
        losses.torch_value_and_grad(params, x, y, "mse", "bfloat16")
