"""A ``.keras`` file saved under one backend and loaded under each other one, outputs compared.

DigitsNet's Keras twin (interop/keras_bridge.py) gets the seeded NNX weights (a verified
safetensors file) in a ``KERAS_BACKEND=<saver>`` child of this module (``child.run``), which
saves it as ``.keras`` with a manifest beside it (size, sha256: ``keras_worker.save_keras``).
Then every other backend loads that file in its own child, concurrently
(``keras_worker.load_keras``: the manifest is verified before ``keras.saving.load_model(...,
safe_mode=True)``), and also tries a tampered copy (one byte flipped), which it must refuse.
Every run's activations are compared here with the NNX twin's (JAX, an implementation that
shares no code with Keras), layer by layer.

The default saver is TensorFlow: Keras's serializer asks ``tf.available`` for every object it
writes (keras/src/saving/serialization_lib.py), which imports TensorFlow (seconds of CPU) in
whichever backend saves; a TensorFlow child has paid that import already.

``archive`` lists what a ``.keras`` file holds (it is a zip: ``metadata.json``,
``config.json``, ``model.weights.h5``) without Keras; ``tamper`` flips one byte of a copy.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import zipfile

import numpy as np

from interop import keras_bridge, torch_flax, twins
from interop.keras_track import child

BACKENDS = keras_bridge.BACKENDS
DEFAULT_SAVER = "tensorflow"
OUTPUT_LAYER = "fc2"
_MODULE = "interop.keras_track.saving"


@dataclasses.dataclass(frozen=True)
class Result:
    saved_by: str
    loaders: tuple[str, ...]
    activations: dict[str, dict[str, np.ndarray]]  # backend -> layer -> array (saver: built)
    reference: dict[str, np.ndarray]  # the NNX twin's activations, layer -> array
    archive: list[dict]
    config_layers: list[str]
    refusals: dict[str, str | None]  # loader -> its message for the tampered copy
    config_differences: dict[str, list[str]]  # loader -> loaded Config vs twins.SPEC
    seconds: dict[str, float]  # backend -> wall time of its child (imports included)
    keras_version: str

    @property
    def logits(self) -> dict[str, np.ndarray]:
        return {b: a[OUTPUT_LAYER] for b, a in self.activations.items()}


def problem(saved_by: str, loaders) -> str | None:
    if saved_by not in BACKENDS:
        return f"unknown backend {saved_by!r}; known: {', '.join(BACKENDS)}"
    unknown = [b for b in loaders if b not in BACKENDS]
    if unknown:
        return f"unknown backend(s) {', '.join(map(repr, unknown))}; known: {', '.join(BACKENDS)}"
    if not [b for b in loaders if b != saved_by]:
        return f"no backend other than {saved_by} loads the file: nothing is moved"
    return None


def archive(path: str | pathlib.Path) -> tuple[list[dict], dict]:
    """The .keras zip's members (name, size, compressed) and its config.json, read without
    Keras (nothing in it is executed)."""
    with zipfile.ZipFile(path) as zf:
        rows = [
            {"member": i.filename, "bytes": i.file_size, "compressed": i.compress_size}
            for i in zf.infolist()
        ]
        config = json.loads(zf.read("config.json"))
    return rows, config


def tamper(path: str | pathlib.Path, out: str | pathlib.Path) -> pathlib.Path:
    """A copy of a .keras file and its manifest with one byte of the file flipped."""
    path, out = pathlib.Path(path), pathlib.Path(out)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    out.write_bytes(bytes(data))
    manifest = json.loads(keras_bridge.manifest_path(path).read_text())
    keras_bridge.manifest_path(out).write_text(json.dumps({**manifest, "file": out.name}))
    return out


def _read(path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def run(
    saved_by: str, loaders, folder: str | pathlib.Path, seed: int = 0, batch: int = 8
) -> Result:
    """Save under ``saved_by``, load under every other backend in ``loaders`` (concurrently).
    A failing child raises ``child.WorkerError`` (exit status and stderr tail)."""
    reason = problem(saved_by, loaders)
    if reason is not None:
        raise ValueError(reason)
    folder = pathlib.Path(folder)
    nnx = torch_flax.seeded_nnx(seed)
    x = twins.digits_batch(batch, seed)
    reference = dict(twins.nnx_activations(nnx, x))
    weights = folder / "weights.safetensors"
    keras_bridge.write_weights(weights, keras_bridge.nnx_to_keras(nnx))
    inputs = folder / "inputs.npz"
    np.savez(inputs, x=np.asarray(x, np.float32))
    keras_file = folder / f"digits_{saved_by}.keras"
    saved = child.run(
        _MODULE,
        {
            "mode": "save",
            "weights": str(weights),
            "inputs": str(inputs),
            "output": str(folder / "out_save.npz"),
            "keras_file": str(keras_file),
        },
        folder,
        saved_by,
        name="save",
        fast_compile=True,
    )
    bad = tamper(keras_file, folder / "tampered.keras")
    others = tuple(b for b in dict.fromkeys(loaders) if b != saved_by)
    loaded = child.run_many(
        _MODULE,
        {
            b: {
                "mode": "load",
                "inputs": str(inputs),
                "output": str(folder / f"out_{b}.npz"),
                "keras_file": str(keras_file),
                "tampered": str(bad),
            }
            for b in others
        },
        folder,
        fast_compile=True,
    )
    activations = {saved_by: _read(folder / "out_save.npz")}
    seconds = {saved_by: saved.seconds}
    refusals, differences = {}, {}
    for backend, done in loaded.items():
        activations[backend] = _read(folder / f"out_{backend}.npz")
        seconds[backend] = done.seconds
        refusal = done.result["tampered_refusal"]
        refusals[backend] = None if refusal is None else refusal.replace(f"{folder}/", "")
        differences[backend] = done.result["config_differences"]
    rows, config = archive(keras_file)
    layers = [layer["config"]["name"] for layer in config["config"]["layers"]]
    return Result(
        saved_by,
        others,
        activations,
        reference,
        rows,
        layers,
        refusals,
        differences,
        seconds,
        saved.result["keras_version"],
    )


# --- the child (python -m interop.keras_track.saving REQUEST.json, KERAS_BACKEND set) ---------


def _activations(model, inputs: str) -> dict[str, np.ndarray]:
    with np.load(inputs, allow_pickle=False) as data:
        x = data["x"]
    return {k: np.asarray(v, np.float32) for k, v in keras_bridge.activations(model, x).items()}


def _handle(job: dict) -> dict:
    from interop import keras_worker

    path = pathlib.Path(job["keras_file"])
    if job["mode"] == "save":
        weights, config = keras_bridge.read_weights(job["weights"])
        model = keras_bridge.build_model(config)
        keras_bridge.set_weights(model, weights)
        np.savez(job["output"], **_activations(model, job["inputs"]))
        keras_worker.save_keras(model, path)
        return {"saved": path.name}
    model = keras_worker.load_keras(path)
    np.savez(job["output"], **_activations(model, job["inputs"]))
    try:
        keras_worker.load_keras(pathlib.Path(job["tampered"]))
        refusal = None
    except ValueError as error:
        refusal = str(error)
    return {
        "config_differences": twins.SPEC.differences(keras_bridge.model_config(model)),
        "tampered_refusal": refusal,
    }


if __name__ == "__main__":
    sys.exit(child.serve(sys.argv[1:], _handle))
