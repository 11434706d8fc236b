import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.lessons.math_optimization import chain_rule_jacobians as crj


@pytest.mark.parametrize("inputs, outputs", [(1, 1), (4, 3), (2, 17), (33, 5)])
@pytest.mark.parametrize("seed", [0, 1])
def test_jacobians_and_directional_derivatives_match_finite_differences(inputs, outputs, seed):
    params, x, v, u = crj.problem_data(jax.random.key(seed), inputs, outputs)
    jac_fwd, jac_rev, jv, uj = crj.derivatives(params, x, v, u)
    reference = crj.jacobian_reference(params, x)
    assert jac_fwd.shape == jac_rev.shape == (outputs, inputs)
    assert numerics.scaled_max_error(jac_fwd, reference) <= 1e-5
    assert numerics.scaled_max_error(jac_rev, reference) <= 1e-5
    assert numerics.scaled_max_error(jv, crj.directional_reference(params, x, v)) <= 1e-5
    assert numerics.scaled_max_error(uj, np.asarray(u, np.float64) @ reference) <= 1e-5


def test_the_chain_rule_closed_form():
    params, x, _, _ = crj.problem_data(jax.random.key(3), 5, 4)
    p = {k: np.asarray(a, np.float64) for k, a in params.items()}
    pre = p["w1"] @ np.asarray(x, np.float64) + p["b"]
    closed = p["w2"] @ np.diag(1 - np.tanh(pre) ** 2) @ p["w1"]
    assert np.max(np.abs(crj.jacobian_reference(params, x) - closed)) <= 1e-8


def test_the_reference_sees_a_wrong_jacobian():
    params, x, _, _ = crj.problem_data(jax.random.key(0), 3, 2)
    wrong = jax.jacfwd(lambda y: params["w2"] @ jnp.tanh(params["w1"] @ y))(x)  # no bias
    assert numerics.scaled_max_error(wrong, crj.jacobian_reference(params, x)) > 1e-3


def test_compiled_flops_follow_the_product_count():
    # jacfwd does N products, jacrev M: the compiler's FLOPs cross where N = M.
    rows = crj.cost_sweep(16, sizes=(2, 16, 128), hidden=64, repeats=1)
    flops = {(r["mode"], r["inputs"]): r["flops"] for r in rows}
    assert flops[("jacfwd", 2)] < flops[("jacrev", 2)]
    assert flops[("jacfwd", 128)] > 4 * flops[("jacrev", 128)]
    assert flops[("jacfwd", 16)] == pytest.approx(flops[("jacrev", 16)], rel=0.5)
    assert all(r["median_s"] > 0 and r["compile_s"] > 0 for r in rows)
    assert (
        crj.predicted_products("jacfwd", 7, 3) == 7 and crj.predicted_products("jacrev", 7, 3) == 3
    )
    with pytest.raises(ValueError, match="jacfwd or jacrev"):
        crj.cost("hessian", 2, 2, 4, 1)


def test_f_numpy_is_f():
    params, x, _, _ = crj.problem_data(jax.random.key(1), 6, 2)
    assert numerics.scaled_max_error(crj.f(params, x), crj.f_numpy(params, x)) <= 1e-6
    g = functools.partial(crj.f, params)
    assert jax.jacrev(g)(x).shape == (2, 6)
