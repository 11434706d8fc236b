"""Parameters as pytrees, for the lesson "Pytrees and structured parameters".

A pytree is any nesting of lists, tuples, dicts and registered nodes whose leaves are
arrays. JAX transformations (grad, jit, tree_map) take and return whole pytrees, so a model's
parameters can be a dict of layers, each layer a small frozen dataclass.

Dimension glossary: B batch, I layer inputs, O layer outputs.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics

DTYPES = ("float32", "bfloat16", "float16")
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2}  # bytes per element
TAPERS = ("constant", "halving")
ACTIVATIONS = ("tanh", "identity")


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["w", "b"], meta_fields=["activation"]
)
@dataclasses.dataclass(frozen=True)
class Dense:
    """One layer y = activation(x @ w + b), a pytree node with two leaves.

    ``w`` (I, O) and ``b`` (O,) are data (leaves that grad and tree_map see);
    ``activation`` is metadata: part of the tree's structure, never a leaf.
    """

    w: jax.Array
    b: jax.Array
    activation: str = "tanh"


@dataclasses.dataclass(frozen=True)
class PlainDense:
    """The same fields, not registered: to JAX the whole object is one opaque leaf."""

    w: jax.Array
    b: jax.Array
    activation: str = "tanh"


def layer_widths(
    inputs: int, width: int, depth: int, outputs: int, taper: str = "constant"
) -> tuple[int, ...]:
    """Widths of an MLP with ``depth`` Dense layers: (inputs, hidden..., outputs).

    Hidden layer i has ``width`` units ("constant") or ``width // 2**i`` ("halving").
    """
    if taper not in TAPERS:
        raise ValueError(f"taper must be one of {TAPERS}, got {taper!r}")
    if min(inputs, width, depth, outputs) < 1:
        raise ValueError(
            f"inputs, width, depth and outputs must all be >= 1, got {inputs}, {width}, {depth}, "
            f"{outputs}"
        )
    hidden = [width // (2**i if taper == "halving" else 1) for i in range(depth - 1)]
    if hidden and hidden[-1] < 1:
        raise ValueError(
            f"halving width {width} for {depth - 1} hidden layers reaches 0 units at layer "
            f"{hidden.index(0) + 1}: widen to at least {2 ** (depth - 2)} or use fewer layers"
        )
    return (inputs, *hidden, outputs)


def param_count_closed_form(widths: Sequence[int]) -> int:
    """sum over layers of in*out + out: the weights and biases of a dense MLP."""
    return sum(i * o + o for i, o in zip(widths[:-1], widths[1:], strict=True))


def param_bytes_closed_form(widths: Sequence[int], dtype: str) -> int:
    if dtype not in ITEMSIZE:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return param_count_closed_form(widths) * ITEMSIZE[dtype]


def init_mlp(key: jax.Array, widths: Sequence[int], dtype: str = "float32") -> dict:
    """Parameters {"layers": [Dense, ...]}: w ~ N(0, 1/I) (LeCun normal), b = 0.

    Hidden layers use tanh, the last one is linear ("identity").
    """
    widths = tuple(int(w) for w in widths)
    if len(widths) < 2 or min(widths) < 1:
        raise ValueError(
            f"widths needs at least an input and an output width, all >= 1, got {widths}"
        )
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return _init_mlp(key, widths, dtype)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _init_mlp(key: jax.Array, widths: tuple[int, ...], dtype: str) -> dict:
    # One normal draw for all weights, cut into layers: one compiled program, whatever the depth.
    sizes = [i * o for i, o in zip(widths[:-1], widths[1:], strict=True)]
    z = jax.random.normal(key, (sum(sizes),), dtype=jnp.float32)
    layers, start = [], 0
    for index, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        w_IO = z[start : start + fan_in * fan_out].reshape(fan_in, fan_out) / math.sqrt(fan_in)
        start += fan_in * fan_out
        activation = "identity" if index == len(widths) - 2 else "tanh"
        layers.append(Dense(w_IO, jnp.zeros((fan_out,), jnp.float32), activation))
    return cast(dtype, {"layers": layers})


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def example_batch(key: jax.Array, inputs: int, outputs: int, batch: int):
    """Inputs x (B, I) and targets y (B, O), standard normal float32.

    Drawn from ``fold_in(key, 1)``, so passing the key that initialised the parameters
    does not reuse it.
    """
    xy = jax.random.normal(jax.random.fold_in(key, 1), (batch, inputs + outputs), dtype=jnp.float32)
    return xy[:, :inputs], xy[:, inputs:]


@functools.partial(jax.jit, static_argnums=0)
def cast(dtype, tree):
    """Every leaf converted to ``dtype``: one ``tree_map``, structure unchanged."""
    return jax.tree.map(lambda leaf: leaf.astype(dtype), tree)


@jax.jit
def mlp_apply(params: dict, x_BI: jax.Array) -> jax.Array:
    """The forward pass: (B, I) -> (B, O), computed in the parameters' dtype."""
    h = x_BI.astype(params["layers"][0].w.dtype)
    for layer in params["layers"]:
        h = h @ layer.w + layer.b
        h = jnp.tanh(h) if layer.activation == "tanh" else h
    return h


def mlp_reference(params: dict, x_BI) -> np.ndarray:
    """The same forward pass in numpy float64, reading the layers by hand: (B, O).

    x is first rounded to the parameters' dtype, as ``mlp_apply`` does.
    """
    param_dtype = np.asarray(params["layers"][0].w).dtype
    h = np.asarray(x_BI).astype(param_dtype).astype(np.float64)
    for layer in params["layers"]:
        w = np.asarray(layer.w).astype(np.float64)
        b = np.asarray(layer.b).astype(np.float64)
        h = h @ w + b
        h = np.tanh(h) if layer.activation == "tanh" else h
    return h


def forward_tolerance(widths: Sequence[int], dtype: str) -> float:
    """Allowed numerics.scaled_max_error of the forward pass vs NumPy float64: the dtype's
    tolerance once per layer, since every layer's output is rounded to ``dtype`` again and the
    errors accumulate through the depth."""
    return numerics.tolerance(dtype) * (len(widths) - 1)


def mse_loss(params: dict, x_BI: jax.Array, y_BO: jax.Array) -> jax.Array:
    return jnp.mean((mlp_apply(params, x_BI).astype(jnp.float32) - y_BO) ** 2)


def sgd_step(params, grads, learning_rate: float):
    """p - learning_rate * g for every leaf pair: ``tree_map`` over two trees of one shape."""
    return jax.tree.map(lambda p, g: (p - learning_rate * g).astype(p.dtype), params, grads)


@dataclasses.dataclass(frozen=True)
class TreeMapDemo:
    """What tree_map does to a parameter tree in one training step."""

    grads: dict  # jax.grad(mse_loss)(params, x, y): the same structure as params
    updated: dict  # sgd_step(params, grads, learning_rate)
    loss_before: float
    loss_after: float
    grad_norm: float  # sqrt of the sum of squares over all leaves


def tree_map_demo(params: dict, x_BI, y_BO, learning_rate: float) -> TreeMapDemo:
    grads, updated, loss_before, loss_after, grad_norm = _tree_map_demo(
        params, x_BI, y_BO, learning_rate
    )
    return TreeMapDemo(grads, updated, float(loss_before), float(loss_after), float(grad_norm))


@jax.jit
def _tree_map_demo(params, x_BI, y_BO, learning_rate):
    loss_before, grads = jax.value_and_grad(mse_loss)(params, x_BI, y_BO)
    updated = sgd_step(params, grads, learning_rate)
    squares = [jnp.sum(g.astype(jnp.float32) ** 2) for g in jax.tree.leaves(grads)]
    return grads, updated, loss_before, mse_loss(updated, x_BI, y_BO), jnp.sqrt(sum(squares))


@dataclasses.dataclass(frozen=True)
class LeafInfo:
    path: str  # jax.tree_util.keystr, e.g. "['layers'][0].w"
    shape: tuple[int, ...]
    dtype: str
    size: int
    nbytes: int


def leaf_infos(tree) -> list[LeafInfo]:
    """Every leaf with its path (``tree_flatten_with_path`` + ``keystr``), in flatten order."""
    leaves_with_paths, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [
        LeafInfo(
            jax.tree_util.keystr(path),
            tuple(leaf.shape),
            str(leaf.dtype),
            int(leaf.size),
            int(leaf.nbytes),
        )
        for path, leaf in leaves_with_paths
    ]


def _child(node, key):
    """Follow one path entry (DictKey, SequenceKey, GetAttrKey) one level down."""
    if isinstance(key, jax.tree_util.DictKey):
        return node[key.key]
    if isinstance(key, jax.tree_util.SequenceKey):
        return node[key.idx]
    if isinstance(key, jax.tree_util.GetAttrKey):
        return getattr(node, key.name)
    raise TypeError(f"unsupported path entry {key!r}")


def _label(node) -> str:
    if isinstance(node, dict):
        return f"dict ({len(node)} keys)"
    if isinstance(node, (list, tuple)):
        return f"{type(node).__name__} ({len(node)} items)"
    if dataclasses.is_dataclass(node):
        values = {f.name: getattr(node, f.name) for f in dataclasses.fields(node)}
        meta = [
            f"{k}={v!r}" for k, v in values.items() if not isinstance(v, (jax.Array, np.ndarray))
        ]
        return f"{type(node).__name__}({', '.join(meta)})"
    return type(node).__name__


def tree_outline(tree, name: str = "params") -> str:
    """An indented picture of the tree: containers and nodes, then each leaf's dtype[shape]
    and bytes."""
    leaves_with_paths, _ = jax.tree_util.tree_flatten_with_path(tree)
    lines = [f"{name}: {_label(tree)}"]
    drawn: set[tuple] = set()
    for path, leaf in leaves_with_paths:
        node = tree
        for depth, key in enumerate(path):
            node = _child(node, key)
            prefix = tuple(path[: depth + 1])
            if prefix in drawn:
                continue
            drawn.add(prefix)
            last = depth == len(path) - 1
            entry = jax.tree_util.keystr((key,))
            what = f"{leaf.dtype}{list(leaf.shape)}  {leaf.nbytes} B" if last else _label(node)
            lines.append("    " * (depth + 1) + f"{entry}: {what}")
    return "\n".join(lines)


def round_trip(tree):
    """``tree_flatten`` then ``tree_unflatten``: (leaves, treedef, rebuilt tree)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return leaves, treedef, jax.tree_util.tree_unflatten(treedef, leaves)


def trees_equal(a, b) -> bool:
    """Same structure (metadata included) and bit-identical leaves."""
    leaves_a, def_a = jax.tree_util.tree_flatten(a)
    leaves_b, def_b = jax.tree_util.tree_flatten(b)
    return def_a == def_b and all(
        x.shape == y.shape and x.dtype == y.dtype and np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(leaves_a, leaves_b, strict=True)
    )


def opaque_leaf_count(widths: Sequence[int]) -> tuple[int, int]:
    """Leaves JAX sees in a list of layers: (registered Dense, unregistered PlainDense).

    2 per layer when registered, 1 per layer when not: JAX cannot look inside.
    """
    registered = [
        Dense(jnp.zeros((i, o)), jnp.zeros((o,)))
        for i, o in zip(widths[:-1], widths[1:], strict=True)
    ]
    plain = [PlainDense(d.w, d.b) for d in registered]
    return len(jax.tree.leaves(registered)), len(jax.tree.leaves(plain))


def unregistered_grad_error() -> str:
    """What ``jax.grad`` says when a parameter is an unregistered dataclass (first line)."""
    layer = PlainDense(np.ones((2, 2), np.float32), np.zeros((2,), np.float32))
    try:
        jax.grad(lambda p: jnp.sum(p.w) + jnp.sum(p.b))(layer)
    except TypeError as error:
        # "Argument '<repr of the object>' of type <class ...> is not a valid JAX type."
        message = " ".join(str(error).split())
        return f"{type(error).__name__}: Argument '...'" + message[message.find(" of type ") :]
    raise RuntimeError("jax.grad accepted an unregistered dataclass: JAX changed")


def other_dtype(dtype: str) -> str:
    """The dtype to cast to in the tree_map demo: float32 for 16-bit trees, else bfloat16."""
    return "bfloat16" if dtype == "float32" else "float32"


def treedef_text(treedef) -> str:
    """``str(treedef)`` with one layer per line, for reading."""
    return (
        str(treedef)
        .replace("), CustomNode", "),\n    CustomNode")
        .replace("[CustomNode", "[\n    CustomNode")
    )
