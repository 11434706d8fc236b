"""A ``.keras`` file saved under one backend and loaded under each other one, outputs compared.

DigitsNet's Keras twin (interop/keras_bridge.py) gets the seeded weights under the saving
backend (a ``keras_bridge.Job`` with ``save_keras``: keras_worker saves it and writes a
manifest with its size and sha256), then every other backend loads that file in its own
subprocess (``load_keras``: the manifest is verified before ``keras.saving.load_model(...,
safe_mode=True)``), concurrently. Every run's logits are compared with the NNX twin's in
this process (JAX, an implementation that shares no code with Keras).

``archive`` lists what a ``.keras`` file holds (it is a zip: ``metadata.json``,
``config.json``, ``model.weights.h5``) without Keras; ``tamper`` flips one byte of a copy,
which every loader must refuse (the manifest's sha256 no longer matches).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import zipfile

import numpy as np

from interop import keras_bridge, twins
from interop.keras_track import child

BACKENDS = keras_bridge.BACKENDS
OUTPUT_LAYER = "fc2"


@dataclasses.dataclass(frozen=True)
class Result:
    saved_by: str
    logits: dict[str, np.ndarray]  # backend -> logits (the saver's from its own model)
    reference: np.ndarray  # the NNX twin's logits
    archive: list[dict]
    config_layers: list[str]
    seconds: dict[str, float]
    keras_file: str


def problem(saved_by: str, loaders) -> str | None:
    if saved_by not in BACKENDS:
        return f"unknown backend {saved_by!r}; known: {', '.join(BACKENDS)}"
    unknown = [b for b in loaders if b not in BACKENDS]
    if unknown:
        return f"unknown backend(s) {', '.join(unknown)}"
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


def run(
    saved_by: str, loaders, folder: str | pathlib.Path, seed: int = 0, batch: int = 8
) -> Result:
    reason = problem(saved_by, loaders)
    if reason is not None:
        raise ValueError(reason)
    folder = pathlib.Path(folder)
    nnx = twins.seeded_nnx(seed)
    x = twins.digits_batch(batch, seed)
    reference = dict(twins.nnx_activations(nnx, x))[OUTPUT_LAYER]
    weights_path = folder / "weights.safetensors"
    keras_bridge.write_weights(weights_path, keras_bridge.nnx_to_keras(nnx))
    inputs = keras_bridge.write_inputs(folder / "inputs.npz", {"x": x})
    keras_file = folder / f"digits_{saved_by}.keras"
    save_job = keras_bridge.Job(
        name="save",
        inputs=str(inputs),
        output=str(folder / f"out_{saved_by}.npz"),
        weights=str(weights_path),
        save_keras=str(keras_file),
    )
    saved = keras_bridge.run_backend(saved_by, [save_job], folder)
    others = [b for b in dict.fromkeys(loaders) if b != saved_by]

    def load(backend):
        job = keras_bridge.Job(
            name="load",
            inputs=str(inputs),
            output=str(folder / f"out_{backend}.npz"),
            load_keras=str(keras_file),
        )
        return keras_bridge.run_backend(backend, [job], folder)

    loaded = child.run_parallel([lambda b=b: load(b) for b in others])
    logits = {saved_by: saved.outputs["save"]["x"][OUTPUT_LAYER]}
    seconds = {saved_by: saved.seconds}
    for backend, result in zip(others, loaded, strict=True):
        logits[backend] = result.outputs["load"]["x"][OUTPUT_LAYER]
        seconds[backend] = result.seconds
    rows, config = archive(keras_file)
    layers = [layer["config"]["name"] for layer in config["config"]["layers"]]
    return Result(saved_by, logits, reference, rows, layers, seconds, str(keras_file))
