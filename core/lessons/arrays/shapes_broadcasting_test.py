import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.lessons.arrays import shapes_broadcasting

SHAPES = [(), (0,), (1,), (3,), (4,), (1, 3), (3, 1), (2, 3), (2, 1, 3), (4, 2, 1), (5, 1, 1, 3)]


@pytest.mark.parametrize("a,b", list(itertools.product(SHAPES, SHAPES)))
def test_rule_agrees_with_numpy_and_jax(a, b):
    ours = shapes_broadcasting.broadcast(a, b)
    numpy_shape, numpy_message = shapes_broadcasting.numpy_broadcast(a, b)
    jax_shape, jax_message = shapes_broadcasting.jax_broadcast(a, b)
    assert ours.shape == numpy_shape == jax_shape
    assert (ours.reason is None) == (numpy_message == "") == (jax_message == "")
    if ours.shape is not None:  # and the arrays really combine to that shape
        assert (np.zeros(a) + np.zeros(b)).shape == ours.shape


def test_numpy_docs_example_and_axis_story():
    result = shapes_broadcasting.broadcast((8, 1, 6, 1), (7, 1, 5))
    assert result.shape == (8, 7, 6, 5)
    assert [ax["what"] for ax in result.axes] == [
        "b gets a new axis",
        "a stretched",
        "b stretched",
        "a stretched",
    ]
    assert [ax["axis"] for ax in result.axes] == [-4, -3, -2, -1]


@pytest.mark.parametrize(
    "a,b,axis,sizes",
    [((2, 3), (4,), -1, (3, 4)), ((2, 3), (4, 3), -2, (2, 4)), ((5, 2, 3), (4, 5), -1, (3, 5))],
)
def test_failure_reason_names_the_right_most_clashing_axis(a, b, axis, sizes):
    result = shapes_broadcasting.broadcast(a, b)
    assert result.shape is None
    assert f"axis {axis} " in result.reason
    assert f"a has size {sizes[0]}, b has size {sizes[1]}" in result.reason
    assert sum(ax["what"] == "clash" for ax in result.axes) >= 1


@pytest.mark.parametrize(
    "text,shape",
    [
        ("8, 1, 6", (8, 1, 6)),
        ("(8,1,6)", (8, 1, 6)),
        ("8 1", (8, 1)),
        ("", ()),
        ("()", ()),
        ("3,", (3,)),
    ],
)
def test_parse_shape_reads_common_spellings(text, shape):
    assert shapes_broadcasting.parse_shape(text) == shape


@pytest.mark.parametrize(
    "text,match",
    [
        ("3, a", "whole number"),
        ("1,2,3,4,5", "at most"),
        ("65", "above"),
        ("-1, 2", "whole number"),
    ],
)
def test_parse_shape_refuses_with_a_reason(text, match):
    with pytest.raises(ValueError, match=match):
        shapes_broadcasting.parse_shape(text)


def test_lattice_matches_jnp_promote_types_everywhere():
    names = shapes_broadcasting.PROMOTION_DTYPES + shapes_broadcasting.PYTHON_SCALARS
    for a, b in itertools.product(names, names):
        if a in shapes_broadcasting.PYTHON_SCALARS and b in shapes_broadcasting.PYTHON_SCALARS:
            continue
        left, right = (b, a) if a in shapes_broadcasting.PYTHON_SCALARS else (a, b)
        assert shapes_broadcasting.lattice_join(a, b) == shapes_broadcasting.jnp_result(
            left, right
        ), (a, b)
        assert shapes_broadcasting.lattice_join(a, b) == shapes_broadcasting.lattice_join(b, a)


@pytest.mark.parametrize("a", shapes_broadcasting.PROMOTION_DTYPES)
def test_table_dtypes_are_what_arithmetic_really_returns(a):
    for b in shapes_broadcasting.PROMOTION_DTYPES + shapes_broadcasting.PYTHON_SCALARS:
        other = {"python int": 1, "python float": 1.0}.get(b)
        operand = jnp.zeros(2, b) if other is None else other
        assert str((jnp.zeros(2, a) + operand).dtype) == shapes_broadcasting.jnp_result(a, b), (
            a,
            b,
        )
        if "bfloat16" not in (a, b):
            operand = np.zeros(2, b) if other is None else other
            assert str((np.zeros(2, a) + operand).dtype) == shapes_broadcasting.numpy_result(
                a, b
            ), (a, b)


def test_promotion_table_against_numpy_and_known_differences():
    rows = {(r["a"], r["b"]): r for r in shapes_broadcasting.promotion_table()}
    assert len(rows) == 7 * 9
    for (a, b), row in rows.items():
        if "bfloat16" in (a, b):
            assert row["numpy"] == shapes_broadcasting.NUMPY_MISSING and not row["differs"]
        elif b not in shapes_broadcasting.PYTHON_SCALARS:
            assert row["numpy"] == str(np.promote_types(a, b))
    # the documented differences: JAX keeps floats narrow and does not widen to 64 bits
    assert (
        rows[("int32", "float16")]["jax.numpy"] == "float16"
        and rows[("int32", "float16")]["numpy"] == "float64"
    )
    assert rows[("int32", "python float")]["jax.numpy"] == "float32"
    assert rows[("int32", "python float")]["numpy"] == "float64"
    assert (
        rows[("int8", "python int")]["jax.numpy"] == "int8"
        and not rows[("int8", "python int")]["differs"]
    )
    assert rows[("uint8", "int8")]["jax.numpy"] == rows[("uint8", "int8")]["numpy"] == "int16"
    assert rows[("bfloat16", "float16")]["jax.numpy"] == "float32"


@pytest.mark.parametrize("n", [2, 7, 32])
def test_mse_mistake_numbers_match_float64_closed_forms(n):
    prediction, target = shapes_broadcasting.example_regression(jax.random.key(n), n)
    assert prediction.shape == (n,) and target.shape == (n, 1)
    mistake = shapes_broadcasting.mse_mistake(prediction, target)
    assert mistake.intermediate_shape == (n, n)
    # independent references: an explicit N x N loop in float64, and the closed form
    p = np.asarray(prediction, np.float64)
    t = np.asarray(target, np.float64)[:, 0]
    pairwise = np.mean([[(p[j] - t[i]) ** 2 for j in range(n)] for i in range(n)])
    np.testing.assert_allclose(mistake.wrong, pairwise, rtol=1e-5)
    np.testing.assert_allclose(
        shapes_broadcasting.broadcast_mse_closed_form(p, t), pairwise, rtol=1e-12
    )
    np.testing.assert_allclose(mistake.right, np.mean((p - t) ** 2), rtol=1e-5, atol=1e-7)
    if n >= 7:  # with a handful of examples the pairwise mean can land anywhere
        assert mistake.wrong > 5 * mistake.right  # plausible-looking, and badly wrong
    assert "rank_promotion" in mistake.rank_promotion_error
    assert f"({n},)" in mistake.contract_error and f"({n}, 1)" in mistake.contract_error


def test_mse_contract_passes_matching_shapes_and_rank_promotion_is_scoped():
    prediction, target = shapes_broadcasting.example_regression(jax.random.key(0), 5)
    value = shapes_broadcasting.mse(prediction, target[:, 0])
    np.testing.assert_allclose(
        float(value), shapes_broadcasting.mse_reference(prediction, target), rtol=1e-5
    )
    assert (
        shapes_broadcasting.caught_by_rank_promotion(
            shapes_broadcasting.mse, prediction, target[:, 0]
        )
        is None
    )
    # outside the context manager the default ("allow") is back
    assert (jnp.ones(3) - jnp.ones((3, 1))).shape == (3, 3)


@pytest.mark.parametrize("n", [3, 6])
def test_centering_mistake_is_caught_and_the_fix_is_right(n):
    x = shapes_broadcasting.example_square(jax.random.key(n), n)
    assert x.shape == (n, n) and x.dtype == jnp.float32
    # row i is N(i, 1): the same normals as jax.random.normal, shifted by the row number
    noise = np.asarray(jax.random.normal(jax.random.key(n), (n, n)))
    np.testing.assert_allclose(np.asarray(x) - np.arange(n)[:, None], noise, atol=1e-6)
    mistake = shapes_broadcasting.centering_mistake(x)
    assert mistake.intermediate_shape == (n, n)
    assert mistake.wrong > 0.1 and mistake.right < 1e-5
    assert mistake.rank_promotion_error is not None
    reference = np.asarray(x, np.float64) - np.asarray(x, np.float64).mean(axis=1, keepdims=True)
    np.testing.assert_allclose(shapes_broadcasting.center_rows(x), reference, atol=1e-5)


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="unknown type"):
        shapes_broadcasting.lattice_join("int8", "float128")
    with pytest.raises(ValueError, match="n must be"):
        shapes_broadcasting.example_regression(jax.random.key(0), 0)
