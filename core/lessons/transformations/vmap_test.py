import itertools

import jax
import numpy as np
import pytest

from core import numerics
from core.lessons.transformations import vmap

SIZES = [(4, 3, 5), (1, 2, 2), (6, 6, 6)]  # (batch, rows, cols); the last makes every axis 6
AXES = [vmap.parse_axis(a) for a in vmap.AXIS_CHOICES]


def _shapes(args):
    return [tuple(a.shape) for a in args]


@pytest.mark.parametrize("name", vmap.NAMES)
@pytest.mark.parametrize("batch, rows, cols", SIZES)
def test_natural_in_axes_equal_the_python_loop(name, batch, rows, cols):
    args = vmap.example_data(jax.random.key(batch), name, batch, rows, cols)
    for out_axes in range(vmap.get(name).output_rank + 1):
        assert vmap.problem(name, _shapes(args), vmap.NATURAL_IN_AXES, out_axes) is None
        result = vmap.batched(name, vmap.NATURAL_IN_AXES, out_axes)(*args)
        reference = vmap.loop_reference(name, args, vmap.NATURAL_IN_AXES, out_axes)
        assert result.shape == reference.shape
        assert numerics.scaled_max_error(result, reference) <= numerics.tolerance("float32")


@pytest.mark.parametrize("name", vmap.NAMES)
@pytest.mark.parametrize("batch, rows, cols", SIZES)
def test_problem_predicts_exactly_when_jax_refuses(name, batch, rows, cols):
    # Every in_axes/out_axes combination the lesson offers: the closed-form prediction and
    # JAX agree on whether it runs, and whenever it runs vmap equals the loop.
    args = vmap.example_data(jax.random.key(0), name, batch, rows, cols)
    runs = 0
    for in_axes in itertools.product(AXES, repeat=3):
        for out_axes in (0, 1):
            predicted = vmap.problem(name, _shapes(args), in_axes, out_axes)
            raised = vmap.jax_error(name, args, in_axes, out_axes)
            assert (predicted is None) == (raised is None), (in_axes, out_axes, predicted, raised)
            if predicted is None:
                runs += 1
                result = vmap.batched(name, in_axes, out_axes)(*args)
                reference = vmap.loop_reference(name, args, in_axes, out_axes)
                assert numerics.scaled_max_error(result, reference) <= numerics.tolerance("float32")
    assert runs >= 1


def test_reasons_name_the_problem():
    shapes = [(4, 3, 5), (4, 5), (3,)]
    assert "maps no argument" in vmap.problem("affine", shapes, (None, None, None), 0)
    assert "only 2 axes" in vmap.problem("affine", shapes, (0, 2, None), 0)
    reason = vmap.problem("affine", shapes, (1, 0, None), 0)
    assert "disagree" in reason and "M axis 1 has 3" in reason and "v axis 0 has 4" in reason
    assert "M (4, 3, 5)" in vmap.problem("affine", shapes, (None, 0, None), 0)
    assert "out_axes=1" in vmap.problem("squared_error", [(4, 5), (4,), (5,)], (0, 0, None), 1)
    assert "y (4,)" in vmap.problem("squared_error", [(4, 5), (4,), (5,)], (0, None, None), 0)


def test_out_axes_moves_the_batch_axis():
    args = vmap.example_data(jax.random.key(1), "affine", 4, 3, 5)
    assert vmap.batched("affine", (0, 0, None), 0)(*args).shape == (4, 3)
    assert vmap.batched("affine", (0, 0, None), 1)(*args).shape == (3, 4)


def test_matching_sizes_hide_a_wrong_axis():
    # With batch == rows, mapping M over axis 1 runs: vmap cannot know it is the wrong axis.
    args = vmap.example_data(jax.random.key(2), "affine", 3, 3, 5)
    assert vmap.problem("affine", _shapes(args), (1, 0, None), 0) is None
    wrong = vmap.batched("affine", (1, 0, None), 0)(*args)
    right = vmap.batched("affine", (0, 0, None), 0)(*args)
    assert not np.allclose(wrong, right)


def test_loop_reference_is_the_definition():
    m = np.arange(24.0).reshape(2, 3, 4)
    v = np.ones((2, 4))
    b = np.zeros(3)
    expected = np.stack([m[0] @ v[0], m[1] @ v[1]])
    np.testing.assert_array_equal(
        vmap.loop_reference("affine", (m, v, b), (0, 0, None), 0), expected
    )
    np.testing.assert_array_equal(
        vmap.loop_reference("affine", (m, v, b), (0, 0, None), 1), expected.T
    )


def test_jit_equals_eager():
    args = vmap.example_data(jax.random.key(3), "squared_error", 5, 2, 3)
    f = vmap.batched("squared_error", (0, 0, None), 0)
    np.testing.assert_allclose(jax.jit(f)(*args), f(*args), rtol=1e-6)


def test_loop_vs_vmap_reports_its_measurements():
    result = vmap.loop_vs_vmap(batch=3, rows=2, cols=2, repeats=2)
    assert set(result) == {
        "batch",
        "rows",
        "cols",
        "repeats",
        "backend",
        "loop_s",
        "vmap_s",
        "speedup",
        "max_abs_difference",
    }
    assert result["loop_s"] > 0 and result["vmap_s"] > 0
    assert result["speedup"] == pytest.approx(result["loop_s"] / result["vmap_s"])
    assert result["max_abs_difference"] <= 1e-5


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="unknown example"):
        vmap.get("softmax")
    with pytest.raises(ValueError, match="an axis is one of"):
        vmap.parse_axis("3")
    with pytest.raises(ValueError, match=">= 1"):
        vmap.example_data(jax.random.key(0), "affine", 0, 2, 2)
    with pytest.raises(ValueError, match="one entry per argument"):
        vmap.problem("affine", [(2, 2, 2), (2, 2)], (0, 0), 0)
    with pytest.raises(ValueError, match="repeats"):
        vmap.loop_vs_vmap(repeats=0)
