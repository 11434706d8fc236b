"""The Keras twin under jax, torch and tensorflow == the NNX twin; weights and .keras files move.

One worker subprocess per backend (module-scoped): jax builds from the safetensors file and
saves a .keras file, torch loads that file, tensorflow loads the one torch saved. Planted
mistakes ride along as extra jobs in the jax worker and must miss the reference.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from core import numerics
from interop import keras_bridge, torch_flax, twins

TOL = numerics.tolerance("float32")


@pytest.fixture(scope="module")
def nnx_model():
    return torch_flax.torch_to_nnx(twins.seeded_weights(3))


@pytest.fixture(scope="module")
def inputs():
    return {"b5": twins.digits_batch(5, 1), "b32": twins.digits_batch(32, 2)}


def _variants(model) -> dict[str, dict[str, np.ndarray]]:
    right = keras_bridge.nnx_to_keras(model)
    hw_swapped = dict(right)
    hw_swapped["conv2.kernel"] = np.ascontiguousarray(right["conv2.kernel"].transpose(1, 0, 2, 3))
    stats_reset = dict(right)
    stats_reset["bn1.moving_mean"] = np.zeros_like(right["bn1.moving_mean"])
    stats_reset["bn1.moving_variance"] = np.ones_like(right["bn1.moving_variance"])
    return {"right": right, "kernel_hw_swapped": hw_swapped, "bn_stats_reset": stats_reset}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("keras")


@pytest.fixture(scope="module")
def runs(nnx_model, inputs, folder):
    inputs_path = keras_bridge.write_inputs(folder / "inputs.npz", inputs)
    jobs = {}
    for name, weights in _variants(nnx_model).items():
        path = folder / f"{name}.safetensors"
        keras_bridge.write_weights(path, weights, nnx_model.config)
        jobs[name] = path
    wrong_eps = folder / "wrong_eps.safetensors"
    keras_bridge.write_weights(
        wrong_eps, keras_bridge.nnx_to_keras(nnx_model), twins.Config(bn_epsilon=1e-3)
    )
    jobs["keras_default_epsilon"] = wrong_eps

    def job(name, backend, **source):
        return keras_bridge.Job(
            name=name,
            inputs=str(inputs_path),
            output=str(folder / f"{backend}_{name}.npz"),
            **source,
        )

    results = {}
    jax_jobs = [
        job(name, "jax", weights=str(path), save_keras=str(folder / "jax.keras"))
        if name == "right"
        else job(name, "jax", weights=str(path))
        for name, path in jobs.items()
    ]
    results["jax"] = keras_bridge.run_backend("jax", jax_jobs, folder)
    results["torch"] = keras_bridge.run_backend(
        "torch",
        [
            job("right", "torch", weights=str(jobs["right"])),
            job(
                "loaded",
                "torch",
                load_keras=str(folder / "jax.keras"),
                save_keras=str(folder / "torch.keras"),
            ),
        ],
        folder,
    )
    results["tensorflow"] = keras_bridge.run_backend(
        "tensorflow",
        [
            job("right", "tensorflow", weights=str(jobs["right"])),
            job("loaded", "tensorflow", load_keras=str(folder / "torch.keras")),
        ],
        folder,
    )
    return results


def _errors(outputs, reference_model, inputs, layer="fc2"):
    return {
        name: numerics.scaled_max_error(
            outputs[name][layer], dict(twins.nnx_activations(reference_model, x))[layer]
        )
        for name, x in inputs.items()
    }


@pytest.mark.parametrize("backend", keras_bridge.BACKENDS)
def test_each_backend_equals_nnx_at_every_layer(runs, nnx_model, inputs, backend):
    outputs = runs[backend].outputs["right"]
    for name, x in inputs.items():
        reference = dict(twins.nnx_activations(nnx_model, x))
        for layer in twins.LAYERS:
            error = numerics.scaled_max_error(outputs[name][layer], reference[layer])
            assert error <= TOL, (backend, name, layer, error)
        assert outputs[name]["fc2"].shape == (len(x), twins.CLASSES)


def test_only_the_tensorflow_worker_imports_tensorflow(runs, folder):
    # the jax and torch workers save and load .keras files without importing TensorFlow
    imported = {
        backend: json.loads((folder / f"jobs_{backend}.done.json").read_text()) for backend in runs
    }
    assert {b: d["tensorflow_imported"] for b, d in imported.items()} == {
        "jax": False,
        "torch": False,
        "tensorflow": True,
    }


@pytest.mark.parametrize("backend", ["torch", "tensorflow"])
def test_keras_file_saved_under_one_backend_loads_under_another(runs, nnx_model, inputs, backend):
    # torch loads the file jax saved; tensorflow loads the file torch saved (from jax's)
    errors = _errors(runs[backend].outputs["loaded"], nnx_model, inputs)
    assert max(errors.values()) <= TOL, errors


@pytest.mark.parametrize("mistake", ["kernel_hw_swapped", "bn_stats_reset"])
def test_wrong_weights_that_fit_the_shapes_are_caught_by_the_outputs(
    runs, nnx_model, inputs, mistake
):
    errors = _errors(runs["jax"].outputs[mistake], nnx_model, inputs)
    assert min(errors.values()) > 100 * TOL, errors


def test_keras_default_epsilon_is_caught_at_bn1(runs, nnx_model, inputs):
    outputs = runs["jax"].outputs["keras_default_epsilon"]
    assert max(_errors(outputs, nnx_model, inputs, "conv1").values()) <= TOL
    assert min(_errors(outputs, nnx_model, inputs, "bn1").values()) > 100 * TOL


def test_nnx_keras_round_trip_is_bitwise(nnx_model, inputs):
    weights = keras_bridge.nnx_to_keras(nnx_model)
    back = keras_bridge.keras_to_nnx(weights, nnx_model.config)
    assert keras_bridge.nnx_to_keras(back).keys() == weights.keys()
    for name, value in keras_bridge.nnx_to_keras(back).items():
        np.testing.assert_array_equal(value, weights[name])
    x = inputs["b5"]
    np.testing.assert_array_equal(
        dict(twins.nnx_activations(back, x))["fc2"],
        dict(twins.nnx_activations(nnx_model, x))["fc2"],
    )


def test_keras_names_match_the_torch_state_dict_through_nnx(nnx_model):
    weights = keras_bridge.nnx_to_keras(nnx_model)
    torch_state = torch_flax.nnx_to_torch(nnx_model)
    np.testing.assert_array_equal(weights["fc1.kernel"], torch_state["fc1.weight"].T)
    np.testing.assert_array_equal(
        weights["conv1.kernel"], torch_state["conv1.weight"].transpose(2, 3, 1, 0)
    )
    np.testing.assert_array_equal(weights["bn1.moving_variance"], torch_state["bn1.running_var"])


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda w: w.update({"fc1.kernel": w["fc1.kernel"].T.copy()}), "fc1.kernel"),
        (
            lambda w: w.update({"conv1.kernel": w["conv1.kernel"].transpose(3, 2, 0, 1).copy()}),
            "conv1.kernel",
        ),
        (lambda w: w.pop("bn1.moving_mean"), "bn1.moving_mean"),
        (lambda w: w.update({"bn1.extra": np.zeros(8, np.float32)}), "bn1.extra"),
        (lambda w: w.update({"fc2.bias": w["fc2.bias"].astype(np.float64)}), "fc2.bias"),
    ],
)
def test_a_mismatch_is_refused_naming_the_weight(nnx_model, change, named):
    weights = keras_bridge.nnx_to_keras(nnx_model)
    change(weights)
    with pytest.raises(keras_bridge.ConversionError, match=named.replace(".", r"\.")):
        keras_bridge.check_weights(weights)
    with pytest.raises(keras_bridge.ConversionError, match=named.replace(".", r"\.")):
        keras_bridge.keras_to_nnx(weights)


def test_weights_file_is_verified_before_load(nnx_model, tmp_path):
    path = tmp_path / "w.safetensors"
    keras_bridge.write_weights(path, keras_bridge.nnx_to_keras(nnx_model), twins.SPEC)
    weights, config = keras_bridge.read_weights(path)
    assert config == twins.SPEC
    np.testing.assert_array_equal(
        weights["fc1.kernel"], np.asarray(nnx_model.fc1.kernel.get_value())
    )
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256"):
        keras_bridge.read_weights(path)
    manifest = json.loads(keras_bridge.manifest_path(path).read_text())
    manifest["config"]["bn_epsilon"] = "tiny"
    keras_bridge.manifest_path(path).write_text(json.dumps(manifest))
    with pytest.raises(ValueError):
        keras_bridge.read_weights(path)


def test_jobs_are_validated(tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        keras_bridge.Job(name="x", inputs="a.npz", output="b.npz")
    with pytest.raises(ValueError, match="unknown Keras backend"):
        keras_bridge.run_backend("mxnet", [], pathlib.Path(tmp_path))
    with pytest.raises(ValueError, match="shape"):
        keras_bridge.write_inputs(tmp_path / "x.npz", {"x": np.zeros((2, 1, 8, 8), np.float32)})
