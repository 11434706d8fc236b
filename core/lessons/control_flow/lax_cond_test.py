import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.lessons.control_flow import lax_cond

GRIDS = [(-2.0, 3.0, 11), (-5.0, 0.5, 40), (0.01, 4.0, 7), (-1.0, 1.0, 2)]


@pytest.mark.parametrize("x_min, x_max, points", GRIDS)
def test_values_and_gradients_match_closed_forms(x_min, x_max, points):
    xs = lax_cond.grid(x_min, x_max, points)
    for name, evaluation in lax_cond.evaluate(xs).items():
        assert evaluation.value_error <= numerics.tolerance("float32"), name
        if name == "sqrt: where (naive)":
            continue
        assert evaluation.grad_error <= numerics.tolerance("float32"), name


@pytest.mark.parametrize("x_min, x_max, points", GRIDS)
def test_naive_where_gradient_is_nan_exactly_where_x_is_not_positive(x_min, x_max, points):
    xs = lax_cond.grid(x_min, x_max, points)
    naive = lax_cond.evaluate(xs)["sqrt: where (naive)"]
    assert np.array_equal(~np.isfinite(naive.grad), xs <= 0)
    assert naive.nan_grads == int(np.sum(xs <= 0))
    positive = xs > 0
    np.testing.assert_allclose(naive.grad[positive], naive.grad_reference[positive], rtol=1e-5)


def test_closed_forms_by_hand():
    x = np.array([-1.0, 0.0, 0.25, 4.0])
    np.testing.assert_allclose(lax_cond.sqrt_reference(x), [0, 0, 0.5, 2])
    np.testing.assert_allclose(lax_cond.sqrt_derivative_reference(x), [0, 0, 1, 0.25])
    y = np.array([-2.0, -1.0, 0.5, 1.0, 2.0])
    np.testing.assert_allclose(lax_cond.piecewise_reference(y), [np.sin(-2), 1, 0.25, 1, np.e])
    np.testing.assert_allclose(
        lax_cond.piecewise_derivative_reference(y), [np.cos(-2), -2, 1, 1, np.e]
    )
    np.testing.assert_array_equal(lax_cond.piece_index(jnp.array(y)), [0, 1, 1, 2, 2])


@pytest.mark.parametrize("x", [-3.0, -1.0, 0.0, 0.7, 1.0, 2.5])
def test_scalar_grad_through_cond_and_switch(x):
    expected = lax_cond.piecewise_derivative_reference(np.array([x]))[0]
    for fn in (lax_cond.piecewise_cond, lax_cond.piecewise_switch):
        assert float(jax.grad(fn)(jnp.float32(x))) == pytest.approx(expected, rel=1e-5, abs=1e-6)
    expected_sqrt = lax_cond.sqrt_derivative_reference(np.array([x]))[0]
    assert float(jax.grad(lax_cond.sqrt_cond)(jnp.float32(x))) == pytest.approx(
        expected_sqrt, rel=1e-5
    )


def test_elementwise_relative_error_flags_nan_and_scales():
    assert numerics.elementwise_relative_error([1.0, np.nan], [1.0, 1.0]) == float("inf")
    assert numerics.elementwise_relative_error([3.0], [2.0]) == 0.5
    assert numerics.elementwise_relative_error([0.5], [0.0]) == 0.5


@pytest.mark.parametrize("x", [2.0, -0.5])
def test_cond_traces_both_branches_and_runs_one(x):
    log = lax_cond.branch_log("cond", x)
    assert sorted(log.traced) == ["sqrt branch", "zero branch"]
    assert log.ran == (("sqrt branch",) if x > 0 else ("zero branch",))
    assert log.value == pytest.approx(float(lax_cond.sqrt_reference(np.array([x]))[0]))


@pytest.mark.parametrize("x", [2.0, -0.5])
def test_where_runs_both_sides(x):
    log = lax_cond.branch_log("where", x)
    assert sorted(log.traced) == sorted(log.ran) == ["sqrt branch", "zero branch"]


@pytest.mark.parametrize("x, piece", [(-2.0, "sin(x)"), (0.0, "x^2"), (3.0, "exp(x - 1)")])
def test_switch_traces_all_and_runs_the_indexed_piece(x, piece):
    log = lax_cond.branch_log("switch", x)
    assert sorted(log.traced) == sorted(lax_cond.PIECE_NAMES)
    assert log.ran == (piece,)
    assert log.value == pytest.approx(
        float(lax_cond.piecewise_reference(np.array([x]))[0]), rel=1e-6
    )


def test_a_second_call_reuses_the_trace_and_runs_the_new_branch():
    first = lax_cond.branch_log("cond", 2.0, fresh=True)
    assert first.traced_now and first.ran == ("sqrt branch",)
    second = lax_cond.branch_log("cond", -2.0)
    assert not second.traced_now and second.traced == first.traced
    assert second.ran == ("zero branch",) and second.value == 0.0
    assert lax_cond.branch_log("cond", 4.0, fresh=True).traced_now


def test_vmapped_cond_runs_both_branches():
    log = lax_cond.branch_log("vmap(cond)", 1.0)
    assert sorted(log.ran) == ["sqrt branch", "zero branch"]


def test_primitives_cond_vs_vmap_select():
    assert "cond" in lax_cond.primitive_names(lax_cond.sqrt_cond, 1.0)
    batched = lax_cond.primitive_names(jax.vmap(lax_cond.sqrt_cond), jnp.ones(3))
    assert "cond" not in batched and "select_n" in batched
    assert "cond" in lax_cond.primitive_names(lax_cond.piecewise_switch, 1.0)
    assert "cond" not in lax_cond.primitive_names(lax_cond.piecewise_where, 1.0)
    assert "select_n" in lax_cond.primitive_names(lax_cond.sqrt_where_naive, 1.0)
    assert lax_cond.primitive_names(lambda x: jax.jit(jnp.sin)(x) + 1, 1.0) == ["sin", "add"]


def test_segments_follow_the_pieces():
    x = np.array([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0], np.float32)
    np.testing.assert_array_equal(lax_cond.segment("pieces: lax.switch", x), [0, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(lax_cond.segment("sqrt: lax.cond", x), [0, 0, 0, 1, 1, 1])


@pytest.mark.parametrize("x_min, x_max, points", [(-2.0, 3.0, 10), (-1.0, 0.0, 5), (0.5, 1.5, 3)])
def test_grid(x_min, x_max, points):
    xs = lax_cond.grid(x_min, x_max, points)
    assert xs.dtype == np.float32 and xs.shape == (points,)
    assert xs[0] == x_min and xs[-1] == x_max and np.all(np.diff(xs) > 0)
    assert (0.0 in xs) == (x_min <= 0 <= x_max)


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="range is empty"):
        lax_cond.grid(0.0, 0.0, 5)
    with pytest.raises(ValueError, match="construct"):
        lax_cond.branch_log("if", 1.0)
    with pytest.raises(ValueError, match="1-D"):
        lax_cond.evaluate(np.zeros((2, 2)))


def test_python_if_under_jit_is_refused():
    message = lax_cond.python_if_error()
    assert message.startswith("TracerBoolConversionError")
    assert "bool" in message.lower() or "concrete" in message.lower()


def test_padding_to_a_bucket_does_not_change_results():
    xs = lax_cond.grid(-2.0, 3.0, 70)  # pads to 128
    whole, part = lax_cond.evaluate(xs), lax_cond.evaluate(xs[:5])  # pads to 64
    for name in lax_cond.FUNCTIONS:
        assert part[name].value.shape == (5,)
        np.testing.assert_array_equal(part[name].value, whole[name].value[:5])
        np.testing.assert_array_equal(part[name].grad, whole[name].grad[:5])
