"""The per-backend entry point: ``KERAS_BACKEND=jax python -m interop.keras_worker JOBS.json``.

Keras picks its backend once, when it is first imported, so the parent (interop/keras_bridge.py,
``run_backend``) starts one of these per backend. It reads a ``keras_bridge.JobFile`` (pydantic,
strict), refuses to run under any backend but the one the file names, and for each job builds
the Keras twin from a verified safetensors file (or loads a verified ``.keras`` file), runs the
job's inputs, writes every named layer's activation as ``.npz`` (no pickle), and optionally saves
the model as ``.keras`` (with a sha256 manifest beside it). Exit status 0 and
``<jobs>.done.json`` mean every job ran; any error exits non-zero with the reason on stderr.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys

import numpy as np


def _keras_manifest(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(path.name + ".json")


def save_keras(model, path: pathlib.Path) -> None:
    """model.save(path) and a manifest (size, sha256) a loader verifies first."""
    model.save(path)
    data = path.read_bytes()
    manifest = {"file": path.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    _keras_manifest(path).write_text(json.dumps(manifest, indent=1))


def load_keras(path: pathlib.Path):
    """A ``.keras`` file loaded (safe_mode: no arbitrary code) after its manifest verifies."""
    import keras

    from interop import keras_bridge

    manifest = json.loads(_keras_manifest(path).read_text())
    data = path.read_bytes()
    if (
        manifest.get("file") != path.name
        or manifest.get("size") != len(data)
        or manifest.get("sha256") != hashlib.sha256(data).hexdigest()
    ):
        raise ValueError(f"{path}: size or sha256 differs from its manifest (changed file)")
    keras_bridge._gelu_class()  # registers the custom layer before deserializing
    return keras.saving.load_model(path, safe_mode=True)


def _tensorflow_types_cannot_occur() -> None:
    """Tell Keras that TensorFlow is absent while no one has imported it (jax, torch workers).

    Keras's (de)serializer asks ``tensorflow.available`` for each object it writes, to spot a
    tf.TensorShape, tf.DType or tf.TypeSpec; asking imports TensorFlow (~4 CPU s) in a worker
    that never made a TensorFlow object, so none can be one. An explicit use of TensorFlow
    (an attribute of Keras's lazy module) still imports it.
    """
    from keras.src.utils import module_utils

    lazy = getattr(module_utils, "tensorflow", None)  # private to Keras: a release may move it
    if "tensorflow" not in sys.modules and lazy is not None and getattr(lazy, "module", 0) is None:
        lazy._available = False  # without it, the worker is only slower


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m interop.keras_worker JOBS.json", file=sys.stderr)
        return 2
    from interop import keras_bridge

    job_path = pathlib.Path(argv[0])
    document = keras_bridge.JobFile.model_validate_json(job_path.read_text())
    if document.schema_version != keras_bridge.JOBS_SCHEMA_VERSION:
        raise ValueError(f"job file schema {document.schema_version} is not supported")
    wanted = document.backend
    if os.environ.get("KERAS_BACKEND") != wanted:
        raise ValueError(f"the job file is for backend {wanted!r}; KERAS_BACKEND differs")
    import keras

    if keras.backend.backend() != wanted:
        raise ValueError(f"Keras runs on {keras.backend.backend()!r}, the jobs want {wanted!r}")
    if wanted != "tensorflow":
        _tensorflow_types_cannot_occur()
    for job in document.jobs:
        if job.weights is not None:
            weights, config = keras_bridge.read_weights(job.weights)
            model = keras_bridge.build_model(config)
            keras_bridge.set_weights(model, weights)
        else:
            model = load_keras(pathlib.Path(job.load_keras))
        arrays = {}
        with np.load(job.inputs, allow_pickle=False) as inputs:
            for name in inputs.files:
                for layer, value in keras_bridge.activations(model, inputs[name]).items():
                    arrays[f"{name}/{layer}"] = np.asarray(value, np.float32)
        np.savez(job.output, **arrays)
        if job.save_keras is not None:
            save_keras(model, pathlib.Path(job.save_keras))
    done = {"backend": wanted, "keras_version": keras.__version__, "jobs": len(document.jobs)}
    done["tensorflow_imported"] = "tensorflow" in sys.modules
    job_path.with_name(job_path.name.removesuffix(".json") + ".done.json").write_text(
        json.dumps(done)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
