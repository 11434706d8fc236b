"""The parent side: one worker per chosen backend, all started at once, their results read back.

``run_backends(spec, backends, weights, data, training)`` writes the weights once
(safetensors + sha256 manifest, interop/weights_file.py) and the data once (.npz, its sha256
in every job), starts ``KERAS_BACKEND=b python -m interop.keras_track.worker`` for each backend
concurrently (they are independent: wall time is the slowest, not the sum), waits for all
within one deadline, and returns {backend: BackendRun}. A worker that fails or runs past the
deadline is a ``WorkerError`` naming the backend, its exit status and the end of its stderr.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence

import numpy as np

from core import runtime
from interop import keras_bridge, weights_file
from interop.keras_track import models, worker

BACKENDS = worker.BACKENDS
# A worker imports its backend (TensorFlow alone takes seconds, more on a loaded machine),
# builds a small model and runs tens of small steps: far below this; a hung child is killed.
WORKER_TIMEOUT_S = 240.0
STDERR_TAIL_LINES = 8
_ROOT = pathlib.Path(__file__).resolve().parents[2]


class WorkerError(RuntimeError):
    """A backend's worker failed: names the backend, its exit status and its stderr's end."""


@dataclasses.dataclass(frozen=True)
class Training:
    optimizer: str = "sgd"
    learning_rate: float = 0.1
    steps: int = 10
    clipnorm: float | None = None
    global_clipnorm: float | None = None
    momentum: float = 0.0
    jit_compile: str = "auto"
    eval_every: int = 0
    gradients: bool = True


@dataclasses.dataclass(frozen=True)
class BackendRun:
    backend: str
    outputs: np.ndarray
    probe_loss: float | None
    gradients: dict[str, np.ndarray]
    train_loss: np.ndarray
    step_seconds: np.ndarray
    eval_steps: np.ndarray
    eval_loss: np.ndarray
    eval_outputs: np.ndarray
    summary: dict
    wall_seconds: float

    @property
    def median_step_seconds(self) -> float:
        """Median seconds per training step, the first (warm-up, compile) step excluded."""
        steady = self.step_seconds[1:] if len(self.step_seconds) > 1 else self.step_seconds
        return float(np.median(steady)) if len(steady) else float("nan")


def parse_backends(text: str) -> tuple[tuple[str, ...], str | None]:
    """("jax", "torch") from "jax, torch", and the problem with it (None when fine)."""
    chosen = [b.strip() for b in text.split(",") if b.strip()]
    if not chosen:
        return (), f"choose at least one backend of {', '.join(BACKENDS)}"
    unknown = [b for b in chosen if b not in BACKENDS]
    if unknown:
        return (), f"unknown backend {unknown[0]!r}; Keras 3 runs on {', '.join(BACKENDS)}"
    if len(set(chosen)) != len(chosen):
        return (), f"a backend is named twice in {text!r}"
    return tuple(chosen), None


def write_data(path: pathlib.Path, data: Mapping[str, np.ndarray]) -> str:
    np.savez(path, **{k: np.asarray(v) for k, v in data.items()})
    return worker.sha256_file(path)


def _read(backend: str, output: pathlib.Path, wall: float) -> BackendRun:
    with np.load(output, allow_pickle=False) as npz:
        a = {k: npz[k] for k in npz.files}
    grads = {k.removeprefix("grad/"): v for k, v in a.items() if k.startswith("grad/")}
    return BackendRun(
        backend=backend,
        outputs=a["outputs"],
        probe_loss=float(a["probe_loss"]) if "probe_loss" in a else None,
        gradients=grads,
        train_loss=a["train_loss"],
        step_seconds=a["step_seconds"],
        eval_steps=a["eval_steps"],
        eval_loss=a["eval_loss"],
        eval_outputs=a["eval_outputs"],
        summary=json.loads(worker.summary_path(output).read_text()),
        wall_seconds=wall,
    )


def _tail(path: pathlib.Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return "\n".join(lines[-STDERR_TAIL_LINES:]) or "(no stderr)"


def start_worker(document: worker.JobFile, folder: pathlib.Path, env_backend: str | None = None):
    """Popen of one worker on ``document`` (stderr to a file in ``folder``); ``env_backend``
    sets another KERAS_BACKEND than the file's (tests of the refusal)."""
    backend = env_backend or document.backend
    job_path = folder / f"jobs_{document.backend}.json"
    job_path.write_text(document.model_dump_json(indent=1))
    env = runtime.child_env(
        KERAS_BACKEND=backend,
        JAX_PLATFORMS=keras_bridge.CHILD_PLATFORM,
        TF_CPP_MIN_LOG_LEVEL="3",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=runtime.python_path(_ROOT),
        OMP_NUM_THREADS="1",
    )
    stderr = open(folder / f"stderr_{document.backend}.txt", "w")  # noqa: SIM115 (closed later)
    process = subprocess.Popen(
        [sys.executable, "-m", "interop.keras_track.worker", str(job_path)],
        env=env,
        cwd=_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    return process, stderr


def run_documents(
    documents: Sequence[worker.JobFile],
    folder: pathlib.Path,
    timeout_s: float = WORKER_TIMEOUT_S,
) -> dict[str, dict[str, BackendRun]]:
    """Start every backend's worker at once, wait within one deadline, read the results:
    {backend: {job name: BackendRun}}."""
    start = time.perf_counter()
    running = {d.backend: (d, *start_worker(d, folder)) for d in documents}
    walls, codes, failures = {}, {}, []
    while len(codes) < len(running):  # poll all: each backend's own wall time
        for backend, (_doc, process, _stderr) in running.items():
            if backend not in codes and process.poll() is not None:
                codes[backend], walls[backend] = process.returncode, time.perf_counter() - start
        if time.perf_counter() - start > timeout_s:
            for backend, (_doc, process, _stderr) in running.items():
                if backend not in codes:
                    process.kill()
                    process.wait()
                    codes[backend], walls[backend] = None, time.perf_counter() - start
        time.sleep(0.02)
    for backend, (_doc, _process, stderr) in running.items():
        stderr.close()
        code = codes[backend]
        if code is None:
            failures.append(f"Keras {backend} worker ran past {timeout_s:.0f} s and was stopped")
        elif code != 0:
            tail = _tail(folder / f"stderr_{backend}.txt")
            failures.append(f"Keras {backend} worker exited {code}:\n{tail}")
    if failures:
        raise WorkerError("\n".join(failures))
    return {
        b: {j.name: _read(b, pathlib.Path(j.output), walls[b]) for j in doc.jobs}
        for b, (doc, *_) in running.items()
    }


@dataclasses.dataclass(frozen=True)
class Case:
    """One model to run under every backend: its spec, weights, data and training."""

    name: str
    spec: models.Spec
    weights: Mapping[str, np.ndarray]
    data: Mapping[str, np.ndarray]
    training: Training = Training()


def run_cases(
    cases: Sequence[Case],
    backends: Sequence[str],
    folder: str | pathlib.Path | None = None,
    timeout_s: float = WORKER_TIMEOUT_S,
) -> dict[str, dict[str, BackendRun]]:
    """Every case under every backend, one concurrent worker per backend running all the
    cases (the backend imports once): {backend: {case name: BackendRun}}. ``folder`` keeps
    the files (default: a temporary folder, removed afterwards)."""
    chosen, problem = parse_backends(",".join(backends))
    if problem:
        raise ValueError(problem)
    names = [c.name for c in cases]
    if not cases or len(set(names)) != len(names):
        raise ValueError(f"cases need distinct names, got {names}")
    for case in cases:
        if case.training.optimizer not in worker.OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {worker.OPTIMIZERS}")
    with tempfile.TemporaryDirectory(prefix="keras_track_") as tmp:
        where = pathlib.Path(folder) if folder is not None else pathlib.Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        jobs = {b: [] for b in chosen}
        for case in cases:
            saved = weights_file.save(
                where / f"{case.name}.safetensors", case.weights, model=case.spec.kind
            )
            data_path = where / f"{case.name}_data.npz"
            digest = write_data(data_path, case.data)
            for b in chosen:
                jobs[b].append(
                    worker.Job(
                        name=case.name,
                        spec=models.spec_to_dict(case.spec),
                        weights=str(saved.weights),
                        data=str(data_path),
                        data_sha256=digest,
                        output=str(where / f"out_{b}_{case.name}.npz"),
                        **dataclasses.asdict(case.training),
                    )
                )
        documents = [
            worker.JobFile(schema_version=worker.SCHEMA_VERSION, backend=b, jobs=jobs[b])
            for b in chosen
        ]
        return run_documents(documents, where, timeout_s)


def run_backends(
    spec: models.Spec,
    backends: Sequence[str],
    weights: Mapping[str, np.ndarray],
    data: Mapping[str, np.ndarray],
    training: Training = Training(),
    folder: str | pathlib.Path | None = None,
    timeout_s: float = WORKER_TIMEOUT_S,
) -> dict[str, BackendRun]:
    """The spec's model, holding ``weights``, run and trained on ``data`` under each backend
    (one concurrent subprocess each): {backend: BackendRun}."""
    case = Case("model", spec, weights, data, training)
    runs = run_cases([case], backends, folder, timeout_s)
    return {b: by_case["model"] for b, by_case in runs.items()}
