"""keras.distribution's read-back against the predictions made here without Keras."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from core import numerics
from interop.keras_track import distribution as dist


def test_expected_shard_shape_divides_only_the_named_dimensions():
    sizes = {"batch": 2, "model": 4}
    assert dist.expected_shard_shape((16, 32), (None, "model"), sizes) == (16, 8)
    assert dist.expected_shard_shape((16, 32), ("batch", "model"), sizes) == (8, 8)
    assert dist.expected_shard_shape((16, 32), (), sizes) == (16, 32)
    assert dist.expected_shard_shape((32,), ("model",), sizes) == (8,)
    assert dist.expected_shard_shape((16, 32), (None, ("batch", "model")), sizes) == (16, 4)


@pytest.mark.parametrize("text,shape", [("8x1", (8, 1)), ("2x4", (2, 4)), ("1X8", (1, 8))])
def test_parse_mesh(text, shape):
    assert dist.parse_mesh(text) == shape


@pytest.mark.parametrize("text", ["3x3", "2x2", "abc", "0x8"])
def test_parse_mesh_refuses_shapes_that_are_not_8_devices(text):
    with pytest.raises(ValueError):
        dist.parse_mesh(text)


def test_fullmatch_is_the_trap_and_a_leading_wildcard_the_fix():
    path = "mlp/dense_1/kernel"
    assert not dist.matches("dense.*kernel", path)
    assert dist.matches(".*dense.*/kernel", path)
    assert dist.matches(path, path)
    assert dist.expected_spec(path, 2, dist.layout_keys(*dist.TRAP_KEYS)) == (None, None)
    assert dist.expected_spec(path, 2, dist.layout_keys(*dist.GOOD_KEYS)) == (None, "model")


def test_audit_flags_keys_that_match_nothing():
    request = dist.Request()
    weights = [{"path": p} for p in dist.weight_shapes(request)]
    rows = {(r["key set"], r["key"]): r for r in dist.audit(request, weights)}
    assert rows[("asked", ".*dense.*/kernel")]["flag"] == "ok"
    assert "re.search" in rows[("trap", "dense.*kernel")]["flag"]
    typo = dist.Request(kernel_key=".*conv.*/kernel")
    rows = {r["key"]: r for r in dist.audit(typo, weights)}
    assert rows[".*conv.*/kernel"]["flag"] == "matches no weight path"


@pytest.mark.parametrize(
    "changes,words",
    [
        ({"mesh": "3x3"}, "not 8"),
        ({"kernel_key": "(unclosed"}, "not a regular expression"),
        ({"kernel_key": ".*", "bias_key": ".*/bias"}, "matches both keys"),
        ({"batch": 6, "mesh": "4x2"}, "does not split over the data axis"),
        ({"outputs": 10, "mesh": "2x4"}, "does not split over the model axis"),
        ({"kernel_key": ".*/bias", "bias_key": ".*/kernel"}, "dimension(s)"),
        ({"kernel_key": ".*", "bias_key": ".*"}, "same key"),
    ],
)
def test_problem_names_what_cannot_work(changes, words):
    reason = dist.problem(dist.Request(**changes))
    assert reason is not None and words in reason


def test_defaults_and_every_mesh_are_accepted():
    for mesh in dist.MESHES:
        assert dist.problem(dist.Request(mesh=mesh)) is None
    assert dist.problem(dist.Request(kernel_key="dense.*kernel", bias_key="dense.*bias")) is None


def test_numpy_forward_matches_a_hand_written_two_layer_case():
    request = dist.Request(batch=4, features=3, hidden=5, outputs=2)
    x, w = dist.seeded(request)
    h = np.maximum(x @ w["mlp/dense/kernel"] + w["mlp/dense/bias"], 0)
    h = np.maximum(h @ w["mlp/dense_1/kernel"] + w["mlp/dense_1/bias"], 0)
    y = h @ w["mlp/dense_2/kernel"] + w["mlp/dense_2/bias"]
    assert numerics.scaled_max_error(dist.numpy_forward(w, x), y) < 1e-6
    assert all(np.any(w[f"mlp/{layer}/bias"] != 0) for layer in dist.LAYERS)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    # One jax child for the whole module (its imports are most of its cost).
    return dist.run(dist.Request(mesh="4x2"), tmp_path_factory.mktemp("dist"))


def test_every_mode_equals_numpy_float64(result):
    reference = dist.numpy_forward(result.weights, result.x_BF)
    for mode in dist.MODES:
        error = numerics.scaled_max_error(result.outputs[mode], reference)
        assert error <= numerics.tolerance("float32"), (mode, error)


def test_read_back_sharding_is_what_the_keys_and_mesh_predict(result):
    for mode in dist.MODES:
        assert dist.mismatches(result.request, mode, result.readback[mode]) == [], mode
    # ModelParallel on 4x2 splits every kernel's last dimension in 2 and nothing else
    rows = dist.weight_rows(result.request, "model_parallel", result.readback["model_parallel"])
    assert all(not r["replicated"] and r["distinct shards"] == 2 for r in rows)
    assert dist.replicated(result.readback["trap"]) == sorted(
        dist.weight_shapes(result.request), key=list(dist.weight_shapes(result.request)).index
    )
    for mode in ("data_parallel", "model_parallel"):
        shards = {tuple(s["shape"]) for s in result.inputs[mode]["shards"]}
        assert shards == {dist.expected_input_shard(result.request, mode)}, mode


def test_a_planted_wrong_spec_or_shard_is_reported(result):
    weights = copy.deepcopy(result.readback["model_parallel"])
    weights[0]["spec"] = [None, None]
    assert any("spec" in m for m in dist.mismatches(result.request, "model_parallel", weights))
    weights = copy.deepcopy(result.readback["model_parallel"])
    weights[1]["shards"][0]["shape"] = [1]
    assert any("shard" in m for m in dist.mismatches(result.request, "model_parallel", weights))


def test_a_failing_child_is_a_worker_error(tmp_path, monkeypatch):
    monkeypatch.setattr(dist, "_MODULE", "interop.keras_track.no_such_module")
    with pytest.raises(dist.child.WorkerError, match="exited 1"):
        dist.run(dist.Request(), tmp_path)
