"""DigitsNet written out in NumPy float64: the framework-free reference of the parity lesson.

The lesson's formats (JAX, PyTorch, ONNX Runtime, TensorFlow, LiteRT, Keras) are each checked
against this, from the same torch-layout weights (the names and shapes of a torch state dict:
conv OIHW, linear (out, in)) and the same x_BHWC batch. Every step is spelled out, so the
layout rules are visible in one place: the convs cross-correlate with padding 1 on every side
(stride 1, then 2), BatchNorm uses the running statistics, act1/act2 are the exact (erf) GELU and
act3 the tanh one, conv2's map is flattened in NHWC order before fc1, and a Linear computes
x @ weight.T + bias.

Dimension glossary: B batch, H/W rows/columns, C channels, D features, K classes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy import special

EPSILON = 1e-5  # BatchNorm and LayerNorm, as the spec fixes them


def conv_nhwc(x_BHWC: np.ndarray, weight_OIHW: np.ndarray, bias_O, stride: int) -> np.ndarray:
    """A 3x3 cross-correlation, padding 1 on every side, NHWC in and out, float64."""
    x = np.pad(np.asarray(x_BHWC, np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    weight = np.asarray(weight_OIHW, np.float64)
    if weight.shape[2:] != (3, 3) or weight.shape[1] != x.shape[3]:
        raise ValueError(f"weight {weight.shape} does not fit input channels {x.shape[3]}")
    b, hp, wp, _ = x.shape
    ho, wo = (hp - 3) // stride + 1, (wp - 3) // stride + 1
    out = np.zeros((b, ho, wo, weight.shape[0]))
    for dy in range(3):
        for dx in range(3):
            window = x[:, dy : dy + stride * ho : stride, dx : dx + stride * wo : stride, :]
            out += np.einsum("bhwi,oi->bhwo", window, weight[:, :, dy, dx])
    return out + np.asarray(bias_O, np.float64)


def gelu_exact(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def logits_float64(weights: Mapping[str, np.ndarray], x_BHWC) -> np.ndarray:
    """DigitsNet's logits_BK in float64 from torch-layout ``weights`` and x_BHWC (B, 8, 8, 1)."""
    x = np.asarray(x_BHWC, np.float64)
    if x.ndim != 4 or x.shape[1:] != (8, 8, 1) or len(x) == 0:
        raise ValueError(f"x_BHWC must have shape (B, 8, 8, 1), got {x.shape}")
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    h = conv_nhwc(x, w["conv1.weight"], w["conv1.bias"], stride=1)
    h = (h - w["bn1.running_mean"]) / np.sqrt(w["bn1.running_var"] + EPSILON)
    h = gelu_exact(h * w["bn1.weight"] + w["bn1.bias"])
    h = gelu_exact(conv_nhwc(h, w["conv2.weight"], w["conv2.bias"], stride=2))
    h = h.reshape(len(h), -1)  # NHWC order
    h = h @ w["fc1.weight"].T + w["fc1.bias"]
    mean, var = h.mean(axis=1, keepdims=True), h.var(axis=1, keepdims=True)
    h = (h - mean) / np.sqrt(var + EPSILON) * w["ln1.weight"] + w["ln1.bias"]
    return gelu_tanh(h) @ w["fc2.weight"].T + w["fc2.bias"]
