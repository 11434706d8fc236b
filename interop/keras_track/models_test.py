"""The specs, the NumPy weights and data, and the NumPy float64 twin on known cases."""

import numpy as np
import pytest

from interop.keras_track import models

SPECS = [
    models.MLPSpec(),
    models.MLPSpec(hidden=5, depth=3, activation="relu"),
    models.CNNSpec(),
    models.CNNSpec(channels1=4, channels2=6),
    models.TransformerSpec(),
    models.TransformerSpec(width=12, heads=3, seq_len=5),
]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_weights_are_deterministic_and_shaped(spec):
    a, b = models.init_weights(spec, 3), models.init_weights(spec, 3)
    assert list(a) == list(models.weight_shapes(spec))
    for name, shape in models.weight_shapes(spec).items():
        assert a[name].shape == shape and a[name].dtype == np.float32
        np.testing.assert_array_equal(a[name], b[name])
    c = models.init_weights(spec, 4)
    assert any(not np.array_equal(a[n], c[n]) for n in a)


def test_spec_round_trip_and_refusals():
    for spec in SPECS:
        assert models.spec_from_dict(models.spec_to_dict(spec)) == spec
    with pytest.raises(ValueError, match="divide"):
        models.TransformerSpec(width=10, heads=3)
    with pytest.raises(ValueError, match="unknown model kind"):
        models.spec_from_dict({"kind": "rnn"})
    with pytest.raises(ValueError, match="activation"):
        models.MLPSpec(activation="gelu")


def test_mlp_forward_on_a_known_case():
    spec = models.MLPSpec(inputs=2, hidden=2, depth=1, classes=2, activation="relu")
    w = {
        "fc1/kernel": np.array([[1.0, -1.0], [2.0, 0.5]]),
        "fc1/bias": np.array([0.5, 0.0]),
        "head/kernel": np.array([[1.0, 0.0], [0.0, 3.0]]),
        "head/bias": np.array([0.0, -1.0]),
    }
    x = np.array([[1.0, 1.0], [-1.0, 0.0]])
    # h = relu([3.5, -0.5]) = [3.5, 0]; relu([-0.5, 1]) = [0, 1]
    expected = np.array([[3.5, -1.0], [0.0, 2.0]])
    np.testing.assert_allclose(models.forward_reference(spec, w, x), expected)
    # cross-entropy of logits [0, log 3] for label 1: -log(3/4)
    assert models.loss_from_outputs(spec, np.array([[0.0, np.log(3.0)]]), [1]) == pytest.approx(
        -np.log(0.75)
    )


def test_cnn_conv_matches_a_direct_sum():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4, 5, 3))
    kernel, bias = rng.normal(size=(3, 3, 3, 2)), rng.normal(size=2)
    got = models._conv_same_3x3(x, kernel, bias)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    for b, y, xx, o in [(0, 0, 0, 0), (1, 3, 4, 1), (0, 2, 1, 1)]:
        direct = np.sum(padded[b, y : y + 3, xx : xx + 3, :] * kernel[..., o]) + bias[o]
        assert got[b, y, xx, o] == pytest.approx(direct)


def test_causal_attention_ignores_the_future():
    spec = models.TransformerSpec(width=8, heads=2, seq_len=6)
    w = models.init_weights(spec, 0)
    x = np.random.default_rng(1).normal(size=(1, 6, 8))
    changed = x.copy()
    changed[0, 4:] += 5.0
    a, b = (models.attention_reference(v, w, spec.heads) for v in (x, changed))
    np.testing.assert_allclose(a[0, :4], b[0, :4], atol=1e-12)
    assert np.abs(a[0, 4:] - b[0, 4:]).max() > 1e-3
    # position 0 attends to itself only: its output is v_0 projected
    v0 = np.einsum("d,dhk->hk", x[0, 0], w["attn/value/kernel"]) + w["attn/value/bias"]
    out0 = np.einsum("hk,hkd->d", v0, w["attn/attention_output/kernel"])
    np.testing.assert_allclose(a[0, 0], out0 + w["attn/attention_output/bias"], atol=1e-12)


@pytest.mark.parametrize("spec", [SPECS[0], SPECS[1]], ids=str)
def test_finite_differences_match_the_mlp_backprop(spec):
    w = models.init_weights(spec, 2)
    data = models.make_data(spec, 2, steps=1, batch=1, points=40)
    x, y = data["x_probe"], data["y_probe"]
    exact = models.mlp_gradient_reference(spec, w, x, y)
    coords = models.gradient_coordinates(spec, per_tensor=6)
    fd = models.gradient_reference(spec, w, x, y, coords)
    for name, indices in coords.items():
        np.testing.assert_allclose(fd[name], exact[name].ravel()[indices], atol=1e-8)


@pytest.mark.parametrize("spec", [SPECS[0], SPECS[2], SPECS[5]], ids=str)
def test_data_batches(spec):
    data = models.make_data(spec, 0, steps=3, batch=4)
    again = models.make_data(spec, 0, steps=3, batch=4)
    for k in data:
        np.testing.assert_array_equal(data[k], again[k])
    np.testing.assert_array_equal(data["x_probe"], data["x_train"][0])
    out = models.forward_reference(spec, models.init_weights(spec, 0), data["x_probe"])
    assert np.all(np.isfinite(out))
    if spec.kind == "transformer":
        np.testing.assert_array_equal(data["y_train"][:, :, 1:], data["x_train"][:, :, :-1])
