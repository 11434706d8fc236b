"""The TensorFlow script: its MirroredStrategy twin trains on 2 logical CPU devices with the
shared builders, and the TPU path is refused (before TensorFlow is imported) where it cannot
run: TPU7x, an unknown accelerator type, a host that is not a TPU VM."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from core import curriculum, numerics, runtime
from tpu_scripts.frameworks import tf_train

STEPS = 30
SEEDS = (0, 1, 2)
# The loss after STEPS SGD steps must fall below this fraction of the first loss. Measured
# 0.15, 0.17, 0.23 at seeds 0, 1, 2 here (2 replicas); 0.5 leaves a wide margin.
LOSS_RATIO = 0.5

# One process (logical devices are fixed before TensorFlow's runtime starts): the twin on 2
# logical CPU devices for each seed, and seed 0 on one device with the same global batch.
_DRIVER = """
import json, sys
import tensorflow as tf
from tpu_scripts.frameworks import tf_train as t
mirrored = t.mirrored_strategy(2)
out = {"devices": list(mirrored.extended.worker_devices)}
for seed in json.loads(sys.argv[1]):
    out[seed] = t.train(mirrored, t.Config(steps=int(sys.argv[2]), seed=seed))["losses"]
one = tf.distribute.OneDeviceStrategy("/cpu:0")
out["one_device"] = t.train(one, t.Config(steps=int(sys.argv[2]), seed=0))["losses"]
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def twin_runs() -> dict:
    result = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps(SEEDS), str(STEPS)],
        capture_output=True, text=True, timeout=240, cwd=curriculum.REPO_ROOT,
        env=runtime.child_env(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def test_mirrored_twin_trains_on_two_logical_cpu_devices(twin_runs):
    assert [d.rsplit("/", 1)[-1] for d in twin_runs["devices"]] == ["device:CPU:0", "device:CPU:1"]
    for seed in SEEDS:
        losses = twin_runs[str(seed)]
        assert len(losses) == STEPS
        assert losses[-1] < LOSS_RATIO * losses[0], (seed, losses[0], losses[-1])


def test_two_replicas_equal_one_device_with_the_same_global_batch(twin_runs):
    # The all-reduced step is the one-device step: same data, same updates, float32 rounding.
    error = numerics.scaled_max_error(np.array(twin_runs["0"]), np.array(twin_runs["one_device"]))
    assert error <= numerics.tolerance("float32"), error


@pytest.fixture
def no_tensorflow(monkeypatch):
    """Any `import tensorflow` now raises ImportError: a refusal must come before it."""
    monkeypatch.setitem(sys.modules, "tensorflow", None)


def test_tpu7x_is_refused_before_tensorflow_with_the_cited_page(no_tensorflow, capsys):
    assert tf_train.main(["--accelerator-type", "tpu7x:2x2x1"]) == tf_train.REFUSED
    err = capsys.readouterr().err
    assert "TPU7x (Ironwood) does not support TensorFlow" in err
    assert "docs.cloud.google.com/tpu/docs/tpu7x" in err


@pytest.mark.parametrize("kind", ["v5litepod-8", "v5p-8", "v6e-4"])
def test_tf_generations_are_accepted(kind):
    assert tf_train.generation_problem(kind) is None


def test_unknown_or_missing_accelerator_type_is_refused(no_tensorflow, monkeypatch, capsys):
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
    assert tf_train.main(["--accelerator-type", "v9-8"]) == tf_train.REFUSED
    assert "unknown accelerator type 'v9-8'" in capsys.readouterr().err
    assert tf_train.main([]) == tf_train.REFUSED
    assert "needs --accelerator-type" in capsys.readouterr().err


def test_off_a_tpu_vm_refuses_instead_of_resolving(no_tensorflow, monkeypatch, capsys):
    monkeypatch.setattr(runtime, "host_has_tpu", lambda: False)
    assert tf_train.main(["--accelerator-type", "v5litepod-8"]) == tf_train.REFUSED
    err = capsys.readouterr().err
    assert "not a TPU VM" in err and "NotFoundError" in err
    monkeypatch.setattr(runtime, "host_has_tpu", lambda: True)
    assert tf_train.tpu_problem("v5litepod-8") is None


def test_the_script_names_only_the_local_tpu():
    import ast

    source = (curriculum.REPO_ROOT / "tpu_scripts/frameworks/tf_train.py").read_text()
    calls = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "TPUClusterResolver"
    ]
    assert len(calls) == 1 and not calls[0].args
    (keyword,) = calls[0].keywords
    assert (keyword.arg, getattr(keyword.value, "value", None)) == ("tpu", "local")
