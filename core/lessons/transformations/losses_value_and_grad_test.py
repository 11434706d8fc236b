import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from core import numerics
from core.lessons.transformations import losses_value_and_grad, losses_value_and_grad_torch

SHAPES = [(1, 1, 2), (8, 7, 5), (64, 3, 10)]  # (batch, features, outputs)


@pytest.mark.parametrize("loss", losses_value_and_grad.LOSSES)
@pytest.mark.parametrize("batch, features, outputs", SHAPES)
def test_value_and_grad_matches_closed_form_float64(loss, batch, features, outputs):
    params, x, y = losses_value_and_grad.example_problem(
        jax.random.key(batch), loss, batch, features, outputs
    )
    (value, metrics), grads = losses_value_and_grad.value_and_grad(params, x, y, loss)
    ref_value, ref_grads = losses_value_and_grad.numpy_value_and_grad(params, x, y, loss)
    tol = numerics.tolerance("float32")
    assert numerics.scaled_max_error(float(value), ref_value) <= tol
    assert numerics.tree_scaled_max_error(grads, ref_grads) <= tol
    assert jax.tree.structure(grads) == jax.tree.structure(params)


@pytest.mark.parametrize("loss", losses_value_and_grad.LOSSES)
@pytest.mark.parametrize("dtype", losses_value_and_grad.TORCH_DTYPES)
@pytest.mark.parametrize("batch, features, outputs", SHAPES[1:])
def test_value_and_grad_matches_torch_autograd(loss, dtype, batch, features, outputs):
    params, x, y = losses_value_and_grad.example_problem(
        jax.random.key(7), loss, batch, features, outputs
    )
    (value, _), grads = losses_value_and_grad.value_and_grad(params, x, y, loss)
    torch_value, torch_grads = losses_value_and_grad_torch.torch_value_and_grad(
        params, x, y, loss, dtype
    )
    tol = numerics.tolerance("float32")
    assert numerics.scaled_max_error(float(value), torch_value) <= tol
    assert numerics.tree_scaled_max_error(grads, torch_grads) <= tol


def test_torch_and_closed_form_agree_in_float64():
    params, x, y = losses_value_and_grad.example_problem(
        jax.random.key(3), "cross_entropy", 16, 4, 6
    )
    torch_value, torch_grads = losses_value_and_grad_torch.torch_value_and_grad(
        params, x, y, "cross_entropy"
    )
    ref_value, ref_grads = losses_value_and_grad.numpy_value_and_grad(params, x, y, "cross_entropy")
    assert torch_value == pytest.approx(ref_value, rel=1e-12)
    assert numerics.tree_scaled_max_error(torch_grads, ref_grads) < 1e-12


def test_metrics_match_numpy():
    params, x, y = losses_value_and_grad.example_problem(
        jax.random.key(4), "cross_entropy", 32, 5, 4
    )
    (_, metrics), _ = losses_value_and_grad.value_and_grad(params, x, y, "cross_entropy")
    logits = np.asarray(x, np.float64) @ np.asarray(params["w_DK"], np.float64) + np.asarray(
        params["b_K"]
    )
    assert float(metrics["accuracy"]) == pytest.approx(np.mean(logits.argmax(1) == np.asarray(y)))
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert float(metrics["mean p(true class)"]) == pytest.approx(
        np.mean(probs[np.arange(32), y]), rel=1e-5
    )
    params, x, y = losses_value_and_grad.example_problem(jax.random.key(4), "mse", 6, 3, 2)
    (_, metrics), _ = losses_value_and_grad.value_and_grad(params, x, y, "mse")
    residual = np.asarray(losses_value_and_grad.predict(params, x), np.float64) - np.asarray(y)
    assert float(metrics["mean abs error"]) == pytest.approx(np.abs(residual).mean(), rel=1e-5)
    assert float(metrics["max abs error"]) == pytest.approx(np.abs(residual).max(), rel=1e-5)


def test_cross_entropy_of_uniform_logits_is_log_classes():
    logits = jnp.zeros((3, 7))
    assert float(
        losses_value_and_grad.softmax_cross_entropy(logits, jnp.array([0, 3, 6]))
    ) == pytest.approx(np.log(7))
    assert float(losses_value_and_grad.mse(jnp.ones((2, 2)), jnp.zeros((2, 2)))) == 1.0


def test_jit_equals_eager():
    params, x, y = losses_value_and_grad.example_problem(jax.random.key(5), "mse", 4, 3, 2)
    jitted = losses_value_and_grad.value_and_grad(params, x, y, "mse")
    with jax.disable_jit():
        eager = losses_value_and_grad.value_and_grad(params, x, y, "mse")
    for a, b in zip(jax.tree.leaves(jitted), jax.tree.leaves(eager), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_grad_without_has_aux_is_refused():
    params, x, y = losses_value_and_grad.example_problem(jax.random.key(6), "mse", 2, 2, 2)
    assert "scalar-output" in losses_value_and_grad.has_aux_error_message(params, x, y, "mse")


@pytest.mark.parametrize("loss", losses_value_and_grad.LOSSES)
def test_stepping_against_the_gradient_follows_the_tangent(loss):
    params, x, y = losses_value_and_grad.example_problem(jax.random.key(8), loss, 16, 4, 3)
    rows = losses_value_and_grad.loss_along_gradient(params, x, y, loss, [0.0, 1e-3, 0.5])
    actual = {r["t"]: r["loss"] for r in rows if r["curve"].startswith("loss(")}
    tangent = {r["t"]: r["loss"] for r in rows if r["curve"].startswith("tangent")}
    assert actual[0.0] == pytest.approx(tangent[0.0])
    slope_actual = (actual[1e-3] - actual[0.0]) / 1e-3
    slope_tangent = (tangent[1e-3] - tangent[0.0]) / 1e-3
    assert slope_actual < 0 and slope_actual == pytest.approx(slope_tangent, rel=2e-2)
    assert actual[0.5] >= tangent[0.5] - 1e-6  # both losses are convex in the params


def test_bad_inputs_name_the_problem():
    assert "at least 2" in losses_value_and_grad.problem("cross_entropy", 1)
    assert losses_value_and_grad.problem("mse", 1) is None
    with pytest.raises(ValueError, match="at least 2"):
        losses_value_and_grad.example_problem(jax.random.key(0), "cross_entropy", 4, 3, 1)
    with pytest.raises(ValueError, match="loss must be one of"):
        losses_value_and_grad.example_problem(jax.random.key(0), "hinge", 4, 3, 2)
    params, x, y = losses_value_and_grad.example_problem(jax.random.key(0), "mse", 4, 3, 2)
    with pytest.raises(ValueError, match="torch dtype"):
        losses_value_and_grad_torch.torch_value_and_grad(params, x, y, "mse", "bfloat16")


@pytest.mark.parametrize("loss, outputs", [("mse", 3), ("cross_entropy", 4)])
def test_smoothness_bounds_the_hessian(loss, outputs):
    # the largest eigenvalue of the exact Hessian (jax.hessian over the flattened params)
    # equals the bound for mse and stays below it for cross-entropy
    params, x, y = losses_value_and_grad.example_problem(jax.random.key(3), loss, 10, 5, outputs)
    flat, unravel = ravel_pytree(params)
    hessian = jax.jit(
        jax.hessian(lambda f: losses_value_and_grad.loss_and_metrics(unravel(f), x, y, loss)[0])
    )(flat)
    top = float(np.max(np.linalg.eigvalsh(np.asarray(hessian, np.float64))))
    bound = losses_value_and_grad.smoothness(x, loss, outputs)
    if loss == "mse":
        assert top == pytest.approx(bound, rel=1e-4)
    else:
        assert 0 < top <= bound * (1 + 1e-5)
    with pytest.raises(ValueError, match="at least 2"):
        losses_value_and_grad.smoothness(np.ones((2, 2)), "cross_entropy", 1)


# (loss, batch, features, outputs): the lesson's defaults and the sharpest corners
DESCENT_GRID = [
    ("mse", 16, 6, 4),
    ("mse", 1, 64, 1),
    ("mse", 512, 1, 32),
    ("cross_entropy", 16, 6, 4),
    ("cross_entropy", 1, 64, 2),
    ("cross_entropy", 512, 64, 32),
]


def test_a_fixed_step_of_0_1_raises_a_sharp_loss():
    # The lesson once asserted loss(params - 0.1 grad) < loss(params) at any controls: one
    # example with 64 features has curvature ~130, and t = 0.1 overshoots.
    params, x, y = losses_value_and_grad.example_problem(jax.random.key(0), "mse", 1, 64, 1)
    assert losses_value_and_grad.smoothness(x, "mse", 1) > 2 / 0.1
    rows = losses_value_and_grad.loss_along_gradient(params, x, y, "mse", [0.0, 0.1])
    before, after = (r["loss"] for r in rows if r["curve"].startswith("loss("))
    assert after > before
    assert losses_value_and_grad.descent_at_safe_step(params, x, y, "mse").decrease > 0


def test_the_safe_step_lowers_the_loss_by_its_guarantee_everywhere():
    # The claim of apps/losses_value_and_grad.py at any controls: a step of 1 / smoothness
    # against the gradient lowers the loss by at least t |g|^2 / 2 (the descent lemma; the
    # app asserts half of it). Over both losses, the default shape and sharp corners, 5 seeds.
    worst = (np.inf, None)
    for loss, batch, features, outputs in DESCENT_GRID:
        for seed in range(5):
            params, x, y = losses_value_and_grad.example_problem(
                jax.random.key(seed), loss, batch, features, outputs
            )
            descent = losses_value_and_grad.descent_at_safe_step(params, x, y, loss)
            assert descent.guaranteed > 0
            worst = min(worst, (descent.ratio, (loss, batch, features, outputs, seed)))
    print(
        f"decrease / guaranteed at the safe step, worst over {5 * len(DESCENT_GRID)}: "
        f"{worst[0]:.6f} at {worst[1]} (the app asserts >= 0.5)"
    )
    assert worst[0] >= 0.99  # exact arithmetic: >= 1 (mse with one example: = 1)
