import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics

REFERENCE = np.array([[4.0, -0.5], [0.25, 0.0]])
RESULT = np.array([[4.2, -0.5], [0.25, 0.1]])  # errors 0.2 (at |ref| 4) and 0.1 (at ref 0)


def test_each_measure_against_hand_worked_values():
    assert numerics.max_abs_error(RESULT, REFERENCE) == pytest.approx(0.2)
    assert numerics.scaled_max_error(RESULT, REFERENCE) == pytest.approx(0.2 / 4.0)
    # per element: 0.2 / 4 = 0.05 and 0.1 / max(0, 1) = 0.1
    assert numerics.elementwise_relative_error(RESULT, REFERENCE) == pytest.approx(0.1)
    frobenius = np.sqrt(0.2**2 + 0.1**2) / np.sqrt(16 + 0.25 + 0.0625)
    assert numerics.norm_relative_error(RESULT, REFERENCE) == pytest.approx(frobenius)


def test_below_magnitude_one_the_scaled_error_is_absolute():
    assert numerics.scaled_max_error([0.1 + 1e-3], [0.1]) == pytest.approx(1e-3)


@pytest.mark.parametrize(
    "measure",
    [numerics.max_abs_error, numerics.scaled_max_error, numerics.elementwise_relative_error,
     numerics.norm_relative_error],
)
def test_a_non_finite_result_never_passes_and_shapes_must_match(measure):
    assert measure([1.0, np.nan], [1.0, 2.0]) == float("inf")
    assert measure([1.0, np.inf], [1.0, 2.0]) == float("inf")
    assert measure([1.0, np.inf], [1.0, -np.inf]) == float("inf")
    assert measure([1.0, 2.0], [1.0, np.nan]) == float("inf")
    assert measure([1.0, np.inf, np.nan], [1.0, np.inf, np.nan]) == 0.0  # the same values
    with pytest.raises(ValueError, match="shape"):
        measure(np.zeros(3), np.zeros(4))


def test_bfloat16_and_jax_arrays_are_widened_exactly():
    x = jnp.asarray([1.0, 2.5, -3.0], jnp.bfloat16)
    assert numerics.as_float64(x).dtype == np.float64
    assert numerics.max_abs_error(x, [1.0, 2.5, -3.0]) == 0.0
    # bfloat16 rounds 1 + 2**-9 to 1: the error is exactly 2**-9
    assert numerics.max_abs_error(jnp.asarray([1 + 2**-9], jnp.bfloat16), [1 + 2**-9]) == 2**-9


def test_pytrees_report_the_worst_leaf_and_refuse_other_structures():
    reference = {"w": np.ones((2, 2)), "b": np.zeros(2)}
    result = {"w": np.ones((2, 2)) * 1.5, "b": np.full(2, 0.1)}
    assert numerics.tree_scaled_max_error(result, reference) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="structures differ"):
        numerics.tree_scaled_max_error({"w": np.ones(2)}, reference)


def test_tolerance_table_reads_names_and_dtypes():
    assert numerics.tolerance("bfloat16") == numerics.tolerance(jnp.bfloat16) == 2e-2
    assert numerics.tolerance(np.float32) == 1e-5
    with pytest.raises(ValueError, match="no tolerance for dtype 'complex64'"):
        numerics.tolerance("complex64")


def test_the_normwise_tree_error_has_one_scale_and_no_floor():
    reference = {"w": np.full((2, 2), 1e-3), "b": np.array([2e-3, 0.0])}
    result = {"w": np.full((2, 2), 1e-3), "b": np.array([2e-3, 1e-4])}
    # 1e-4 off, against the largest reference magnitude 2e-3 (tree_scaled_max_error: 1e-4)
    assert numerics.tree_normwise_max_error(result, reference) == pytest.approx(0.05)
    assert numerics.tree_scaled_max_error(result, reference) == pytest.approx(1e-4)
    assert numerics.tree_normwise_max_error(reference, reference) == 0.0
    nan = {"w": np.full((2, 2), np.nan), "b": reference["b"]}
    assert numerics.tree_normwise_max_error(nan, reference) == float("inf")
    with pytest.raises(ValueError, match="structures differ"):
        numerics.tree_normwise_max_error({"w": np.ones(2)}, reference)
