"""DigitsNet's Keras 3 twin and the weight moves NNX <-> Keras, run per backend in a subprocess.

The Keras twin (``build_model``, interop/twins.py's spec) in channels-last layout, x_BHWC:

    conv1   ZeroPadding2D(1) + Conv2D(8, 3, "valid")             padding 1 on every side
    bn1     BatchNormalization(epsilon=1e-5)                      Keras's default is 1e-3
    act1    Gelu(approximate=False)                               keras.activations.gelu
    conv2   ZeroPadding2D(1) + Conv2D(16, 3, strides 2, "valid")  NOT "same": it pads (0, 1)
    act2    Gelu(approximate=False)                               (Keras's default is tanh)
    flatten Flatten() (channels-last: NHWC order, as the NNX twin)
    fc1     Dense(64)
    ln1     LayerNormalization(epsilon=1e-5)                      Keras's default is 1e-3
    act3    Gelu(approximate=True)
    fc2     Dense(10)

The layout rules, NNX -> Keras (``KERAS_RULES``): Conv2D's kernel is HWIO like NNX's, Dense's
kernel is (in, out) like NNX's, so every weight is a copy; only the names change (BatchNorm
scale/bias/mean/var -> gamma/beta/moving_mean/moving_variance, LayerNorm scale/bias ->
gamma/beta). A torch state dict reaches Keras through NNX (interop/torch_flax.py transposes).
``Config`` fields that are not weights (epsilons, each GELU's approximation, the flatten
order) are built into the Keras model from the same ``twins.Config``.

Keras fixes its backend (jax, torch, tensorflow) once per process, so each backend runs in
its own subprocess (``run_backend``: ``KERAS_BACKEND=... python -m interop.keras_worker``).
The parent writes the weights as safetensors with a manifest (names, shapes, dtypes, sha256,
the config; ``write_weights``), the inputs as .npz; the worker verifies the manifest, builds
the twin, sets the weights (a missing, extra or misshapen weight is refused naming it), runs
the jobs, and writes every named layer's activation as .npz (``allow_pickle=False``). One
worker call runs several jobs, paying the backend's import once.

Dimension glossary: B batch, H/W rows/columns, C channels, D features, K classes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence

import numpy as np
import pydantic

from core import documents, numerics, runtime
from interop import torch_flax, twins

BACKENDS: tuple[str, ...] = ("jax", "torch", "tensorflow")
WEIGHTS_SCHEMA_VERSION = 1
JOBS_SCHEMA_VERSION = 1
# A worker imports its backend (TensorFlow alone takes seconds, more on a loaded machine), builds
# the model and runs a few small batches: far below this; a hung child is killed here.
WORKER_TIMEOUT_S = 300.0
# Every Keras child process (this module's worker, the Keras track's workers and jobs) computes
# on the CPU (JAX_PLATFORMS=cpu, no CUDA), whatever this process runs on: on a TPU host the
# parent may hold the chip, and a chip serves one process. Numbers the children computed,
# compared with each other or with NumPy, are judged at the CPU's tolerance (CHILD_FLOAT32),
# not at this process's backend's (a TPU's DEFAULT float32 bound is the bfloat16 one).
CHILD_PLATFORM = "cpu"
CHILD_FLOAT32 = numerics.tolerance("float32", backend=CHILD_PLATFORM)
_ROOT = pathlib.Path(__file__).resolve().parents[1]


class ConversionError(torch_flax.ConversionError):
    """Keras weights that do not fit the model they go into (names the weight)."""


class WorkerError(RuntimeError):
    """A Keras backend subprocess failed (its exit status and the end of its stderr)."""


@dataclasses.dataclass(frozen=True)
class KerasRule:
    """How one NNX parameter maps to a Keras weight (same layout: a copy)."""

    layer: str
    nnx_attribute: str
    keras_weight: str
    layout: str


# In each Keras layer's get_weights() order.
KERAS_RULES: tuple[KerasRule, ...] = (
    KerasRule("conv1", "kernel", "kernel", "HWIO (kH, kW, in, out) in both"),
    KerasRule("conv1", "bias", "bias", "(out,)"),
    KerasRule("bn1", "scale", "gamma", "(C,)"),
    KerasRule("bn1", "bias", "beta", "(C,)"),
    KerasRule("bn1", "mean", "moving_mean", "(C,) running statistic"),
    KerasRule("bn1", "var", "moving_variance", "(C,) running statistic"),
    KerasRule("conv2", "kernel", "kernel", "HWIO (kH, kW, in, out) in both"),
    KerasRule("conv2", "bias", "bias", "(out,)"),
    KerasRule("fc1", "kernel", "kernel", "(in, out) in both (torch: (out, in))"),
    KerasRule("fc1", "bias", "bias", "(out,)"),
    KerasRule("ln1", "scale", "gamma", "(D,)"),
    KerasRule("ln1", "bias", "beta", "(D,)"),
    KerasRule("fc2", "kernel", "kernel", "(in, out) in both (torch: (out, in))"),
    KerasRule("fc2", "bias", "bias", "(out,)"),
)
KERAS_LAYERS: tuple[str, ...] = ("conv1", "bn1", "conv2", "fc1", "ln1", "fc2")


def keras_name(rule: KerasRule) -> str:
    return f"{rule.layer}.{rule.keras_weight}"


def _nnx_shapes() -> dict[str, tuple[int, ...]]:
    c1, c2 = twins.CHANNELS
    return {
        "conv1.kernel": (3, 3, 1, c1),
        "conv1.bias": (c1,),
        "bn1.gamma": (c1,),
        "bn1.beta": (c1,),
        "bn1.moving_mean": (c1,),
        "bn1.moving_variance": (c1,),
        "conv2.kernel": (3, 3, c1, c2),
        "conv2.bias": (c2,),
        "fc1.kernel": (twins.FEATURES, twins.HIDDEN),
        "fc1.bias": (twins.HIDDEN,),
        "ln1.gamma": (twins.HIDDEN,),
        "ln1.beta": (twins.HIDDEN,),
        "fc2.kernel": (twins.HIDDEN, twins.CLASSES),
        "fc2.bias": (twins.CLASSES,),
    }


KERAS_SHAPES: dict[str, tuple[int, ...]] = _nnx_shapes()


def layout_table() -> list[dict]:
    """The NNX -> Keras rules as rows (for the app and the README)."""
    return [
        {
            "NNX": f"{r.layer}.{r.nnx_attribute}",
            "Keras": keras_name(r),
            "shape": str(KERAS_SHAPES[keras_name(r)]),
            "layout": r.layout,
            "rule": "copy",
        }
        for r in KERAS_RULES
    ]


# --- NNX <-> Keras-named arrays (no Keras needed) -----------------------------------------------


def check_weights(weights: Mapping) -> dict[str, np.ndarray]:
    """The Keras-named weights as float32 NumPy after checking every name, shape and dtype
    (ConversionError naming the first weight that does not fit; nothing is reshaped)."""
    missing = [n for n in KERAS_SHAPES if n not in weights]
    extra = [n for n in weights if n not in KERAS_SHAPES]
    if missing:
        raise ConversionError(f"missing weight {missing[0]!r} (missing: {', '.join(missing)})")
    if extra:
        raise ConversionError(f"unexpected weight {extra[0]!r} (extra: {', '.join(extra)})")
    out = {}
    for name, shape in KERAS_SHAPES.items():
        array = np.asarray(weights[name])
        if array.shape != shape:
            raise ConversionError(f"{name}: shape {array.shape}, expected {shape}")
        if array.dtype != np.float32:
            raise ConversionError(f"{name}: dtype {array.dtype}, expected float32")
        out[name] = array
    return out


def nnx_to_keras(model: twins.NNXDigitsNet) -> dict[str, np.ndarray]:
    """The NNX model's weights under Keras names (copies: the layouts agree)."""
    weights = {}
    for rule in KERAS_RULES:
        value = getattr(getattr(model, rule.layer), rule.nnx_attribute).get_value()
        weights[keras_name(rule)] = np.array(value, np.float32)
    return check_weights(weights)


def keras_to_nnx(weights: Mapping, config: twins.Config = twins.SPEC) -> twins.NNXDigitsNet:
    """A fresh NNX DigitsNet (``config``) holding Keras-named ``weights`` (checked first)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    arrays = check_weights(weights)
    # Abstract (shapes only): flax's random init compiled an initializer program per weight
    # shape (~4.6 CPU s on first use) for values that are all replaced below.
    model = nnx.eval_shape(lambda: twins.nnx_model(config))
    for rule in KERAS_RULES:
        variable = getattr(getattr(model, rule.layer), rule.nnx_attribute)
        variable.set_value(jnp.asarray(arrays[keras_name(rule)]))
    # Keras keeps no count of BatchNorm updates: a fresh model's (0), as twins.nnx_model has
    model.bn1_num_batches.set_value(jnp.zeros((), jnp.int32))
    unset = [
        jax.tree_util.keystr(path)
        for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(model))
        if isinstance(leaf, jax.ShapeDtypeStruct)
    ]
    if unset:
        raise ValueError(f"no Keras weight sets {', '.join(unset)}")
    return model


# --- the weights file: safetensors + a verified manifest ----------------------------------------


class TensorEntry(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    name: str
    shape: list[int]
    dtype: str


class WeightsManifest(pydantic.BaseModel):
    """``<file>.json`` beside ``<file>.safetensors``: verified before the weights are read."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    schema_version: int
    file: str
    sha256: str
    size: int
    tensors: list[TensorEntry]
    config: dict


def manifest_path(path: str | pathlib.Path) -> pathlib.Path:
    path = pathlib.Path(path)
    return path.with_name(path.name + ".json")


def config_dict(config: twins.Config) -> dict:
    d = dataclasses.asdict(config)
    d["gelu_approximate"] = list(d["gelu_approximate"])
    return d


def config_from_dict(d: Mapping) -> twins.Config:
    try:
        return twins.Config(**{**d, "gelu_approximate": tuple(d["gelu_approximate"])})
    except (TypeError, KeyError) as error:
        raise ValueError(f"not a DigitsNet config: {dict(d)!r} ({error})") from None


def write_weights(
    path: str | pathlib.Path, weights: Mapping, config: twins.Config = twins.SPEC
) -> WeightsManifest:
    """Write Keras-named weights as safetensors at ``path`` and its manifest beside it."""
    from safetensors.numpy import save

    arrays = check_weights(weights)
    data = save({k: np.ascontiguousarray(v) for k, v in arrays.items()})
    path = pathlib.Path(path)
    documents.write_bytes_atomic(path, data)
    manifest = WeightsManifest(
        schema_version=WEIGHTS_SCHEMA_VERSION,
        file=path.name,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        tensors=[
            TensorEntry(name=k, shape=list(v.shape), dtype=str(v.dtype)) for k, v in arrays.items()
        ],
        config=config_dict(config),
    )
    documents.write_text_atomic(manifest_path(path), manifest.model_dump_json(indent=1))
    return manifest


def read_weights(path: str | pathlib.Path) -> tuple[dict[str, np.ndarray], twins.Config]:
    """(weights, config) from a safetensors file, after verifying its manifest: the file's
    name, size and sha256, then every tensor's name, shape and dtype (ValueError naming the
    first that differs), then DigitsNet's own names and shapes (ConversionError)."""
    from safetensors.numpy import load

    path = pathlib.Path(path)
    manifest = WeightsManifest.model_validate(
        documents.load(manifest_path(path), WeightsManifest, "Keras weights manifest")
    )
    if manifest.schema_version != WEIGHTS_SCHEMA_VERSION:
        raise ValueError(f"{path}: manifest schema {manifest.schema_version} is not supported")
    if manifest.file != path.name:
        raise ValueError(f"{path}: the manifest describes {manifest.file!r}")
    data = path.read_bytes()
    if len(data) != manifest.size or hashlib.sha256(data).hexdigest() != manifest.sha256:
        raise ValueError(f"{path}: size or sha256 differs from its manifest (changed file)")
    arrays = load(data)
    listed = {t.name: t for t in manifest.tensors}
    if sorted(listed) != sorted(arrays):
        raise ValueError(f"{path}: tensors {sorted(arrays)} differ from the manifest's")
    for name, entry in listed.items():
        if list(arrays[name].shape) != entry.shape or str(arrays[name].dtype) != entry.dtype:
            raise ValueError(f"{path}: tensor {name!r} differs from its manifest entry")
    return check_weights(arrays), config_from_dict(manifest.config)


# --- the Keras model (call only inside a process whose KERAS_BACKEND is set) -------------------


def _gelu_class():
    global _GELU
    if _GELU is not None:
        return _GELU
    import keras

    @keras.saving.register_keras_serializable(package="jax_tpu_lab")
    class Gelu(keras.layers.Layer):
        """GELU with its approximation stated (keras.activations.gelu defaults to tanh)."""

        def __init__(self, approximate: bool, **kwargs):
            super().__init__(**kwargs)
            self.approximate = bool(approximate)

        def call(self, x):
            return keras.activations.gelu(x, approximate=self.approximate)

        def get_config(self):
            return {**super().get_config(), "approximate": self.approximate}

    _GELU = Gelu
    return Gelu


_GELU = None


def build_model(config: twins.Config = twins.SPEC):
    """The Keras 3 twin (functional model; every named layer reachable by ``get_layer``)."""
    import keras
    from keras import layers

    gelu = _gelu_class()
    approx = config.gelu_approximate
    x = keras.Input((twins.IMAGE_SIZE, twins.IMAGE_SIZE, 1), name="x_BHWC")
    h = layers.ZeroPadding2D(1, name="pad1")(x)
    h = layers.Conv2D(twins.CHANNELS[0], 3, strides=1, padding="valid", name="conv1")(h)
    h = layers.BatchNormalization(epsilon=config.bn_epsilon, momentum=0.9, name="bn1")(h)
    h = gelu(approx[0], name="act1")(h)
    h = layers.ZeroPadding2D(1, name="pad2")(h)
    h = layers.Conv2D(twins.CHANNELS[1], 3, strides=2, padding="valid", name="conv2")(h)
    h = gelu(approx[1], name="act2")(h)
    if config.flatten_order == "NCHW":
        h = layers.Permute((3, 1, 2), name="to_nchw")(h)
    h = layers.Flatten(name="flatten")(h)
    h = layers.Dense(twins.HIDDEN, name="fc1")(h)
    h = layers.LayerNormalization(epsilon=config.ln_epsilon, name="ln1")(h)
    h = gelu(approx[2], name="act3")(h)
    h = layers.Dense(twins.CLASSES, name="fc2")(h)
    return keras.Model(x, h, name="digits_net")


def model_config(model) -> twins.Config:
    """The Config a Keras twin computes, read from its layers (a loaded .keras file)."""
    names = [layer.name for layer in model.layers]
    return twins.Config(
        bn_epsilon=float(model.get_layer("bn1").epsilon),
        ln_epsilon=float(model.get_layer("ln1").epsilon),
        gelu_approximate=tuple(bool(model.get_layer(f"act{i}").approximate) for i in (1, 2, 3)),
        flatten_order="NCHW" if "to_nchw" in names else "NHWC",
    )


def set_weights(model, weights: Mapping) -> None:
    """Set Keras-named weights on the twin, each layer's list checked by name and shape
    (ConversionError naming the weight; Keras's own set_weights message names no weight)."""
    arrays = check_weights(weights)
    for layer_name in KERAS_LAYERS:
        layer = model.get_layer(layer_name)
        rules = [r for r in KERAS_RULES if r.layer == layer_name]
        current = layer.get_weights()
        if len(current) != len(rules):
            raise ConversionError(
                f"layer {layer_name} holds {len(current)} weights, expected {len(rules)}"
            )
        values = []
        for rule, held in zip(rules, current, strict=True):
            value = arrays[keras_name(rule)]
            if tuple(held.shape) != value.shape:
                raise ConversionError(
                    f"{keras_name(rule)}: shape {value.shape}, the Keras layer holds "
                    f"{tuple(held.shape)}"
                )
            values.append(value)
        layer.set_weights(values)


def get_weights(model) -> dict[str, np.ndarray]:
    """The twin's weights under Keras names."""
    out = {}
    for layer_name in KERAS_LAYERS:
        rules = [r for r in KERAS_RULES if r.layer == layer_name]
        held = model.get_layer(layer_name).get_weights()
        for rule, value in zip(rules, held, strict=True):
            out[keras_name(rule)] = np.asarray(value, np.float32)
    return check_weights(out)


def activations(model, x_BHWC) -> dict[str, np.ndarray]:
    """Every named layer's output (twins.LAYERS) for x_BHWC, inference mode, NumPy."""
    import keras

    twins.check_input(x_BHWC, "x_BHWC", (twins.IMAGE_SIZE, twins.IMAGE_SIZE, 1))
    probe = keras.Model(model.inputs, [model.get_layer(n).output for n in twins.LAYERS])
    outputs = probe(np.asarray(x_BHWC, np.float32), training=False)
    return {
        n: np.asarray(keras.ops.convert_to_numpy(o))
        for n, o in zip(twins.LAYERS, outputs, strict=True)
    }


# --- jobs for a backend subprocess -------------------------------------------------------------


class Job(pydantic.BaseModel):
    """One unit of work for a worker: build from ``weights`` (a safetensors file) or load a
    ``.keras`` file; run ``inputs`` (an .npz of x_BHWC arrays); write ``output`` (.npz);
    optionally save the model as ``save_keras``."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    name: str
    inputs: str
    output: str
    weights: str | None = None
    load_keras: str | None = None
    save_keras: str | None = None

    @pydantic.model_validator(mode="after")
    def _one_source(self):
        if (self.weights is None) == (self.load_keras is None):
            raise ValueError(f"job {self.name!r}: give exactly one of weights and load_keras")
        return self


class JobFile(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    schema_version: int
    backend: str
    jobs: list[Job]


@dataclasses.dataclass(frozen=True)
class BackendResult:
    """What one worker call returned: per job, every named layer's activation per input."""

    backend: str
    outputs: dict[str, dict[str, dict[str, np.ndarray]]]  # job -> input -> layer -> array
    keras_version: str
    seconds: float


def write_inputs(path: str | pathlib.Path, inputs: Mapping[str, np.ndarray]) -> pathlib.Path:
    """Write named x_BHWC batches as an .npz (float32)."""
    path = pathlib.Path(path)
    for name, x in inputs.items():
        twins.check_input(x, f"input {name!r}", (twins.IMAGE_SIZE, twins.IMAGE_SIZE, 1))
    np.savez(path, **{k: np.asarray(v, np.float32) for k, v in inputs.items()})
    return path


def read_outputs(path: str | pathlib.Path) -> dict[str, dict[str, np.ndarray]]:
    """A worker's output .npz (keys '<input>/<layer>') as {input: {layer: array}}."""
    out: dict[str, dict[str, np.ndarray]] = {}
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            if key == "__keras_version__":
                continue
            input_name, _, layer = key.partition("/")
            out.setdefault(input_name, {})[layer] = data[key]
    return out


def run_backend(
    backend: str,
    jobs: Sequence[Job],
    folder: str | pathlib.Path,
    timeout_s: float = WORKER_TIMEOUT_S,
) -> BackendResult:
    """Run ``jobs`` in one ``KERAS_BACKEND=backend`` subprocess; the jobs' outputs read back."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown Keras backend {backend!r}; known: {', '.join(BACKENDS)}")
    if not jobs:
        raise ValueError("no jobs to run")
    folder = pathlib.Path(folder)
    job_file = folder / f"jobs_{backend}.json"
    document = JobFile(schema_version=JOBS_SCHEMA_VERSION, backend=backend, jobs=list(jobs))
    job_file.write_text(document.model_dump_json(indent=1))
    env = runtime.child_env(
        KERAS_BACKEND=backend,
        JAX_PLATFORMS=CHILD_PLATFORM,
        TF_CPP_MIN_LOG_LEVEL="3",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=runtime.python_path(_ROOT),
    )
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "interop.keras_worker", str(job_file)],
            env=env,
            cwd=_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise WorkerError(f"Keras {backend} worker ran past {timeout_s:.0f} s") from None
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-6:])
        raise WorkerError(f"Keras {backend} worker exited {done.returncode}: {tail}")
    status = json.loads((folder / f"jobs_{backend}.done.json").read_text())
    outputs = {job.name: read_outputs(job.output) for job in jobs}
    return BackendResult(backend, outputs, str(status["keras_version"]), seconds)


def run_backends(
    weights: Mapping,
    config: twins.Config,
    inputs: Mapping[str, np.ndarray],
    backends: Sequence[str] = BACKENDS,
) -> dict[str, BackendResult]:
    """The Keras twin holding ``weights`` run on ``inputs`` under each backend (one
    subprocess each, in a temporary folder): {backend: result}, job name "model"."""
    with tempfile.TemporaryDirectory(prefix="keras_bridge_") as tmp:
        folder = pathlib.Path(tmp)
        weights_path = folder / "weights.safetensors"
        write_weights(weights_path, weights, config)
        inputs_path = write_inputs(folder / "inputs.npz", inputs)
        results = {}
        for backend in backends:
            job = Job(
                name="model",
                inputs=str(inputs_path),
                output=str(folder / f"out_{backend}.npz"),
                weights=str(weights_path),
            )
            results[backend] = run_backend(backend, [job], folder)
        return results
