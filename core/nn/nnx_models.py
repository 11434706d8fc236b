"""Flax NNX models for phase 9: the lesson MLP as an ``nnx.Module`` and a small CNN.

An NNX module is a Python object that *holds* its state (``nnx.Param`` for weights,
``nnx.RngState`` for random streams, ...). ``nnx.split`` turns it into a static
``GraphDef`` plus a ``State`` pytree that JAX transformations can take; ``nnx.merge``
turns them back into a module. Read a variable with ``v[...]`` (``.value`` is deprecated).

Dimension glossary: B batch, D input features, H hidden width, C classes,
Y/X image rows/columns, K channels.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.nn import mlp


class MLP(nnx.Module):
    """Affine -> activation (-> dropout) per hidden layer, affine at the end: logits_BC.

    The same function as ``core.nn.mlp.forward`` when the weights are the same and dropout is
    off (rate 0 or ``model.eval()``). ``rngs`` needs a ``params`` stream (weights) and,
    when ``dropout_rate > 0``, a ``dropout`` stream (masks, drawn fresh on every call).
    """

    def __init__(
        self,
        sizes: Sequence[int],
        *,
        rngs: nnx.Rngs,
        activation: str = "relu",
        dropout_rate: float = 0.0,
    ):
        if len(sizes) < 2:
            raise ValueError(f"need at least an input and an output size, got {tuple(sizes)}")
        if activation not in mlp.ACTIVATIONS:
            raise ValueError(f"activation must be one of {mlp.ACTIVATIONS}, got {activation!r}")
        if not 0.0 <= dropout_rate < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {dropout_rate}")
        self.sizes = tuple(sizes)
        self.activation = activation
        self.layers = nnx.List(
            [nnx.Linear(i, o, rngs=rngs) for i, o in zip(sizes[:-1], sizes[1:], strict=True)]
        )
        # Only a model that drops anything needs (and holds) a 'dropout' stream.
        self.dropout = nnx.Dropout(dropout_rate, rngs=rngs if dropout_rate > 0 else None)

    def __call__(self, x_BD: jax.Array) -> jax.Array:
        h = x_BD
        for layer in self.layers[:-1]:
            h = self.dropout(mlp.activate(self.activation, layer(h)))
        return self.layers[-1](h)


def load_hand_params(model: MLP, params: mlp.Params) -> MLP:
    """Copy a ``core.nn.mlp`` pytree ([{"w", "b"}, ...]) into the model's Params, in place."""
    if len(params) != len(model.layers):
        raise ValueError(f"{len(params)} layers of weights for a model with {len(model.layers)}")
    for layer, source in zip(model.layers, params, strict=True):
        if tuple(layer.kernel[...].shape) != tuple(np.shape(source["w"])):
            raise ValueError(
                f"weight shape {np.shape(source['w'])} does not fit kernel "
                f"{layer.kernel[...].shape}"
            )
        layer.kernel[...] = jnp.asarray(source["w"], layer.kernel[...].dtype)
        layer.bias[...] = jnp.asarray(source["b"], layer.bias[...].dtype)
    return model


def to_hand_params(model: MLP) -> mlp.Params:
    """The model's weights as a ``core.nn.mlp`` pytree of NumPy copies (not views)."""
    return [
        {"w": np.array(layer.kernel[...]), "b": np.array(layer.bias[...])} for layer in model.layers
    ]


class CNN(nnx.Module):
    """A small convnet for 8x8 grey images: x_BYXK (B, 8, 8, 1) -> logits_BC.

    conv 3x3 (K1) -> ReLU -> max-pool 2x2 -> conv 3x3 (K2) -> ReLU -> flatten -> dense C.
    'SAME' padding keeps 8x8, the pool halves it to 4x4, so the head sees 16 * K2 features.
    """

    def __init__(
        self,
        *,
        rngs: nnx.Rngs,
        channels: tuple[int, int] = (16, 32),
        classes: int = 10,
        image_size: int = 8,
    ):
        if image_size % 2:
            raise ValueError(f"image size must be even (the 2x2 pool halves it), got {image_size}")
        if min(channels) < 1 or classes < 2:
            raise ValueError(f"need channels >= 1 and classes >= 2, got {channels}, {classes}")
        self.conv1 = nnx.Conv(1, channels[0], (3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(channels[0], channels[1], (3, 3), rngs=rngs)
        half = image_size // 2
        self.head = nnx.Linear(half * half * channels[1], classes, rngs=rngs)

    def features(self, x_BYXK: jax.Array) -> jax.Array:
        """The flattened feature vector the head reads: (B, (size/2)^2 * K2)."""
        h = nnx.relu(self.conv1(x_BYXK))
        h = max_pool_2x2(h)
        h = nnx.relu(self.conv2(h))
        return h.reshape(h.shape[0], -1)

    def __call__(self, x_BYXK: jax.Array) -> jax.Array:
        return self.head(self.features(x_BYXK))


def max_pool_2x2(h_BYXK: jax.Array) -> jax.Array:
    """2x2 max-pool, stride 2, as reshape + max: the same numbers as
    ``nnx.max_pool(h, (2, 2), strides=(2, 2))``, and its gradient compiles faster on CPU
    (a plain reduction instead of XLA's select-and-scatter)."""
    b, y, x, k = h_BYXK.shape
    return h_BYXK.reshape(b, y // 2, 2, x // 2, 2, k).max(axis=(2, 4))


def cnn_reference(params: dict, x_BYXK) -> np.ndarray:
    """The CNN's forward pass in NumPy float64, loops over the 3x3 taps: a reference.

    ``params`` = {"conv1": (kernel (3,3,Kin,Kout), bias), "conv2": (...), "head": (kernel, bias)}
    as from ``cnn_params(model)``. SAME padding: 1 pixel of zeros on every side.
    """

    def conv_same(h, kernel, bias):
        padded = np.pad(h, ((0, 0), (1, 1), (1, 1), (0, 0)))
        out = np.zeros(h.shape[:3] + (kernel.shape[-1],))
        for dy in range(3):
            for dx in range(3):
                window = padded[:, dy : dy + h.shape[1], dx : dx + h.shape[2], :]
                out += window @ kernel[dy, dx]
        return out + bias

    h = np.asarray(x_BYXK, np.float64)
    h = np.maximum(conv_same(h, *params["conv1"]), 0.0)
    b, y, x, k = h.shape
    h = h.reshape(b, y // 2, 2, x // 2, 2, k).max(axis=(2, 4))
    h = np.maximum(conv_same(h, *params["conv2"]), 0.0)
    kernel, bias = params["head"]
    return h.reshape(b, -1) @ kernel + bias


def cnn_params(model: CNN) -> dict:
    """The CNN's weights as float64 NumPy arrays, for ``cnn_reference``."""

    def pair(layer):
        return (np.asarray(layer.kernel[...], np.float64), np.asarray(layer.bias[...], np.float64))

    return {"conv1": pair(model.conv1), "conv2": pair(model.conv2), "head": pair(model.head)}


def state_rows(state: nnx.State) -> list[dict]:
    """One row per variable of a State: path, variable type, shape, dtype, element count."""
    rows = []
    for path, variable in nnx.to_flat_state(state):
        value = variable[...]
        rows.append(
            {
                "path": ".".join(str(p) for p in path),
                "type": type(variable).__name__,
                "shape": str(tuple(np.shape(value))),
                "dtype": str(value.dtype),
                "elements": int(np.size(value)),
            }
        )
    return rows


def count_params(model: nnx.Module) -> int:
    """Number of trainable numbers (``nnx.Param`` elements) in a module."""
    return int(sum(np.size(leaf) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param))))


def rng_counts(model: nnx.Module) -> dict[str, int]:
    """How many draws each RNG stream held by the module has made (its ``RngCount``)."""
    counts = {}
    for path, variable in nnx.to_flat_state(nnx.state(model, nnx.RngCount)):
        counts[".".join(str(p) for p in path[:-1])] = int(variable[...])
    return counts


def identical_masks_chance(dropout_rate: float, entries: int) -> float:
    """The chance that two independent dropout masks agree on all ``entries`` entries.

    Each entry is kept with probability 1 - rate in both draws or dropped in both:
    (rate^2 + (1 - rate)^2) ** entries. Two training calls can give the same output only if
    their masks agree wherever the activations are nonzero, so this bounds how often
    "dropout makes every training call different" can fail to show.
    """
    if not 0.0 <= dropout_rate < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1), got {dropout_rate}")
    if entries < 0:
        raise ValueError(f"entries must be >= 0, got {entries}")
    return float((dropout_rate**2 + (1.0 - dropout_rate) ** 2) ** entries)


# "Two training calls with dropout differ" is claimed where identical masks have less than
# this chance (nnx_models_test checks it over seeds just inside the boundary).
DIFFERENT_CALLS_CHANCE = 1e-6


def training_calls_surely_differ(
    dropout_rate: float, batch: int, hidden: int, depth: int, activation: str = "relu"
) -> bool:
    """Whether two training calls of an MLP with dropout should give different outputs.

    With ReLU about half the hidden activations are 0, and dropping a 0 changes nothing: only
    half the entries count. False for rate 0 (no dropout) and for tiny models at low rates,
    where the two masks can agree by chance.
    """
    if dropout_rate == 0.0:
        return False
    entries = batch * hidden * depth // (2 if activation == "relu" else 1)
    return identical_masks_chance(dropout_rate, entries) < DIFFERENT_CALLS_CHANCE
