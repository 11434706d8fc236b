"""The track's three models as specs: Keras 3 builders, NumPy weights and a NumPy float64 twin.

Each spec (a frozen dataclass, validated on construction) gives

    weight_shapes(spec)      {Keras weight path: shape}, the path without the model's name
    init_weights(spec, seed) one deterministic float32 weight set, drawn in NumPy (the parent
                             writes it once; every backend loads the same bytes)
    build_keras(spec)        the Keras 3 functional model (call only in a worker process)
    forward_reference        the forward pass written out in NumPy float64 (independent of Keras)
    loss_reference           its loss (cross-entropy from logits, or mean squared error)
    make_data(spec, ...)     identical batches for every backend

The models (mirroring the JAX lessons' shapes):

    mlp          x_BD (2-D points) -> Dense(hidden, act) x depth -> Dense(classes)     tiny_mlp
    cnn          x_BYXK (8x8x1 digits) -> Conv2D(c1, 3, same, relu) -> MaxPool 2x2
                 -> Conv2D(c2, 3, same, relu) -> Flatten (NHWC) -> Dense(10)          cnn_digits
    transformer  x_BTD -> x + MHA(LN(x), causal) -> x + Dense(D)(gelu(Dense(4D)(LN(x))))
                 pre-LN, LayerNorm eps 1e-5, exact GELU; target: the previous position's
                 input (y_t = x_{t-1}, y_0 = 0), learnable under the causal mask  transformer_block

Dimension glossary: B batch, D features, C classes, Y/X pixel rows/columns, K channels or
head size, T/S query/key positions, H heads, N examples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

LN_EPSILON = 1e-5  # Keras's LayerNormalization default is 1e-3; the JAX lesson's is 1e-5
ACTIVATIONS = ("relu", "tanh")
KINDS = ("mlp", "cnn", "transformer")
IMAGE_SIZE = 8
DIGIT_CLASSES = 10


@dataclasses.dataclass(frozen=True)
class MLPSpec:
    kind: ClassVar[str] = "mlp"
    inputs: int = 2
    hidden: int = 16
    depth: int = 2
    classes: int = 2
    activation: str = "tanh"

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        for name in ("inputs", "hidden", "depth", "classes"):
            if getattr(self, name) < 1:
                raise ValueError(f"mlp {name} must be >= 1, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class CNNSpec:
    kind: ClassVar[str] = "cnn"
    channels1: int = 8
    channels2: int = 16

    def __post_init__(self):
        if self.channels1 < 1 or self.channels2 < 1:
            raise ValueError(f"cnn channels must be >= 1, got {self.channels1}, {self.channels2}")


@dataclasses.dataclass(frozen=True)
class TransformerSpec:
    kind: ClassVar[str] = "transformer"
    width: int = 16
    heads: int = 2
    seq_len: int = 8
    mlp_ratio: int = 4

    def __post_init__(self):
        if self.width < 1 or self.heads < 1 or self.seq_len < 1 or self.mlp_ratio < 1:
            raise ValueError(f"transformer sizes must be >= 1: {self}")
        if self.width % self.heads:
            raise ValueError(
                f"heads ({self.heads}) must divide the width ({self.width}): each head gets "
                "width / heads features"
            )

    @property
    def head_size(self) -> int:
        return self.width // self.heads


Spec = MLPSpec | CNNSpec | TransformerSpec
_SPECS = {cls.kind: cls for cls in (MLPSpec, CNNSpec, TransformerSpec)}


def spec_to_dict(spec: Spec) -> dict:
    return {"kind": spec.kind, **dataclasses.asdict(spec)}


def spec_from_dict(d: Mapping) -> Spec:
    d = dict(d)
    kind = d.pop("kind", None)
    if kind not in _SPECS:
        raise ValueError(f"unknown model kind {kind!r}; known: {', '.join(KINDS)}")
    try:
        return _SPECS[kind](**d)
    except TypeError as error:
        raise ValueError(f"not a {kind} spec: {d!r} ({error})") from None


def loss_kind(spec: Spec) -> str:
    """ "crossentropy" (integer labels, logits) or "mse" (the Transformer's regression)."""
    return "mse" if spec.kind == "transformer" else "crossentropy"


# --- weights ------------------------------------------------------------------------------------


def weight_shapes(spec: Spec) -> dict[str, tuple[int, ...]]:
    """{path: shape} in the Keras model's weight order (paths as Keras names them)."""
    if spec.kind == "mlp":
        sizes = [spec.inputs] + [spec.hidden] * spec.depth + [spec.classes]
        out = {}
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            name = "head" if i == spec.depth else f"fc{i + 1}"
            out[f"{name}/kernel"], out[f"{name}/bias"] = (a, b), (b,)
        return out
    if spec.kind == "cnn":
        c1, c2 = spec.channels1, spec.channels2
        half = IMAGE_SIZE // 2
        return {
            "conv1/kernel": (3, 3, 1, c1),
            "conv1/bias": (c1,),
            "conv2/kernel": (3, 3, c1, c2),
            "conv2/bias": (c2,),
            "head/kernel": (half * half * c2, DIGIT_CLASSES),
            "head/bias": (DIGIT_CLASSES,),
        }
    d, h, k, f = spec.width, spec.heads, spec.head_size, spec.width * spec.mlp_ratio
    out = {"ln1/gamma": (d,), "ln1/beta": (d,)}
    for part in ("query", "key", "value"):
        out[f"attn/{part}/kernel"], out[f"attn/{part}/bias"] = (d, h, k), (h, k)
    out["attn/attention_output/kernel"], out["attn/attention_output/bias"] = (h, k, d), (d,)
    out.update({"ln2/gamma": (d,), "ln2/beta": (d,)})
    out.update({"mlp_in/kernel": (d, f), "mlp_in/bias": (f,)})
    out.update({"mlp_out/kernel": (f, d), "mlp_out/bias": (d,)})
    return out


def _fan_in(name: str, shape: tuple[int, ...]) -> int:
    if name.endswith("attention_output/kernel"):
        return shape[0] * shape[1]
    return int(np.prod(shape[:-1])) if len(shape) == 4 else shape[0]


def init_weights(spec: Spec, seed: int) -> dict[str, np.ndarray]:
    """One float32 weight set per (spec, seed): kernels N(0, 2 / fan_in) for relu, 1 / fan_in
    otherwise; biases and LayerNorm offsets N(0, 0.1^2) (non-zero, so their gradients are
    tested too); LayerNorm scales 1 + N(0, 0.1^2)."""
    rng = np.random.default_rng([int(seed), KINDS.index(spec.kind)])
    relu = spec.kind == "cnn" or getattr(spec, "activation", "") == "relu"
    gain = 2.0 if relu else 1.0
    out = {}
    for name, shape in weight_shapes(spec).items():
        if name.endswith("kernel"):
            std = np.sqrt(gain / _fan_in(name, shape))
            value = rng.normal(0.0, std, shape)
        elif name.endswith("gamma"):
            value = 1.0 + 0.1 * rng.normal(size=shape)
        else:
            value = 0.1 * rng.normal(size=shape)
        out[name] = value.astype(np.float32)
    return out


def scale_kernels(weights: Mapping, scale: float) -> dict[str, np.ndarray]:
    """The weights with every kernel multiplied by ``scale`` (an init-scale control)."""
    return {
        k: (np.asarray(v) * np.float32(scale)).astype(np.float32) if k.endswith("kernel") else v
        for k, v in weights.items()
    }


# --- data ---------------------------------------------------------------------------------------


def moons(n: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved half circles, centred and scaled to about [-1.5, 1.5]^2 (tiny_mlp's)."""
    rng = np.random.default_rng([int(seed), 101])
    y_N = np.arange(n) % 2
    angle = np.pi * rng.uniform(size=n)
    upper = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    lower = np.stack([1.0 - np.cos(angle), 0.5 - np.sin(angle)], axis=1)
    x_N2 = np.where(y_N[:, None] == 0, upper, lower) + noise * rng.normal(size=(n, 2))
    x_N2 = (x_N2 - np.array([0.5, 0.25])) / np.array([1.0, 0.5]) * 0.75
    return x_N2.astype(np.float32), y_N.astype(np.int32)


def make_data(
    spec: Spec, seed: int, steps: int, batch: int, points: int = 200, noise: float = 0.1
) -> dict[str, np.ndarray]:
    """The batches every backend sees: x_train/y_train (nb batches, cycled by step), the probe
    batch (x_probe/y_probe: outputs and gradients) and an evaluation set (x_eval/y_eval).

    mlp: ``points`` moons, full batch when ``batch`` >= points (tiny_mlp), else shuffled
    minibatches (train_eval_step); eval on fresh moons;
    cnn: digits split (core.data.digits, seed), ``steps`` shuffled batches of ``batch``;
    transformer: standard normal x_BTD, y_t = x_{t-1}."""
    if steps < 1 or batch < 1:
        raise ValueError(f"steps and batch must be >= 1, got {steps}, {batch}")
    rng = np.random.default_rng([int(seed), 202])
    if spec.kind == "mlp":
        x, y = moons(points, noise, seed)
        x_eval, y_eval = moons(points, noise, seed + 10_000)
        if batch >= points:  # full batch, as tiny_mlp trains
            x_train, y_train = x[None], y[None]
        else:  # shuffled minibatches, one per step, a fresh order every epoch
            epochs = steps * batch // points + 1
            order = np.concatenate([rng.permutation(points) for _ in range(epochs)])
            x_train = x[order[: steps * batch]].reshape(steps, batch, 2)
            y_train = y[order[: steps * batch]].reshape(steps, batch)
    elif spec.kind == "cnn":
        from core.data import digits

        split = digits.load(0.2, seed)
        order = np.concatenate(
            [rng.permutation(len(split.y_train)) for _ in range(steps * batch // 1437 + 1)]
        )[: steps * batch]
        x_train = split.x_train[order].reshape(steps, batch, IMAGE_SIZE, IMAGE_SIZE, 1)
        y_train = split.y_train[order].reshape(steps, batch)
        x_eval, y_eval = split.x_test, split.y_test
    else:
        shape = (steps, batch, spec.seq_len, spec.width)
        x_train = rng.normal(size=shape).astype(np.float32)
        y_train = np.concatenate([np.zeros_like(x_train[:, :, :1]), x_train[:, :, :-1]], axis=2)
        x_eval = rng.normal(size=shape[1:]).astype(np.float32)
        y_eval = np.concatenate([np.zeros_like(x_eval[:, :1]), x_eval[:, :-1]], axis=1)
    return {
        "x_train": np.asarray(x_train, np.float32),
        "y_train": np.asarray(y_train, np.float32 if spec.kind == "transformer" else np.int32),
        "x_probe": np.asarray(x_train[0], np.float32),
        "y_probe": np.asarray(y_train[0], np.float32 if spec.kind == "transformer" else np.int32),
        "x_eval": np.asarray(x_eval, np.float32),
        "y_eval": np.asarray(y_eval, np.float32 if spec.kind == "transformer" else np.int32),
    }


# --- the Keras model (only inside a worker: Keras's backend is fixed per process) ---------------


def build_keras(spec: Spec, placeholder_weights: bool = False):
    """The spec's Keras 3 functional model, named ``spec.kind``.

    ``placeholder_weights``: every weight starts as NumPy zeros instead of Keras's initializers,
    for a caller that sets every weight next (the worker). Under jax each random initializer
    is a threefry program compiled for its shape, seconds of CPU per model, all thrown away.
    """
    import keras
    from keras import layers

    init = {}
    if placeholder_weights:
        init = {"kernel_initializer": _zeros(), "bias_initializer": _zeros()}
    norm_init = {"gamma_initializer": _zeros(), "beta_initializer": _zeros()} if init else {}
    if spec.kind == "mlp":
        x = keras.Input((spec.inputs,), name="x_BD")
        h = x
        for i in range(spec.depth):
            h = layers.Dense(spec.hidden, activation=spec.activation, name=f"fc{i + 1}", **init)(h)
        out = layers.Dense(spec.classes, name="head", **init)(h)
    elif spec.kind == "cnn":
        x = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 1), name="x_BYXK")
        conv = {"padding": "same", "activation": "relu", **init}
        h = layers.Conv2D(spec.channels1, 3, name="conv1", **conv)(x)
        h = layers.MaxPooling2D(2, name="pool")(h)
        h = layers.Conv2D(spec.channels2, 3, name="conv2", **conv)(h)
        h = layers.Flatten(name="flatten")(h)
        out = layers.Dense(DIGIT_CLASSES, name="head", **init)(h)
    else:
        x = keras.Input((spec.seq_len, spec.width), name="x_BTD")
        h = layers.LayerNormalization(epsilon=LN_EPSILON, name="ln1", **norm_init)(x)
        a = layers.MultiHeadAttention(spec.heads, spec.head_size, name="attn", **init)(
            h, h, use_causal_mask=True
        )
        x1 = layers.Add(name="residual1")([x, a])
        h = layers.LayerNormalization(epsilon=LN_EPSILON, name="ln2", **norm_init)(x1)
        wide = spec.width * spec.mlp_ratio
        h = layers.Dense(wide, activation="gelu", name="mlp_in", **init)(h)
        h = layers.Dense(spec.width, name="mlp_out", **init)(h)
        out = layers.Add(name="residual2")([x1, h])
    return keras.Model(x, out, name=spec.kind)


def _zeros():
    """A Keras initializer of zeros made in NumPy: no backend program runs to make them (under
    jax they are placed with ``device_put``: ``jnp.asarray`` compiles a copy per shape)."""
    import keras

    class NumpyZeros(keras.initializers.Initializer):
        def __call__(self, shape, dtype=None):
            zeros = np.zeros(shape, keras.backend.standardize_dtype(dtype or "float32"))
            if keras.backend.backend() == "jax":
                import jax

                return jax.device_put(zeros)
            return zeros

    return NumpyZeros()


def weight_path(model, variable) -> str:
    """A Keras variable's path without the model's own name in front."""
    path = variable.path
    return path.removeprefix(model.name + "/")


def keras_loss(spec: Spec):
    import keras

    if loss_kind(spec) == "mse":
        return keras.losses.MeanSquaredError()
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


# --- the NumPy float64 twin ---------------------------------------------------------------------


def _f64(weights: Mapping) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, np.float64) for k, v in weights.items()}


def _layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + LN_EPSILON) * gamma + beta


def _gelu(x):
    from scipy import special

    return 0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0)))


def _conv_same_3x3(x_BYXK, kernel, bias):
    b, y, x, _ = x_BYXK.shape
    padded = np.pad(x_BYXK, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((b, y, x, kernel.shape[-1]))
    for i in range(3):
        for j in range(3):
            out += padded[:, i : i + y, j : j + x, :] @ kernel[i, j]
    return out + bias


def attention_reference(x_BTD, w: Mapping, heads: int, causal: bool = True) -> np.ndarray:
    """Multi-head self-attention in float64, causal unless told (Keras MultiHeadAttention's
    weight layout: query/key/value kernels (D, H, K), output kernel (H, K, D))."""
    q = np.einsum("btd,dhk->bthk", x_BTD, w["attn/query/kernel"]) + w["attn/query/bias"]
    k = np.einsum("btd,dhk->bthk", x_BTD, w["attn/key/kernel"]) + w["attn/key/bias"]
    v = np.einsum("btd,dhk->bthk", x_BTD, w["attn/value/kernel"]) + w["attn/value/bias"]
    scores = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(q.shape[-1])
    t = x_BTD.shape[1]
    if causal:
        scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
    scores = scores - scores.max(-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(-1, keepdims=True)
    o = np.einsum("bhts,bshk->bthk", probs, v)
    out = np.einsum("bthk,hkd->btd", o, w["attn/attention_output/kernel"])
    return out + w["attn/attention_output/bias"]


def forward_reference(spec: Spec, weights: Mapping, x, causal: bool = True) -> np.ndarray:
    """The model's output in NumPy float64, from the same weights (written without Keras);
    ``causal=False`` drops the Transformer's mask (to show that the mask matters)."""
    w = _f64(weights)
    x = np.asarray(x, np.float64)
    if spec.kind == "mlp":
        act = np.tanh if spec.activation == "tanh" else (lambda z: np.maximum(z, 0.0))
        h = x
        for i in range(spec.depth):
            h = act(h @ w[f"fc{i + 1}/kernel"] + w[f"fc{i + 1}/bias"])
        return h @ w["head/kernel"] + w["head/bias"]
    if spec.kind == "cnn":
        h = np.maximum(_conv_same_3x3(x, w["conv1/kernel"], w["conv1/bias"]), 0.0)
        b, y, xx, k = h.shape
        h = h.reshape(b, y // 2, 2, xx // 2, 2, k).max(axis=(2, 4))
        h = np.maximum(_conv_same_3x3(h, w["conv2/kernel"], w["conv2/bias"]), 0.0)
        return h.reshape(b, -1) @ w["head/kernel"] + w["head/bias"]
    h = _layer_norm(x, w["ln1/gamma"], w["ln1/beta"])
    x1 = x + attention_reference(h, w, spec.heads, causal)
    h = _layer_norm(x1, w["ln2/gamma"], w["ln2/beta"])
    h = _gelu(h @ w["mlp_in/kernel"] + w["mlp_in/bias"])
    return x1 + h @ w["mlp_out/kernel"] + w["mlp_out/bias"]


def loss_from_outputs(spec: Spec, outputs, y) -> float:
    """Mean cross-entropy of logits against integer labels, or mean squared error (float64)."""
    outputs = np.asarray(outputs, np.float64)
    if loss_kind(spec) == "mse":
        return float(np.mean((outputs - np.asarray(y, np.float64)) ** 2))
    shifted = outputs - outputs.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    labels = np.asarray(y).astype(int)
    return float(-np.mean(log_probs[np.arange(len(labels)), labels]))


def loss_reference(spec: Spec, weights: Mapping, x, y) -> float:
    return loss_from_outputs(spec, forward_reference(spec, weights, x), y)


# A float64 central difference with step h has truncation error ~h^2 |L'''| / 6 and rounding
# error ~1e-16 |L| / h: h = 1e-5 keeps both near 1e-10, far below float32's 1e-5 tolerance.
FD_STEP = 1e-5
FD_COORDINATES = 4  # sampled coordinates per weight tensor (every tensor is covered)


def gradient_coordinates(spec: Spec, seed: int = 0, per_tensor: int = FD_COORDINATES):
    """{path: flat indices} sampled per weight tensor (deterministic)."""
    rng = np.random.default_rng([int(seed), 303])
    out = {}
    for name, shape in weight_shapes(spec).items():
        size = int(np.prod(shape))
        out[name] = np.sort(rng.choice(size, size=min(per_tensor, size), replace=False))
    return out


def gradient_reference(spec: Spec, weights: Mapping, x, y, coordinates: Mapping) -> dict:
    """d loss / d weight at the sampled coordinates, by float64 central differences."""
    base = _f64(weights)
    out = {}
    for name, indices in coordinates.items():
        values = []
        for index in indices:
            plus, minus = dict(base), dict(base)
            flat = base[name].ravel()
            for sign, target in ((1.0, plus), (-1.0, minus)):
                moved = flat.copy()
                moved[index] += sign * FD_STEP
                target[name] = moved.reshape(base[name].shape)
            values.append(
                (loss_reference(spec, plus, x, y) - loss_reference(spec, minus, x, y))
                / (2 * FD_STEP)
            )
        out[name] = np.asarray(values)
    return out


def mlp_gradient_reference(spec: MLPSpec, weights: Mapping, x, y) -> dict[str, np.ndarray]:
    """The MLP's exact gradient by hand-written backpropagation in float64 (tests the finite
    differences above on a case with a closed form)."""
    w = _f64(weights)
    names = [f"fc{i + 1}" for i in range(spec.depth)] + ["head"]
    hs, zs = [np.asarray(x, np.float64)], []
    for i, name in enumerate(names):
        z = hs[-1] @ w[f"{name}/kernel"] + w[f"{name}/bias"]
        zs.append(z)
        if i < spec.depth:
            hs.append(np.tanh(z) if spec.activation == "tanh" else np.maximum(z, 0.0))
    logits = zs[-1]
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    labels = np.asarray(y).astype(int)
    delta = p
    delta[np.arange(len(labels)), labels] -= 1.0
    delta /= len(labels)
    grads = {}
    for i in range(len(names) - 1, -1, -1):
        grads[f"{names[i]}/kernel"] = hs[i].T @ delta
        grads[f"{names[i]}/bias"] = delta.sum(0)
        if i > 0:
            back = delta @ w[f"{names[i]}/kernel"].T
            z = zs[i - 1]
            delta = back * (1 - np.tanh(z) ** 2 if spec.activation == "tanh" else (z > 0))
    return grads
