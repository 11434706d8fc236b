"""A multilayer perceptron by hand in jax.numpy, for the lesson "Build a tiny multilayer
perceptron".

Parameters are a plain pytree: a list with one ``{"w": (fan_in, fan_out), "b": (fan_out,)}``
dict per layer. Everything else (init, forward, loss, a training loop, a decision-boundary
grid) is a pure function of that pytree, so ``jax.grad`` and ``jax.jit`` apply directly.

Dimension glossary: N examples, B batch, D input features (2 here), H hidden width,
C classes, L layers, G grid points.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from core import numerics, runtime
from core.nn import chunked

DATASETS = ("moons", "spirals", "blobs")

# The defaults of the lesson "Build a tiny multilayer perceptron" (apps/tiny_mlp.py). Its
# claim there, "training learns": final loss below a tenth of the first, training accuracy
# >= 95%. mlp_test proves it over seeds with margin; tests/test_app_claims.py keeps these
# equal to the app's flag defaults.
TINY_MLP_LESSON = {
    "dataset": "moons",
    "classes": 2,
    "points": 200,
    "noise": 0.1,
    "hidden": 16,
    "depth": 2,
    "activation": "relu",
    "init": "he",
    "init_scale": 1.0,
    "learning_rate": 0.1,
    "steps": 300,
    "seed": 0,
}
INITS = ("he", "glorot")
ACTIVATIONS = ("relu", "tanh")

Params = list[dict[str, jax.Array]]


# ---------------------------------------------------------------- data


def make_dataset(
    key: jax.Array, name: str, n: int, noise: float = 0.1, classes: int = 2
) -> tuple[jax.Array, jax.Array]:
    """A 2-D classification problem: points x_ND (N, 2) float32 and labels y_N (N,) int32.

    ``moons``: two interleaved half circles (2 classes); ``spirals``: ``classes`` arms
    winding around the origin; ``blobs``: ``classes`` Gaussian clusters on a circle.
    ``noise`` is the standard deviation of Gaussian jitter added to every point.
    Points come out roughly inside [-1.5, 1.5]^2, classes balanced (sizes differ by <= 1).
    """
    if name not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}, got {name!r}")
    if n < 2:
        raise ValueError(f"need at least 2 points, got n={n}")
    if name == "moons" and classes != 2:
        raise ValueError(
            f"moons has exactly 2 classes, got classes={classes}: pick spirals or blobs"
        )
    if not 2 <= classes <= 8:
        raise ValueError(f"classes must be between 2 and 8, got {classes}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0, got {noise}")
    # NumPy draws the points, seeded from the key's bits: the data is not what this module
    # teaches, and NumPy needs no compile (each jax.random call site compiles a threefry).
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel())
    y_N = np.arange(n) % classes
    t_N = rng.uniform(size=n)
    if name == "moons":
        angle = np.pi * t_N
        upper = np.stack([np.cos(angle), np.sin(angle)], axis=1)
        lower = np.stack([1.0 - np.cos(angle), 0.5 - np.sin(angle)], axis=1)
        x_ND = np.where(y_N[:, None] == 0, upper, lower) - np.array([0.5, 0.25])
    elif name == "spirals":
        radius = 0.1 + 1.2 * t_N
        angle = 3.0 * t_N * np.pi + 2.0 * np.pi * y_N / classes
        x_ND = radius[:, None] * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    else:
        centre_angle = 2.0 * np.pi * y_N / classes
        x_ND = np.stack([np.cos(centre_angle), np.sin(centre_angle)], axis=1)
        noise = noise + 0.25  # blobs are clusters, not curves: always some spread
    x_ND = x_ND + noise * rng.normal(size=x_ND.shape)
    return jnp.asarray(x_ND, jnp.float32), jnp.asarray(y_N, jnp.int32)


# ---------------------------------------------------------------- model


def init_std(init: str, fan_in: int, fan_out: int) -> float:
    """Standard deviation of a layer's weights: He sqrt(2/fan_in), Glorot sqrt(2/(in+out))."""
    if init == "he":
        return float(np.sqrt(2.0 / fan_in))
    if init == "glorot":
        return float(np.sqrt(2.0 / (fan_in + fan_out)))
    raise ValueError(f"init must be one of {INITS}, got {init!r}")


def layer_sizes(inputs: int, hidden: int, depth: int, classes: int) -> tuple[int, ...]:
    """(inputs, hidden, ..., hidden, classes) with ``depth`` hidden layers."""
    if depth < 0 or hidden < 1 or inputs < 1 or classes < 1:
        raise ValueError(
            f"sizes must be positive (depth >= 0): inputs={inputs} hidden={hidden} "
            f"depth={depth} classes={classes}"
        )
    return (inputs, *([hidden] * depth), classes)


def init_params(
    key: jax.Array, sizes: Sequence[int], init: str = "he", scale: float = 1.0
) -> Params:
    """Gaussian weights with std ``scale * init_std(init, fan_in, fan_out)``, zero biases.

    ``scale`` multiplies the textbook std: 1 keeps activations at a steady size through the
    layers; much smaller makes the signal vanish, much larger makes it explode.
    """
    if len(sizes) < 2:
        raise ValueError(f"need at least an input and an output size, got {tuple(sizes)}")
    if scale <= 0:
        raise ValueError(f"init scale must be > 0, got {scale}")
    init_std(init, 1, 1)  # names a bad init before tracing
    return _init_params(key, tuple(sizes), init, scale)


@functools.partial(jax.jit, static_argnames=("sizes", "init"))
def _init_params(key, sizes, init, scale):
    # One draw for all weights, then cut into layers: a single jax.random call compiles
    # faster than one per layer, and the values are as independent.
    counts = [fan_in * fan_out for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True)]
    z = jax.random.normal(key, (sum(counts),), jnp.float32)
    params, start = [], 0
    for count, fan_in, fan_out in zip(counts, sizes[:-1], sizes[1:], strict=True):
        std = scale * init_std(init, fan_in, fan_out)
        params.append(
            {
                "w": std * z[start : start + count].reshape(fan_in, fan_out),
                "b": jnp.zeros((fan_out,), jnp.float32),
            }
        )
        start += count
    return params


def activate(name: str, z: jax.Array) -> jax.Array:
    if name == "relu":
        return jax.nn.relu(z)
    if name == "tanh":
        return jnp.tanh(z)
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {name!r}")


@functools.partial(jax.jit, static_argnames="activation")
def forward(params: Params, x_BD: jax.Array, activation: str = "relu") -> jax.Array:
    """logits_BC: affine -> activation for every hidden layer, affine at the end."""
    h = x_BD
    for layer in params[:-1]:
        h = activate(activation, h @ layer["w"] + layer["b"])
    return h @ params[-1]["w"] + params[-1]["b"]


def cross_entropy(logits_BC: jax.Array, y_B: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy of integer labels (nats), stable for large logits."""
    log_probs = jax.nn.log_softmax(logits_BC, axis=-1)
    return -jnp.mean(jnp.take_along_axis(log_probs, y_B[:, None], axis=-1))


@functools.partial(jax.jit, static_argnames="activation")
def loss(params: Params, x_BD: jax.Array, y_B: jax.Array, activation: str = "relu") -> jax.Array:
    """Mean cross-entropy of the MLP on a batch: a scalar."""
    return cross_entropy(forward(params, x_BD, activation), y_B)


def accuracy(logits_BC, y_B) -> float:
    """Fraction of rows whose largest logit is the label (computed on the host)."""
    return float(np.mean(np.argmax(np.asarray(logits_BC), axis=-1) == np.asarray(y_B)))


def count_params(params) -> int:
    return int(sum(np.size(leaf) for leaf in jax.tree.leaves(params)))


# ---------------------------------------------------------------- training


@dataclasses.dataclass(frozen=True)
class History:
    """Per-step loss and accuracy of a full-batch run (arrays of length steps, measured
    before each update), and both after the last update."""

    loss: np.ndarray
    accuracy: np.ndarray
    final_loss: float
    final_accuracy: float


def train_sgd(
    params: Params,
    x_ND: jax.Array,
    y_N: jax.Array,
    steps: int,
    learning_rate: float,
    activation: str = "relu",
    momentum: float = 0.9,
) -> tuple[Params, History]:
    """Full-batch gradient descent with heavy-ball momentum, written out by hand.

    v <- momentum * v + grad;  p <- p - learning_rate * v. Compiled ``lax.scan`` chunks of
    TRAIN_CHUNK steps; the history records the loss and accuracy *before* each update.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if learning_rate <= 0:
        raise ValueError(f"learning rate must be > 0, got {learning_rate}")
    velocity = jax.tree.map(lambda p: np.zeros(np.shape(p), np.result_type(p)), params)
    (params, _), (losses, accuracies) = _sgd_chunks(
        (params, velocity), x_ND, y_N, learning_rate, momentum, steps=steps, activation=activation
    )
    final = jax.device_get(_final_metrics(params, x_ND, y_N, activation))
    return jax.device_get(params), History(losses, accuracies, float(final[0]), float(final[1]))


def _sgd_step(carry, _index, x_ND, y_N, learning_rate, momentum, *, activation):
    """One heavy-ball update of carry = (params, velocity): (carry, (loss, accuracy) before)."""
    params, velocity = carry
    (value, logits), grads = jax.value_and_grad(_loss_and_logits, has_aux=True)(
        params, x_ND, y_N, activation
    )
    velocity = jax.tree.map(lambda v, g: momentum * v + g, velocity, grads)
    params = jax.tree.map(lambda p, v: p - learning_rate * v, params, velocity)
    correct = jnp.mean(jnp.argmax(logits, axis=-1) == y_N)
    return (params, velocity), (value, correct)


# Steps per compiled chunk (core.nn.chunked): tiny_mlp's steps control moves by 10, so every
# count it offers reuses one program; one scan of the run compiled again for every count.
TRAIN_CHUNK = 10
_sgd_chunks = chunked.ChunkedScan(_sgd_step, chunk=TRAIN_CHUNK)


@functools.partial(jax.jit, static_argnames="activation")
def _final_metrics(params, x_ND, y_N, activation):
    """[loss, accuracy] after the last update."""
    value, logits = _loss_and_logits(params, x_ND, y_N, activation)
    return jnp.stack([value, jnp.mean(jnp.argmax(logits, axis=-1) == y_N)])


def _loss_and_logits(params, x_BD, y_B, activation):
    logits = forward(params, x_BD, activation)
    return cross_entropy(logits, y_B), logits


def decision_grid(
    params: Params, x_ND, resolution: int = 40, activation: str = "relu", margin: float = 0.3
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The predicted class over a ``resolution``^2 grid covering the data (plus ``margin``).

    Returns (grid_x (G,), grid_y (G,), predicted class (G,)) with G = resolution**2,
    and the cell size is (span / (resolution - 1)) on each axis.
    """
    if resolution < 2:
        raise ValueError(f"grid resolution must be >= 2, got {resolution}")
    x = np.asarray(x_ND)
    low, high = x.min(axis=0) - margin, x.max(axis=0) + margin
    axis0 = np.linspace(low[0], high[0], resolution)
    axis1 = np.linspace(low[1], high[1], resolution)
    gx, gy = np.meshgrid(axis0, axis1, indexing="xy")
    points = np.stack([gx.ravel(), gy.ravel()], axis=1).astype(np.float32)
    predicted = np.asarray(forward(params, points, activation)).argmax(axis=-1)
    return gx.ravel(), gy.ravel(), predicted


def activation_stds(params: Params, x_BD, activation: str = "relu") -> list[float]:
    """Standard deviation of every hidden layer's output on a batch: does the signal hold?"""
    return [float(s) for s in np.asarray(_activation_stds(params, x_BD, activation))]


@functools.partial(jax.jit, static_argnames="activation")
def _activation_stds(params, x_BD, activation):
    stds = []
    h = x_BD
    for layer in params[:-1]:
        h = activate(activation, h @ layer["w"] + layer["b"])
        stds.append(jnp.std(h))
    return jnp.stack(stds) if stds else jnp.zeros((0,))


# ---------------------------------------------------------------- references (numpy float64)


def forward_reference(params, x_BD, activation: str = "relu") -> np.ndarray:
    """The same forward pass in numpy float64: an independent reference."""
    return _forward_reference(params, x_BD, activation)[0]


def _forward_reference(params, x_BD, activation):
    """(logits, every hidden layer's pre-activations z) in numpy float64."""
    h = np.asarray(x_BD, dtype=np.float64)
    layers = [(np.asarray(p["w"], np.float64), np.asarray(p["b"], np.float64)) for p in params]
    pre_activations = []
    for w, b in layers[:-1]:
        z = h @ w + b
        pre_activations.append(z)
        h = np.maximum(z, 0.0) if activation == "relu" else np.tanh(z)
    w, b = layers[-1]
    return h @ w + b, pre_activations


def loss_reference(params, x_BD, y_B, activation: str = "relu") -> float:
    """Mean softmax cross-entropy in numpy float64 (log-sum-exp shifted by the row max)."""
    return _loss_reference(forward_reference(params, x_BD, activation), y_B)


def _loss_reference(logits, y_B) -> float:
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    y = np.asarray(y_B)
    return float(-np.mean(log_probs[np.arange(len(y)), y]))


def all_coordinates(params) -> list[tuple[int, int]]:
    """Every (leaf index, flat index) of a pytree, leaves in ``jax.tree.leaves`` order."""
    return [
        (leaf, i)
        for leaf, value in enumerate(jax.tree.leaves(params))
        for i in range(np.size(value))
    ]


def sample_coordinates(params, count: int, seed: int = 0) -> list[tuple[int, int]]:
    """``count`` distinct coordinates drawn uniformly (all of them when there are fewer)."""
    coordinates = all_coordinates(params)
    if count >= len(coordinates):
        return coordinates
    chosen = np.random.default_rng(seed).choice(len(coordinates), size=count, replace=False)
    return [coordinates[i] for i in sorted(chosen)]


def gather(tree, coordinates: Sequence[tuple[int, int]]) -> np.ndarray:
    """The values of a pytree at ``coordinates``, as a float64 vector."""
    leaves = [np.asarray(leaf, np.float64).reshape(-1) for leaf in jax.tree.leaves(tree)]
    return np.array([leaves[leaf][i] for leaf, i in coordinates], dtype=np.float64)


@dataclasses.dataclass(frozen=True)
class FiniteDifferences:
    """Central differences at some coordinates, and where the loss has a kink there.

    ``kink[n]``: a ReLU input on the check points changes sign between p - e, p and p + e
    (the nudge crosses a kink: the loss is not smooth on [p - e, p + e], so a revived or
    killed unit makes the difference nonzero where the derivative at p is 0, or vice versa),
    or the one-sided slopes (L(p + e) - L(p)) / e and (L(p) - L(p - e)) / e differ by more
    than ``KINK_TOLERANCE`` (relative). Central differences mean nothing there.
    """

    gradient: np.ndarray
    kink: np.ndarray


KINK_TOLERANCE = 1e-3


def finite_differences(
    params,
    x_BD,
    y_B,
    activation: str = "relu",
    coordinates: Sequence[tuple[int, int]] | None = None,
    epsilon: float = 1e-6,
) -> FiniteDifferences:
    """d loss / d parameter at ``coordinates`` (default: all) by central differences, float64.

    Uses ``loss_reference`` (numpy), not JAX. (L(p + e) - L(p - e)) / 2e has error O(e^2)
    from the Taylor series plus ~1e-16/e from rounding: e = 1e-6 gives ~1e-10 for a smooth
    loss. Vectors come in the order of ``coordinates``.
    """
    x_BD, y_B = np.asarray(x_BD, np.float64), np.asarray(y_B)  # once, not per evaluation
    leaves, treedef = jax.tree.flatten(params)
    leaves = [np.array(leaf, dtype=np.float64).reshape(-1) for leaf in leaves]
    shapes = [np.shape(leaf) for leaf in jax.tree.leaves(params)]
    base = jax.tree.unflatten(treedef, [v.reshape(s) for v, s in zip(leaves, shapes, strict=True)])
    if coordinates is None:
        coordinates = all_coordinates(params)

    def evaluate():  # the loss, and the sign of every ReLU input (none for tanh: smooth)
        logits, pre_activations = _forward_reference(base, x_BD, activation)
        signs = [np.sign(z) for z in pre_activations] if activation == "relu" else []
        return _loss_reference(logits, y_B), signs

    centre, centre_signs = evaluate()
    gradient = np.empty(len(coordinates), dtype=np.float64)
    kink = np.zeros(len(coordinates), dtype=bool)
    for n, (leaf, i) in enumerate(coordinates):
        original = leaves[leaf][i]  # ``base`` holds views of these flat arrays
        leaves[leaf][i] = original + epsilon
        plus, plus_signs = evaluate()
        leaves[leaf][i] = original - epsilon
        minus, minus_signs = evaluate()
        leaves[leaf][i] = original
        gradient[n] = (plus - minus) / (2 * epsilon)
        forward, backward = (plus - centre) / epsilon, (centre - minus) / epsilon
        crosses = any(
            not (np.array_equal(c, p) and np.array_equal(c, m))
            for c, p, m in zip(centre_signs, plus_signs, minus_signs, strict=True)
        )
        kink[n] = crosses or (abs(forward - backward) > KINK_TOLERANCE * max(1.0, abs(gradient[n])))
    return FiniteDifferences(gradient, kink)


def finite_difference_gradient(
    params,
    x_BD,
    y_B,
    activation: str = "relu",
    coordinates: Sequence[tuple[int, int]] | None = None,
    epsilon: float = 1e-6,
) -> np.ndarray:
    """The central differences alone (see ``finite_differences``)."""
    return finite_differences(params, x_BD, y_B, activation, coordinates, epsilon).gradient


# The finite-difference check: jax.grad in float64 against central differences, relative to
# the largest gradient. Central differences with step 1e-6 are good to ~1e-10 (Taylor +
# rounding, see ``finite_differences``), ~1e-7 of gradients ~1e-3.
GRADIENT_TOLERANCE = 1e-6
# Rounding the loss (terms ~1) to float64 leaves central differences an absolute error of
# ~eps64 / e = 2.2e-10 at e = 1e-6, whatever the gradient: measured up to 0.85x that over 80
# trained lesson networks (all three datasets, noise 0 to 0.5, hidden 2 to 64, depth 1 to 4,
# relu and tanh, 2 seeds), among them a dead one and a noise-free blobs fit whose gradients
# were 7e-9 and 3e-6. Gradients below FD_RESOLUTION_SLACK x that / GRADIENT_TOLERANCE (9e-4;
# the defaults' largest is 1.5e-3 to 6e-3) are compared within that absolute bound (9e-10).
FD_RESOLUTION_SLACK = 4.0


@dataclasses.dataclass(frozen=True)
class GradientCheck:
    """jax.grad vs central differences at the coordinates off every kink.

    ``error`` (float64 jax.grad) and ``float32_error`` are max |grad - fd| / ``scale``;
    ``scale`` is the largest |fd|, or ``floor`` when that is smaller (``floored``): the
    gradients are then below what finite differences resolve, and the check bounds the
    absolute error by GRADIENT_TOLERANCE * floor.
    """

    error: float
    float32_error: float
    scale: float
    floor: float
    floored: bool
    kinks: int
    finite_differences: np.ndarray  # at the smooth coordinates
    grads64: np.ndarray  # the same coordinates


def gradient_check(
    params, x_BD, y_B, activation: str, coordinates, epsilon: float = 1e-6
) -> GradientCheck:
    """Compare jax.grad (float64 and float32) with ``finite_differences`` at ``coordinates``,
    skipping those on a ReLU kink; see ``GradientCheck``."""
    differences = finite_differences(params, x_BD, y_B, activation, coordinates, epsilon)
    smooth = ~differences.kink
    reference = differences.gradient[smooth]
    grads64 = gather(gradient_float64(params, x_BD, y_B, activation), coordinates)[smooth]
    grads32 = gather(grad_loss(params, x_BD, y_B, activation), coordinates)[smooth]
    floor = FD_RESOLUTION_SLACK * float(np.finfo(np.float64).eps) / epsilon / GRADIENT_TOLERANCE
    largest = float(np.max(np.abs(reference), initial=0.0))
    scale = max(largest, floor)
    return GradientCheck(
        error=numerics.max_abs_error(grads64, reference) / scale,
        float32_error=numerics.max_abs_error(grads32, reference) / scale,
        scale=scale,
        floor=floor,
        floored=largest < floor,
        kinks=int(differences.kink.sum()),
        finite_differences=reference,
        grads64=grads64,
    )


grad_loss = jax.jit(jax.grad(loss), static_argnames="activation")
grad_loss.__doc__ = "jax.grad of ``loss`` with respect to params (compiled): a params pytree."


def gradient_float64(params, x_BD, y_B, activation: str = "relu"):
    """jax.grad of ``loss`` with every array in float64 (inside an x64 context only)."""
    with runtime.enable_float64():
        params64 = jax.tree.map(lambda p: jnp.asarray(np.asarray(p, np.float64)), params)
        x64 = jnp.asarray(np.asarray(x_BD, np.float64))
        grads = grad_loss(params64, x64, jnp.asarray(np.asarray(y_B)), activation)
        return jax.tree.map(lambda g: np.asarray(g, np.float64), grads)
