import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.lessons.control_flow import pytrees

SETTINGS = [  # inputs, width, depth, outputs, taper
    (1, 1, 1, 1, "constant"),
    (4, 16, 3, 2, "constant"),
    (7, 32, 4, 3, "halving"),
    (3, 5, 2, 9, "halving"),
]


@pytest.mark.parametrize("inputs, width, depth, outputs, taper", SETTINGS)
def test_layer_widths_by_hand(inputs, width, depth, outputs, taper):
    widths = pytrees.layer_widths(inputs, width, depth, outputs, taper)
    assert len(widths) == depth + 1 and widths[0] == inputs and widths[-1] == outputs
    expected_hidden = [width // 2**i if taper == "halving" else width for i in range(depth - 1)]
    assert list(widths[1:-1]) == expected_hidden


@pytest.mark.parametrize("inputs, width, depth, outputs, taper", SETTINGS)
@pytest.mark.parametrize("dtype", pytrees.DTYPES)
def test_count_and_bytes_match_the_closed_form(inputs, width, depth, outputs, taper, dtype):
    widths = pytrees.layer_widths(inputs, width, depth, outputs, taper)
    params = pytrees.init_mlp(jax.random.key(0), widths, dtype)
    infos = pytrees.leaf_infos(params)
    # closed form written out again here: weights in*out, biases out
    count = sum(widths[k] * widths[k + 1] + widths[k + 1] for k in range(depth))
    assert pytrees.param_count_closed_form(widths) == count
    assert sum(i.size for i in infos) == count
    assert (
        sum(i.nbytes for i in infos)
        == pytrees.param_bytes_closed_form(widths, dtype)
        == count * np.dtype(jnp.dtype(dtype)).itemsize
    )
    assert {i.dtype for i in infos} == {dtype}
    assert len(infos) == 2 * depth


def test_leaf_paths_and_shapes():
    params = pytrees.init_mlp(jax.random.key(1), (3, 4, 2))
    infos = pytrees.leaf_infos(params)
    assert [i.path for i in infos] == [
        "['layers'][0].w",
        "['layers'][0].b",
        "['layers'][1].w",
        "['layers'][1].b",
    ]
    assert [i.shape for i in infos] == [(3, 4), (4,), (4, 2), (2,)]


def test_activation_is_metadata_not_a_leaf():
    params = pytrees.init_mlp(jax.random.key(1), (3, 4, 2))
    assert [layer.activation for layer in params["layers"]] == ["tanh", "identity"]
    treedef = jax.tree_util.tree_structure(params)
    assert "tanh" in str(treedef) and "identity" in str(treedef)
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(params))


@pytest.mark.parametrize("widths", [(2, 3), (5, 8, 8, 1), (4, 16, 8, 2)])
def test_unregistered_dataclass_is_one_opaque_leaf(widths):
    registered, plain = pytrees.opaque_leaf_count(widths)
    assert registered == 2 * (len(widths) - 1)
    assert plain == len(widths) - 1


@pytest.mark.parametrize("widths", [(2, 3), (5, 8, 8, 1)])
@pytest.mark.parametrize("dtype", pytrees.DTYPES)
def test_flatten_unflatten_round_trip(widths, dtype):
    params = pytrees.init_mlp(jax.random.key(2), widths, dtype)
    leaves, treedef, rebuilt = pytrees.round_trip(params)
    assert len(leaves) == treedef.num_leaves == 2 * (len(widths) - 1)
    assert isinstance(rebuilt["layers"][0], pytrees.Dense)
    assert pytrees.trees_equal(params, rebuilt)
    changed = jax.tree_util.tree_unflatten(treedef, [leaf + 1 for leaf in leaves])
    assert not pytrees.trees_equal(params, changed)


def test_trees_equal_sees_structure_and_metadata():
    a = pytrees.Dense(jnp.ones((2, 2)), jnp.zeros(2), "tanh")
    assert pytrees.trees_equal(a, pytrees.Dense(jnp.ones((2, 2)), jnp.zeros(2), "tanh"))
    assert not pytrees.trees_equal(a, pytrees.Dense(jnp.ones((2, 2)), jnp.zeros(2), "identity"))
    assert not pytrees.trees_equal([a], (a,))


@pytest.mark.parametrize(
    "widths, batch", [((3, 4, 2), 1), ((5, 16, 8, 3), 7), ((64, 256, 256, 256, 8), 32)]
)
@pytest.mark.parametrize("dtype", pytrees.DTYPES)
def test_forward_matches_numpy_float64(widths, batch, dtype):
    params = pytrees.init_mlp(jax.random.key(3), widths, dtype)
    x = jax.random.normal(jax.random.key(4), (batch, widths[0]))
    result = pytrees.mlp_apply(params, x)
    assert result.shape == (batch, widths[-1]) and result.dtype == jnp.dtype(dtype)
    reference = pytrees.mlp_reference(params, np.asarray(x))
    assert numerics.scaled_max_error(result, reference) <= pytrees.forward_tolerance(widths, dtype)


def test_scaled_error_and_forward_tolerance_by_hand():
    assert numerics.scaled_max_error(np.array([1.0, 2.5]), np.array([1.0, 2.0])) == 0.25
    assert numerics.scaled_max_error(np.array([0.5]), np.array([0.25])) == 0.25  # scale floor of 1
    assert pytrees.forward_tolerance((3, 4, 5, 2), "bfloat16") == 3 * numerics.tolerance("bfloat16")


@pytest.mark.parametrize("widths", [(3, 4, 2), (2, 6, 6, 1)])
def test_sgd_step_is_a_leafwise_update(widths):
    params = pytrees.init_mlp(jax.random.key(5), widths)
    x = jax.random.normal(jax.random.key(6), (8, widths[0]))
    y = jax.random.normal(jax.random.key(7), (8, widths[-1]))
    grads = jax.grad(pytrees.mse_loss)(params, x, y)
    assert jax.tree_util.tree_structure(grads) == jax.tree_util.tree_structure(params)
    updated = pytrees.sgd_step(params, grads, 0.1)
    for p, g, u in zip(
        jax.tree.leaves(params), jax.tree.leaves(grads), jax.tree.leaves(updated), strict=True
    ):
        np.testing.assert_allclose(
            np.asarray(u),
            np.asarray(p, np.float64) - 0.1 * np.asarray(g, np.float64),
            rtol=1e-6,
            atol=1e-7,
        )
    assert pytrees.mse_loss(updated, x, y) < pytrees.mse_loss(params, x, y)


@pytest.mark.parametrize("widths, dtype", [((3, 4, 2), "float32"), ((2, 6, 6, 1), "bfloat16")])
def test_tree_map_demo_matches_a_leafwise_numpy_step(widths, dtype):
    params = pytrees.init_mlp(jax.random.key(8), widths, dtype)
    x, y = pytrees.example_batch(jax.random.key(9), widths[0], widths[-1], 5)
    assert x.shape == (5, widths[0]) and y.shape == (5, widths[-1])
    demo = pytrees.tree_map_demo(params, x, y, 0.05)
    assert jax.tree_util.tree_structure(demo.grads) == jax.tree_util.tree_structure(params)
    grads = jax.tree.leaves(demo.grads)
    unit_roundoff = {"float32": 2.0**-24, "bfloat16": 2.0**-8}[dtype]
    for p, g, u in zip(jax.tree.leaves(params), grads, jax.tree.leaves(demo.updated), strict=True):
        p64, step64 = np.asarray(p, np.float64), 0.05 * np.asarray(g, np.float64)
        # p - lr*g in the leaf's dtype: a few roundings, each relative to |p| + |lr*g|
        # (not to the result, which can cancel to near zero)
        error = np.abs(np.asarray(u, np.float64) - (p64 - step64))
        assert np.all(error <= 4 * unit_roundoff * (np.abs(p64) + np.abs(step64)) + 1e-12)
    norm = np.sqrt(sum(np.sum(np.asarray(g, np.float64) ** 2) for g in grads))
    assert demo.grad_norm == pytest.approx(norm, rel=1e-5)
    assert demo.loss_before == pytest.approx(float(pytrees.mse_loss(params, x, y)), rel=1e-6)
    assert demo.loss_after < demo.loss_before


def test_outline_names_every_node_and_leaf():
    params = pytrees.init_mlp(jax.random.key(0), (3, 4, 2), "bfloat16")
    outline = pytrees.tree_outline(params)
    assert outline.splitlines()[0] == "params: dict (1 keys)"
    assert "['layers']: list (2 items)" in outline
    assert "[1]: Dense(activation='identity')" in outline
    assert ".w: bfloat16[3, 4]  24 B" in outline and ".b: bfloat16[2]  4 B" in outline
    assert len(outline.splitlines()) == 1 + 1 + 2 + 4


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="reaches 0 units"):
        pytrees.layer_widths(4, 4, 5, 2, "halving")
    with pytest.raises(ValueError, match="taper"):
        pytrees.layer_widths(4, 4, 2, 2, "doubling")
    with pytest.raises(ValueError, match=">= 1"):
        pytrees.layer_widths(0, 4, 2, 2)
    with pytest.raises(ValueError, match="dtype"):
        pytrees.init_mlp(jax.random.key(0), (2, 2), "int8")


def test_unregistered_grad_error_names_the_type():
    message = pytrees.unregistered_grad_error()
    assert message.startswith("TypeError: Argument '...' of type")
    assert "PlainDense" in message and "not a valid JAX type" in message


@pytest.mark.parametrize(
    "dtype, other", [("float32", "bfloat16"), ("bfloat16", "float32"), ("float16", "float32")]
)
def test_other_dtype_halves_or_doubles_the_bytes(dtype, other):
    assert pytrees.other_dtype(dtype) == other
    params = pytrees.init_mlp(jax.random.key(0), (3, 5, 2), dtype)
    cast = pytrees.cast(other, params)
    assert jax.tree_util.tree_structure(cast) == jax.tree_util.tree_structure(params)
    ratio = pytrees.ITEMSIZE[other] / pytrees.ITEMSIZE[dtype]
    assert sum(i.nbytes for i in pytrees.leaf_infos(cast)) == ratio * sum(
        i.nbytes for i in pytrees.leaf_infos(params)
    )


def test_treedef_text_puts_one_layer_per_line():
    params = pytrees.init_mlp(jax.random.key(0), (2, 3, 3, 1))
    text = pytrees.treedef_text(jax.tree_util.tree_structure(params))
    assert text.count("\n") == 3 and text.count("CustomNode(Dense") == 3
    undone = text.replace("[\n    ", "[").replace(",\n    ", ", ")
    assert undone == str(jax.tree_util.tree_structure(params))
