"""One backend's run: ``KERAS_BACKEND=jax python -m interop.keras_track.worker JOBS.json``.

Keras fixes its backend at first import, so the parent (runner.py) starts one worker per
backend. The job file (``JobFile``, pydantic, strict) names the backend it is for (a worker
under another KERAS_BACKEND refuses it) and its jobs (``Job``: several per file, so the
backend is imported once); each job names the model spec, a safetensors weights file (its
manifest and sha256 verified by interop/weights_file.py before anything is read, then every
name and shape against the spec), a data .npz (its sha256 given in the job) and the training
settings. For each job the worker

1. builds the model (every weight NumPy zeros: no initializer program) and sets the weights
   from the file (a missing, extra or misshapen weight is refused);
2. writes the outputs on the probe batch, its loss, and the gradient of the loss w.r.t. every
   trainable weight: jax ``stateless_call`` + ``jax.grad``, torch ``loss.backward()``,
   tensorflow ``tf.GradientTape``;
3. resets the weights, compiles with Keras's own optimizer (SGD or Adam; ``jit_compile`` as
   asked) and runs ``train_on_batch`` on the same batches, recording each step's loss and
   seconds (metrics reset per step, so each loss is that batch's own); optionally the eval
   loss every ``eval_every`` steps (``test_on_batch``) and the final eval outputs.

Results go to ``output`` (.npz, loaded with allow_pickle=False) and ``<output>.json`` (what
ran: versions, jit_compile resolved, seconds). Exit 0 means all of it ran; any error exits
non-zero with the reason on stderr.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys
import time
from typing import Literal

import numpy as np
import pydantic

from interop import weights_file
from interop.keras_track import models

SCHEMA_VERSION = 1
BACKENDS: tuple[str, ...] = ("jax", "torch", "tensorflow")
OPTIMIZERS = ("sgd", "adam")


class Job(pydantic.BaseModel):
    """One model to build, probe and train (several per worker: the backend imports once)."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    name: str
    spec: dict
    weights: str
    data: str
    data_sha256: str
    output: str
    optimizer: Literal[OPTIMIZERS] = "sgd"
    learning_rate: float = 0.1
    clipnorm: float | None = None
    global_clipnorm: float | None = None
    momentum: float = 0.0
    steps: int = pydantic.Field(default=10, ge=0)
    jit_compile: Literal["auto", "on", "off"] = "auto"
    eval_every: int = pydantic.Field(default=0, ge=0)
    gradients: bool = True


class JobFile(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    schema_version: int
    backend: Literal[BACKENDS]
    jobs: list[Job] = pydantic.Field(min_length=1)


def sha256_file(path: str | pathlib.Path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def summary_path(output: str | pathlib.Path) -> pathlib.Path:
    output = pathlib.Path(output)
    return output.with_name(output.name + ".json")


def read_job(path: str | pathlib.Path) -> JobFile:
    job = JobFile.model_validate_json(pathlib.Path(path).read_text())
    if job.schema_version != SCHEMA_VERSION:
        raise ValueError(f"job file schema {job.schema_version} is not supported")
    return job


def load_inputs(job: Job, spec) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(weights, data) after every check: the manifest and sha256 of the weights file, the
    names and shapes the spec needs, the data file's sha256."""
    expected = {n: (s, "float32") for n, s in models.weight_shapes(spec).items()}
    weights = weights_file.load(job.weights, expected=expected, model=spec.kind)
    if sha256_file(job.data) != job.data_sha256:
        raise ValueError(f"{job.data}: sha256 differs from the job's (changed file), not loaded")
    with np.load(job.data, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    return weights, arrays


def set_weights(model, weights) -> None:
    held = {models.weight_path(model, v): v for v in model.weights}
    if sorted(held) != sorted(weights):
        raise ValueError(f"the model holds {sorted(held)}, the file {sorted(weights)}")
    for name, variable in held.items():
        if tuple(variable.shape) != weights[name].shape:
            raise ValueError(f"{name}: model {tuple(variable.shape)}, file {weights[name].shape}")
        variable.assign(weights[name])


def gradients(backend: str, model, loss_fn, x, y) -> tuple[float, dict[str, np.ndarray]]:
    """(loss, {path: d loss / d weight}) on one batch, the backend's own autodiff."""
    import keras

    names = [models.weight_path(model, v) for v in model.trainable_variables]
    if backend == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        frozen = [v.value for v in model.non_trainable_variables]

        def loss_of(tv):
            out, _ = model.stateless_call(tv, frozen, x, training=False)
            return loss_fn(y, out)

        # one compiled program: op-by-op (eager) JAX would compile every primitive on its own
        loss, grads = jax.jit(jax.value_and_grad(loss_of))(trainable)
    elif backend == "torch":
        import torch

        for v in model.trainable_variables:
            v.value.grad = None
        loss = loss_fn(torch.as_tensor(y), model(x, training=False))
        loss.backward()
        grads = [v.value.grad for v in model.trainable_variables]
    else:
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=False))
        grads = tape.gradient(loss, model.trainable_variables)
    to_np = keras.ops.convert_to_numpy
    return float(to_np(loss)), {
        n: np.asarray(to_np(g), np.float32) for n, g in zip(names, grads, strict=True)
    }


_JITTED: dict = {}


def forward(backend: str, model, x) -> np.ndarray:
    """The model's outputs on ``x`` (inference mode) as float32 NumPy. Under jax one compiled
    program (``stateless_call`` in ``jax.jit``): eager JAX compiles every primitive alone,
    seconds for a Transformer block."""
    import keras

    if backend == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        frozen = [v.value for v in model.non_trainable_variables]
        if model not in _JITTED:  # one jit per model: a same-shaped batch reuses its compile
            _JITTED[model] = jax.jit(
                lambda tv, fv, x: model.stateless_call(tv, fv, x, training=False)[0]
            )
        out = _JITTED[model](trainable, frozen, x)
    else:
        out = model(x, training=False)
    return np.asarray(keras.ops.convert_to_numpy(out), np.float32)


def optimizer(job: Job):
    import keras

    kwargs = {"learning_rate": job.learning_rate}
    if job.clipnorm is not None:
        kwargs["clipnorm"] = job.clipnorm  # per weight tensor
    if job.global_clipnorm is not None:
        kwargs["global_clipnorm"] = job.global_clipnorm  # over all tensors (optax's global norm)
    if job.optimizer == "sgd":
        return keras.optimizers.SGD(momentum=job.momentum, **kwargs)
    return keras.optimizers.Adam(**kwargs)


def run(backend: str, job: Job, weights: dict, data: dict) -> dict:
    """One job under the running backend (``weights`` and ``data`` already verified)."""
    import keras

    keras.utils.clear_session()
    spec = models.spec_from_dict(job.spec)
    marks = [time.perf_counter()]
    compiled_before = len(_COMPILED)
    # NumPy zeros, no initializer program: set_weights replaces every weight just below
    model = models.build_keras(spec, placeholder_weights=True)
    build_compiles = _COMPILED[compiled_before:]
    set_weights(model, weights)
    loss_fn = models.keras_loss(spec)
    arrays: dict[str, np.ndarray] = {}
    x_probe, y_probe = data["x_probe"], data["y_probe"]
    arrays["outputs"] = forward(backend, model, x_probe)
    marks.append(time.perf_counter())
    if job.gradients:
        loss, grads = gradients(backend, model, loss_fn, x_probe, y_probe)
        arrays["probe_loss"] = np.asarray(loss, np.float32)
        arrays.update({f"grad/{n}": g for n, g in grads.items()})
        set_weights(model, weights)  # the torch path leaves .grad behind; values unchanged
    marks.append(time.perf_counter())
    jit = {"auto": "auto", "on": True, "off": False}[job.jit_compile]
    model.compile(optimizer=optimizer(job), loss=loss_fn, jit_compile=jit)
    x_train, y_train = data["x_train"], data["y_train"]
    losses, seconds, eval_steps, eval_losses = [], [], [], []
    for step in range(job.steps):
        i = step % len(x_train)
        model.reset_metrics()
        start = time.perf_counter()
        loss = model.train_on_batch(x_train[i], y_train[i])
        seconds.append(time.perf_counter() - start)
        losses.append(float(loss[0] if isinstance(loss, list) else loss))
        if job.eval_every and ((step + 1) % job.eval_every == 0 or step + 1 == job.steps):
            model.reset_metrics()
            value = model.test_on_batch(data["x_eval"], data["y_eval"])
            eval_steps.append(step + 1)
            eval_losses.append(float(value[0] if isinstance(value, list) else value))
    arrays["train_loss"] = np.asarray(losses, np.float64)
    arrays["step_seconds"] = np.asarray(seconds, np.float64)
    arrays["eval_steps"] = np.asarray(eval_steps, np.int64)
    arrays["eval_loss"] = np.asarray(eval_losses, np.float64)
    arrays["eval_outputs"] = forward(backend, model, data["x_eval"])
    marks.append(time.perf_counter())
    np.savez(job.output, **arrays)
    phases = ("build and probe", "gradients", "train and eval")
    return {
        "phase_seconds": {k: b - a for k, a, b in zip(phases, marks[:-1], marks[1:], strict=True)},
        "backend": backend,
        "job": job.name,
        "keras_version": keras.__version__,
        "jit_compile": str(getattr(model, "jit_compile", jit)),
        "steps": job.steps,
        # the XLA programs compiled while the model was built (recorded under jax only)
        "build_compiles": build_compiles if backend == "jax" else None,
        "packages": loaded_packages(),
    }


_COMPILED: list[str] = []  # the name of every program XLA compiled in this (jax) process


def record_compiles() -> None:
    """Append the name of every XLA backend compile of this (jax) process to ``_COMPILED``."""
    import jax

    def listen(event: str, seconds: float, fun_name: str = "?", **_kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            _COMPILED.append(fun_name)

    jax.monitoring.register_event_duration_secs_listener(listen)


def loaded_packages() -> list[str]:
    """The top-level packages this process has imported (a blocked one is not counted)."""
    return sorted({n.partition(".")[0] for n, m in list(sys.modules.items()) if m is not None})


# Keras imports its scikit-learn wrappers (sklearn, pandas: seconds of CPU), matplotlib.pyplot
# (keras.src.visualization), requests (its RemoteMonitor callback) and, under torch and
# tensorflow, jax at its first import; the worker uses none of them.
# ``sys.modules[name] = None`` makes ``import name`` raise ImportError, which Keras's optional
# imports handle (each sits in try/except ImportError): every worker starts on less CPU.
# TensorFlow imports requests unconditionally (its failure-handling module), so it keeps it.
UNUSED_BY_BACKEND = {
    "jax": ("sklearn", "pandas", "matplotlib", "requests"),
    "torch": ("sklearn", "pandas", "matplotlib", "requests", "jax"),
    "tensorflow": ("sklearn", "pandas", "matplotlib", "jax"),
}


def block_unused_imports(backend: str) -> None:
    for name in UNUSED_BY_BACKEND[backend]:
        if name not in sys.modules:
            sys.modules[name] = None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m interop.keras_track.worker JOBS.json", file=sys.stderr)
        return 2
    started = time.perf_counter()
    job = read_job(argv[0])
    if os.environ.get("KERAS_BACKEND") != job.backend:
        raise ValueError(
            f"the job file is for backend {job.backend!r}; KERAS_BACKEND is "
            f"{os.environ.get('KERAS_BACKEND')!r}"
        )
    # Every input is verified before the backend is imported: a bad file costs no import.
    inputs = [load_inputs(one, models.spec_from_dict(one.spec)) for one in job.jobs]
    block_unused_imports(job.backend)
    if job.backend == "jax":
        record_compiles()
    import keras

    if keras.backend.backend() != job.backend:
        raise ValueError(f"Keras runs on {keras.backend.backend()!r}, the job wants {job.backend}")
    imported = time.perf_counter() - started
    for one, (weights, data) in zip(job.jobs, inputs, strict=True):
        begun = time.perf_counter()
        summary = run(job.backend, one, weights, data)
        summary.update(import_seconds=imported, seconds=time.perf_counter() - begun)
        summary_path(one.output).write_text(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
