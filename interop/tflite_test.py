"""JAX -> SavedModel -> TFLite/LiteRT on a digits CNN trained here: parity, int8, wrong variants.

TensorFlow takes several seconds to import and each conversion about a second: one trained
model and one conversion (module-scoped) serve most tests.
"""

from __future__ import annotations

import gc
import pathlib

import jax
import numpy as np
import pytest
from flax import nnx

from core import numerics
from core.data import digits
from core.nn import nnx_models, training
from interop import tflite

SHAPE = (8, 8, 1)


def _trained_cnn(epochs: int):
    split = digits.load(0.2, 0)
    model = nnx_models.CNN(rngs=nnx.Rngs(params=jax.random.key(0, impl="rbg")), channels=(8, 16))
    optimizer = nnx.Optimizer(model, training.make_optimizer("adam", 0.01), wrt=nnx.Param)
    if epochs:
        training.fit(
            model, optimizer, split.x_train, split.y_train, epochs=epochs, batch_size=32, seed=0
        )
    return split, model


@pytest.fixture(scope="module")
def trained():
    split, model = _trained_cnn(epochs=4)
    fn, params = tflite.nnx_function(model)
    return split, fn, params


@pytest.fixture(scope="module")
def converted(trained, tmp_path_factory):
    split, fn, params = trained
    folder = tmp_path_factory.mktemp("saved") / "model"
    tflite.to_saved_model(fn, params, folder, SHAPE)
    # the freeze count at each gc.collect() the converter makes (checked in a test below)
    frozen_at_collect = []
    collect = gc.collect

    def counting_collect(*args, **kwargs):
        frozen_at_collect.append(gc.get_freeze_count())
        return collect(*args, **kwargs)

    # The suite freezes each process's objects after collection (conftest.py); the converter
    # freezes only where nothing is frozen yet, so that is the state it runs from here.
    frozen_by_the_suite = gc.get_freeze_count() > 0
    gc.unfreeze()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(gc, "collect", counting_collect)
            variants = {
                "float": tflite.to_tflite(folder, "float"),
                "int8": tflite.to_tflite(folder, "int8", representative=split.x_train),
            }
        frozen_after = gc.get_freeze_count()
    finally:
        if frozen_by_the_suite:
            gc.freeze()
    return folder, variants, (frozen_at_collect, frozen_after)


def test_the_converters_collections_skip_the_objects_made_before_it(converted):
    # every converter's gc.collect() met the older objects frozen, and none stays frozen after
    frozen_at_collect, frozen_after = converted[2]
    assert len(frozen_at_collect) >= 2 and min(frozen_at_collect) > 1000, frozen_at_collect
    assert frozen_after == 0


def test_nnx_function_is_the_model(trained):
    split, model = _trained_cnn(epochs=0)
    fn, params = tflite.nnx_function(model)
    np.testing.assert_array_equal(np.asarray(fn(params, split.x_test[:5])), model(split.x_test[:5]))
    assert all(isinstance(p, np.ndarray) for p in params)


def test_float_tflite_equals_jax_at_several_batch_sizes(trained, converted):
    split, fn, params = trained
    model = converted[1]["float"]
    for batch in (1, 7, len(split.x_test)):
        x = split.x_test[:batch]
        error = numerics.scaled_max_error(tflite.run(model, x), fn(params, x))
        assert error <= numerics.tolerance("float32"), (batch, error)
    # float32 builtin ops only: nothing the LiteRT runtime has to be extended with
    assert all(row["builtin"] for row in tflite.ops(model))
    assert {"CONV_2D", "FULLY_CONNECTED"} <= {row["op"] for row in tflite.ops(model)}
    assert tflite.io_details(model)["input"]["dtype"] == "float32"


def test_int8_within_its_bound_and_keeps_accuracy(trained, converted):
    split, fn, params = trained
    model = converted[1]["int8"]
    reference = np.asarray(fn(params, split.x_test))
    logits = tflite.run(model, split.x_test)
    assert tflite.range_scaled_error(logits, reference) <= tflite.INT8_OUTPUT_BOUND
    drop = tflite.accuracy(reference, split.y_test) - tflite.accuracy(logits, split.y_test)
    assert drop <= tflite.INT8_ACCURACY_DROP
    # full integer: int8 at the boundary, no float32 tensor inside, builtin ops only
    io = tflite.io_details(model)
    assert io["input"]["dtype"] == io["output"]["dtype"] == "int8"
    assert io["input"]["scale"] > 0 and io["output"]["scale"] > 0
    assert "float32" not in tflite.tensor_types(model)
    assert all(row["builtin"] for row in tflite.ops(model))
    assert len(model) < len(converted[1]["float"])


def test_saved_model_batch_is_polymorphic(trained, converted):
    split, fn, params = trained
    for batch in (3, 50):
        x = split.x_test[-batch:]
        result = tflite.run_saved_model(converted[0], x)
        assert result.shape == (batch, digits.CLASSES)
        assert numerics.scaled_max_error(result, fn(params, x)) <= numerics.tolerance("float32")


def test_wrong_representative_distribution_is_caught(trained, converted):
    split, fn, params = trained
    reference = np.asarray(fn(params, split.x_test))
    # calibrated on inputs a tenth as bright: every real input above 0.1 clips
    dim = tflite.to_tflite(converted[0], "int8", representative=split.x_train * 0.1)
    assert tflite.range_scaled_error(tflite.run(dim, split.x_test), reference) > (
        3 * tflite.INT8_OUTPUT_BOUND
    )
    # calibrated on 100 images: the largest logits fall outside the calibrated output range
    few = tflite.to_tflite(
        converted[0], "int8", representative=split.x_train, calibration_limit=100
    )
    assert tflite.range_scaled_error(tflite.run(few, split.x_test), reference) > (
        tflite.INT8_OUTPUT_BOUND
    )


def test_stale_or_missing_weights_are_caught(trained, tmp_path):
    split, fn, params = trained
    _, untrained = _trained_cnn(epochs=0)
    _, stale_params = tflite.nnx_function(untrained)
    stale = tflite.convert(fn, stale_params, SHAPE, quantizations=("float",))["float"]
    error = numerics.scaled_max_error(tflite.run(stale, split.x_test), fn(params, split.x_test))
    assert error > 100 * numerics.tolerance("float32")
    with pytest.raises(ValueError, match="params is empty"):
        tflite.to_saved_model(fn, [], tmp_path / "none", SHAPE)
    with pytest.raises(ValueError, match="does not accept params of shapes"):
        tflite.to_saved_model(fn, params[::-1], tmp_path / "reversed", SHAPE)
    with pytest.raises(ValueError, match="representative dataset"):
        tflite.to_tflite(tmp_path, "int8")
    with pytest.raises(ValueError, match="quantization must be one of"):
        tflite.to_tflite(tmp_path, "int4")
    with pytest.raises(ValueError, match="no SavedModel"):
        tflite.to_tflite(tmp_path, "float")


def test_flatbuffer_readers_refuse_other_bytes(converted):
    with pytest.raises(ValueError, match="not a TFLite flatbuffer"):
        tflite.ops(b"\x00" * 64)
    with pytest.raises(ValueError, match="input shape"):
        tflite.Runner(converted[1]["float"], batch=2)(np.zeros((3, *SHAPE), np.float32))


def test_range_scaled_error_against_a_hand_value():
    reference = np.array([[0.0, 4.0], [-4.0, 2.0]])
    result = reference + np.array([[0.0, 0.4], [0.0, -0.2]])
    assert tflite.range_scaled_error(result, reference) == pytest.approx(0.4 / 8.0)
    with pytest.raises(ValueError, match="constant"):
        tflite.range_scaled_error(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="shapes differ"):
        tflite.range_scaled_error(np.ones(3), np.ones(4))


def test_cache_returns_verified_bytes_only(tmp_path: pathlib.Path):
    spec = {"model": "test", "variants": ["float", "int8"]}
    calls = []

    def compute():
        calls.append(1)
        return {"float": b"TFL3 float bytes", "int8": b"TFL3 int8 bytes"}

    first, origin = tflite.cached_tflite(spec, compute, folder=tmp_path)
    assert origin == "converted in this process" and len(calls) == 1
    again, origin = tflite.cached_tflite(spec, compute, folder=tmp_path)
    assert origin == "on-disk cache" and again == first and len(calls) == 1
    # a tampered entry is not trusted: it is converted (and stored) again
    entry = next(tmp_path.glob("*.tflite"))
    entry.write_bytes(b"TFL3 tampered bytes")
    again, origin = tflite.cached_tflite(spec, compute, folder=tmp_path)
    assert origin == "converted in this process" and again == first and len(calls) == 2
    # another spec is another key
    _, origin = tflite.cached_tflite({**spec, "model": "other"}, compute, folder=tmp_path)
    assert origin == "converted in this process"
    with pytest.raises(ValueError, match="variants"):
        tflite.cached_tflite({"model": "x"}, compute, folder=tmp_path)


def test_measure_reports_the_variant(trained, converted):
    split, fn, params = trained
    model = converted[1]["int8"]
    reference = np.asarray(fn(params, split.x_test))
    row = tflite.measure(model, split.x_test, split.y_test, reference, repeats=5)
    logits = tflite.run(model, split.x_test)
    assert row["size (bytes)"] == len(model)
    assert row["accuracy"] == tflite.accuracy(logits, split.y_test)
    assert row["max abs error"] == pytest.approx(np.max(np.abs(logits - reference)))
    assert row["error / output range"] == tflite.range_scaled_error(logits, reference)
    assert row["latency (ms)"] > 0
    assert tflite.arrays_sha256(params) != tflite.arrays_sha256(params[::-1])
    assert tflite.arrays_sha256(params) == tflite.arrays_sha256([p.copy() for p in params])


@pytest.fixture(scope="module")
def digitsnet():
    from interop import torch_flax, twins

    model = torch_flax.seeded_nnx(0)
    fn, params = tflite.nnx_function(model)
    return twins, model, fn, params


def test_digitsnet_float_equals_jax(digitsnet):
    # the interop reference model: BatchNorm statistics, exact and tanh GELU, LayerNorm
    twins, model, fn, params = digitsnet
    flat = tflite.convert(fn, params, SHAPE, quantizations=("float",))["float"]
    for batch, seed in ((1, 1), (33, 2)):
        x = twins.digits_batch(batch, seed)
        error = numerics.scaled_max_error(tflite.run(flat, x), model(x))
        assert error <= numerics.tolerance("float32"), (batch, error)
    names = {row["op"] for row in tflite.ops(flat)}
    assert all(row["builtin"] for row in tflite.ops(flat))
    assert {"TANH", "EXP", "DIV", "RSQRT"} <= names  # tanh GELU, erf's expansion, LayerNorm


def test_digitsnet_exact_gelu_int8_fails_with_a_clear_error(digitsnet):
    twins, _, fn, params = digitsnet
    quantized = tflite.convert(
        fn, params, SHAPE, representative=twins.digits_batch(256, 3), quantizations=("int8",)
    )["int8"]
    # pinned: if a later converter quantizes erf's expansion, this test says so
    with pytest.raises(RuntimeError, match="exact \\(erf\\) GELU"):
        tflite.run(quantized, twins.digits_batch(4, 1))
