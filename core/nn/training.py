"""Compiled train and evaluation steps with Flax NNX and Optax.

``train_step(model, optimizer, x, y)`` computes the loss and its gradient with respect to
the model's ``nnx.Param`` variables, applies one Optax update in place
(``optimizer.update(model, grads)``) and returns the batch metrics; ``eval_step`` only
measures. Both are ``nnx.jit``-compiled: the first call traces and compiles, later calls
with the same shapes reuse the compiled program. ``train_epoch`` runs a whole epoch of
steps inside one ``jax.lax.scan`` (one dispatch per epoch instead of one per step).

Dimension glossary: B batch, S steps (batches) per epoch, C classes.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from core.perf import timing

OPTIMIZERS = ("adam", "sgd", "momentum")

# The defaults of the lesson "A compiled train and evaluation step" (apps/train_eval_step.py),
# with its data (moons, noise 0.15). Its claim there: after the default run the test accuracy
# is >= 90% and the test loss is below the first batch's. training_test proves it over seeds
# with margin; tests/test_app_claims.py keeps these equal to the app's flag defaults.
TRAIN_EVAL_LESSON = {
    "optimizer": "adam",
    "learning_rate": 0.01,
    "batch_size": 32,
    "steps": 200,
    "eval_every": 20,
    "hidden": 32,
    "seed": 0,
}
TRAIN_EVAL_DATA = {"train_points": 512, "test_points": 256, "classes": 2, "noise": 0.15}


def make_optimizer(
    name: str,
    learning_rate: float | optax.Schedule,
    clip_norm: float | None = None,
) -> optax.GradientTransformation:
    """An Optax transformation: ``adam``, plain ``sgd`` or ``momentum`` (SGD, 0.9).

    ``clip_norm`` first rescales the whole gradient to global L2 norm <= clip_norm
    (``optax.clip_by_global_norm``), the usual guard against one exploding step.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")
    if not callable(learning_rate) and learning_rate <= 0:
        raise ValueError(f"learning rate must be > 0, got {learning_rate}")
    if name == "adam":
        tx = optax.adam(learning_rate)
    elif name == "sgd":
        tx = optax.sgd(learning_rate)
    else:
        tx = optax.sgd(learning_rate, momentum=0.9)
    if clip_norm is not None:
        if clip_norm <= 0:
            raise ValueError(f"clip norm must be > 0, got {clip_norm}")
        tx = optax.chain(optax.clip_by_global_norm(clip_norm), tx)
    return tx


def loss_and_logits(model: nnx.Module, x, y_B) -> tuple[jax.Array, jax.Array]:
    """Mean softmax cross-entropy of integer labels (nats), and the logits_BC."""
    logits = model(x)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y_B).mean()
    return loss, logits


def _metrics(loss, logits, y_B) -> dict[str, jax.Array]:
    return {"loss": loss, "accuracy": jnp.mean(jnp.argmax(logits, axis=-1) == y_B)}


def _train_step(model: nnx.Module, optimizer: nnx.Optimizer, x, y_B) -> dict[str, jax.Array]:
    grad_fn = nnx.value_and_grad(loss_and_logits, has_aux=True)  # d/d nnx.Param by default
    (loss, logits), grads = grad_fn(model, x, y_B)
    optimizer.update(model, grads)
    return _metrics(loss, logits, y_B)


def _eval_step(model: nnx.Module, x, y_B) -> dict[str, jax.Array]:
    loss, logits = loss_and_logits(model, x, y_B)
    return {**_metrics(loss, logits, y_B), "logits": logits}


def make_train_step() -> Callable:
    """A fresh ``nnx.jit`` of one training step (its own compile cache, for timing).

    step(model, optimizer, x, y) -> {"loss", "accuracy"} of the batch *before* the update;
    model and optimizer are updated in place.
    """
    return nnx.jit(_train_step)


def make_eval_step() -> Callable:
    """A fresh ``nnx.jit`` of the evaluation step (no update).

    eval(model, x, y) -> {"loss", "accuracy", "logits"}: the metrics and the logits_BC
    they came from (for a confusion matrix or a check, without a second forward pass).
    """
    return nnx.jit(_eval_step)


train_step = make_train_step()
eval_step = make_eval_step()


def eval_at_highest(eval_fn: Callable, model: nnx.Module, x, y_B) -> dict[str, jax.Array]:
    """``eval_fn(model, x, y_B)`` with its matmuls at HIGHEST precision: for a comparison with
    a float64 reference. On a TPU a float32 matmul at DEFAULT is one bfloat16 pass, which moved
    this course's eval loss by 0.3%; at HIGHEST (6 passes) it is a float32 product, and the
    loss is judged at numerics.tolerance("float32", precision="HIGHEST"). A CPU computes in
    float32 either way. (A jit caches one program per precision: this compiles once more.)"""
    with jax.default_matmul_precision("highest"):
        return eval_fn(model, x, y_B)


@nnx.jit
def train_epoch(model: nnx.Module, optimizer: nnx.Optimizer, x_SB, y_SB) -> dict[str, jax.Array]:
    """``S`` training steps, one per leading slice of x_SB / y_SB, in one ``lax.scan``.

    Returns the per-step metrics as arrays of length S. Same updates as S ``train_step``s.
    """

    @nnx.scan(in_axes=(nnx.Carry, 0, 0), out_axes=(nnx.Carry, 0))
    def run(carry, x_B, y_B):
        model, optimizer = carry
        return (model, optimizer), _train_step(model, optimizer, x_B, y_B)

    _, metrics = run((model, optimizer), x_SB, y_SB)
    return metrics


def fit(
    model: nnx.Module,
    optimizer: nnx.Optimizer,
    x_train,
    y_train,
    *,
    epochs: int,
    batch_size: int,
    seed: int,
    x_eval=None,
    y_eval=None,
    progress: Callable = iter,
) -> list[dict]:
    """Train for ``epochs`` (one ``train_epoch`` each), evaluating after every epoch.

    ``progress`` wraps the epoch range (e.g. ``mo.status.progress_bar``). Returns one row
    per epoch: mean train loss / accuracy over its steps, eval loss / accuracy, seconds.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    history = []
    for epoch in progress(range(epochs)):
        start = time.perf_counter()
        x_SB, y_SB = epoch_batches(x_train, y_train, batch_size, seed, epoch)
        metrics = jax.device_get(train_epoch(model, optimizer, x_SB, y_SB))
        row = {
            "epoch": epoch + 1,
            "train loss": float(np.mean(metrics["loss"])),
            "train accuracy": float(np.mean(metrics["accuracy"])),
        }
        if x_eval is not None:
            evaluation = eval_step(model, x_eval, y_eval)
            row["eval loss"] = float(evaluation["loss"])
            row["eval accuracy"] = float(evaluation["accuracy"])
        row["seconds"] = time.perf_counter() - start
        history.append(row)
    return history


def train_for_steps(
    model: nnx.Module,
    optimizer: nnx.Optimizer,
    x_train,
    y_train,
    *,
    steps: int,
    batch_size: int,
    seed: int,
    x_eval,
    y_eval,
    eval_every: int,
    progress: Callable = iter,
    train_fn: Callable | None = None,
    eval_fn: Callable | None = None,
) -> tuple[list[dict], list[dict]]:
    """``steps`` calls of ``train_step`` over reshuffled epochs; ``eval_step`` every
    ``eval_every`` steps and after the last. ``train_fn`` / ``eval_fn`` replace the two
    module-level compiled steps (e.g. with ones already compiled elsewhere).

    Returns (train rows: step, loss, accuracy of the step's batch before its update;
    eval rows: step, loss, accuracy on the eval set after that step). Steps count from 1.
    """
    if steps < 1 or eval_every < 1:
        raise ValueError(f"steps and eval_every must be >= 1, got {steps}, {eval_every}")
    per_epoch = len(y_train) // batch_size
    if per_epoch < 1:
        raise ValueError(f"batch size {batch_size} is larger than the {len(y_train)} examples")
    train_fn = train_fn or train_step
    eval_fn = eval_fn or eval_step
    train_metrics, eval_rows = [], []
    for step in progress(range(steps)):
        epoch, index = divmod(step, per_epoch)
        if index == 0:
            x_SB, y_SB = epoch_batches(x_train, y_train, batch_size, seed, epoch)
        train_metrics.append(train_fn(model, optimizer, x_SB[index], y_SB[index]))
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            evaluation = eval_fn(model, x_eval, y_eval)
            eval_rows.append(
                {
                    "step": step + 1,
                    "loss": float(evaluation["loss"]),
                    "accuracy": float(evaluation["accuracy"]),
                }
            )
    train_metrics = jax.device_get(train_metrics)  # one transfer, not a sync per step
    train_rows = [
        {"step": i + 1, "loss": float(m["loss"]), "accuracy": float(m["accuracy"])}
        for i, m in enumerate(train_metrics)
    ]
    return train_rows, eval_rows


def train_steps_scanned(
    model: nnx.Module,
    optimizer: nnx.Optimizer,
    x_train,
    y_train,
    *,
    steps: int,
    batch_size: int,
    seed: int,
) -> dict[str, np.ndarray]:
    """The updates of ``train_for_steps`` (same batches in the same order), one
    ``train_epoch`` dispatch per epoch instead of one call per step, without evaluations.

    Returns the per-step metrics {"loss", "accuracy"}: arrays of length ``steps``, each of
    the step's batch before its update. (A multi-seed test of a lesson's claim runs this.)
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    per_epoch = len(y_train) // batch_size
    if per_epoch < 1:
        raise ValueError(f"batch size {batch_size} is larger than the {len(y_train)} examples")
    metrics = []
    for epoch in range(-(-steps // per_epoch)):
        x_SB, y_SB = epoch_batches(x_train, y_train, batch_size, seed, epoch)
        count = min(per_epoch, steps - epoch * per_epoch)
        metrics.append(train_epoch(model, optimizer, x_SB[:count], y_SB[:count]))
    metrics = jax.device_get(metrics)
    return {key: np.concatenate([m[key] for m in metrics]) for key in ("loss", "accuracy")}


def epoch_batches(x, y, batch_size: int, seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """Shuffle (seeded by ``seed`` and ``epoch``) and cut into S = N // batch_size batches.

    Returns x_SB... and y_SB: the ragged tail of the permutation is dropped this epoch.
    """
    n = len(y)
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch size must be between 1 and the {n} examples, got {batch_size}")
    steps = n // batch_size
    order = np.random.default_rng([seed, epoch]).permutation(n)[: steps * batch_size]
    order = order.reshape(steps, batch_size)
    return np.asarray(x)[order], np.asarray(y)[order]


@dataclasses.dataclass(frozen=True)
class StepTiming:
    """Seconds for the first call (trace + compile + run) and the steady-state calls."""

    first_s: float
    steady_s: list[float]

    @property
    def median_s(self) -> float:
        return statistics.median(self.steady_s)


def timed_call(fn: Callable, *args):
    """(output, seconds) of one call of ``fn(*args)``, the clock stopped after
    ``jax.block_until_ready`` (core.perf.timing.timed_call)."""
    return timing.timed_call(fn, *args)


def time_calls(fn: Callable, *args, repeats: int = 20, first_s: float | None = None) -> StepTiming:
    """Time ``fn(*args)``: the first call, then ``repeats`` more (block_until_ready each).

    Call on a *fresh* jitted function (``make_train_step()``) so the first call really
    includes the compile; or pass ``first_s`` measured earlier (``timed_call``) when that
    first call already happened, and every call here counts as steady.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if first_s is None:
        _, first_s = timing.timed_call(fn, *args)
    steady = timing.time_calls(fn, *args, repeats=repeats, warmup=0)
    return StepTiming(first_s, list(steady.samples))


def reference_update(
    loss_fn: Callable, params, x, y, tx: optax.GradientTransformation, steps: int = 1
):
    """Optax applied by hand: ``steps`` updates of a pure ``loss_fn(params, x, y)``.

    grads = jax.grad(loss_fn)(params, x, y); updates, state = tx.update(grads, state, params);
    params = optax.apply_updates(params, updates). The reference for a ``train_step``.
    Returns (params, grads of the first step).
    """

    @jax.jit
    def one_update(params, state):
        grads = jax.grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state, grads

    state = jax.jit(tx.init)(params)
    first_grads = None
    for _ in range(steps):
        params, state, grads = one_update(params, state)
        first_grads = grads if first_grads is None else first_grads
    return params, first_grads


def sgd_reference(params, grads, learning_rate: float):
    """One plain SGD step in NumPy float64: p - learning_rate * g, leaf by leaf."""
    return jax.tree.map(
        lambda p, g: np.asarray(p, np.float64) - learning_rate * np.asarray(g, np.float64),
        params,
        grads,
    )


def accuracy_reference(logits_BC, y_B) -> float:
    """Accuracy in NumPy: fraction of rows whose argmax is the label."""
    return float(np.mean(np.argmax(np.asarray(logits_BC), axis=1) == np.asarray(y_B)))
