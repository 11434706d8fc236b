"""JAX -> TensorFlow SavedModel (jax2tf) -> TFLite/LiteRT, float and int8, run with LiteRT.

The path a JAX model takes to a phone or a microcontroller:

1. ``to_saved_model(fn, params, directory, example_shape)``: ``fn(params, x_B...)`` is a
   JAX function of a *flat list* of weight arrays and a batch of inputs. jax2tf wraps it
   with a polymorphic batch dimension (``polymorphic_shapes=[None, "(b, ...)"]``: one
   SavedModel serves any batch size) and native serialization (StableHLO inside the
   SavedModel; the default, so no flag is passed: the flag is deprecated). The weights ride
   along as a flat list of ``tf.Variable`` on a ``tf.Module``: a nested ``nnx.State`` tree
   there fails to save ("references an 'untracked' resource"), a flat list is tracked.
2. ``to_tflite(directory, "float")``: the TFLite converter turns the SavedModel into a
   LiteRT flatbuffer of float32 builtin ops (the same arithmetic: float error ~1e-7).
3. ``to_tflite(directory, "int8", representative=x_N...)``: post-training **full-integer**
   quantization. The converter runs the float model on the representative inputs to
   calibrate each tensor's range, stores weights as int8 (per-channel for convolutions and
   dense kernels) and activations as int8 with a scale and zero point, and we ask for
   **int8 inputs and outputs** as well (``inference_input_type = tf.int8``). That is the
   choice an integer-only accelerator (a microcontroller, an Edge TPU) needs: no float
   tensor crosses the model's boundary, and the caller quantizes its input with the input
   tensor's (scale, zero point) and dequantizes the logits; ``run`` does both. The other
   choice, float I/O with int8 internals, is easier to call but puts a QUANTIZE and a
   DEQUANTIZE op at the edges that such hardware cannot run. A representative set from the
   wrong distribution calibrates the wrong ranges (inputs clip, resolution is wasted): the
   int8 error bound below catches it, which is why the bound is checked, not assumed.
4. ``run(model_bytes, x)`` runs a flatbuffer with the LiteRT interpreter of
   ``ai_edge_litert`` (``tf.lite.Interpreter`` is deprecated), resizing the batch.
   ``ops(model_bytes)`` reads the operator codes from the flatbuffer itself (before any
   delegate rewrites the graph) and says which are builtin and which are custom.

Known limit (tried here): exact GELU (``jax.nn.gelu(approximate=False)``, erf) converts to
float TFLite as ~100 builtin elementwise ops (erf's rational approximation) and agrees to
float32 rounding, but its int8 conversion fails at run time: a DIV's divisor quantizes to
its zero point. The tanh GELU quantizes (interop/tflite_test.py pins both).

int8 agreement is measured as max |int8 - float| over the float output's range
(``range_scaled_error``), bounded by INT8_OUTPUT_BOUND; accuracy may drop by at most
INT8_ACCURACY_DROP. TensorFlow takes several seconds to import: it is imported inside the
functions that convert; ``run`` and ``ops`` need only ``ai_edge_litert``. ``cached_tflite``
keeps converted bytes on disk by content hash, manifest-verified before they are returned.

Dimension glossary: B batch, N representative examples, K classes (logits).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import pathlib
import tempfile
from collections.abc import Callable, Sequence

import numpy as np
import pydantic

from core import documents
from core.perf import timing

QUANTIZATIONS = ("float", "int8")
SIGNATURE = "serving_default"
# int8 vs float outputs: max |difference| over the float outputs' range (max - min). The
# digits CNN calibrated on the whole training split stays under 1% ("LiteRT int8:
# error_over_range" in benchmarks/records/edge_deploy/): one int8 step of a tensor is 1/256 of
# its calibrated range and a few steps add up through the layers. 3% leaves room for other seeds and
# widths. The wrong variants land far above it (interop/tflite_test.py): calibration on
# inputs scaled by 0.1 gives ~57%, on 200 images only ~8% (the largest logits fall outside
# the calibrated output range and clip).
INT8_OUTPUT_BOUND = 0.03
# Held-out accuracy may fall by at most this much from float to int8 (2 points: about 7 of
# 360 test digits; seen: 0 or 1 image).
INT8_ACCURACY_DROP = 0.02
# At most this many representative examples go to the calibrator: the digits' whole
# training split (1437) fits; a small subset misses the extremes (see above).
CALIBRATION_LIMIT = 5000
CACHE_SUBFOLDER = "tflite"
CACHE_SCHEMA_VERSION = 1
_ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHE_SOURCES = ("interop/tflite.py",)


# --- JAX -> SavedModel -------------------------------------------------------------------------


def nnx_function(model) -> tuple[Callable, list[np.ndarray]]:
    """(fn, params) for an NNX module: ``fn(params, x) == model(x)`` in inference mode.

    ``params`` is the module's whole state (Params and BatchNorm statistics) as a flat list
    of NumPy arrays, in ``jax.tree.leaves`` order; ``fn`` rebuilds the module from them
    (``nnx.merge``) and calls it with ``model.eval()`` set (running statistics, no dropout).
    """
    import jax
    from flax import nnx

    graphdef, state = nnx.split(model)
    leaves, treedef = jax.tree.flatten(state)

    def fn(params, x):
        rebuilt = nnx.merge(graphdef, jax.tree.unflatten(treedef, list(params)))
        rebuilt.eval()
        return rebuilt(x)

    return fn, [np.asarray(leaf) for leaf in leaves]


def _check_params(params: Sequence) -> list[np.ndarray]:
    out = []
    for i, p in enumerate(params):
        array = np.asarray(p)
        if array.dtype == object or not np.issubdtype(array.dtype, np.number):
            raise ValueError(f"params[{i}] is not a numeric array (dtype {array.dtype})")
        out.append(array)
    if not out:
        raise ValueError("params is empty: pass the weights as a flat list of arrays")
    return out


def _check_example_shape(example_shape: Sequence[int]) -> tuple[int, ...]:
    shape = tuple(int(d) for d in example_shape)
    if not shape or min(shape) < 1:
        raise ValueError(f"example shape (without the batch) must be positive, got {shape}")
    return shape


def to_saved_model(
    fn: Callable,
    params: Sequence,
    directory: str | pathlib.Path,
    example_shape: Sequence[int],
    dtype: str = "float32",
) -> pathlib.Path:
    """Save ``fn(params, x_B...)`` as a SavedModel with a polymorphic batch dimension.

    ``example_shape`` is one input's shape without the batch (digits: (8, 8, 1)). The
    SavedModel's ``serving_default`` signature takes x (None, *example_shape). Before
    saving, ``fn`` is traced with the given params (a shape mismatch is a ValueError here,
    not an error deep inside TensorFlow).
    """
    import jax
    import tensorflow as tf
    from jax.experimental import jax2tf

    arrays = _check_params(params)
    shape = _check_example_shape(example_shape)
    try:
        jax.eval_shape(fn, arrays, jax.ShapeDtypeStruct((2, *shape), dtype))
    except Exception as error:  # whatever fn raises on these shapes, named as a ValueError
        shapes = [tuple(a.shape) for a in arrays]
        raise ValueError(
            f"fn does not accept params of shapes {shapes} and x of shape (B, *{shape}): {error}"
        ) from error
    polymorphic = "(b, " + ", ".join(str(d) for d in shape) + ")"
    converted = jax2tf.convert(fn, polymorphic_shapes=[None, polymorphic], with_gradient=False)
    module = tf.Module()
    # A flat list of tf.Variable is tracked by the module (a nested nnx.State is not).
    module.weights = [tf.Variable(a, trainable=False) for a in arrays]

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None, *shape], dtype, "x")])
    def serve(x):
        return converted(module.weights, x)

    module.serve = serve
    path = pathlib.Path(directory)
    tf.saved_model.save(module, str(path), signatures={SIGNATURE: serve})
    return path


def run_saved_model(directory: str | pathlib.Path, x) -> np.ndarray:
    """Run a SavedModel's ``serving_default`` in TensorFlow on x (any batch size)."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(directory))
    outputs = loaded.signatures[SIGNATURE](x=tf.constant(np.asarray(x, np.float32)))
    return np.asarray(next(iter(outputs.values())))


# --- SavedModel -> TFLite ----------------------------------------------------------------------


def _representative(representative, limit: int) -> np.ndarray:
    if representative is None:
        raise ValueError("int8 quantization needs a representative dataset (inputs x_N...)")
    x = np.asarray(representative, np.float32)
    if x.ndim < 2 or len(x) == 0:
        raise ValueError(f"representative inputs must be a batch x_N..., got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("representative inputs contain NaN or infinity")
    return x[:limit]


def to_tflite(
    saved_model_dir: str | pathlib.Path,
    quantization: str = "float",
    representative=None,
    calibration_limit: int = CALIBRATION_LIMIT,
) -> bytes:
    """The LiteRT flatbuffer of a SavedModel: float32, or full-integer int8 (int8 I/O).

    ``representative`` (int8 only): typical inputs x_N... from the training distribution;
    the first ``calibration_limit`` are fed to the calibrator one at a time.
    """
    import tensorflow as tf

    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
    if quantization == "int8":
        x = _representative(representative, calibration_limit)
    elif representative is not None:
        raise ValueError("a representative dataset is only used by int8 quantization")
    if not (pathlib.Path(saved_model_dir) / "saved_model.pb").is_file():
        raise ValueError(f"no SavedModel in {saved_model_dir} (saved_model.pb is missing)")
    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model_dir))
    if quantization == "int8":

        def dataset():
            for example in x:
                yield [example[None]]

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = dataset
        # Builtin int8 kernels only (an op without one would keep float tensors: see
        # tensor_types).
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    with _collector_skips_older_objects():
        return bytes(converter.convert())


@contextlib.contextmanager
def _collector_skips_older_objects():
    """While converting, the objects made before the conversion sit in the collector's
    permanent generation (``gc.freeze``), then go back (``gc.unfreeze``).

    The SavedModel converter calls ``gc.collect()`` once per conversion: a full collection
    walks every tracked object of a process that imported JAX and TensorFlow (~500,000, about
    0.3 CPU s on a 2-core host), when only the conversion's own objects can be its garbage.
    Garbage among the older objects waits for the next collection. A process that already
    froze objects (core/lab/warm_kernels.py) is left as it is: unfreezing would undo that.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def convert(
    fn: Callable,
    params: Sequence,
    example_shape: Sequence[int],
    representative=None,
    quantizations: Sequence[str] = QUANTIZATIONS,
) -> dict[str, bytes]:
    """{quantization: flatbuffer bytes}: one SavedModel (in a temporary folder), then each
    requested TFLite variant. ``representative`` is needed when "int8" is requested."""
    for q in quantizations:
        if q not in QUANTIZATIONS:
            raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {q!r}")
    with tempfile.TemporaryDirectory(prefix="jax2tf_") as folder:
        to_saved_model(fn, params, pathlib.Path(folder) / "saved_model", example_shape)
        return {
            q: to_tflite(
                pathlib.Path(folder) / "saved_model",
                q,
                representative if q == "int8" else None,
            )
            for q in quantizations
        }


# --- running and reading a flatbuffer ----------------------------------------------------------


def interpreter(model_bytes: bytes, num_threads: int = 1):
    """A LiteRT interpreter for the flatbuffer (tensors not yet allocated)."""
    from ai_edge_litert import interpreter as litert

    if not isinstance(model_bytes, bytes | bytearray) or len(model_bytes) < 8:
        raise ValueError("model_bytes must be the bytes of a .tflite flatbuffer")
    return litert.Interpreter(model_content=bytes(model_bytes), num_threads=num_threads)


def _quantize(x: np.ndarray, detail: dict) -> np.ndarray:
    if detail["dtype"] == np.float32:
        return x.astype(np.float32)
    scale, zero_point = detail["quantization"]
    info = np.iinfo(detail["dtype"])
    q = np.round(x / scale) + zero_point
    return np.clip(q, info.min, info.max).astype(detail["dtype"])


def _dequantize(y: np.ndarray, detail: dict) -> np.ndarray:
    if detail["dtype"] == np.float32:
        return y.astype(np.float32)
    scale, zero_point = detail["quantization"]
    return ((y.astype(np.float32) - zero_point) * scale).astype(np.float32)


class Runner:
    """One allocated interpreter for a fixed batch size: ``runner(x)`` -> float32 outputs.

    Integer inputs and outputs are quantized and dequantized with the tensors' own
    (scale, zero point), so the caller always passes and gets float32.
    """

    def __init__(self, model_bytes: bytes, batch: int, num_threads: int = 1):
        self.interpreter = interpreter(model_bytes, num_threads)
        inputs = self.interpreter.get_input_details()
        if len(inputs) != 1:
            raise ValueError(f"expected a model with one input, it has {len(inputs)}")
        self.input_shape = (batch, *inputs[0]["shape_signature"][1:])
        self.interpreter.resize_tensor_input(inputs[0]["index"], list(self.input_shape))
        self.interpreter.allocate_tensors()
        self.input = self.interpreter.get_input_details()[0]
        self.output = self.interpreter.get_output_details()[0]

    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x, np.float32)
        if x.shape != self.input_shape:
            raise ValueError(f"input shape {x.shape} != the model's {self.input_shape}")
        self.interpreter.set_tensor(self.input["index"], _quantize(x, self.input))
        try:
            self.interpreter.invoke()
        except RuntimeError as error:
            hint = ""
            if "div.cc" in str(error):
                hint = (
                    " An int8 DIV met a divisor quantized to zero: exact (erf) GELU lowers to "
                    "a rational polynomial whose denominator int8 cannot hold; use the tanh "
                    "GELU or keep this model in float."
                )
            raise RuntimeError(f"LiteRT could not run the model: {error}.{hint}") from error
        return _dequantize(self.interpreter.get_tensor(self.output["index"]), self.output)


def run(model_bytes: bytes, x, num_threads: int = 1) -> np.ndarray:
    """The flatbuffer's float32 outputs on the batch x (any batch size)."""
    x = np.asarray(x, np.float32)
    if x.ndim < 1 or len(x) == 0:
        raise ValueError(f"x must be a non-empty batch, got shape {x.shape}")
    return Runner(model_bytes, len(x), num_threads)(x)


def latency_seconds(
    model_bytes: bytes, x_1, repeats: int = 50, warmup: int = 5, num_threads: int = 1
) -> float:
    """Median seconds of one inference on a batch of one (set input, invoke, read output)."""
    x = np.asarray(x_1, np.float32)
    runner = Runner(model_bytes, 1, num_threads)
    return timing.median_seconds(lambda: runner(x), repeats=repeats, warmup=warmup)


def measure(model_bytes: bytes, x_test, y_test, reference_logits, repeats: int = 100) -> dict:
    """A variant's figures: file size, median latency (batch of one, on this CPU, one
    thread), held-out accuracy, and its max |error| against the reference logits (absolute
    and over the reference's range)."""
    logits = run(model_bytes, x_test)
    return {
        "size (bytes)": len(model_bytes),
        "latency (ms)": latency_seconds(model_bytes, np.asarray(x_test)[:1], repeats) * 1e3,
        "accuracy": accuracy(logits, y_test),
        "max abs error": float(np.max(np.abs(logits - np.asarray(reference_logits)))),
        "error / output range": range_scaled_error(logits, reference_logits),
    }


def io_details(model_bytes: bytes) -> dict:
    """The input and output tensors' dtype, shape signature and (scale, zero point)."""
    runner = Runner(model_bytes, 1)

    def describe(detail):
        return {
            "dtype": np.dtype(detail["dtype"]).name,
            "shape": [int(d) for d in detail["shape_signature"]],
            "scale": float(detail["quantization"][0]),
            "zero_point": int(detail["quantization"][1]),
        }

    return {"input": describe(runner.input), "output": describe(runner.output)}


def _model(model_bytes: bytes):
    from ai_edge_litert import schema_py_generated as schema

    if not schema.Model.ModelBufferHasIdentifier(model_bytes, 0):
        raise ValueError("not a TFLite flatbuffer (its file identifier is not TFL3)")
    return schema, schema.Model.GetRootAsModel(model_bytes, 0)


def ops(model_bytes: bytes) -> list[dict]:
    """One row per operator kind in the flatbuffer: op name, builtin or custom, count.

    Read from the file's operator codes (not from an interpreter, whose delegates replace
    nodes by DELEGATE). A custom op needs its kernel linked into the runtime on the device.
    """
    schema, model = _model(model_bytes)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    kinds = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if builtin == schema.BuiltinOperator.CUSTOM:
            kinds.append((code.CustomCode().decode(), False))
        else:
            kinds.append((names.get(builtin, f"BUILTIN_{builtin}"), True))
    counts: dict[int, int] = {}
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        for o in range(graph.OperatorsLength()):
            index = graph.Operators(o).OpcodeIndex()
            counts[index] = counts.get(index, 0) + 1
    return [
        {"op": name, "builtin": builtin, "count": counts.get(i, 0)}
        for i, (name, builtin) in enumerate(kinds)
    ]


def tensor_types(model_bytes: bytes) -> dict[str, int]:
    """How many tensors of each element type the flatbuffer holds (all subgraphs)."""
    schema, model = _model(model_bytes)
    names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    counts: dict[str, int] = {}
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        for t in range(graph.TensorsLength()):
            name = names.get(graph.Tensors(t).Type(), "?").lower()
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def range_scaled_error(result, reference) -> float:
    """max |result - reference| over the reference's range (max - min): the int8 measure.

    A quantized tensor's error is a fraction of its calibrated range, not of each value, so
    this is the scale an int8 bound is stated in (INT8_OUTPUT_BOUND).
    """
    result = np.asarray(result, np.float64)
    reference = np.asarray(reference, np.float64)
    if result.shape != reference.shape:
        raise ValueError(f"shapes differ: {result.shape} vs {reference.shape}")
    spread = float(reference.max() - reference.min()) if reference.size else 0.0
    if spread == 0.0:
        raise ValueError("the reference is constant: its range cannot scale an error")
    return float(np.max(np.abs(result - reference)) / spread)


def accuracy(logits_BK, labels_B) -> float:
    """Fraction of rows whose largest logit is the label."""
    logits = np.asarray(logits_BK)
    labels = np.asarray(labels_B)
    if logits.ndim != 2 or logits.shape[0] != labels.shape[0]:
        raise ValueError(f"logits {logits.shape} and labels {labels.shape} do not match")
    return float(np.mean(logits.argmax(axis=1) == labels))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def arrays_sha256(arrays: Sequence) -> str:
    """One sha256 over a list of arrays (dtype, shape and bytes of each, in order): a cache
    key part for weights or a representative set."""
    digest = hashlib.sha256()
    for a in arrays:
        array = np.ascontiguousarray(a)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


# --- a content-addressed cache of converted bytes ----------------------------------------------


class CacheManifest(pydantic.BaseModel):
    """``<key>.json`` beside ``<key>.tflite``: what a reader verifies before trusting it."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    schema_version: int
    key: str
    sha256: str
    size: int
    spec: dict
    environment: dict


def cache_directory() -> pathlib.Path | None:
    """The course's trained-weights cache folder (JAX_LAB_CACHE_DIR) + "tflite"; None = off."""
    from core.post_training import cache

    base = cache.directory()
    return None if base is None else base.parent / CACHE_SUBFOLDER


def _environment(sources: Sequence[str]) -> dict:
    from importlib import metadata

    digest = hashlib.sha256()
    for name in sources:
        digest.update(name.encode())
        digest.update((_ROOT / name).read_bytes())
    versions = {}
    for package in ("jax", "jaxlib", "flax", "tensorflow-cpu", "tensorflow", "ai-edge-litert"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "absent"
    return {"sources_sha256": digest.hexdigest(), "versions": versions}


def cache_key(spec: dict, sources: Sequence[str] = CACHE_SOURCES) -> tuple[str, dict]:
    """(sha256 key, environment) of a conversion described by ``spec`` (JSON-able)."""
    environment = _environment(sources)
    text = json.dumps({"spec": spec, "environment": environment}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest(), environment


def load_cached(key: str, folder: pathlib.Path | None = None) -> bytes | None:
    """The entry's bytes if its manifest validates and names this key, size and sha256."""
    folder = cache_directory() if folder is None else folder
    if folder is None:
        return None
    try:
        manifest = CacheManifest.model_validate_json((folder / f"{key}.json").read_text())
        data = (folder / f"{key}.tflite").read_bytes()
    except (OSError, ValueError):
        return None
    if (
        manifest.schema_version != CACHE_SCHEMA_VERSION
        or manifest.key != key
        or manifest.size != len(data)
        or manifest.sha256 != sha256(data)
    ):
        return None
    return data


def store_cached(
    key: str, data: bytes, spec: dict, environment: dict, folder: pathlib.Path | None = None
) -> pathlib.Path | None:
    """Write ``<key>.tflite`` then its manifest, each atomically; None if off or unwritable."""
    folder = cache_directory() if folder is None else folder
    if folder is None:
        return None
    manifest = CacheManifest(
        schema_version=CACHE_SCHEMA_VERSION,
        key=key,
        sha256=sha256(data),
        size=len(data),
        spec=spec,
        environment=environment,
    )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        documents.write_bytes_atomic(folder / f"{key}.tflite", data)
        documents.write_text_atomic(folder / f"{key}.json", manifest.model_dump_json(indent=1))
    except OSError:
        return None
    return folder / f"{key}.json"


def cached_tflite(
    spec: dict,
    compute: Callable[[], dict[str, bytes]],
    sources: Sequence[str] = CACHE_SOURCES,
    folder: pathlib.Path | None = None,
) -> tuple[dict[str, bytes], str]:
    """({variant: bytes}, origin): every variant verified from the cache ("on-disk cache"),
    else ``compute()`` stored ("converted in this process").

    ``spec`` must name everything the bytes depend on that ``sources`` do not: the weights'
    and the representative set's content hashes, the model's code, the variants.
    """
    variants = spec.get("variants")
    if not variants or not isinstance(variants, list | tuple):
        raise ValueError("spec must list its 'variants' (the keys compute() returns)")
    entries = {}
    for variant in variants:
        key, environment = cache_key({**spec, "variant": variant}, sources)
        entries[variant] = (key, environment)
    found = {v: load_cached(key, folder) for v, (key, _) in entries.items()}
    if all(data is not None for data in found.values()):
        return found, "on-disk cache"
    computed = compute()
    if sorted(computed) != sorted(variants):
        raise ValueError(f"compute() returned {sorted(computed)}, spec lists {sorted(variants)}")
    for variant, (key, environment) in entries.items():
        store_cached(key, computed[variant], {**spec, "variant": variant}, environment, folder)
    return computed, "converted in this process"
