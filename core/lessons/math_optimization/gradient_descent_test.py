import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.lessons.math_optimization import gradient_descent as gd


@pytest.mark.parametrize("p", [(-1.2, 1.0), (0.3, -0.7), (1.0, 1.0)])
def test_gradient_and_hessian_match_jax_and_differences(p):
    p64 = np.asarray(p)
    jax_grad = np.asarray(jax.grad(gd.rosenbrock)(jnp.asarray(p, jnp.float32)))
    assert numerics.scaled_max_error(jax_grad, gd.gradient_numpy(p64)) <= 1e-5
    h = 1e-6  # central differences of the closed-form gradient, float64
    fd = np.stack(
        [
            (gd.gradient_numpy(p64 + h * e) - gd.gradient_numpy(p64 - h * e)) / (2 * h)
            for e in np.eye(2)
        ],
        axis=1,
    )
    assert numerics.scaled_max_error(gd.hessian_numpy(p64), fd) <= 1e-6
    assert gd.rosenbrock_numpy(*gd.MINIMUM) == 0.0


@pytest.mark.parametrize(
    "start, lr, beta, steps",
    [
        ((-1.2, 1.0), 1e-3, 0.9, 500),
        ((-1.5, 2.0), 9e-4, 0.0, 1000),
        ((0.0, -0.5), 2e-3, 0.5, 2000),
        ((1.5, 1.0), 1e-3, 0.9, 300),
        ((-0.42, 2.97), 8.4e-4, 0.95, 2000),  # momentum amplifies rounding to ~1e-3 here
    ],
)
def test_three_loops_agree_and_every_step_is_the_float64_update(start, lr, beta, steps):
    p, v = (np.asarray(a) for a in gd.scan_states(jnp.asarray(start), lr, beta, steps))
    assert p.shape == v.shape == (steps + 1, 2)
    assert gd.problem(lr, beta) is None and gd.path_problem(p) is None
    p_ref, v_ref = gd.one_step_reference(p, v, lr, beta)
    assert numerics.scaled_max_error(p[1:], p_ref) <= numerics.tolerance("float32")
    assert numerics.scaled_max_error(v[1:], v_ref) <= numerics.tolerance("float32")
    k = gd.PYTHON_STEPS
    assert numerics.scaled_max_error(gd.python_loop(start, lr, beta, k), p[: k + 1]) <= 1e-5
    jit = gd.jit_loop(start, lr, beta, gd.JIT_STEPS)
    assert numerics.scaled_max_error(jit, p[: gd.JIT_STEPS + 1]) <= 1e-5
    # and the full float64 run agrees early on (before momentum amplifies the rounding)
    assert numerics.scaled_max_error(p[:21], gd.reference(start, lr, beta, 20)) <= 1e-5


def test_a_wrong_update_is_caught():
    p, v = (np.asarray(a) for a in gd.scan_states(jnp.asarray((-1.2, 1.0)), 1e-3, 0.9, 50))
    p_ref, _ = gd.one_step_reference(p, v, 1e-3, 0.8)  # another beta
    assert numerics.scaled_max_error(p[1:], p_ref) > 10 * numerics.tolerance("float32")


def test_momentum_ends_closer_from_every_claimed_start():
    assert gd.momentum_claim_problems(1e-3, 0.9, 500) == []


def test_but_not_from_everywhere():
    assert gd.momentum_claim_problems(1e-3, 0.9, 500, starts=[gd.COUNTER_START]) != []


def test_past_the_limit_at_the_minimum_never_settles_and_is_refused():
    for beta in (0.0, 0.9):
        limit = gd.stability_limit(gd.MINIMUM, beta)
        assert "stability limit" in gd.problem(1.02 * limit, beta)
        assert gd.problem(0.98 * limit, beta) is None
        off = gd.reference((-1.2, 1.0), 1.02 * limit, beta, 20000)
        assert gd.diverged(off) or np.abs(off[-1000:] - gd.MINIMUM).max() > 1e-3
    settles = gd.reference((-1.2, 1.0), 0.98 * gd.stability_limit(gd.MINIMUM, 0.0), 0.0, 20000)
    assert np.abs(settles[-1] - gd.MINIMUM).max() < 1e-3
    assert "never moves" in gd.problem(0.0, 0.9)


def test_an_escape_is_found():
    path = gd.reference((-2.0, -1.0), 0.02, 0.9, 50)
    assert gd.diverged(path) and "diverged" in gd.path_problem(path)


def test_landscape_grid():
    rows = gd.landscape(n=10)
    assert len(rows) == 100 and min(r["log10(1 + f)"] for r in rows) >= 0
