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


# What the TPU v5e chip returned for the stale 2.0 * tanh(x) (2026-12-06, float32) and NumPy
# float64's value on the same x: 1.8e-5 relative apart, a TPU's tanh, not a bug.
CHIP_FLOAT32 = np.array(
    [1.8499928712844849, 1.9315372705459595, -0.8166534304618835, -0.15691432356834412], np.float32
)
CHIP_FLOAT64 = np.array(
    [1.8500158490274619, 1.9315411402693572, -0.8166411001116682, -0.15691154307615032]
)


def test_tanh_tolerance_admits_the_tpu_tanh_and_not_a_bug():
    def close(result, backend):
        rtol, atol, _ = pure_functions.tanh_tolerances(backend)
        return np.allclose(result, CHIP_FLOAT64, rtol=rtol, atol=atol)

    assert pure_functions.tanh_tolerances("cpu")[:2] == (1e-6, 1e-7)  # the CPU's, unchanged
    assert not close(CHIP_FLOAT32, "cpu")  # the chip's tanh fails the CPU's bound...
    rtol, _, why = pure_functions.tanh_tolerances("tpu")
    assert close(CHIP_FLOAT32, "tpu") and "tanh" in why and "TPU" in why  # ...and holds here
    assert close(CHIP_FLOAT32.astype(np.float64) * (1 + 0.2 * rtol), "tpu")
    # planted bugs still fail at the TPU's bound: the new scale (2.5) instead of the stale one,
    # a sign, two elements swapped, a float32 tanh off by 10x the TPU's error
    for wrong in (
        CHIP_FLOAT32 * 1.25,
        -CHIP_FLOAT32,
        CHIP_FLOAT32[[1, 0, 2, 3]],
        CHIP_FLOAT64 * (1 + 10 * rtol),
    ):
        assert not close(wrong, "tpu")
