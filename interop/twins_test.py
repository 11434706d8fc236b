"""DigitsNet's twins against a NumPy float64 forward pass written from the spec."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from core import numerics
from interop import torch_flax, twins

TOL = numerics.tolerance("float32")


def _conv_reference(x_BHWC, w_OIHW, b_O, stride):
    """3x3 cross-correlation with one pixel of zeros on every side, loop over output pixels."""
    x = np.pad(np.asarray(x_BHWC, np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    w = np.asarray(w_OIHW, np.float64)
    out_size = (x.shape[1] - 3) // stride + 1
    out = np.zeros((x.shape[0], out_size, out_size, w.shape[0]))
    for i in range(out_size):
        for j in range(out_size):
            patch = x[:, i * stride : i * stride + 3, j * stride : j * stride + 3, :]  # B,3,3,I
            out[:, i, j, :] = np.einsum("bhwi,oihw->bo", patch, w)
    return out + np.asarray(b_O, np.float64)


_erf = np.vectorize(math.erf)


def _gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def reference_activations(w, x_BHWC):
    """DigitsNet in NumPy float64 from torch-layout weights, straight from the spec."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    out = {}
    h = _conv_reference(x_BHWC, w["conv1.weight"], w["conv1.bias"], 1)
    out["conv1"] = h
    h = (h - w["bn1.running_mean"]) / np.sqrt(w["bn1.running_var"] + 1e-5)
    h = h * w["bn1.weight"] + w["bn1.bias"]
    out["bn1"] = h
    h = out["act1"] = _gelu(h, False)
    h = out["conv2"] = _conv_reference(h, w["conv2.weight"], w["conv2.bias"], 2)
    h = out["act2"] = _gelu(h, False)
    h = out["flatten"] = h.reshape(h.shape[0], -1)
    h = out["fc1"] = h @ w["fc1.weight"].T + w["fc1.bias"]
    mean, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
    h = out["ln1"] = (h - mean) / np.sqrt(var + 1e-5) * w["ln1.weight"] + w["ln1.bias"]
    h = out["act3"] = _gelu(h, True)
    out["fc2"] = h @ w["fc2.weight"].T + w["fc2.bias"]
    return out


@pytest.mark.parametrize("seed,batch", [(0, 1), (1, 5), (2, 16)])
def test_both_twins_match_a_float64_forward_layer_by_layer(seed, batch):
    weights = twins.seeded_weights(seed)
    x = twins.digits_batch(batch, seed + 10)
    reference = reference_activations(weights, x)
    nnx_run = twins.nnx_activations(torch_flax.seeded_nnx(seed), x)
    torch_run = twins.torch_activations(twins.seeded_torch(seed), x)
    for run in (nnx_run, torch_run):
        assert [name for name, _ in run] == list(twins.LAYERS)
        for name, array in run:
            assert array.dtype == np.float32, name
            assert numerics.scaled_max_error(array, reference[name]) <= TOL, name
    assert nnx_run[-1][1].shape == (batch, twins.CLASSES)
    assert dict(nnx_run)["conv2"].shape == (batch, 4, 4, 16)


def test_same_padding_at_stride_two_is_not_the_spec():
    """Why conv2 pads explicitly: JAX's "SAME" pads (0, 1) at stride 2, torch (1, 1)."""
    model = torch_flax.seeded_nnx(0)
    x = twins.digits_batch(4, 0)
    h = model.bn1(model.conv1(jnp.asarray(x)))
    same = nnx.Conv(8, 16, (3, 3), strides=2, padding="SAME", rngs=nnx.Rngs(0))
    same.kernel[...], same.bias[...] = model.conv2.kernel[...], model.conv2.bias[...]
    explicit = model.conv2(h)
    assert same(h).shape == explicit.shape == (4, 4, 4, 16)
    assert numerics.scaled_max_error(same(h), explicit) > 100 * TOL


def test_nnx_call_equals_the_last_activation_and_jit():
    model = torch_flax.seeded_nnx(3)
    x = twins.digits_batch(6, 3)
    direct = np.asarray(model(jnp.asarray(x)))
    assert numerics.scaled_max_error(direct, twins.nnx_activations(model, x)[-1][1]) <= TOL


def test_seeded_weights_are_deterministic_and_the_statistics_nontrivial():
    a, b, c = twins.seeded_weights(0), twins.seeded_weights(0), twins.seeded_weights(1)
    assert list(a) == list(twins.TORCH_SHAPES)
    for name, shape in twins.TORCH_SHAPES.items():
        assert a[name].shape == shape and a[name].tobytes() == b[name].tobytes()
    assert not np.array_equal(a["fc1.weight"], c["fc1.weight"])
    assert a["bn1.num_batches_tracked"].dtype == np.int64
    mean, var = a["bn1.running_mean"], a["bn1.running_var"]
    assert np.all(var > 0) and np.min(np.abs(var - 1)) > 0.1 and np.max(np.abs(mean)) > 0.05
    # The statistics are near conv1's own on digits, so BatchNorm keeps activations O(1).
    h = twins.nnx_activations(torch_flax.seeded_nnx(0), twins.digits_batch(128, 5))
    assert 0.2 < float(np.std(dict(h)["bn1"])) < 5


def test_torch_twin_with_torch_init_loads_into_nnx_and_agrees():
    import torch

    torch.manual_seed(0)
    module = twins.torch_model()  # torch's own init: a state dict from torch, not NumPy
    model = torch_flax.from_torch_model(module)
    x = twins.digits_batch(8, 1)
    assert (
        numerics.scaled_max_error(
            twins.nnx_activations(model, x)[-1][1], twins.torch_activations(module, x)[-1][1]
        )
        <= TOL
    )


def test_bad_inputs_and_configs_are_refused():
    model = torch_flax.seeded_nnx(0)
    with pytest.raises(ValueError, match=r"x_BHWC must have shape \(B, 8, 8, 1\)"):
        model(jnp.zeros((2, 1, 8, 8)))
    with pytest.raises(ValueError, match="x_BCHW"):
        twins.seeded_torch(0).activations(__import__("torch").zeros(2, 8, 8, 1))
    with pytest.raises(ValueError, match="bn_epsilon"):
        twins.Config(bn_epsilon=0)
    with pytest.raises(ValueError, match="gelu_approximate"):
        twins.Config(gelu_approximate=(True, False))
    with pytest.raises(ValueError, match="flatten_order"):
        twins.Config(flatten_order="CHW")
    with pytest.raises(ValueError, match="batch"):
        twins.digits_batch(0)
    assert twins.SPEC.differences(twins.Config(ln_epsilon=1e-6)) == ["ln_epsilon: 1e-05 vs 1e-06"]
