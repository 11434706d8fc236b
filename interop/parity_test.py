"""The parity matrix: every pair of formats agrees, a planted mistake flags exactly its pairs,
an unavailable runner shows as "not run", and int8 pairs are judged on their own bound."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

from core import numerics
from interop import parity, torch_flax

FLOAT_TOL = numerics.tolerance("float32")


@pytest.fixture(scope="module")
def cheap():
    return parity.parity_matrix(parity.CHEAP, seed=1, batch=12)


def test_cheap_formats_agree_on_every_pair(cheap):
    assert [(p.a, p.b) for p in cheap.pairs] == [
        ("jax", "torch"),
        ("jax", "onnx"),
        ("torch", "onnx"),
    ]
    assert cheap.failing() == [] and cheap.not_run() == {}
    for pair in cheap.pairs:
        assert pair.measure == "scaled" and pair.bound == FLOAT_TOL
        assert pair.error == pair.relative <= FLOAT_TOL
        a, b = cheap.runs[pair.a].logits, cheap.runs[pair.b].logits
        assert pair.max_abs == pytest.approx(float(np.max(np.abs(a - b))), rel=1e-6)
    ratios = cheap.ratio_matrix()
    assert np.isnan(np.diag(ratios)).all() and np.allclose(ratios, ratios.T, equal_nan=True)


def test_the_logits_are_not_trivial(cheap):
    logits = cheap.runs["jax"].logits
    assert logits.shape == (12, 10) and np.ptp(logits) > 0.5


@pytest.mark.parametrize("mistake", [m for m in torch_flax.MISTAKES if m != "none"])
def test_a_mistake_planted_in_torch_flags_its_pair(mistake):
    matrix = parity.parity_matrix(
        ("jax", "torch"), seed=2, batch=8, mistake=mistake, mistake_in="torch"
    )
    assert matrix.failing() == [("jax", "torch")]
    assert matrix.pairs[0].error > 10 * FLOAT_TOL


def test_a_mistake_flags_exactly_the_pairs_of_its_format():
    matrix = parity.parity_matrix(
        parity.CHEAP, seed=1, batch=12, mistake="missing_transpose", mistake_in="onnx"
    )
    assert matrix.failing() == [("jax", "onnx"), ("torch", "onnx")]
    assert matrix.run_rows()[2]["mistake planted"] == "missing_transpose"


def test_an_unavailable_runner_shows_as_not_run(monkeypatch):
    def missing(model, x, folder):
        raise ImportError("No module named 'onnxruntime'")

    monkeypatch.setitem(parity.RUNNERS, "onnx", missing)
    matrix = parity.parity_matrix(parity.CHEAP, seed=0, batch=4)
    assert matrix.not_run() == {"onnx": "not run: ImportError: No module named 'onnxruntime'"}
    rows = {row["pair"]: row for row in matrix.rows()}
    assert set(rows) == {"jax vs torch", "jax vs onnx", "torch vs onnx"}
    assert rows["jax vs onnx"]["verdict"].startswith("not run: onnx not run: ImportError")
    assert rows["jax vs onnx"]["error"] is None
    assert list(matrix.errors()) == ["jax vs torch"]


def test_another_runner_error_is_not_hidden(monkeypatch):
    def broken(model, x, folder):
        raise TypeError("a bug")

    monkeypatch.setitem(parity.RUNNERS, "torch", broken)
    with pytest.raises(TypeError, match="a bug"):
        parity.parity_matrix(("jax", "torch"), batch=2)


def _runs(**logits):
    return {
        name: parity.Run(name, np.asarray(v, np.float32), "ran", 0.0) for name, v in logits.items()
    }


def test_int8_pairs_use_the_range_scaled_bound():
    rng = np.random.default_rng(0)
    reference = rng.normal(0, 3, size=(16, 10))
    spread = np.ptp(reference)
    close = reference + 0.5 * parity.INT8_BOUND * spread  # inside the int8 bound
    far = reference + 2.0 * parity.INT8_BOUND * spread  # outside it
    runs = _runs(jax=reference, torch=close, tflite_int8=close)
    int8 = parity.compare("jax", "tflite_int8", runs)
    assert int8.measure == "range-scaled" and int8.bound == parity.INT8_BOUND
    assert int8.within and int8.error == pytest.approx(0.5 * parity.INT8_BOUND, rel=1e-5)
    assert parity.compare("jax", "torch", runs).within is False  # float32 judges it strictly
    runs = _runs(jax=reference, tflite_int8=far)
    assert parity.compare("jax", "tflite_int8", runs).within is False


def test_worst_per_pair_keeps_the_largest(cheap):
    other = parity.parity_matrix(
        ("jax", "torch"), seed=1, batch=12, mistake="wrong_epsilon", mistake_in="torch"
    )
    worst = parity.worst_per_pair([cheap, other])
    assert worst["jax vs torch"]["error"] == other.pairs[0].error
    assert worst["torch vs onnx"]["error"] == cheap.pairs[2].error


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"formats": ("jax",)}, "at least two"),
        ({"formats": ("jax", "caffe")}, "unknown format 'caffe'"),
        ({"batch": 0}, "batch must be"),
        ({"mistake": "typo"}, "unknown mistake"),
        ({"mistake": "missing_transpose", "mistake_in": "keras_jax"}, "one of the chosen"),
    ],
)
def test_bad_requests_are_refused(kwargs, message):
    request = {"formats": parity.CHEAP, "batch": 4, "mistake": "none", "mistake_in": None}
    request.update(kwargs)
    with pytest.raises(ValueError, match=message):
        parity.check_request(**request)


@pytest.fixture(scope="module")
def full():
    """Every format but the Keras torch/tensorflow backends (keras_bridge_test covers those),
    with the wrong BatchNorm epsilon planted in keras_jax."""
    formats = ("jax", "tf_savedmodel", "tflite_float", "tflite_int8", "keras_jax")
    return parity.parity_matrix(
        formats, seed=0, batch=16, mistake="wrong_epsilon", mistake_in="keras_jax"
    )


def test_tensorflow_formats_agree_and_keras_mistake_is_caught(full):
    failing = full.failing()
    assert all("keras_jax" in pair for pair in failing)
    ran = [f for f in full.formats if full.runs[f].ran]
    assert {tuple(sorted(p)) for p in failing} == {
        tuple(sorted((f, "keras_jax"))) for f in ran if f != "keras_jax"
    }
    for pair in full.pairs:
        if "keras_jax" not in (pair.a, pair.b) and pair.error is not None:
            assert pair.within, pair
    for name in ("jax", "tf_savedmodel", "tflite_float", "keras_jax"):
        assert full.runs[name].ran, full.runs[name].status
    int8 = full.runs["tflite_int8"]
    assert int8.ran or int8.status.startswith("not run: Unavailable: the LiteRT int8")


def test_keras_outputs_are_cached_by_content(full):
    right, wrong = parity.models(0, "wrong_epsilon")
    from interop import twins

    x = twins.digits_batch(16, 0)
    again = parity.run_format("keras_jax", wrong, x, None)
    assert again.status == "ran (cached)"
    np.testing.assert_array_equal(again.logits, full.runs["keras_jax"].logits)
    assert parity.keras_cached(right, x, "jax") is None  # other weights, other key


def test_against_reference_judges_each_format(cheap):
    reference = np.asarray(cheap.runs["jax"].logits, np.float64)
    judged = parity.against_reference(cheap, reference)
    assert set(judged) == set(parity.CHEAP)
    assert judged["jax"] == (0.0, FLOAT_TOL)
    assert all(error <= bound for error, bound in judged.values())
    shifted = parity.against_reference(cheap, reference + 1e-3)
    assert all(error > bound for error, bound in shifted.values())


def test_every_format_names_the_frameworks_it_needs():
    """framework_interop refuses (lab.require) a format whose framework the host lacks."""
    from core import runtime

    assert set(parity.MODULES) == set(parity.FORMATS)
    assert {m for ms in parity.MODULES.values() for m in ms} <= set(runtime.OPTIONAL_MODULES)


def test_a_format_names_the_package_it_fails_without(monkeypatch, tmp_path):
    """On the chip's host onnx came back "not run: No module named 'onnxscript'" and the
    lesson's "every chosen format ran" failed: MODULES["onnx"] left onnxscript out, so
    lab.require let the format start. Without it (a fresh process: once imported, torch.onnx
    keeps it) the export fails, and the refusal names it."""
    from core import runtime

    root = pathlib.Path(__file__).resolve().parents[1]
    probe = (
        "import sys, numpy as np\n"
        "from interop import parity\n"
        "model = parity.models(0)[0]\n"
        "print(parity.run_format('onnx', model, np.zeros((2, 8, 8, 1), 'f4'), sys.argv[1]).status)"
    )
    env = runtime.child_env(
        JAX_PLATFORMS="cpu",
        LAB_BLOCK_MODULES="onnxscript",  # tests/fixtures/host_lacks/sitecustomize.py
        PYTHONPATH=runtime.python_path(root / "tests" / "fixtures" / "host_lacks", root),
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    status = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert status.startswith("not run") and "onnxscript" in status, status
    assert "onnxscript" in parity.MODULES["onnx"]
    monkeypatch.setattr(runtime, "has_module", lambda name: name != "onnxscript")
    lacks = runtime.host_lacks(parity.MODULES["onnx"])
    assert lacks is not None and "`onnxscript` is not installed here" in lacks
    assert "pip install onnxscript" in lacks
