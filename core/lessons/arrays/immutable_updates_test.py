import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.lessons.arrays import immutable_updates

CASES = [
    (8, (0, 2, 2, 5, -1, 9)),  # duplicate, negative, out of bounds above
    (5, (4, 4, 4, -6, 0, 7, -1)),  # duplicates at an end, out of bounds on both sides
    (3, (0, 1, 2)),  # plain
    (1, (0, 0, -1, 3)),  # a single element
]


def loop_reference(x, indices, values, op, mode):
    """Element by element in Python floats: an independent spelling of JAX's documented rule."""
    out = [float(v) for v in np.asarray(x)]
    n = len(out)
    combine = {
        "set": lambda old, v: v,
        "add": lambda old, v: old + v,
        "multiply": lambda old, v: old * v,
        "min": min,
        "max": max,
    }[op]
    for i, v in zip(indices, np.asarray(values).tolist(), strict=True):
        p = i + n if i < 0 else i
        if not 0 <= p < n:
            if mode == "clip":
                p = min(max(p, 0), n - 1)
            else:
                continue  # dropped
        out[p] = combine(out[p], v)
    return np.array(out)


@pytest.mark.parametrize("op", immutable_updates.OPS)
@pytest.mark.parametrize("mode", immutable_updates.UPDATE_MODES)
@pytest.mark.parametrize("n,indices", CASES)
def test_at_update_matches_references(op, mode, n, indices):
    x, values = immutable_updates.example_arrays(jax.random.key(n), n, len(indices))
    result = immutable_updates.at_update(x, indices, values, op, mode)
    reference = immutable_updates.update_reference(x, indices, values, op, mode)
    np.testing.assert_array_equal(reference, loop_reference(x, indices, values, op, mode))
    check = immutable_updates.compare_update(result, x, indices, values, op, mode)
    assert check.max_error == 0.0 and check.ambiguous_ok
    if op != "set":
        np.testing.assert_array_equal(np.asarray(result, np.float64), reference)
    assert x.shape == (n,)  # x is untouched: a new array came back


def test_add_accumulates_duplicates_like_np_add_at_and_unlike_fancy_assignment():
    x = jnp.zeros(4)
    values = jnp.array([1.0, 10.0, 100.0])
    idx = (2, 2, 2)
    np.testing.assert_array_equal(
        immutable_updates.at_update(x, idx, values, "add", "default"), [0, 0, 111, 0]
    )
    fancy, statement, error = immutable_updates.numpy_fancy_update(x, idx, values, "add")
    assert statement == "x[idx] += v" and error == ""
    assert fancy[2] == 100.0  # buffered: only one update survives
    np_add_at = np.zeros(4)
    np.add.at(np_add_at, list(idx), [1.0, 10.0, 100.0])
    np.testing.assert_array_equal(
        immutable_updates.update_reference(x, idx, values, "add", "default"), np_add_at
    )


@pytest.mark.parametrize(
    "op,ufunc", [("min", np.minimum), ("max", np.maximum), ("multiply", np.multiply)]
)
def test_min_max_multiply_match_numpy_ufunc_at(op, ufunc):
    x, values = immutable_updates.example_arrays(jax.random.key(7), 6, 12)
    idx = (0, 1, 1, 3, 3, 3, 5, 0, 2, 2, 4, 5)
    expected = np.asarray(x, np.float64).copy()
    ufunc.at(expected, list(idx), np.asarray(values, np.float64))
    np.testing.assert_allclose(
        immutable_updates.at_update(x, idx, values, op, "drop"), expected, rtol=1e-6
    )


def test_set_with_duplicates_writes_one_of_the_candidates():
    x = jnp.zeros(3)
    values = jnp.array([1.0, 2.0, 3.0, 4.0])
    idx = (1, 1, 1, 0)
    result = np.asarray(immutable_updates.at_update(x, idx, values, "set", "default"))
    candidates = immutable_updates.set_candidates(idx, values, 3, "default")
    assert candidates == {1: [1.0, 2.0, 3.0], 0: [4.0]}
    assert result[1] in candidates[1] and result[0] == 4.0 and result[2] == 0.0
    check = immutable_updates.compare_update(result, x, idx, values, "set", "default")
    assert check.ambiguous_positions == (1,) and check.ambiguous_ok
    bad = result.copy()
    bad[1] = 9.0
    assert not immutable_updates.compare_update(bad, x, idx, values, "set", "default").ambiguous_ok


@pytest.mark.parametrize("mode", immutable_updates.GET_MODES)
@pytest.mark.parametrize("n,indices", CASES)
def test_gather_clamps_or_fills(mode, n, indices):
    x, _ = immutable_updates.example_arrays(jax.random.key(n + 1), n, 1)
    result = np.asarray(immutable_updates.gather(x, indices, mode))
    host = np.asarray(x, np.float64)
    expected = []
    for i in indices:
        p = i + n if i < 0 else i
        if 0 <= p < n:
            expected.append(host[p])
        elif mode == "fill":
            expected.append(immutable_updates.GET_FILL_VALUE)
        else:
            expected.append(host[min(max(p, 0), n - 1)])
    np.testing.assert_array_equal(result, expected)
    np.testing.assert_array_equal(immutable_updates.gather_reference(x, indices, mode), expected)


def test_numpy_raises_where_jax_does_not():
    x = np.arange(4.0)
    values, error = immutable_updates.numpy_gather(x, (0, 4))
    assert values is None and "out of bounds" in error
    result, _, error = immutable_updates.numpy_fancy_update(x, (5,), np.ones(1), "set")
    assert result is None and "out of bounds" in error
    np.testing.assert_array_equal(
        immutable_updates.gather(jnp.asarray(x), (0, 4), "default"), [0.0, 3.0]
    )


def test_updates_inside_jit_match_eager():
    x, values = immutable_updates.example_arrays(jax.random.key(3), 5, 4)
    idx = jnp.array([0, 0, 4, 9])
    jitted = jax.jit(lambda x, i, v: x.at[i].add(v))(x, idx, values)
    np.testing.assert_array_equal(
        jitted, immutable_updates.at_update(x, (0, 0, 4, 9), values, "add", "default")
    )


@pytest.mark.parametrize(
    "text,indices",
    [
        ("0, 2, 2, 5, -1, 9", (0, 2, 2, 5, -1, 9)),
        ("[3 -4]", (3, -4)),
        ("7", (7,)),
        ("+1,2", (1, 2)),
    ],
)
def test_parse_indices(text, indices):
    assert immutable_updates.parse_indices(text) == indices


@pytest.mark.parametrize(
    "text,match",
    [
        ("", "at least one"),
        ("1, a", "whole numbers"),
        ("1.5", "whole numbers"),
        ("65", "within"),
        (",".join(["1"] * 33), "at most"),
    ],
)
def test_parse_indices_refuses_with_a_reason(text, match):
    with pytest.raises(ValueError, match=match):
        immutable_updates.parse_indices(text)


def test_bad_inputs_name_the_problem():
    x = jnp.zeros(2)
    with pytest.raises(ValueError, match="op must be"):
        immutable_updates.at_update(x, (0,), jnp.ones(1), "divide_by", "drop")
    with pytest.raises(ValueError, match="update mode"):
        immutable_updates.at_update(x, (0,), jnp.ones(1), "add", "wrap")
    with pytest.raises(ValueError, match="get mode"):
        immutable_updates.gather(x, (0,), "drop")
    with pytest.raises(ValueError, match="n and k"):
        immutable_updates.example_arrays(jax.random.key(0), 0, 1)
    assert immutable_updates.reference_spelling("add") == "np.add.at(x, idx, v)"
