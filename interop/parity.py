"""THE parity matrix: one DigitsNet, one input batch, every framework and format, every pair.

One seeded DigitsNet (``twins.seeded_weights(seed)``, torch layout, non-trivial BatchNorm
statistics) becomes the NNX reference (``torch_flax.torch_to_nnx``); each format is made from it:

    jax               the NNX twin itself (the reference)
    torch             torch_flax.to_torch_model (NNX -> torch state dict, transposes)
    onnx              that torch module -> torch.onnx.export (dynamo) -> onnxruntime
    tf_savedmodel     jax2tf SavedModel with a polymorphic batch, run in TensorFlow
    tflite_float      the SavedModel -> LiteRT float32, run with ai_edge_litert
    tflite_int8       the SavedModel -> LiteRT full-integer int8 (calibrated on the digits'
                      training split), int8 inputs and outputs
    keras_jax / keras_torch / keras_tensorflow
                      keras_bridge's Keras twin, one subprocess per backend

All run the same x_BHWC batch (torch and ONNX get it transposed to NCHW). For every PAIR of
formats that ran (not only against JAX): max |a - b|, the relative error (max |a - b| over
max(max |b|, 1), ``numerics.scaled_max_error``; b is the pair's earlier format in ``FORMATS``),
and the verdict against the pair's bound: float32 pairs against ``numerics.tolerance("float32")``
(scaled error), pairs with int8 against ``INT8_BOUND`` (the range-scaled error, see there).

A format whose runner cannot start (an import fails, a worker dies) is a row "not run: <why>"
and its pairs say so; nothing is dropped silently. ``mistake`` / ``mistake_in`` plant one of
``torch_flax.MISTAKES`` (a missing transpose, a wrong epsilon, ...) in ONE format's model (the
model that format is built from): the matrix must flag exactly the pairs with that format.
Keras subprocess outputs are cached in memory by content hash (weights, config, input, backend,
source files), TFLite bytes on disk (tflite.cached_tflite).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import pathlib
import tempfile
import time
from collections.abc import Callable, Sequence

import numpy as np

from core import numerics
from interop import keras_bridge, tflite, torch_flax, twins

FORMATS: tuple[str, ...] = (
    "jax",
    "torch",
    "onnx",
    "tf_savedmodel",
    "tflite_float",
    "tflite_int8",
    "keras_jax",
    "keras_torch",
    "keras_tensorflow",
)
# The optional frameworks each format needs (a host may lack them: core.runtime.host_lacks).
MODULES: dict[str, tuple[str, ...]] = {
    "jax": (),
    "torch": ("torch",),
    # torch.onnx.export (its dynamo exporter imports onnxscript), run by ONNX Runtime
    "onnx": ("torch", "onnx", "onnxscript", "onnxruntime"),
    "tf_savedmodel": ("tensorflow",),
    "tflite_float": ("tensorflow", "ai_edge_litert"),
    "tflite_int8": ("tensorflow", "ai_edge_litert"),
    # the weights travel to the Keras worker as a safetensors file (keras_bridge)
    "keras_jax": ("keras", "safetensors"),
    "keras_torch": ("keras", "safetensors", "torch"),
    "keras_tensorflow": ("keras", "safetensors", "tensorflow"),
}
# Cheap enough for a headless run at the app's defaults (no subprocess, no TensorFlow).
CHEAP: tuple[str, ...] = ("jax", "torch", "onnx")
REFERENCE = "jax"
DTYPES: dict[str, str] = {f: ("int8" if f == "tflite_int8" else "float32") for f in FORMATS}
# A pair with int8 is judged on max |a - b| over the float output's range (max - min): an int8
# tensor's error is a fraction of its calibrated range, not of each value, and the logits'
# int8 steps (1/256 of that range) add up through the layers. The bound is interop/tflite.py's
# (the digits CNN calibrated on the training split: "LiteRT int8: error_over_range" in
# benchmarks/records/edge_deploy/; 3% leaves room for other seeds); numerics.tolerance("int8")
# is 0 (exact integer work), which does not apply here.
INT8_BOUND: float = tflite.INT8_OUTPUT_BOUND
MISTAKES = torch_flax.MISTAKES
_ROOT = pathlib.Path(__file__).resolve().parents[1]
_KERAS_SOURCES = ("interop/keras_bridge.py", "interop/keras_worker.py", "interop/twins.py")
_KERAS_CACHE: dict[str, np.ndarray] = {}
_KERAS_CACHE_LIMIT = 64


@dataclasses.dataclass(frozen=True)
class Run:
    """One format's outcome: logits_BK, or why it did not run."""

    name: str
    logits: np.ndarray | None
    status: str  # "ran", "ran (cached)", or "not run: <why>"
    seconds: float

    @property
    def ran(self) -> bool:
        return self.logits is not None


@dataclasses.dataclass(frozen=True)
class Pair:
    """Two formats compared: their errors and the verdict against the pair's bound."""

    a: str
    b: str
    max_abs: float | None
    relative: float | None
    measure: str  # "scaled" (float32) or "range-scaled" (int8)
    error: float | None
    bound: float
    status: str

    @property
    def within(self) -> bool | None:
        return None if self.error is None else self.error <= self.bound


@dataclasses.dataclass(frozen=True)
class Matrix:
    formats: tuple[str, ...]
    runs: dict[str, Run]
    pairs: list[Pair]
    seed: int
    batch: int
    mistake: str
    mistake_in: str | None

    def errors(self) -> dict[str, float]:
        """{'a vs b': judged error} for the pairs that ran (a lab.Check's errors)."""
        return {f"{p.a} vs {p.b}": p.error for p in self.pairs if p.error is not None}

    def bounds(self) -> dict[str, float]:
        return {f"{p.a} vs {p.b}": p.bound for p in self.pairs if p.error is not None}

    def failing(self) -> list[tuple[str, str]]:
        return [(p.a, p.b) for p in self.pairs if p.within is False]

    def not_run(self) -> dict[str, str]:
        return {n: r.status for n, r in self.runs.items() if not r.ran}

    def ratio_matrix(self) -> np.ndarray:
        """F x F: judged error / bound (NaN on the diagonal and where a side did not run)."""
        index = {f: i for i, f in enumerate(self.formats)}
        m = np.full((len(self.formats),) * 2, np.nan)
        for p in self.pairs:
            if p.error is not None:
                m[index[p.a], index[p.b]] = m[index[p.b], index[p.a]] = p.error / p.bound
        return m

    def rows(self) -> list[dict]:
        """One row per pair, for a table."""
        return [
            {
                "pair": f"{p.a} vs {p.b}",
                "max abs": p.max_abs,
                "relative": p.relative,
                "judged": p.measure,
                "error": p.error,
                "bound": p.bound,
                "verdict": p.status,
            }
            for p in self.pairs
        ]

    def run_rows(self) -> list[dict]:
        return [
            {
                "#": i,
                "format": f,
                "dtype": DTYPES[f],
                "status": self.runs[f].status,
                "seconds": round(self.runs[f].seconds, 2),
                "mistake planted": self.mistake if f == self.mistake_in else "",
            }
            for i, f in enumerate(self.formats)
        ]


def check_request(
    formats: Sequence[str], batch: int, mistake: str, mistake_in: str | None
) -> tuple[str, ...]:
    """The formats in FORMATS order, after refusing a bad request (ValueError naming it)."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown format {unknown[0]!r}; known: {', '.join(FORMATS)}")
    chosen = tuple(f for f in FORMATS if f in formats)
    if len(chosen) < 2:
        raise ValueError(f"a parity matrix needs at least two formats, got {list(chosen)}")
    if not 1 <= batch <= 512:
        raise ValueError(f"batch must be in 1..512, got {batch}")
    if mistake not in MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; known: {', '.join(MISTAKES)}")
    if mistake != "none" and mistake_in not in chosen:
        raise ValueError(
            f"the mistake {mistake!r} must be planted in one of the chosen formats "
            f"({', '.join(chosen)}), got {mistake_in!r}"
        )
    return chosen


# --- runners: (NNX model, x_BHWC) -> logits_BK ---------------------------------------------------


def _nchw(x_BHWC: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.transpose(x_BHWC, (0, 3, 1, 2)))


def run_jax(model, x_BHWC, folder) -> np.ndarray:
    return twins.nnx_activations(model, x_BHWC)[-1][1]


def run_torch(model, x_BHWC, folder) -> np.ndarray:
    return twins.torch_activations(torch_flax.to_torch_model(model), x_BHWC)[-1][1]


def run_onnx(model, x_BHWC, folder) -> np.ndarray:
    from interop import onnx_io

    path = pathlib.Path(folder) / "digits_net.onnx"
    # torch.export specializes a batch of 1, so the example batch has two rows
    example = _nchw(np.repeat(x_BHWC[:1], 2, axis=0))
    onnx_io.export(torch_flax.to_torch_model(model), example, path)
    return onnx_io.run(onnx_io.load(path), _nchw(x_BHWC))


def run_tf_savedmodel(model, x_BHWC, folder) -> np.ndarray:
    fn, params = tflite.nnx_function(model)
    directory = pathlib.Path(folder) / "saved_model"
    tflite.to_saved_model(fn, params, directory, x_BHWC.shape[1:])
    return tflite.run_saved_model(directory, x_BHWC)


def _representative() -> np.ndarray:
    from core.data import digits

    return digits.load().x_train


def _weights_digest(model) -> str:
    digest = hashlib.sha256()
    for name, value in sorted(keras_bridge.nnx_to_keras(model).items()):
        digest.update(name.encode())
        digest.update(value.tobytes())
    digest.update(repr(model.config).encode())
    return digest.hexdigest()


def tflite_bytes(model, quantization: str) -> tuple[bytes, str]:
    """(flatbuffer, origin) for the model, from tflite's verified on-disk cache when there."""
    fn, params = tflite.nnx_function(model)
    representative = _representative() if quantization == "int8" else None
    spec = {
        "model": "interop.twins.NNXDigitsNet",
        "weights_sha256": _weights_digest(model),
        "representative_sha256": (
            None if representative is None else hashlib.sha256(representative).hexdigest()
        ),
        "variants": [quantization],
    }
    found, origin = tflite.cached_tflite(
        spec,
        lambda: tflite.convert(
            fn, params, (twins.IMAGE_SIZE, twins.IMAGE_SIZE, 1), representative, [quantization]
        ),
        sources=(*tflite.CACHE_SOURCES, "interop/twins.py", "interop/parity.py"),
    )
    return found[quantization], origin


def run_tflite_float(model, x_BHWC, folder) -> np.ndarray:
    return tflite.run(tflite_bytes(model, "float")[0], x_BHWC)


def run_tflite_int8(model, x_BHWC, folder) -> np.ndarray:
    data = tflite_bytes(model, "int8")[0]
    try:
        return tflite.run(data, x_BHWC)
    except RuntimeError as error:
        # Seen with DigitsNet: exact GELU's erf reaches TFLite as an erfc expansion with DIV
        # ops, and full-integer quantization can round a divisor to its zero point
        # ("div.cc: data[i] != zero_point"): the int8 model does not run on those inputs.
        message = str(error).strip().splitlines()[0]
        raise Unavailable(f"the LiteRT int8 interpreter failed: {message}") from None


def _keras_key(model, x_BHWC, backend: str) -> str:
    digest = hashlib.sha256()
    digest.update(_weights_digest(model).encode())
    digest.update(np.ascontiguousarray(x_BHWC, np.float32).tobytes())
    digest.update(str(x_BHWC.shape).encode())
    digest.update(backend.encode())
    for name in _KERAS_SOURCES:
        digest.update((_ROOT / name).read_bytes())
    return digest.hexdigest()


def keras_cached(model, x_BHWC, backend: str) -> np.ndarray | None:
    return _KERAS_CACHE.get(_keras_key(model, x_BHWC, backend))


def _keras_runner(backend: str) -> Callable:
    def run(model, x_BHWC, folder) -> np.ndarray:
        result = keras_bridge.run_backends(
            keras_bridge.nnx_to_keras(model), model.config, {"x": x_BHWC}, [backend]
        )[backend]
        logits = result.outputs["model"]["x"]["fc2"]
        if len(_KERAS_CACHE) >= _KERAS_CACHE_LIMIT:
            _KERAS_CACHE.pop(next(iter(_KERAS_CACHE)))
        _KERAS_CACHE[_keras_key(model, x_BHWC, backend)] = logits
        return logits

    return run


class Unavailable(RuntimeError):
    """A format that was built but cannot produce outputs here (the reason is the message)."""


RUNNERS: dict[str, Callable] = {
    "jax": run_jax,
    "torch": run_torch,
    "onnx": run_onnx,
    "tf_savedmodel": run_tf_savedmodel,
    "tflite_float": run_tflite_float,
    "tflite_int8": run_tflite_int8,
    **{f"keras_{b}": _keras_runner(b) for b in keras_bridge.BACKENDS},
}
# What a runner may fail with and still leave the matrix honest ("not run: <why>"): a missing
# package, a Keras worker that died or hung, a runtime that refuses the built model. Any other
# exception is a bug and propagates.
UNAVAILABLE = (ImportError, keras_bridge.WorkerError, Unavailable)


def run_format(name: str, model, x_BHWC, folder) -> Run:
    if name.startswith("keras_"):
        cached = keras_cached(model, x_BHWC, name.removeprefix("keras_"))
        if cached is not None:
            return Run(name, cached, "ran (cached)", 0.0)
    start = time.perf_counter()
    try:
        logits = np.asarray(RUNNERS[name](model, x_BHWC, folder), np.float32)
    except UNAVAILABLE as error:
        why = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        return Run(name, None, f"not run: {type(error).__name__}: {why}", 0.0)
    if logits.shape != (len(x_BHWC), twins.CLASSES):
        raise ValueError(f"{name} returned logits of shape {logits.shape}")
    return Run(name, logits, "ran", time.perf_counter() - start)


def compare(a: str, b: str, runs: dict[str, Run]) -> Pair:
    """Pair (a, b), a earlier in FORMATS (the reference side of the relative error)."""
    int8 = "int8" in (DTYPES[a], DTYPES[b])
    measure, bound = (
        ("range-scaled", INT8_BOUND) if int8 else ("scaled", numerics.tolerance("float32"))
    )
    missing = [f for f in (a, b) if not runs[f].ran]
    if missing:
        why = "; ".join(f"{f} {runs[f].status}" for f in missing)
        return Pair(a, b, None, None, measure, None, bound, f"not run: {why}")
    ra, rb = runs[a].logits, runs[b].logits
    max_abs = numerics.max_abs_error(rb, ra)
    relative = numerics.scaled_max_error(rb, ra)
    if int8:
        quantized, other = (ra, rb) if DTYPES[a] == "int8" else (rb, ra)
        error = tflite.range_scaled_error(quantized, other)
    else:
        error = relative
    verdict = "within" if error <= bound else "OUTSIDE"
    return Pair(a, b, max_abs, relative, measure, error, bound, verdict)


def models(seed: int, mistake: str = "none"):
    """(right NNX model, the model with ``mistake`` planted) from seeded torch weights."""
    weights = twins.seeded_weights(seed)
    right = torch_flax.torch_to_nnx(weights)
    wrong = right if mistake == "none" else torch_flax.torch_to_nnx(weights, mistake=mistake)
    return right, wrong


def parity_matrix(
    formats: Sequence[str] = FORMATS,
    seed: int = 0,
    batch: int = 16,
    mistake: str = "none",
    mistake_in: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Matrix:
    """Run DigitsNet (seeded) on one digits batch in every chosen format; compare all pairs."""
    chosen = check_request(formats, batch, mistake, mistake_in)
    right, wrong = models(seed, mistake)
    x = twins.digits_batch(batch, seed)
    runs = {}
    with tempfile.TemporaryDirectory(prefix="parity_") as tmp:
        for name in chosen:
            if progress is not None:
                progress(name)
            folder = pathlib.Path(tmp) / name
            folder.mkdir()
            model = wrong if name == mistake_in else right
            runs[name] = run_format(name, model, x, folder)
    pairs = [compare(a, b, runs) for a, b in itertools.combinations(chosen, 2)]
    return Matrix(
        chosen, runs, pairs, seed, batch, mistake, mistake_in if mistake != "none" else None
    )


def worst_per_pair(matrices: Sequence[Matrix]) -> dict[str, dict]:
    """{'a vs b': worst judged error, its bound and max abs over several matrices}."""
    worst: dict[str, dict] = {}
    for matrix in matrices:
        for p in matrix.pairs:
            if p.error is None:
                continue
            key = f"{p.a} vs {p.b}"
            entry = worst.setdefault(
                key, {"error": 0.0, "max_abs": 0.0, "bound": p.bound, "measure": p.measure}
            )
            entry["error"] = max(entry["error"], p.error)
            entry["max_abs"] = max(entry["max_abs"], p.max_abs)
    return worst


def against_reference(matrix: Matrix, reference_BK) -> dict[str, tuple[float, float]]:
    """{format: (error, bound)} of every format that ran against an outside reference's logits
    (a NumPy float64 DigitsNet): float32 formats on the scaled error, int8 range-scaled."""
    reference = np.asarray(reference_BK, np.float64)
    out = {}
    for name, run in matrix.runs.items():
        if not run.ran:
            continue
        if DTYPES[name] == "int8":
            out[name] = (tflite.range_scaled_error(run.logits, reference), INT8_BOUND)
        else:
            out[name] = (
                numerics.scaled_max_error(run.logits, reference),
                numerics.tolerance("float32"),
            )
    return out
