"""The worker's protocol: every input verified before use, the backend checked, clear refusals."""

import json
import pathlib

import numpy as np
import pydantic
import pytest

from interop import weights_file
from interop.keras_track import models, runner, worker

SPEC = models.MLPSpec(hidden=4, depth=1)


def _job(tmp_path: pathlib.Path, backend: str = "jax") -> worker.JobFile:
    saved = weights_file.save(tmp_path / "w.safetensors", models.init_weights(SPEC, 0), "mlp")
    data = tmp_path / "data.npz"
    digest = runner.write_data(data, models.make_data(SPEC, 0, steps=2, batch=8, points=8))
    job = worker.Job(
        name="m",
        spec=models.spec_to_dict(SPEC),
        weights=str(saved.weights),
        data=str(data),
        data_sha256=digest,
        output=str(tmp_path / "out.npz"),
        steps=2,
    )
    return worker.JobFile(schema_version=worker.SCHEMA_VERSION, backend=backend, jobs=[job])


def test_good_inputs_load(tmp_path):
    job = _job(tmp_path).jobs[0]
    weights, data = worker.load_inputs(job, SPEC)
    assert sorted(weights) == sorted(models.weight_shapes(SPEC))
    assert data["x_train"].shape == (1, 8, 2)


def test_tampered_weights_are_refused(tmp_path):
    job = _job(tmp_path).jobs[0]
    path = pathlib.Path(job.weights)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(weights_file.WeightsFileError, match="tampered"):
        worker.load_inputs(job, SPEC)


def test_weights_for_another_model_are_refused(tmp_path):
    job = _job(tmp_path).jobs[0]
    with pytest.raises(weights_file.WeightsFileError, match="expected 'cnn'|holds a 'mlp'"):
        worker.load_inputs(job, models.CNNSpec())
    bigger = models.MLPSpec(hidden=5, depth=1)
    weights_file.save(job.weights, models.init_weights(bigger, 0), "mlp")
    with pytest.raises(weights_file.WeightsFileError, match="shape"):
        worker.load_inputs(job, SPEC)


def test_changed_data_is_refused(tmp_path):
    job = _job(tmp_path).jobs[0]
    np.savez(job.data, x_train=np.zeros(3))
    with pytest.raises(ValueError, match="sha256"):
        worker.load_inputs(job, SPEC)


def test_job_file_is_strict(tmp_path):
    document = json.loads(_job(tmp_path).model_dump_json())
    with pytest.raises(pydantic.ValidationError):
        worker.JobFile.model_validate({**document, "backend": "mxnet"})
    with pytest.raises(pydantic.ValidationError):
        worker.JobFile.model_validate({**document, "pickle": True})
    with pytest.raises(pydantic.ValidationError):
        worker.JobFile.model_validate({**document, "jobs": []})


def test_wrong_backend_is_refused_naming_it(tmp_path):
    # The file is for torch; the worker runs with KERAS_BACKEND=jax: refused before any import.
    document = _job(tmp_path, backend="torch")
    process, stderr = runner.start_worker(document, tmp_path, env_backend="jax")
    assert process.wait(timeout=60) == 1
    stderr.close()
    tail = runner._tail(tmp_path / "stderr_torch.txt")
    assert "the job file is for backend 'torch'; KERAS_BACKEND is 'jax'" in tail
    assert not pathlib.Path(document.jobs[0].output).exists()


def test_a_failing_worker_is_a_clear_error(tmp_path):
    document = _job(tmp_path, backend="jax")
    pathlib.Path(document.jobs[0].weights).write_bytes(b"not safetensors")
    with pytest.raises(runner.WorkerError) as error:
        runner.run_documents([document], tmp_path, timeout_s=60)
    message = str(error.value)
    assert message.startswith("Keras jax worker exited 1")
    assert "tampered or replaced" in message
