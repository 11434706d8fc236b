"""The digits classifier's artifact: train it, export it with jax.export over a SYMBOLIC batch
dimension, write the directory, and read it back only after verifying every byte.

    weights.npz          the MLP's parameters (np.savez; read with allow_pickle=False)
    predict.jax_exported Exported.serialize() of (weights, x_BF D[b, 64])
                         -> (labels_B int32[b], probabilities_BC float32[b, 10])
                         (D, the weights' and inputs' dtype: float32, or bfloat16)
    manifest.json        manifest.ArtifactManifest: format/version, model_version, the contract
                         (features, classes, value range, max_batch, "b"), each file's size and
                         sha256, the exported inputs/outputs with "b", platforms, calling
                         convention version, library versions, created, manifest_sha256

The weights are an ARGUMENT of the exported function, not constants baked into it (like the
byte LM capstone's endpoints). ``load_artifacts`` checks the manifest's schema and own hash,
each file's size and sha256 and the platform BEFORE deserializing; then that the deserialized
avals equal the manifest's. ``Artifacts.check_inputs`` refuses a call outside the contract
(rank, feature count, dtype, batch, NaN/inf, values outside [0, 16]) naming the problem.

The format-agnostic pieces (errors, hashes, file checks, leaves) are core.serving.artifacts,
shared with the capstone's exporter.
"""

from __future__ import annotations

import dataclasses
import datetime
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from core import documents
from core.data import digits
from core.nn import mlp
from core.serving import artifacts as files
from core.serving.artifacts import (
    ArtifactError,
    InputMismatchError,
    InputOutOfRangeError,
    ManifestSchemaError,
    MissingArtifactError,
    SignatureMismatchError,
    UnsupportedPlatformError,
    WeightsMismatchError,
)
from core.serving.predict.manifest import BATCH_DIM, FORMAT, FORMAT_VERSION, ArtifactManifest

MANIFEST = "manifest.json"
WEIGHTS = "weights.npz"
EXPORTED = "predict.jax_exported"
FEATURES = digits.IMAGE_SIZE * digits.IMAGE_SIZE
CLASSES = digits.CLASSES
MIN_VALUE, MAX_VALUE = 0.0, 16.0  # the digits' pixel intensities
HIDDEN = 64
DEFAULTS = {"seed": 0, "steps": 300, "learning_rate": 0.1, "max_batch": 64}
ARG_NAMES = ("weights", "x_BF")
OUT_NAMES = ("labels_B", "probabilities_BC")

__all__ = [
    "ArtifactError",
    "InputMismatchError",
    "InputOutOfRangeError",
    "ManifestSchemaError",
    "MissingArtifactError",
    "SignatureMismatchError",
    "UnsupportedPlatformError",
    "WeightsMismatchError",
]


# --- the model -------------------------------------------------------------------------------


def predict_fn(weights: dict, x_BF):
    """(labels_B int32, probabilities_BC float32) of raw pixel rows x_BF in [0, 16]: the MLP
    on x / 16 (ReLU hidden layers) with its matmul inputs in the weights' dtype and float32
    accumulation (``preferred_element_type``), softmax in float32, and the argmax of those
    probabilities. For bfloat16 the activations are rounded to bfloat16 before each matmul."""
    layers = len(weights) // 2
    h = x_BF / jnp.asarray(MAX_VALUE, x_BF.dtype)
    for i in range(layers):
        w = weights[f"layer{i}/w"]
        h = jnp.dot(h.astype(w.dtype), w, preferred_element_type=jnp.float32)
        h = h + weights[f"layer{i}/b"].astype(jnp.float32)
        if i + 1 < layers:
            h = jax.nn.relu(h)
    probabilities = jax.nn.softmax(h, axis=-1)
    return jnp.argmax(probabilities, axis=-1).astype(jnp.int32), probabilities


def reference_forward(weights: dict, x_BF) -> tuple[np.ndarray, np.ndarray]:
    """predict_fn in NumPy float64 (an independent reference: no jax)."""
    layers = len(weights) // 2
    h = np.asarray(x_BF, np.float64) / MAX_VALUE
    for i in range(layers):
        h = h @ np.asarray(weights[f"layer{i}/w"], np.float64) + np.asarray(
            weights[f"layer{i}/b"], np.float64
        )
        if i + 1 < layers:
            h = np.maximum(h, 0.0)
    e = np.exp(h - h.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return p.argmax(axis=-1), p


def flat_weights(params) -> dict[str, np.ndarray]:
    """core.nn.mlp's [{"w", "b"}] as {"layer0/w": ..., "layer0/b": ...} numpy float32."""
    out = {}
    for i, layer in enumerate(params):
        out[f"layer{i}/w"] = np.asarray(layer["w"], np.float32)
        out[f"layer{i}/b"] = np.asarray(layer["b"], np.float32)
    return out


@dataclasses.dataclass(frozen=True)
class Trained:
    weights: dict
    info: dict  # models.ModelInfo


def train(seed: int = 0, steps: int = 300, learning_rate: float = 0.1) -> Trained:
    """A 64-64-10 MLP on the digits (core.nn.mlp: full-batch SGD with momentum), trained on
    the stratified split of ``seed``; test accuracy measured on the held-out images."""
    if not 1 <= steps <= 5000:
        raise ValueError(f"steps must be in [1, 5000], got {steps}")
    if not 0 < learning_rate <= 1:
        raise ValueError(f"learning rate must be in (0, 1], got {learning_rate}")
    split = digits.load(0.2, seed)
    x_train = split.x_train.reshape(-1, FEATURES)  # in [0, 1]: the model divides by 16
    x_test = split.x_test.reshape(-1, FEATURES)
    sizes = (FEATURES, HIDDEN, CLASSES)
    params = mlp.init_params(jax.random.key(seed), sizes)
    params, history = mlp.train_sgd(
        params, jnp.asarray(x_train), jnp.asarray(split.y_train), steps, learning_rate
    )
    weights = flat_weights(params)
    test_labels, _ = reference_forward(weights, x_test * MAX_VALUE)
    info = {
        "kind": "digits_mlp",
        "sizes": list(sizes),
        "seed": seed,
        "steps": steps,
        "learning_rate": learning_rate,
        "train_accuracy": history.final_accuracy,
        "test_accuracy": float(np.mean(test_labels == split.y_test)),
    }
    return Trained(weights, info)


def test_inputs(seed: int = 0, count: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(x_BF float32 raw pixels in [0, 16], labels) of ``count`` held-out digits."""
    split = digits.load(0.2, seed)
    x = (split.x_test.reshape(-1, FEATURES) * MAX_VALUE).astype(np.float32)
    return x[:count], split.y_test[:count]


# --- writing -----------------------------------------------------------------------------------


DTYPES = ("float32", "bfloat16")


def cast_weights(weights: dict, dtype: str) -> dict[str, np.ndarray]:
    """The weights in ``dtype`` (one of DTYPES) as numpy arrays."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return {n: np.asarray(a).astype(jnp.dtype(dtype)) for n, a in weights.items()}


def _specs(weights: dict):
    b = jax.export.symbolic_shape(BATCH_DIM)[0]
    w = {n: jax.ShapeDtypeStruct(a.shape, a.dtype) for n, a in weights.items()}
    dtype = next(iter(weights.values())).dtype
    return w, jax.ShapeDtypeStruct((b, FEATURES), dtype)


def export(weights: dict, platforms: tuple[str, ...] | None = None):
    """jax.export.Exported of predict_fn over (weights, x_BF[b, 64]) with a symbolic b (x in
    the weights' dtype)."""
    fn = jax.export.export(jax.jit(predict_fn), platforms=platforms or None)
    return fn(*_specs(weights))


def write_artifacts(
    trained: Trained,
    out_dir,
    max_batch: int = 64,
    model_version: str | None = None,
    platforms: tuple[str, ...] | None = None,
    dtype: str = "float32",
) -> dict:
    """Export ``trained`` into ``out_dir`` with its weights and inputs in ``dtype`` (each
    file atomically, manifest.json last); returns the manifest."""
    if not 1 <= max_batch <= 4096:
        raise ValueError(f"max_batch must be in [1, 4096], got {max_batch}")
    weights = cast_weights(trained.weights, dtype)
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # a half-rewritten directory has no manifest
    weights_data = files.npz_bytes({n: files.storable(a) for n, a in weights.items()})
    exported = export(weights, platforms)
    blob = bytes(exported.serialize())
    documents.write_bytes_atomic(out / WEIGHTS, weights_data)
    documents.write_bytes_atomic(out / EXPORTED, blob)
    version = model_version or f"digits-mlp-{files.sha256_bytes(weights_data)[:12]}"
    w_specs, x_spec = _specs(weights)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model_version": version,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "model": trained.info,
        "contract": {
            "features": FEATURES,
            "classes": CLASSES,
            "min_value": MIN_VALUE,
            "max_value": MAX_VALUE,
            "max_batch": max_batch,
            "batch_dim": BATCH_DIM,
            "input_dtype": dtype,
        },
        "weights": {
            "file": WEIGHTS,
            "sha256": files.sha256_bytes(weights_data),
            "bytes": len(weights_data),
            "leaves": files.weight_leaves(weights),
        },
        "exported": {
            "file": EXPORTED,
            "sha256": files.sha256_bytes(blob),
            "bytes": len(blob),
            "platforms": list(exported.platforms),
            "calling_convention_version": exported.calling_convention_version,
            "inputs": files.named_leaves(ARG_NAMES, (w_specs, x_spec)),
            "outputs": files.named_leaves(OUT_NAMES, tuple(exported.out_avals)),
        },
        "versions": files.versions(),
    }
    manifest["manifest_sha256"] = files.manifest_digest(manifest)
    documents.write_text_atomic(out / MANIFEST, _json(manifest))
    return manifest


def _json(document: dict) -> str:
    import json

    return json.dumps(document, indent=2) + "\n"


# --- reading and verifying ---------------------------------------------------------------------


def read_manifest(directory) -> dict:
    """The parsed, schema-checked, self-consistent manifest (ArtifactError otherwise)."""
    path = pathlib.Path(directory) / MANIFEST
    if not path.is_file():
        raise MissingArtifactError(
            f"no {MANIFEST} in {directory}: not a predict artifact directory "
            "(or an export that did not finish)"
        )
    try:
        manifest = documents.read_json(path)
        documents.validate(ArtifactManifest, manifest, "predict artifact manifest")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestSchemaError(f"{path}: {exc}") from None
    for entry in (manifest["weights"], manifest["exported"]):
        problem = files.plain_name_problem(entry["file"])
        if problem:
            raise ManifestSchemaError(f"{path}: {problem}")
    files.check_manifest_digest(path, manifest)
    return manifest


def bucket_sizes(max_batch: int) -> list[int]:
    """The batch sizes a call is padded to (powers of two below max_batch, then max_batch):
    one compiled program per size, all compiled by warm-up."""
    sizes, size = [], 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return [*sizes, max_batch]


@dataclasses.dataclass
class Artifacts:
    """A verified, deserialized predict artifact and its weights (on the default device)."""

    directory: pathlib.Path
    manifest: dict
    weights: dict  # {name: jax.Array}
    exported: jax.export.Exported
    load_seconds: float = 0.0

    def __post_init__(self):
        self._call = jax.jit(self.exported.call)

    @property
    def contract(self) -> dict:
        return self.manifest["contract"]

    @property
    def model_version(self) -> str:
        return self.manifest["model_version"]

    @property
    def buckets(self) -> list[int]:
        return bucket_sizes(self.contract["max_batch"])

    def check_inputs(self, x_BF) -> np.ndarray:
        """``x_BF`` as a numpy array once it meets the contract: rank 2, ``features``
        columns, the contract's dtype, 1 to max_batch rows, finite values in [min_value, max_value]
        (InputMismatchError / InputOutOfRangeError naming the problem otherwise)."""
        c = self.contract
        if not hasattr(x_BF, "dtype") or not hasattr(x_BF, "shape"):
            raise InputMismatchError(
                f"x_BF must be an array {c['input_dtype']}[b, {c['features']}], got "
                f"{type(x_BF).__name__}"
            )
        if len(x_BF.shape) != 2:
            raise InputMismatchError(
                f"x_BF must have rank 2 (b, {c['features']}), got shape {tuple(x_BF.shape)}"
            )
        if x_BF.shape[1] != c["features"]:
            raise InputMismatchError(
                f"x_BF must have {c['features']} features per row (8x8 pixels), got {x_BF.shape[1]}"
            )
        if np.dtype(x_BF.dtype).name != c["input_dtype"]:
            raise InputMismatchError(
                f"x_BF must be {c['input_dtype']}, got {np.dtype(x_BF.dtype).name} "
                "(convert it yourself: the contract does not cast)"
            )
        rows = x_BF.shape[0]
        if not 1 <= rows <= c["max_batch"]:
            raise InputOutOfRangeError(
                f"x_BF must hold 1 to max_batch={c['max_batch']} rows, got {rows}"
            )
        x = np.asarray(x_BF)
        finite = np.isfinite(x.astype(np.float32))
        if not finite.all():
            where = np.argwhere(~finite)[0]
            raise InputOutOfRangeError(
                f"x_BF must be finite: x_BF[{where[0]}, {where[1]}] is {x[tuple(where)]}"
            )
        wide = x.astype(np.float32)
        outside = (wide < c["min_value"]) | (wide > c["max_value"])
        if outside.any():
            where = np.argwhere(outside)[0]
            raise InputOutOfRangeError(
                f"x_BF values must lie in [{c['min_value']:g}, {c['max_value']:g}] (pixel "
                f"intensities): x_BF[{where[0]}, {where[1]}] is {wide[tuple(where)]:g} "
                f"({int(outside.sum())} values outside)"
            )
        return x

    def run(self, x_BF: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The exported program on checked rows, padded with zeros to the next bucket (one
        compiled size per bucket): (labels_B int32, probabilities_BC float32) as numpy."""
        rows = x_BF.shape[0]
        size = next(s for s in self.buckets if s >= rows)
        padded = np.zeros((size, x_BF.shape[1]), x_BF.dtype)
        padded[:rows] = x_BF
        labels, probabilities = self._call(self.weights, padded)
        return np.asarray(labels)[:rows], np.asarray(probabilities)[:rows]

    def predict(self, x_BF) -> tuple[np.ndarray, np.ndarray]:
        """check_inputs, then run."""
        return self.run(self.check_inputs(x_BF))

    @property
    def input_dtype(self):
        return jnp.dtype(self.contract["input_dtype"])

    def numpy_weights(self) -> dict[str, np.ndarray]:
        return {n: np.asarray(a) for n, a in self.weights.items()}


def load_artifacts(directory, expected_platform: str | None = None) -> Artifacts:
    """Verify, then deserialize, the artifact in ``directory`` (see the module docstring).
    ``expected_platform``: where it will run (default: this process's jax.default_backend())."""
    start = time.perf_counter()
    directory = pathlib.Path(directory)
    manifest = read_manifest(directory)
    entry = manifest["exported"]
    platform = expected_platform or jax.default_backend()
    if platform not in entry["platforms"]:
        raise UnsupportedPlatformError(
            f"unsupported platform: {entry['file']} was exported for {entry['platforms']}, "
            f"this process runs {platform} (re-export with --platforms including {platform})"
        )
    weights_data = files.check_file(directory, manifest["weights"], "weights")
    blob = files.check_file(directory, entry, "exported")
    leaves = manifest["weights"]["leaves"]
    weights = files.load_npz_weights(weights_data, leaves, WEIGHTS)
    try:
        exported = jax.export.deserialize(bytearray(blob))
    except Exception as exc:  # a corrupt blob whose hash the manifest agrees with: name it
        raise ArtifactError(f"cannot deserialize {entry['file']}: {exc}") from None
    for side, avals in (("inputs", exported.in_avals), ("outputs", exported.out_avals)):
        listed = entry[side]
        diff = files.leaf_diff(
            [(x["shape"], x["dtype"]) for x in listed],
            files.aval_list(avals),
            [x["name"] for x in listed],
        )
        if diff:
            raise SignatureMismatchError(f"{entry['file']} {side} differ from the manifest: {diff}")
    if sorted(exported.platforms) != sorted(entry["platforms"]):
        raise SignatureMismatchError(
            f"{entry['file']}: platforms {list(exported.platforms)} != manifest "
            f"{entry['platforms']}"
        )
    if exported.calling_convention_version != entry["calling_convention_version"]:
        raise SignatureMismatchError(
            f"{entry['file']}: calling convention version {exported.calling_convention_version}"
            f" != manifest {entry['calling_convention_version']}"
        )
    weight_inputs = [
        (x["name"][len("weights/") :], x["shape"], x["dtype"])
        for x in entry["inputs"]
        if x["name"].startswith("weights/")
    ]
    if weight_inputs != [(x["name"], x["shape"], x["dtype"]) for x in leaves]:
        raise WeightsMismatchError(f"{entry['file']}: its weight inputs differ from weights.leaves")
    x_inputs = [x for x in entry["inputs"] if not x["name"].startswith("weights/")]
    c = manifest["contract"]
    want = [{"name": "x_BF", "shape": [c["batch_dim"], c["features"]], "dtype": c["input_dtype"]}]
    if x_inputs != want:
        raise SignatureMismatchError(
            f"{entry['file']}: its data input {x_inputs} is not the contract's {want}"
        )
    device_weights = {n: jnp.asarray(a) for n, a in weights.items()}
    return Artifacts(directory, manifest, device_weights, exported, time.perf_counter() - start)


# --- another process -----------------------------------------------------------------------


def replay(directory, inputs_path, out_path) -> None:
    """Load the artifact (a fresh process), predict the rows in ``inputs_path`` (.npy) and
    save labels + probabilities to ``out_path`` (.npz); no pickle either way.

    python -m core.serving.predict predict --artifacts DIR --inputs X.npy --out Y.npz"""
    artifacts = load_artifacts(directory)
    x = np.load(inputs_path, allow_pickle=False)
    labels, probabilities = artifacts.predict(x)
    documents.write_bytes_atomic(
        out_path, files.npz_bytes({"labels": labels, "probabilities": probabilities})
    )


def load_replay(path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return archive["labels"], archive["probabilities"]
