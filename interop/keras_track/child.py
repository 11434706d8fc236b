"""Run one Keras job in a ``KERAS_BACKEND=...`` subprocess: a JSON request in, a JSON result out.

Keras fixes its backend at its first import, once per process, so a track app never imports
Keras itself: it calls ``run(module, request, folder, backend)``, which writes
``<folder>/<name>.request.json`` and starts ``python -m <module> <request file>`` with
``KERAS_BACKEND=backend`` (and the lab's 8 CPU devices for JAX). The module's ``__main__``
calls ``serve(argv, handler)``: it checks that Keras really runs on the backend the request
names, calls ``handler(request)`` and writes the handler's dict as ``<name>.result.json``.
Arrays travel as ``.npz`` files the handler names in its result (``allow_pickle=False``).

A failing child is a ``WorkerError`` with its exit status and the end of its stderr (never a
traceback in the app). ``run_many`` starts independent jobs concurrently (wall time is the
slowest job's, not the sum).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from core import runtime
from interop import keras_bridge
from interop.keras_track import worker

BACKENDS = keras_bridge.BACKENDS
# A child imports its backend (TensorFlow alone takes seconds, more on a loaded machine) and runs a
# few small batches: far below this; a hung child is killed here.
TIMEOUT_S = keras_bridge.WORKER_TIMEOUT_S
STDERR_LINES = 6  # the end of a failed child's stderr shown in its WorkerError
_ROOT = pathlib.Path(__file__).resolve().parents[2]
WorkerError = keras_bridge.WorkerError
# The float32 tolerance for what the children computed alone (they run on the CPU, whatever
# this process runs on: keras_bridge.CHILD_PLATFORM).
FLOAT32 = keras_bridge.CHILD_FLOAT32
# ``fast_compile=True`` is for a jax child that runs a small model once: Keras on jax compiles
# every eager op and every initializer (one threefry program per weight shape), and XLA's CPU
# optimizer dominates that: runtime.FAST_COMPILE_XLA_FLAGS cut DigitsNet's build to a fraction
# of its CPU time (jax 0.10.2), its outputs still within float32 tolerance of NNX.


@dataclasses.dataclass(frozen=True)
class ChildResult:
    backend: str
    result: dict
    seconds: float  # wall time of the whole child (imports included)


def child_env(backend: str, fast_compile: bool = False) -> dict[str, str]:
    extra = {}
    if fast_compile and backend == "jax":
        extra["XLA_FLAGS"] = runtime.with_fast_compile(os.environ.get("XLA_FLAGS", ""))
    return runtime.child_env(
        **extra,
        KERAS_BACKEND=backend,
        JAX_PLATFORMS=keras_bridge.CHILD_PLATFORM,
        JAX_NUM_CPU_DEVICES=os.environ.get("JAX_NUM_CPU_DEVICES", str(runtime.DEFAULT_CPU_DEVICES)),
        TF_CPP_MIN_LOG_LEVEL="3",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=runtime.python_path(_ROOT),
    )


def run(
    module: str,
    request: Mapping,
    folder: str | pathlib.Path,
    backend: str = "jax",
    name: str | None = None,
    timeout_s: float = TIMEOUT_S,
    fast_compile: bool = False,
) -> ChildResult:
    """``request`` handled by ``python -m module`` under ``KERAS_BACKEND=backend``
    (``fast_compile``: runtime.FAST_COMPILE_XLA_FLAGS in a jax child)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown Keras backend {backend!r}; known: {', '.join(BACKENDS)}")
    folder = pathlib.Path(folder)
    name = name or backend
    request_path = folder / f"{name}.request.json"
    request_path.write_text(json.dumps({**request, "backend": backend}, indent=1))
    result_path = folder / f"{name}.result.json"
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", module, str(request_path)],
            env=child_env(backend, fast_compile),
            cwd=_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise WorkerError(f"Keras {backend} child ({module}) ran past {timeout_s:.0f} s") from None
    seconds = time.perf_counter() - start
    if done.returncode != 0 or not result_path.exists():
        tail = "\n".join(done.stderr.strip().splitlines()[-STDERR_LINES:])
        raise WorkerError(f"Keras {backend} child ({module}) exited {done.returncode}: {tail}")
    return ChildResult(backend, json.loads(result_path.read_text()), seconds)


def run_arrays(
    module: str,
    request,
    arrays: Mapping[str, np.ndarray],
    folder: str | pathlib.Path,
    name: str,
    backend: str = "jax",
) -> tuple[ChildResult, dict[str, np.ndarray]]:
    """``run`` with a dataclass ``request`` and input ``arrays`` (an .npz the child reads as
    ``job["inputs"]``); the .npz it writes at ``job["output"]`` read back (no pickle)."""
    folder = pathlib.Path(folder)
    inputs, output = folder / f"{name}.inputs.npz", folder / f"{name}.outputs.npz"
    np.savez(inputs, **arrays)
    job = {"request": dataclasses.asdict(request), "inputs": str(inputs), "output": str(output)}
    done = run(module, job, folder, backend=backend, name=name)
    with np.load(output, allow_pickle=False) as data:
        return done, {k: data[k] for k in data.files}


def run_many(
    module: str,
    requests: Mapping[str, Mapping],
    folder: str | pathlib.Path,
    backends: Mapping[str, str] | None = None,
    fast_compile: bool = False,
) -> dict[str, ChildResult]:
    """Several independent children at once: {name: request} -> {name: result}.
    ``backends`` gives each name's backend (default: the name itself). The first failure is
    raised after every child has ended."""
    backends = dict(backends or {n: n for n in requests})
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(len(requests), 1)) as pool:
        futures = {
            n: pool.submit(run, module, r, folder, backends[n], n, fast_compile=fast_compile)
            for n, r in requests.items()
        }
        return {n: f.result() for n, f in futures.items()}


def run_parallel(calls: Sequence[Callable[[], object]]) -> list:
    """Call each zero-argument function in its own thread (each starts a subprocess)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(len(calls), 1)) as pool:
        return [f.result() for f in [pool.submit(c) for c in calls]]


def serve(argv: Sequence[str], handler: Callable[[dict], dict]) -> int:
    """A child's main: read the request, check the backend, handle it, write the result."""
    if len(argv) != 1:
        print("usage: python -m MODULE REQUEST.json", file=sys.stderr)
        return 2
    request_path = pathlib.Path(argv[0])
    request = json.loads(request_path.read_text())
    wanted = request["backend"]
    if os.environ.get("KERAS_BACKEND") != wanted:
        print(f"the request is for backend {wanted!r}; KERAS_BACKEND differs", file=sys.stderr)
        return 3
    # Keras's first import pulls in its scikit-learn wrappers (sklearn, pandas: seconds of CPU
    # in every child) unless they are blocked; no handler uses them (worker.py does the same).
    worker.block_unused_imports(wanted)
    import keras

    if keras.backend.backend() != wanted:
        print(f"Keras runs on {keras.backend.backend()!r}, not {wanted!r}", file=sys.stderr)
        return 3
    result = handler(request)
    result = {**result, "backend": wanted, "keras_version": keras.__version__}
    out = request_path.with_name(request_path.name.replace(".request.json", ".result.json"))
    out.write_text(json.dumps(result, indent=1))
    return 0
