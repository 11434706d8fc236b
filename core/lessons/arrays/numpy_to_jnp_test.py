import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.lessons.arrays import numpy_to_jnp


def python_reference(x_RC: np.ndarray, kind: str) -> np.ndarray:
    """Row by row in plain Python floats (math.fsum): independent of numpy's reductions."""
    out = []
    for row in np.asarray(x_RC, dtype=np.float64).tolist():
        if kind == "softmax":
            top = max(row)
            exps = [math.exp(v - top) for v in row]
            total = math.fsum(exps)
            out.append([e / total for e in exps])
        else:
            mean = math.fsum(row) / len(row)
            var = math.fsum((v - mean) ** 2 for v in row) / len(row)
            out.append([(v - mean) / math.sqrt(var + numpy_to_jnp.STANDARDIZE_EPS) for v in row])
    return np.array(out)


@pytest.mark.parametrize("kind", numpy_to_jnp.NORMALIZATIONS)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (16, 33)])
def test_reference_matches_plain_python(kind, shape):
    x = numpy_to_jnp.example_rows(jax.random.key(0), *shape, offset=3.0)
    np.testing.assert_allclose(
        numpy_to_jnp.normalize_rows_reference(x, kind), python_reference(x, kind), atol=1e-12
    )


@pytest.mark.parametrize("kind", numpy_to_jnp.NORMALIZATIONS)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (16, 33)])
def test_jnp_matches_numpy_float64(kind, shape):
    x = numpy_to_jnp.example_rows(jax.random.key(1), *shape)
    reference = python_reference(x, kind)
    result = numpy_to_jnp.normalize_rows_jnp(jnp.asarray(x), kind)
    assert result.dtype == jnp.float32
    assert numerics.scaled_max_error(result, reference) <= numerics.tolerance("float32")
    same_code_numpy = numpy_to_jnp.normalize_rows(np, x.astype(np.float64), kind)
    assert numerics.scaled_max_error(same_code_numpy, reference) <= numerics.tolerance("float64")


@pytest.mark.parametrize("kind", numpy_to_jnp.NORMALIZATIONS)
def test_x64_context_computes_float64_and_does_not_leak(kind):
    x = numpy_to_jnp.example_rows(jax.random.key(2), 4, 7, offset=100.0)
    result = numpy_to_jnp.normalize_rows_jnp_x64(x, kind)
    assert result.dtype == np.float64
    assert numerics.scaled_max_error(result, python_reference(x, kind)) <= numerics.tolerance(
        "float64"
    )
    # the process-wide default is still float32
    assert jnp.ones(2).dtype == jnp.float32 and not jax.config.jax_enable_x64


def test_jit_equals_eager():
    x = jnp.asarray(numpy_to_jnp.example_rows(jax.random.key(3), 5, 6))
    for kind in numpy_to_jnp.NORMALIZATIONS:
        with jax.disable_jit():
            eager = numpy_to_jnp.normalize_rows_jnp(x, kind)
        np.testing.assert_allclose(
            numpy_to_jnp.normalize_rows_jnp(x, kind), eager, rtol=1e-6, atol=1e-7
        )


def test_normalizations_have_their_defining_properties():
    x = numpy_to_jnp.example_rows(jax.random.key(4), 6, 9, offset=-2.0)
    probabilities = np.asarray(numpy_to_jnp.normalize_rows_jnp(jnp.asarray(x), "softmax"))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)
    assert (probabilities > 0).all()
    standardized = np.asarray(
        numpy_to_jnp.normalize_rows_jnp(jnp.asarray(x), "standardize"), np.float64
    )
    np.testing.assert_allclose(standardized.mean(axis=1), 0.0, atol=1e-6)
    np.testing.assert_allclose(standardized.var(axis=1), 1.0, rtol=1e-4)


@pytest.mark.parametrize("shape", [(2, 3), (5, 8)])
def test_side_by_side_reports_dtypes_and_small_errors(shape):
    x = numpy_to_jnp.example_rows(jax.random.key(5), *shape)
    result = numpy_to_jnp.side_by_side(x, "standardize")
    assert list(result.dtypes.values()) == ["float32", "float64", "float32", "float64"]
    errors = list(result.errors.values())
    float64 = numerics.tolerance("float64")
    assert errors[1] <= float64 and errors[3] <= float64
    assert max(errors) <= numerics.tolerance("float32")
    assert len(result.rows()) == 4


def test_precision_sweep_float32_loses_digits_as_the_offset_grows():
    points = numpy_to_jnp.precision_sweep(jax.random.key(6), 4, 10, "standardize")
    by = {(p["computed with"], p["offset"]): p["error"] for p in points}
    assert by[("jax.numpy float32", 0.0)] < 1e-5
    assert by[("jax.numpy float32", 1e6)] > 1e-3  # float32 spacing at 1e6 is 0.0625
    assert all(by[("jax.numpy x64", o)] < 1e-8 for o in numpy_to_jnp.PRECISION_OFFSETS)
    # softmax subtracts the row max first: float32 stays accurate at any offset
    softmax = numpy_to_jnp.precision_sweep(jax.random.key(6), 4, 10, "softmax")
    assert max(p["error"] for p in softmax) < 1e-5


@pytest.mark.parametrize("at", [(0, 0), (1, 2)])
def test_inplace_assignment_raises_in_jax_and_at_set_matches_numpy(at):
    x = numpy_to_jnp.example_rows(jax.random.key(7), 2, 3)
    demo = numpy_to_jnp.inplace_assignment(x, *at, 9.5)
    assert "immutable" in demo.jax_error and ".at[" in demo.jax_error
    np.testing.assert_array_equal(demo.jax_at_result, demo.numpy_after)
    assert demo.numpy_after[at] == 9.5 and demo.jax_original_unchanged


def test_default_dtypes_and_lost_increment():
    rows = numpy_to_jnp.default_dtypes()
    assert [r["numpy"] for r in rows] == ["float64", "int64", "float64", "float64", "float64"]
    assert [r["jax.numpy"] for r in rows] == ["float32", "int32", "float32", "float32", "float32"]
    assert [r["jax.numpy in enable_x64"] for r in rows] == [r["numpy"] for r in rows]
    assert numpy_to_jnp.lost_increment() == {
        "numpy (float64)": 1.0,
        "jax.numpy (float32)": 0.0,
        "jax.numpy in enable_x64": 1.0,
    }
    assert jnp.zeros(1).dtype == jnp.float32


@pytest.mark.parametrize("size", [8, 64])
def test_dispatch_timing_result_matches_numpy_float64(size):
    timing = numpy_to_jnp.dispatch_timing(jax.random.key(8), size, repeats=2)
    assert timing.jax_result.shape == (size, size)
    assert numerics.scaled_max_error(timing.jax_result, timing.reference) <= numerics.tolerance(
        "float32"
    )
    # no wall-clock claims here (DESIGN.md): only that the measurements are well formed
    assert 0 < timing.jax_return_s <= timing.jax_ready_s and timing.numpy_s > 0
    assert [r["what"] for r in timing.rows()][1].startswith("jax: call returns")


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="kind"):
        numpy_to_jnp.normalize_rows(np, np.ones((2, 2)), "l2")
    with pytest.raises(ValueError, match="kind"):
        numpy_to_jnp.normalize_rows_reference(np.ones((2, 2)), "l2")
    with pytest.raises(ValueError, match="shape"):
        numpy_to_jnp.example_rows(jax.random.key(0), 0, 3)
    with pytest.raises(ValueError, match="size"):
        numpy_to_jnp.dispatch_timing(jax.random.key(0), 0)
