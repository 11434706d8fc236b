import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.lessons.arrays import pure_functions


@pytest.mark.parametrize("n_calls,distinct", [(1, 1), (5, 1), (6, 3), (4, 2)])
def test_python_side_effects_run_once_per_trace(n_calls, distinct):
    demo = pure_functions.side_effects_demo(n_calls, distinct, size=3, seed=0)
    shapes = [c.shape for c in demo.calls]
    assert shapes == pure_functions.call_shapes(n_calls, distinct, 3)
    # independent count: a trace happens the first time each shape is seen
    first_seen = [len(set(shapes[: i + 1])) for i in range(n_calls)]
    assert [c.python_prints for c in demo.calls] == first_seen
    assert demo.traces == demo.compiled == min(n_calls, distinct)
    # jax.debug.print is part of the compiled program: once per call
    assert [c.debug_prints for c in demo.calls] == list(range(1, n_calls + 1))


def test_numpy_randomness_is_frozen_and_jax_randomness_is_fresh():
    demo = pure_functions.side_effects_demo(6, 2, size=2, seed=3)
    by_shape: dict = {}
    for call in demo.calls:
        by_shape.setdefault(call.shape, set()).add(call.numpy_noise)
    assert all(len(values) == 1 for values in by_shape.values())  # one constant per trace
    # the frozen values are the first draws of the seeded numpy generator, one per trace
    first_draws = np.random.default_rng(3).normal(size=2).astype(np.float32)
    np.testing.assert_array_equal(sorted(v.pop() for v in by_shape.values()), sorted(first_draws))
    assert len({c.jax_noise for c in demo.calls}) == 6


def test_printed_text_tells_the_story():
    demo = pure_functions.side_effects_demo(3, 1, size=2, seed=0)
    lines = demo.printed.strip().splitlines()
    assert lines[0].startswith(pure_functions.PYTHON_PRINT) and "(2,)" in lines[0]
    assert sum(line.startswith(pure_functions.DEBUG_PRINT) for line in lines) == 3
    assert "sum(x) = 2.0" in lines[-1]
    assert len(demo.rows()) == 3


@pytest.mark.parametrize("old,new,size", [(2.0, 3.0, 4), (-1.5, 0.5, 9)])
def test_stale_global_keeps_the_old_value_until_retrace(old, new, size):
    x = pure_functions.example_vector(jax.random.key(size), size)
    assert x.shape == (size,) and x.dtype == jnp.float32
    demo = pure_functions.stale_global_demo(x, old, new)
    tol = 1e-6  # float32 tanh and one multiply: a few ulp, well inside the float32 table
    assert (
        numerics.scaled_max_error(demo.first, pure_functions.scaled_tanh_reference(x, old)) <= tol
    )
    assert (
        numerics.scaled_max_error(demo.after_change, pure_functions.scaled_tanh_reference(x, old))
        <= tol
    )
    assert (
        numerics.scaled_max_error(
            demo.eager_after_change, pure_functions.scaled_tanh_reference(x, new)
        )
        <= tol
    )
    assert (
        numerics.scaled_max_error(
            demo.new_shape_after_change, pure_functions.scaled_tanh_reference(x[:-1], new)
        )
        <= tol
    )
    assert (
        numerics.scaled_max_error(demo.pure_old, pure_functions.scaled_tanh_reference(x, old))
        <= tol
    )
    assert (
        numerics.scaled_max_error(demo.pure_new, pure_functions.scaled_tanh_reference(x, new))
        <= tol
    )
    assert demo.impure_traces == 2 and demo.pure_traces == 1


def test_each_demo_starts_untraced():
    x = jnp.arange(3.0)
    first = pure_functions.stale_global_demo(x, 1.0, 2.0)
    second = pure_functions.stale_global_demo(x, 5.0, 6.0)
    np.testing.assert_allclose(
        second.after_change, pure_functions.scaled_tanh_reference(x, 5.0), rtol=1e-6
    )
    assert first.impure_traces == second.impure_traces == 2


def test_pure_function_jit_equals_eager():
    x = jnp.linspace(-2.0, 2.0, 7)
    np.testing.assert_allclose(
        jax.jit(pure_functions.scaled_tanh_pure)(x, 1.5),
        pure_functions.scaled_tanh_pure(x, 1.5),
        rtol=1e-6,
    )


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="n_calls"):
        pure_functions.call_shapes(0, 1, 2)
    with pytest.raises(ValueError, match="length >= 2"):
        pure_functions.stale_global_demo(jnp.ones(1), 1.0, 2.0)
    with pytest.raises(ValueError, match="vector"):
        pure_functions.stale_global_demo(jnp.ones((2, 2)), 1.0, 2.0)
