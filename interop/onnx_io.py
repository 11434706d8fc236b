"""PyTorch -> ONNX (the dynamo exporter, a dynamic batch) -> onnxruntime, verified before load.

1. ``export(module, example_x, path)`` puts the module in inference mode (``eval()``:
   BatchNorm reads its running statistics, dropout is off) and exports it with
   ``torch.onnx.export(..., dynamo=True)``: ``torch.export`` traces the forward into an FX
   graph and the ONNX translator writes it out. The batch is dynamic through
   ``dynamic_shapes``, whose keys are the *names of the forward's arguments* (here read
   with ``inspect.signature``, so a forward ``(self, x_BCHW)`` gets ``{"x_BCHW": {0: batch}}``);
   the graph's input and output are renamed ``x`` and ``logits``. The weights are stored
   inside the .onnx file (no external data file for a model this small). Beside it goes a
   manifest (``<path>.json``: the file's sha256 and size, input/output names and shapes with
   the batch as the symbol "batch", opset, torch version).
2. ``load(path, manifest)`` reads the bytes once, checks their size and sha256 against the
   manifest, runs ``onnx.checker.check_model(full_check=True)`` (the graph is well formed
   and its shapes infer) and that the graph's input and output match the manifest, and only
   then builds an onnxruntime ``InferenceSession`` from those same bytes (no second read of
   the file a check could race with) on the ``CPUExecutionProvider``.
3. ``run(session, x)`` -> the logits as NumPy.

JAX -> ONNX directly: ``jax2onnx`` (0.17.1 converts Flax NNX models, 2.4e-7 from JAX here)
pins ``orbax-checkpoint<0.11.37`` while the course pins orbax 0.12.8, so it is **not in the
course environment**; a JAX model reaches ONNX here through its PyTorch twin
(interop/twins.py, interop/torch_flax.py), or reaches an edge runtime as LiteRT
(interop/tflite.py). torch and onnx are imported inside the functions.
"""

from __future__ import annotations

import hashlib
import inspect
import pathlib

import numpy as np
import pydantic

from core import documents

INPUT_NAME = "x"
OUTPUT_NAME = "logits"
BATCH = "batch"
PROVIDERS = ("CPUExecutionProvider",)
MAX_BATCH = 65536


class Manifest(pydantic.BaseModel):
    """What ``<model>.onnx.json`` records and ``load`` checks before a session is built."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    schema_version: int = 1
    file: str
    sha256: str
    size: int
    input_name: str
    input_shape: list[int | str]
    output_name: str
    output_shape: list[int | str]
    opset: int
    torch_version: str


def manifest_path(path: str | pathlib.Path) -> pathlib.Path:
    path = pathlib.Path(path)
    return path.with_name(path.name + ".json")


def _first_argument(module) -> str:
    parameters = [
        p
        for p in inspect.signature(module.forward).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(parameters) != 1:
        names = [p.name for p in parameters]
        raise ValueError(f"forward must take one input tensor, it takes {names}")
    return parameters[0].name


def _dims(value_info) -> list[int | str]:
    return [
        d.dim_param if d.dim_param else int(d.dim_value)
        for d in value_info.type.tensor_type.shape.dim
    ]


def export(
    module,
    example_x,
    path: str | pathlib.Path,
    dynamic_batch: bool = True,
) -> Manifest:
    """Export ``module`` (in eval mode) to ``path``; write and return its manifest.

    ``example_x`` is one batch (B, ...) of float32 inputs (numpy or torch). With
    ``dynamic_batch=False`` the batch is fixed at the example's (a deployment mistake
    ``load``'s callers see: another batch size is refused by onnxruntime).
    """
    import onnx
    import torch

    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    x = torch.as_tensor(np.asarray(example_x, np.float32))
    if x.ndim < 2 or x.shape[0] < 1:
        raise ValueError(f"example_x must be a batch (B, ...), got shape {tuple(x.shape)}")
    argument = _first_argument(module)
    module.eval()
    dynamic = (
        {argument: {0: torch.export.Dim(BATCH, min=1, max=MAX_BATCH)}} if dynamic_batch else None
    )
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    program = torch.onnx.export(
        module,
        (x,),
        dynamo=True,
        dynamic_shapes=dynamic,
        input_names=[INPUT_NAME],
        output_names=[OUTPUT_NAME],
        external_data=False,
        verbose=False,
    )
    data = program.model_proto.SerializeToString()
    proto = onnx.load_from_string(data)
    documents.write_bytes_atomic(path, data)
    manifest = Manifest(
        file=path.name,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        input_name=proto.graph.input[0].name,
        input_shape=_dims(proto.graph.input[0]),
        output_name=proto.graph.output[0].name,
        output_shape=_dims(proto.graph.output[0]),
        opset=int(next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))),
        torch_version=torch.__version__,
    )
    documents.write_text_atomic(manifest_path(path), manifest.model_dump_json(indent=1))
    return manifest


def read_manifest(path: str | pathlib.Path) -> Manifest:
    """The manifest beside ``path``, schema-validated (ValueError naming the file)."""
    where = manifest_path(path)
    try:
        return Manifest.model_validate_json(where.read_text())
    except OSError as error:
        raise ValueError(f"no manifest for {path}: {where} cannot be read ({error})") from error
    except pydantic.ValidationError as error:
        raise ValueError(f"{where} is not an ONNX manifest: {error}") from error


def verified_bytes(path: str | pathlib.Path, manifest: Manifest | None = None) -> bytes:
    """The .onnx file's bytes after every check: size, sha256, onnx.checker, input/output
    names and shapes as the manifest records them (ValueError naming the failed check)."""
    import onnx

    manifest = read_manifest(path) if manifest is None else manifest
    data = pathlib.Path(path).read_bytes()
    if len(data) != manifest.size:
        raise ValueError(f"{path} has {len(data)} bytes, its manifest says {manifest.size}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != manifest.sha256:
        raise ValueError(
            f"{path}'s sha256 {digest[:12]}... != the manifest's {manifest.sha256[:12]}..."
        )
    proto = onnx.load_from_string(data)
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as error:
        raise ValueError(f"{path} fails onnx.checker: {error}") from error
    seen = {
        "input": (proto.graph.input[0].name, _dims(proto.graph.input[0])),
        "output": (proto.graph.output[0].name, _dims(proto.graph.output[0])),
    }
    expected = {
        "input": (manifest.input_name, manifest.input_shape),
        "output": (manifest.output_name, manifest.output_shape),
    }
    if len(proto.graph.input) != 1 or seen != expected:
        raise ValueError(f"{path}'s graph has inputs/outputs {seen}, its manifest {expected}")
    return data


def load(path: str | pathlib.Path, manifest: Manifest | None = None):
    """An onnxruntime InferenceSession (CPU) on the verified bytes of ``path``."""
    import onnxruntime

    data = verified_bytes(path, manifest)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(data, sess_options=options, providers=list(PROVIDERS))


def run(session, x) -> np.ndarray:
    """The session's first output on x (float32), with the input's fixed dims checked."""
    x = np.asarray(x, np.float32)
    declared = session.get_inputs()[0]
    shape = declared.shape
    if len(shape) != x.ndim or any(
        isinstance(d, int) and d != n for d, n in zip(shape, x.shape, strict=True)
    ):
        raise ValueError(f"input shape {x.shape} does not fit the model's {shape}")
    return np.asarray(session.run(None, {declared.name: x})[0])


def op_counts(path: str | pathlib.Path) -> dict[str, int]:
    """How many nodes of each ONNX op type the graph holds (for a report)."""
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path)).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))
