"""The neutral weights file: safetensors plus a manifest, verified before anything is loaded.

``save(path, tensors)`` writes ``<stem>.safetensors`` (the tensors, no code: safetensors holds
only a JSON header and raw little-endian bytes, so loading it cannot run anything, unlike a
pickle) and ``<stem>.manifest.json`` beside it:

    {"format": "jax-tpu-lab weights", "format_version": 1, "model": "DigitsNet",
     "file": "<stem>.safetensors", "file_bytes": N, "file_sha256": "...",
     "tensors": [{"name": "conv1.weight", "dtype": "float32", "shape": [8, 1, 3, 3],
                  "sha256": "..."}, ...]}

both atomically (``core.documents.write_bytes_atomic``/``write_text_atomic``). ``load(path)``
validates the manifest (a pydantic model), checks the file's size and sha256, then every
tensor's name, dtype, shape and sha256 against the manifest and, when given, against what the
model expects (``expected``: name -> (shape, dtype)). Tampered bytes, a missing or an extra
tensor, a wrong dtype or shape are each refused with a ``WeightsFileError`` (a ValueError)
naming the problem; nothing is cast or reshaped to fit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
from collections.abc import Mapping
from typing import Literal

import numpy as np
import pydantic

from core import documents

FORMAT = "jax-tpu-lab weights"
FORMAT_VERSION = 1
WEIGHTS_SUFFIX = ".safetensors"
MANIFEST_SUFFIX = ".manifest.json"
# The dtypes the course writes (safetensors holds more; a manifest naming another is refused).
DTYPES = ("float32", "float64", "float16", "int64", "int32", "int8", "uint8", "bool")

Sha256 = pydantic.constr(pattern=r"^[0-9a-f]{64}$")


class WeightsFileError(ValueError):
    """A weights file or manifest that must not be loaded (names the tensor or the check)."""


class TensorEntry(documents.Document):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid")

    name: pydantic.constr(min_length=1)
    dtype: Literal[DTYPES]
    shape: list[pydantic.NonNegativeInt]
    sha256: Sha256


class Manifest(documents.Document):
    model_config = pydantic.ConfigDict(strict=True, extra="forbid")

    format: Literal[FORMAT]
    format_version: Literal[FORMAT_VERSION]
    model: pydantic.constr(min_length=1)
    file: pydantic.constr(min_length=1)
    file_bytes: pydantic.NonNegativeInt
    file_sha256: Sha256
    tensors: list[TensorEntry]


@dataclasses.dataclass(frozen=True)
class Saved:
    weights: pathlib.Path
    manifest: pathlib.Path


def paths(path: str | pathlib.Path) -> Saved:
    """The weights file and its manifest for ``path`` (with or without ``.safetensors``)."""
    path = pathlib.Path(path)
    stem = path.name.removesuffix(WEIGHTS_SUFFIX)
    if not stem:
        raise ValueError(f"{path} names no file")
    return Saved(path.with_name(stem + WEIGHTS_SUFFIX), path.with_name(stem + MANIFEST_SUFFIX))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tensor_bytes(array: np.ndarray) -> bytes:
    return (
        np.require(array, requirements="C")
        .astype(array.dtype.newbyteorder("<"), copy=False)
        .tobytes()
    )


def manifest_for(data: bytes, tensors: Mapping[str, np.ndarray], file: str, model: str) -> dict:
    """The manifest document of the safetensors ``data`` holding ``tensors``."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": model,
        "file": file,
        "file_bytes": len(data),
        "file_sha256": _sha256(data),
        "tensors": [
            {
                "name": name,
                "dtype": array.dtype.name,
                "shape": list(array.shape),
                "sha256": _sha256(_tensor_bytes(array)),
            }
            for name, array in sorted(tensors.items())
        ],
    }


def save(path: str | pathlib.Path, tensors: Mapping, model: str = "DigitsNet") -> Saved:
    """Write ``tensors`` (name -> NumPy array or torch tensor) and their manifest, atomically."""
    import json

    import safetensors.numpy

    if not tensors:
        raise WeightsFileError("no tensors to save")
    arrays = {}
    for name, value in tensors.items():
        if not isinstance(name, str) or not name:
            raise WeightsFileError(f"tensor names are non-empty strings, got {name!r}")
        array = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
        if array.dtype.name not in DTYPES:
            raise WeightsFileError(f"{name}: dtype {array.dtype} is not one of {DTYPES}")
        arrays[name] = np.require(array, requirements="C")  # ascontiguousarray makes 0-d 1-d
    target = paths(path)
    data = safetensors.numpy.save(arrays)
    manifest = manifest_for(data, arrays, target.weights.name, model)
    documents.validate(Manifest, manifest, "weights manifest")
    documents.write_bytes_atomic(target.weights, data)
    documents.write_text_atomic(target.manifest, json.dumps(manifest, indent=2) + "\n")
    return target


def read_manifest(path: str | pathlib.Path) -> dict:
    """The validated manifest beside the weights file ``path``."""
    target = paths(path)
    if not target.manifest.is_file():
        raise WeightsFileError(f"no manifest {target.manifest.name} beside {target.weights.name}")
    try:
        return documents.load(target.manifest, Manifest, "weights manifest")
    except WeightsFileError:
        raise
    except ValueError as exc:
        raise WeightsFileError(str(exc)) from None


def load(
    path: str | pathlib.Path,
    expected: Mapping[str, tuple[tuple[int, ...], str]] | None = None,
    model: str | None = None,
) -> dict[str, np.ndarray]:
    """The tensors in the weights file ``path``, after every check of the module docstring.

    ``expected`` (name -> (shape, dtype name)) is what the model being loaded needs; ``model``
    the model name the manifest must give.
    """
    import safetensors.numpy

    target = paths(path)
    manifest = read_manifest(target.weights)
    if manifest["file"] != target.weights.name:
        raise WeightsFileError(
            f"the manifest describes {manifest['file']!r}, not {target.weights.name!r}"
        )
    if model is not None and manifest["model"] != model:
        raise WeightsFileError(f"the file holds a {manifest['model']!r}, expected {model!r}")
    if not target.weights.is_file():
        raise WeightsFileError(f"no weights file {target.weights}")
    data = target.weights.read_bytes()
    if len(data) != manifest["file_bytes"] or _sha256(data) != manifest["file_sha256"]:
        raise WeightsFileError(
            f"{target.weights.name} does not match its manifest ({len(data)} bytes, sha256 "
            f"{_sha256(data)[:12]}..., manifest {manifest['file_bytes']} bytes, "
            f"{manifest['file_sha256'][:12]}...): tampered or replaced, not loaded"
        )
    entries = {entry["name"]: entry for entry in manifest["tensors"]}
    if len(entries) != len(manifest["tensors"]):
        raise WeightsFileError("the manifest lists a tensor twice")
    try:
        arrays = safetensors.numpy.load(data)
    except Exception as exc:  # the file's sha256 matched, so the manifest was made for it
        raise WeightsFileError(f"{target.weights.name} is not a safetensors file: {exc}") from None
    _compare_names(set(arrays), set(entries), "the file", "its manifest")
    for name, entry in entries.items():
        array = arrays[name]
        if array.dtype.name != entry["dtype"] or list(array.shape) != entry["shape"]:
            raise WeightsFileError(
                f"{name}: the file holds {array.dtype.name} {list(array.shape)}, the manifest "
                f"says {entry['dtype']} {entry['shape']}"
            )
        if _sha256(_tensor_bytes(array)) != entry["sha256"]:
            raise WeightsFileError(f"{name}: bytes differ from the manifest's sha256")
    if expected is not None:
        _compare_names(set(arrays), set(expected), "the file", "the model")
        for name, (shape, dtype) in expected.items():
            array = arrays[name]
            if array.dtype.name != np.dtype(dtype).name:
                raise WeightsFileError(
                    f"{name}: dtype {array.dtype.name}, the model expects {np.dtype(dtype).name}"
                )
            if tuple(array.shape) != tuple(shape):
                raise WeightsFileError(
                    f"{name}: shape {tuple(array.shape)}, the model expects {tuple(shape)}"
                )
    return {name: arrays[name] for name in sorted(arrays)}


def _compare_names(have: set, want: set, have_what: str, want_what: str) -> None:
    missing, extra = sorted(want - have), sorted(have - want)
    if missing:
        raise WeightsFileError(
            f"tensor {missing[0]!r} is missing from {have_what} ({want_what} lists it; "
            f"missing: {', '.join(missing)})"
        )
    if extra:
        raise WeightsFileError(
            f"tensor {extra[0]!r} in {have_what} is not in {want_what} (extra: {', '.join(extra)})"
        )


def digitsnet_expected() -> dict[str, tuple[tuple[int, ...], str]]:
    """What DigitsNet's torch-layout state dict holds: name -> (shape, dtype name)."""
    from interop import twins

    return {
        name: (shape, "int64" if name.endswith("num_batches_tracked") else "float32")
        for name, shape in twins.TORCH_SHAPES.items()
    }
