import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.lessons.math_optimization import gradient_checking as gc
from core.optim import gradcheck

GRID = np.round(np.arange(-2.0, 2.01, 0.25), 2)


@pytest.mark.parametrize("name", gc.NAMES)
def test_the_rule_of_thumb_step_reaches_the_predicted_error(name):
    lo = 0.5 if name == "sqrt(x)" else -2.0  # sqrt's derivatives blow up near 0
    for x0 in GRID[GRID >= lo]:
        rows = gc.sweep(name, float(x0))
        for row in gc.step_summary(name, float(x0), rows):
            assert row["within the factor"], (name, x0, row)


@pytest.mark.parametrize("name", gc.NAMES)
def test_the_error_curve_is_a_u(name):
    x0 = 0.7
    rows = gc.sweep(name, x0)
    for dtype in gc.DTYPES:
        for method in gc.METHODS:
            err = {r["h"]: r["error"] for r in rows if (r["dtype"], r["method"]) == (dtype, method)}
            h_star = gc.rule_of_thumb_step(method, dtype, x0)
            bottom = min(e for h, e in err.items() if h_star / 10 <= h <= h_star * 10)
            tiny = err[min(err)]  # h = 1e-16: rounding dominates
            large = err[max(err)]  # h = 0.1: truncation dominates
            assert tiny > 100 * bottom and large > 10 * bottom, (dtype, method, tiny, bottom)


def test_float64_differences_beat_float32_by_orders_of_magnitude():
    rows = gc.step_summary("tanh(3x)", 0.3, gc.sweep("tanh(3x)", 0.3))
    by = {(r["dtype"], r["method"]): r["error at predicted h"] for r in rows}
    assert by[("float64", "central")] < 1e-9 < 1e-6 < by[("float32", "central")]
    assert by[("float64", "forward")] < 1e-6 < by[("float32", "forward")]


def test_jax_grad_matches_the_closed_forms():
    for name in gc.NAMES:
        for x0 in (0.3, 1.7):
            got = gc.jax_derivative(name, x0)
            assert numerics.scaled_max_error(got, gc.exact_derivative(name, x0)) <= 1e-5


def test_point_problem():
    assert "x > 0" in gc.point_problem("sqrt(x)", 0.0)
    assert gc.point_problem("sqrt(x)", 0.05) is None
    assert gc.point_problem("tanh(3x)", -2.0) is None
    with pytest.raises(ValueError, match="unknown function"):
        gc.get("cos")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("hidden", [1, 16])
def test_the_checker_passes_jax_grad_and_rejects_the_planted_bug(seed, hidden):
    params, x, y = gc.network_data(jax.random.key(seed), hidden)
    backprop = gc.network_gradient_reference(params, x, y)
    good = gradcheck.check_gradient(lambda p: gc.network_loss(p, x, y), params)
    bad = gradcheck.check_gradient(lambda p: gc.network_loss(p, x, y, bug=True), params)
    assert good.passed and not bad.passed, (good.summary(), bad.summary())
    assert numerics.tree_normwise_max_error(good.analytic_N, backprop) <= 1e-5
    assert numerics.tree_normwise_max_error(good.numeric_N, backprop) <= gradcheck.FD_TOLERANCE
    assert numerics.tree_normwise_max_error(bad.analytic_N, backprop) > 1e-3
    # The bug is in the backward pass only: the loss itself is right.
    assert gc.network_loss(params, x, y, bug=True) == gc.network_loss(params, x, y)


def test_buggy_tanh_forward_is_tanh_and_its_gradient_is_wrong():
    z = jnp.linspace(-2.0, 2.0, 9)
    assert np.array_equal(gc.buggy_tanh(z), jnp.tanh(z))
    wrong = jax.vmap(jax.grad(gc.buggy_tanh))(z)
    assert np.allclose(wrong, 1 - np.tanh(np.asarray(z)), atol=1e-6)
