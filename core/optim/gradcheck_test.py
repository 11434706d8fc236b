import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics, runtime
from core.optim import gradcheck


def _sin_sum(x):
    return jnp.sum(jnp.sin(x) * x)


def _sin_sum_grad_np(x):
    return np.cos(x) * x + np.sin(x)


def _logsumexp(x):
    return jax.nn.logsumexp(x)


def _logsumexp_grad_np(x):
    z = np.exp(x - np.max(x))
    return z / z.sum()


def _mlp_loss(params):
    h = jnp.tanh(params["w1"] @ jnp.array([0.3, -1.2, 0.5]) + params["b1"])
    return jnp.sum((params["w2"] @ h - 0.7) ** 2)


def _mlp_loss_np(params):
    h = np.tanh(params["w1"] @ np.array([0.3, -1.2, 0.5]) + params["b1"])
    return np.sum((params["w2"] @ h - 0.7) ** 2)


def _mlp_params(seed):
    rng = np.random.default_rng(seed)
    return {
        "w1": jnp.asarray(rng.standard_normal((4, 3)), jnp.float32),
        "b1": jnp.asarray(rng.standard_normal(4), jnp.float32),
        "w2": jnp.asarray(rng.standard_normal((2, 4)), jnp.float32),
    }


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 2, 3)])
@pytest.mark.parametrize(
    "f, grad_np", [(_sin_sum, _sin_sum_grad_np), (_logsumexp, _logsumexp_grad_np)]
)
def test_correct_gradients_pass_and_the_numeric_gradient_is_the_closed_form(shape, f, grad_np):
    if f is _logsumexp and shape == ():
        shape = (1,)
    x = jnp.asarray(np.random.default_rng(len(shape)).standard_normal(shape), jnp.float32)
    result = gradcheck.check_gradient(f, x)
    assert result.passed, result.summary()
    assert result.worst <= 1e-5 and result.tolerance == 1e-5
    # The float64 finite differences themselves agree with the hand-written gradient.
    exact = grad_np(np.asarray(x, np.float64)).ravel()
    assert np.max(np.abs(result.numeric_N - exact)) <= gradcheck.FD_TOLERANCE * max(
        1.0, np.max(np.abs(exact))
    )
    assert result.error_N.shape == (int(np.prod(shape)),) == (len(result.names),)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_pytree_of_parameters_with_and_without_a_numpy_twin(seed):
    params = _mlp_params(seed)
    by_jax = gradcheck.check_gradient(_mlp_loss, params)
    by_numpy = gradcheck.check_gradient(_mlp_loss, params, reference_f=_mlp_loss_np)
    assert by_jax.passed and by_numpy.passed, (by_jax.summary(), by_numpy.summary())
    assert np.max(np.abs(by_jax.numeric_N - by_numpy.numeric_N)) <= 1e-8 * by_jax.scale
    assert len(by_jax.names) == 12 + 4 + 8
    assert "['w1'][3, 2]" in by_jax.names


@jax.custom_vjp
def _buggy_square_sum(x):
    return jnp.sum(x**2)


def _buggy_fwd(x):
    return _buggy_square_sum(x), x


def _buggy_bwd(x, g):
    grad = 2 * x
    return (g * grad.at[-1].multiply(1.01),)  # the planted bug: the last element is 1% off


_buggy_square_sum.defvjp(_buggy_fwd, _buggy_bwd)


@pytest.mark.parametrize("n", [3, 17, 200])
def test_a_wrong_custom_vjp_is_caught_at_the_wrong_element(n):
    x = jnp.linspace(0.5, 2.0, n, dtype=jnp.float32)
    result = gradcheck.check_gradient(_buggy_square_sum, x)
    assert not result.passed
    assert result.worst_index == n - 1
    assert result.rows(1)[0]["element"] == f"[{n - 1}]"
    assert np.all(result.error_N[:-1] <= 1e-5)


def test_float64_inputs_get_the_finite_difference_tolerance():
    with runtime.enable_float64():
        x = jnp.linspace(-1.0, 1.0, 7, dtype=jnp.float64)
        result = gradcheck.check_gradient(_sin_sum, x)
    assert result.tolerance == gradcheck.FD_TOLERANCE
    assert result.passed and result.worst < 1e-9, result.summary()


def test_float64_inputs_on_a_tpu_host_are_judged_where_they_live(monkeypatch):
    """On a TPU host float64 inputs live on the host's CPU (runtime.enable_float64); their
    tolerance is the CPU's float64 one, not a refusal (a TPU has no float64)."""
    monkeypatch.setattr(runtime, "_default_backend", lambda: "tpu")
    monkeypatch.setattr(numerics, "computed_backend", lambda: "tpu")
    with runtime.enable_float64():
        x = jnp.linspace(-1.0, 1.0, 7, dtype=jnp.float64)
        assert gradcheck.default_tolerance(x) == gradcheck.FD_TOLERANCE


def test_refusals_name_the_problem():
    with pytest.raises(ValueError, match="float inputs"):
        gradcheck.check_gradient(lambda x: jnp.sum(x), jnp.arange(3))
    with pytest.raises(ValueError, match="reference_f"):
        gradcheck.check_gradient(lambda x: jnp.sum(x.astype(jnp.float32) ** 2), jnp.ones(3))
    with pytest.raises(ValueError, match="at least one"):
        gradcheck.check_gradient(lambda x: 0.0, {})
    with pytest.raises(ValueError, match="positive"):
        gradcheck.check_gradient(_sin_sum, jnp.ones(3), step_N=np.zeros(3))


def test_a_nan_gradient_fails():
    result = gradcheck.check_gradient(lambda x: jnp.sum(jnp.sqrt(x)), jnp.array([0.0, 1.0]))
    assert not result.passed and result.worst == np.inf


def test_central_step_balances_truncation_and_rounding():
    h = gradcheck.central_step(np.array([0.0, 1.0, -1e3]))
    assert np.allclose(h, np.cbrt(gradcheck.EPS64) * np.array([1.0, 1.0, 1e3]), rtol=1e-10)
    assert np.all(((np.array([0.0, 1.0, -1e3]) + h) - np.array([0.0, 1.0, -1e3])) == h)
