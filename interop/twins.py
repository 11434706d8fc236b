"""DigitsNet, the course's interop reference model, twice: a Flax NNX module and a torch module.

The spec (.briefs/twin_spec.md, fixed for every interop lesson): digits images in [0, 1],
JAX layout x_BHWC (B, 8, 8, 1), torch layout x_BCHW (B, 1, 8, 8), logits_BK (B, 10):

    conv1   3x3, 1 -> 8, stride 1, padding (1, 1) on both axes, bias
    bn1     BatchNorm(8), inference mode (running statistics), epsilon 1e-5
    act1    GELU, exact (erf)
    conv2   3x3, 8 -> 16, stride 2, padding (1, 1) explicit (JAX's "SAME" pads (0, 1) here)
    act2    GELU, exact
    flatten NHWC order; the torch twin permutes NCHW -> NHWC first, so fc1 holds the same numbers
    fc1     Linear 256 -> 64, bias
    ln1     LayerNorm(64), epsilon 1e-5, scale and bias
    act3    GELU, tanh approximation
    fc2     Linear 64 -> 10, bias

Both twins return every named layer's activation (``activations``), in NHWC for the conv layers
(the torch twin permutes its NCHW maps), so two runs compare layer by layer
(interop/activations.py). What is not a weight (the epsilons, each GELU's approximation, the
flatten order) is a ``Config``; a converter compares configs and refuses a mismatch.

``seeded_weights(seed)`` makes torch-layout weights (NumPy, torch's state-dict names) with
BatchNorm running statistics measured on digits images (not torch's 0/1 defaults, so a
conversion that forgets them is caught); the NNX twin holding them is a conversion
(``torch_flax.seeded_nnx``), so this module never imports the converter. torch is imported
inside the functions that need it.

Dimension glossary: B batch, H/W rows/columns, C channels, D features, K classes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

LAYERS: tuple[str, ...] = (
    "conv1",
    "bn1",
    "act1",
    "conv2",
    "act2",
    "flatten",
    "fc1",
    "ln1",
    "act3",
    "fc2",
)
IMAGE_SIZE = 8
CHANNELS = (8, 16)
HIDDEN = 64
CLASSES = 10
FEATURES = (IMAGE_SIZE // 2) ** 2 * CHANNELS[1]  # 256: conv2's 4x4x16 map, flattened

# torch-layout shapes of every state-dict entry (the names torch's state_dict() gives).
TORCH_SHAPES: dict[str, tuple[int, ...]] = {
    "conv1.weight": (CHANNELS[0], 1, 3, 3),
    "conv1.bias": (CHANNELS[0],),
    "bn1.weight": (CHANNELS[0],),
    "bn1.bias": (CHANNELS[0],),
    "bn1.running_mean": (CHANNELS[0],),
    "bn1.running_var": (CHANNELS[0],),
    "bn1.num_batches_tracked": (),
    "conv2.weight": (CHANNELS[1], CHANNELS[0], 3, 3),
    "conv2.bias": (CHANNELS[1],),
    "fc1.weight": (HIDDEN, FEATURES),
    "fc1.bias": (HIDDEN,),
    "ln1.weight": (HIDDEN,),
    "ln1.bias": (HIDDEN,),
    "fc2.weight": (CLASSES, HIDDEN),
    "fc2.bias": (CLASSES,),
}

FLATTEN_ORDERS = ("NHWC", "NCHW")


@dataclasses.dataclass(frozen=True)
class Config:
    """What DigitsNet computes that is not a weight: a conversion must carry it, not guess it.

    Library defaults differ (flax LayerNorm epsilon 1e-6, Keras BatchNorm 1e-3, torch 1e-5;
    jax.nn.gelu is tanh-approximate by default, torch's GELU exact), which is why a converter
    compares these and refuses a mismatch instead of taking the target library's default.
    """

    bn_epsilon: float = 1e-5
    ln_epsilon: float = 1e-5
    gelu_approximate: tuple[bool, bool, bool] = (False, False, True)  # act1, act2, act3
    flatten_order: str = "NHWC"

    def __post_init__(self):
        for name in ("bn_epsilon", "ln_epsilon"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value < 1):
                raise ValueError(f"{name} must be a float in (0, 1), got {value!r}")
        approx = tuple(self.gelu_approximate)
        if len(approx) != 3 or not all(isinstance(a, bool) for a in approx):
            raise ValueError(
                f"gelu_approximate is three booleans (act1, act2, act3), got {approx!r}"
            )
        object.__setattr__(self, "gelu_approximate", approx)
        if self.flatten_order not in FLATTEN_ORDERS:
            raise ValueError(
                f"flatten_order must be one of {FLATTEN_ORDERS}, got {self.flatten_order!r}"
            )

    def differences(self, other: Config) -> list[str]:
        """The fields where ``other`` differs, as "field: mine vs other" lines (empty: equal)."""
        lines = []
        for field in dataclasses.fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if mine != theirs:
                lines.append(f"{field.name}: {mine!r} vs {theirs!r}")
        return lines


SPEC = Config()


class BatchCount(nnx.Variable):
    """torch's BatchNorm ``num_batches_tracked``: not a parameter, not a statistic NNX uses.

    Kept on the NNX twin only so torch -> NNX -> torch returns the same state dict bit for bit;
    inference ignores it (torch reads it only when training with momentum=None).
    """


class NNXDigitsNet(nnx.Module):
    """DigitsNet in Flax NNX: x_BHWC (B, 8, 8, 1) float32 -> logits_BK (B, 10)."""

    def __init__(self, config: Config = SPEC, *, rngs: nnx.Rngs):
        self.config = config
        padding = ((1, 1), (1, 1))
        self.conv1 = nnx.Conv(1, CHANNELS[0], (3, 3), strides=1, padding=padding, rngs=rngs)
        self.bn1 = nnx.BatchNorm(
            CHANNELS[0],
            use_running_average=True,
            momentum=0.9,  # torch momentum 0.1: flax keeps 0.9 of the old average
            epsilon=config.bn_epsilon,
            use_fast_variance=False,
            rngs=rngs,
        )
        self.bn1_num_batches = BatchCount(jnp.zeros((), jnp.int32))
        self.conv2 = nnx.Conv(
            CHANNELS[0], CHANNELS[1], (3, 3), strides=2, padding=padding, rngs=rngs
        )
        self.fc1 = nnx.Linear(FEATURES, HIDDEN, rngs=rngs)
        self.ln1 = nnx.LayerNorm(
            HIDDEN, epsilon=config.ln_epsilon, use_fast_variance=False, rngs=rngs
        )
        self.fc2 = nnx.Linear(HIDDEN, CLASSES, rngs=rngs)

    def activations(self, x_BHWC: jax.Array) -> list[tuple[str, jax.Array]]:
        """Every named layer's output, in ``LAYERS`` order (conv maps NHWC)."""
        check_input(x_BHWC, "x_BHWC", (IMAGE_SIZE, IMAGE_SIZE, 1))
        approx = self.config.gelu_approximate
        out = []
        h = self.conv1(x_BHWC)
        out.append(("conv1", h))
        h = self.bn1(h)
        out.append(("bn1", h))
        h = jax.nn.gelu(h, approximate=approx[0])
        out.append(("act1", h))
        h = self.conv2(h)
        out.append(("conv2", h))
        h = jax.nn.gelu(h, approximate=approx[1])
        out.append(("act2", h))
        if self.config.flatten_order == "NCHW":
            h = jnp.transpose(h, (0, 3, 1, 2))
        h = h.reshape(h.shape[0], -1)
        out.append(("flatten", h))
        h = self.fc1(h)
        out.append(("fc1", h))
        h = self.ln1(h)
        out.append(("ln1", h))
        h = jax.nn.gelu(h, approximate=approx[2])
        out.append(("act3", h))
        h = self.fc2(h)
        out.append(("fc2", h))
        return out

    def __call__(self, x_BHWC: jax.Array) -> jax.Array:
        return self.activations(x_BHWC)[-1][1]


def check_input(x, name: str, tail: tuple[int, ...]) -> None:
    """ValueError unless ``x`` is (B, *tail) with B >= 1."""
    shape = tuple(np.shape(x))
    if len(shape) != 1 + len(tail) or shape[1:] != tail or shape[0] < 1:
        raise ValueError(f"{name} must have shape (B, {', '.join(map(str, tail))}), got {shape}")


def nnx_model(config: Config = SPEC, seed: int = 0) -> NNXDigitsNet:
    """A freshly initialised NNX twin (flax's own init; BatchNorm statistics 0 and 1)."""
    return NNXDigitsNet(config, rngs=nnx.Rngs(seed))


def torch_module_class():
    """The torch twin's class (built on first call: torch is imported here, not at import)."""
    global _TORCH_CLASS
    if _TORCH_CLASS is not None:
        return _TORCH_CLASS
    import torch
    from torch import nn
    from torch.nn import functional

    class TorchDigitsNet(nn.Module):
        """DigitsNet in torch: x_BCHW (B, 1, 8, 8) float32 -> logits_BK (B, 10); eval() for
        inference (BatchNorm on running statistics), as the NNX twin always is."""

        def __init__(self, config: Config = SPEC):
            super().__init__()
            self.config = config
            self.conv1 = nn.Conv2d(1, CHANNELS[0], 3, stride=1, padding=1)
            self.bn1 = nn.BatchNorm2d(CHANNELS[0], eps=config.bn_epsilon, momentum=0.1)
            self.conv2 = nn.Conv2d(CHANNELS[0], CHANNELS[1], 3, stride=2, padding=1)
            self.fc1 = nn.Linear(FEATURES, HIDDEN)
            self.ln1 = nn.LayerNorm(HIDDEN, eps=config.ln_epsilon)
            self.fc2 = nn.Linear(HIDDEN, CLASSES)

        def activations(self, x_BCHW) -> list[tuple[str, Any]]:
            """Every named layer's output in ``LAYERS`` order; conv maps permuted to NHWC."""
            check_input(x_BCHW, "x_BCHW", (1, IMAGE_SIZE, IMAGE_SIZE))
            modes = ["tanh" if a else "none" for a in self.config.gelu_approximate]
            nhwc = lambda t: t.permute(0, 2, 3, 1)  # noqa: E731
            out = []
            h = self.conv1(x_BCHW)
            out.append(("conv1", nhwc(h)))
            h = self.bn1(h)
            out.append(("bn1", nhwc(h)))
            h = functional.gelu(h, approximate=modes[0])
            out.append(("act1", nhwc(h)))
            h = self.conv2(h)
            out.append(("conv2", nhwc(h)))
            h = functional.gelu(h, approximate=modes[1])
            out.append(("act2", nhwc(h)))
            if self.config.flatten_order == "NHWC":
                h = nhwc(h)
            h = torch.flatten(h, 1)
            out.append(("flatten", h))
            h = self.fc1(h)
            out.append(("fc1", h))
            h = self.ln1(h)
            out.append(("ln1", h))
            h = functional.gelu(h, approximate=modes[2])
            out.append(("act3", h))
            h = self.fc2(h)
            out.append(("fc2", h))
            return out

        def forward(self, x_BCHW):
            return self.activations(x_BCHW)[-1][1]

    _TORCH_CLASS = TorchDigitsNet
    return TorchDigitsNet


_TORCH_CLASS = None


def torch_model(weights: dict | None = None, config: Config = SPEC):
    """The torch twin in eval mode, loaded with torch-layout ``weights`` (NumPy or tensors;
    ``load_state_dict(strict=True)``: a missing or extra name raises) or torch's own init."""
    import torch

    torch_class = torch_module_class()
    model = torch_class(config)
    if weights is not None:
        state = {k: torch.from_numpy(np.array(v)) for k, v in weights.items()}  # copies
        model.load_state_dict(state, strict=True)
    return model.eval()


def torch_activations(model, x_BHWC) -> list[tuple[str, np.ndarray]]:
    """The torch twin's activations for NHWC images (transposed to NCHW for torch), NumPy."""
    import torch

    x_BCHW = np.ascontiguousarray(np.transpose(np.asarray(x_BHWC, np.float32), (0, 3, 1, 2)))
    with torch.no_grad():
        pairs = model.activations(torch.from_numpy(x_BCHW))
    return [(name, t.detach().cpu().numpy()) for name, t in pairs]


def nnx_activations(model: NNXDigitsNet, x_BHWC) -> list[tuple[str, np.ndarray]]:
    """The NNX twin's activations for NHWC images, NumPy."""
    arrays = _nnx_activations(model, jnp.asarray(x_BHWC, jnp.float32))
    return [(name, np.asarray(a)) for name, a in zip(LAYERS, arrays, strict=True)]


@nnx.jit
def _nnx_activations(model, x_BHWC):
    return tuple(a for _, a in model.activations(x_BHWC))


def digits_batch(batch: int, seed: int = 0) -> np.ndarray:
    """``batch`` digits images x_BHWC float32 in [0, 1], drawn without replacement by ``seed``."""
    from core.data import digits

    images, _ = digits.load_all()
    if not 1 <= batch <= len(images):
        raise ValueError(f"batch must be in 1..{len(images)}, got {batch}")
    index = np.random.default_rng(seed).choice(len(images), size=batch, replace=False)
    return images[np.sort(index)]


def seeded_weights(seed: int = 0, calibration: int = 256) -> dict[str, np.ndarray]:
    """Torch-layout DigitsNet weights (NumPy float32; torch's state-dict names and shapes).

    Convs and linears: torch's default init distribution (uniform +-1/sqrt(fan_in)) from a
    NumPy generator seeded by ``seed`` (the same numbers on every machine, no torch needed);
    BatchNorm scale ~ U(0.5, 1.5), bias ~ N(0, 0.2); running mean and variance measured on
    ``calibration`` digits images through conv1 (float64), then perturbed, so they are neither
    0/1 nor the batch's own statistics; LayerNorm scale ~ U(0.5, 1.5), bias ~ N(0, 0.2);
    num_batches_tracked = calibration batches counted (int64).
    """
    rng = np.random.default_rng(seed)

    def uniform(shape, fan_in):
        bound = 1.0 / np.sqrt(fan_in)
        return rng.uniform(-bound, bound, size=shape)

    w = {}
    for name, (fan_in,) in {"conv1": (9,), "conv2": (9 * CHANNELS[0],)}.items():
        w[f"{name}.weight"] = uniform(TORCH_SHAPES[f"{name}.weight"], fan_in)
        w[f"{name}.bias"] = uniform(TORCH_SHAPES[f"{name}.bias"], fan_in)
    for name, fan_in in {"fc1": FEATURES, "fc2": HIDDEN}.items():
        w[f"{name}.weight"] = uniform(TORCH_SHAPES[f"{name}.weight"], fan_in)
        w[f"{name}.bias"] = uniform(TORCH_SHAPES[f"{name}.bias"], fan_in)
    for name, size in {"bn1": CHANNELS[0], "ln1": HIDDEN}.items():
        w[f"{name}.weight"] = rng.uniform(0.5, 1.5, size=size)
        w[f"{name}.bias"] = rng.normal(0.0, 0.2, size=size)
    conv1 = conv_nchw_reference(
        np.transpose(digits_batch(calibration, seed), (0, 3, 1, 2)),
        w["conv1.weight"],
        w["conv1.bias"],
        stride=1,
    )
    mean = conv1.mean(axis=(0, 2, 3))
    var = conv1.var(axis=(0, 2, 3))
    w["bn1.running_mean"] = mean + rng.normal(0.0, 0.05, size=mean.shape)
    w["bn1.running_var"] = var * rng.uniform(0.8, 1.25, size=var.shape)
    weights = {k: v.astype(np.float32) for k, v in w.items()}
    weights["bn1.num_batches_tracked"] = np.array(int(rng.integers(10, 1000)), np.int64)
    return {k: weights[k] for k in TORCH_SHAPES}


def conv_nchw_reference(x_BCHW, weight_OIHW, bias_O, stride: int) -> np.ndarray:
    """A 3x3 convolution, padding 1, in NumPy float64 (torch's layout and cross-correlation)."""
    x = np.pad(np.asarray(x_BCHW, np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    weight = np.asarray(weight_OIHW, np.float64)
    b, _, hp, wp = x.shape
    ho, wo = (hp - 3) // stride + 1, (wp - 3) // stride + 1
    out = np.zeros((b, weight.shape[0], ho, wo))
    for dy in range(3):
        for dx in range(3):
            window = x[:, :, dy : dy + stride * ho : stride, dx : dx + stride * wo : stride]
            out += np.einsum("bihw,oi->bohw", window, weight[:, :, dy, dx])
    return out + np.asarray(bias_O, np.float64)[None, :, None, None]


def seeded_torch(seed: int = 0, config: Config = SPEC):
    """The torch twin (eval mode) holding ``seeded_weights(seed)``."""
    return torch_model(seeded_weights(seed), config)
