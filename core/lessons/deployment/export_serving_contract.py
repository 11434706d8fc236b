"""Lesson code for "Export a computation and verify its serving contract" (apps/
export_serving_contract.py): the digits classifier of the course's predict service exported
with jax.export over a symbolic batch dimension (core.serving.predict.export, the one export
code of the service), its contract as a table, a reload in a FRESH PROCESS compared bit for bit
with the in-process model, and one violation of the contract, refused with its message.

The fresh process runs this module: ``python -m core.lessons.deployment.export_serving_contract
DIR IN.npz OUT.npz`` loads (verifies, then deserializes) the artifact in DIR once and predicts
every array of IN.npz, writing the probabilities and labels to OUT.npz (no pickle either way).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
import time

import jax
import numpy as np

from core import runtime
from core.serving import artifacts as files
from core.serving.predict import export

VIOLATIONS = (
    "wrong feature count",
    "wrong dtype",
    "wrong rank",
    "oversize batch",
    "NaN input",
    "value out of range",
    "tampered weights file",
    "tampered exported file",
    "edited manifest",
)
BATCH_SETS = ("1,7,32", "1,2,3", "3,16,64", "100,200")
DTYPES = export.DTYPES
SUBPROCESS_TIMEOUT_S = 120
# The error chart's log axis cannot draw 0 (an output equal to the float64 reference after
# rounding); such an error is drawn at this floor and the title says so. It sits far below
# float32's rounding of a probability (~6e-8) and bfloat16's (~4e-3), so it never hides one.
ERROR_FLOOR = 1e-12


def parse_batch_sizes(text: str) -> list[int]:
    """ "1,7,32" -> [1, 7, 32] (ValueError naming a bad entry)."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"batch sizes are positive integers separated by commas, got {part!r}")
        sizes.append(int(part))
    return sizes


def batch_problem(batch_sizes: list[int], max_batch: int) -> str | None:
    """Why these batch sizes cannot be tried against a contract of max_batch (None: fine)."""
    over = [b for b in batch_sizes if b > max_batch]
    if over:
        return (
            f"batch sizes {over} exceed the contract's max batch {max_batch}: the artifact "
            "would refuse them (that is the 'oversize batch' violation); raise the max batch "
            "or pick smaller sizes"
        )
    return None


def probe_inputs(seed: int, batch_sizes: list[int], dtype: str) -> dict[int, np.ndarray]:
    """{b: x_BF} held-out digits (raw pixels in [0, 16]) in ``dtype``, cycled if b is large."""
    x, _ = export.test_inputs(seed, 359)
    rows = np.resize(x, (max(batch_sizes), x.shape[1]))
    return {b: rows[:b].astype(jax.numpy.dtype(dtype)) for b in batch_sizes}


def export_platforms() -> tuple[str, ...]:
    """The platforms the artifact is exported for: this process's backend, and the CPU too
    while this process holds a TPU, since the fresh process that reloads it then runs on the
    CPU (runtime.child_env: one process per chip). jax.export lowers for each platform named,
    no chip needed; a loader refuses a platform the artifact was not exported for."""
    here = jax.default_backend()
    return (here, "cpu") if runtime.holds_tpu() and here != "cpu" else (here,)


def backends_note() -> str:
    """For the check line: where the fresh process and the in-process model ran, while this
    process holds a TPU; "" otherwise."""
    return runtime.child_backend_note("the in-process model")


def in_process(weights: dict, x_BF: np.ndarray, buckets: list[int]):
    """The model in this process (jax.jit of the function that was exported) on the same
    padded batch the artifact runs, on the backend the fresh process runs on (this host's CPU
    while this process holds a TPU): (labels, probabilities) of the real rows."""
    rows = x_BF.shape[0]
    size = next(s for s in buckets if s >= rows)
    padded = np.zeros((size, x_BF.shape[1]), x_BF.dtype)
    padded[:rows] = x_BF
    with runtime.on_child_backend():  # the fresh process's backend: bit for bit needs one
        labels, probabilities = jax.jit(export.predict_fn)(weights, padded)
    return np.asarray(labels)[:rows], np.asarray(probabilities)[:rows]


def contract_rows(manifest: dict) -> list[dict]:
    """The serving contract as table rows: every exported input and output (shapes with the
    symbolic "b"), then platforms, calling convention, value range and the sha256s."""
    x = manifest["exported"]
    rows = [
        {"item": f"{side[:-1]} {leaf['name']}", "value": f"{leaf['dtype']}{leaf['shape']}"}
        for side in ("inputs", "outputs")
        for leaf in x[side]
    ]
    c = manifest["contract"]
    rows += [
        {"item": "platforms", "value": ", ".join(x["platforms"])},
        {"item": "calling convention version", "value": str(x["calling_convention_version"])},
        {"item": "batch b", "value": f"1 to {c['max_batch']} rows (symbolic in the program)"},
        {"item": "values", "value": f"finite, in [{c['min_value']:g}, {c['max_value']:g}]"},
        {"item": f"sha256 {manifest['weights']['file']}", "value": manifest["weights"]["sha256"]},
        {"item": f"sha256 {x['file']}", "value": x["sha256"]},
        {"item": "sha256 manifest (own content)", "value": manifest["manifest_sha256"]},
        {"item": "jax / jaxlib", "value": f"{manifest['versions']['jax']} / "
         f"{manifest['versions']['jaxlib']}"},
    ]  # fmt: skip
    return rows


# --- the fresh process ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Reloaded:
    outputs: dict[int, tuple[np.ndarray, np.ndarray]]  # {b: (labels, probabilities)}
    pid: int
    seconds: float


def reload_in_fresh_process(directory, inputs: dict[int, np.ndarray], workdir) -> Reloaded:
    """Run every input through the artifact in a new Python process (this module's main)."""
    workdir = pathlib.Path(workdir)
    arrays = {f"x{b}": files.storable(x) for b, x in inputs.items()}
    arrays |= {f"x{b}#dtype": np.array(x.dtype.name) for b, x in inputs.items()}
    (workdir / "inputs.npz").write_bytes(files.npz_bytes(arrays))
    out = workdir / "outputs.npz"
    out.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        __name__,
        str(directory),
        str(workdir / "inputs.npz"),
        str(out),
    ]
    start = time.perf_counter()
    env = runtime.child_env()  # on the CPU while this process holds a TPU (one per chip)
    env.setdefault("JAX_PLATFORMS", "cpu")
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, env=env
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"the fresh process failed: {done.stderr.strip()[-800:]}")
    with np.load(out, allow_pickle=False) as archive:
        pid = int(archive["pid"])
        outputs = {b: (archive[f"labels{b}"], archive[f"probabilities{b}"]) for b in inputs}
    return Reloaded(outputs, pid, seconds)


def _main(directory, inputs_path, out_path) -> None:
    artifacts = export.load_artifacts(directory)
    results = {"pid": np.array(os.getpid())}
    with np.load(inputs_path, allow_pickle=False) as archive:
        names = [n for n in archive.files if not n.endswith("#dtype")]
        for name in names:
            x = files.from_stored(archive[name], str(archive[f"{name}#dtype"]))
            labels, probabilities = artifacts.predict(x)
            results[f"labels{name[1:]}"] = labels
            results[f"probabilities{name[1:]}"] = probabilities
    pathlib.Path(out_path).write_bytes(files.npz_bytes(results))


# --- violations ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Refusal:
    violation: str
    sent: str  # what was sent or changed
    refused: bool
    error: str  # the exception's class name ("" when nothing was refused)
    message: str


def _flip_byte(path: pathlib.Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def try_violation(violation: str, artifacts: export.Artifacts, workdir) -> Refusal:
    """Send (or plant) ``violation`` and report how the artifact's checks answered."""
    if violation not in VIOLATIONS:
        raise ValueError(f"violation must be one of {VIOLATIONS}, got {violation!r}")
    c = artifacts.contract
    dtype = artifacts.input_dtype
    good = np.full((2, c["features"]), 3.0, dtype)
    other = np.float32 if dtype != np.float32 else np.float64
    calls = {
        "wrong feature count": (np.full((2, 63), 3.0, dtype), "2 rows of 63 features"),
        "wrong dtype": (good.astype(other), f"2 rows as {np.dtype(other).name}"),
        "wrong rank": (good[None], "an array of shape (1, 2, 64)"),
        "oversize batch": (
            np.zeros((c["max_batch"] + 1, c["features"]), dtype),
            f"{c['max_batch'] + 1} rows",
        ),
        "NaN input": (np.where(np.eye(2, c["features"]) > 0, np.nan, good).astype(dtype), "NaN"),
        "value out of range": ((good * 0 + 17).astype(dtype), "every pixel 17"),
    }
    if violation in calls:
        x, sent = calls[violation]
        try:
            artifacts.predict(x)
        except files.ArtifactError as exc:
            return Refusal(violation, sent, True, type(exc).__name__, str(exc))
        return Refusal(violation, sent, False, "", "accepted: the contract did not refuse it")
    copy = pathlib.Path(workdir) / "tampered"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(artifacts.directory, copy)
    if violation == "tampered weights file":
        _flip_byte(copy / export.WEIGHTS)
        sent = f"one bit flipped in {export.WEIGHTS}"
    elif violation == "tampered exported file":
        _flip_byte(copy / export.EXPORTED)
        sent = f"one bit flipped in {export.EXPORTED}"
    else:
        path = copy / export.MANIFEST
        path.write_text(path.read_text().replace('"max_value": 16.0', '"max_value": 255.0'))
        sent = "manifest max_value 16 -> 255 (not re-hashed)"
    try:
        export.load_artifacts(copy)
    except files.ArtifactError as exc:
        return Refusal(violation, sent, True, type(exc).__name__, str(exc))
    return Refusal(violation, sent, False, "", "loaded: the verification did not refuse it")


# --- the whole lesson ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Result:
    manifest: dict
    artifacts: export.Artifacts
    inputs: dict[int, np.ndarray]
    here: dict[int, tuple[np.ndarray, np.ndarray]]  # in-process model
    reloaded: Reloaded
    export_seconds: float
    test_accuracy: float


def run(seed: int, steps: int, dtype: str, max_batch: int, batch_sizes: list[int], workdir):
    """Train, export (symbolic batch), load here, reload in a fresh process, on each size."""
    problem = batch_problem(batch_sizes, max_batch)
    if problem:
        raise ValueError(problem)
    workdir = pathlib.Path(workdir)
    directory = workdir / "artifact"
    trained = export.train(seed, steps)
    start = time.perf_counter()
    manifest = export.write_artifacts(
        trained, directory, max_batch, platforms=export_platforms(), dtype=dtype
    )
    export_seconds = time.perf_counter() - start
    artifacts = export.load_artifacts(directory)
    inputs = probe_inputs(seed, batch_sizes, dtype)
    weights = artifacts.numpy_weights()
    here = {b: in_process(weights, x, artifacts.buckets) for b, x in inputs.items()}
    reloaded = reload_in_fresh_process(directory, inputs, workdir)
    return Result(
        manifest, artifacts, inputs, here, reloaded, export_seconds,
        trained.info["test_accuracy"],
    )  # fmt: skip


if __name__ == "__main__":
    _main(*sys.argv[1:4])
