"""Keras + JAX in a custom loop: ``stateless_call`` in ``jax.jit`` with Optax, vs ``model.fit``.

One ``KERAS_BACKEND=jax`` child (``child.run``) trains the same MLP (digits, 64 -> H relu ->
10, weights made here with NumPy) twice from the same weights on the same batches in the
same order:

    fit     model.compile(optimizer=keras SGD or Adam, SparseCategoricalCrossentropy(
            from_logits=True)); model.fit(shuffle=False)
    loop    loss(trainable) = mean softmax cross-entropy of model.stateless_call(trainable,
            non_trainable, x, training=True); jax.value_and_grad; an Optax optimizer;
            the whole step in one jax.jit

The optimizers must mean the same thing. Plain SGD is w -= lr * g in both. Adam is not:
Keras's ``epsilon`` is the paper's "epsilon hat" (w -= lr sqrt(1 - b2^t) / (1 - b1^t) * m /
(sqrt(v) + eps)), optax.adam's ``eps`` is Algorithm 1's (w -= lr m_hat / (sqrt(v_hat) + eps)):
equal only if eps_optax = eps_keras / sqrt(1 - b2^t), which changes every step. So the loop
uses ``keras_adam`` below (Keras's formula as an optax GradientTransformation) and also runs
optax.adam with the same eps, to show the difference (``optax_adam``).

Keras logs a running mean of the loss over the epoch; ``per_step_losses`` recovers each
step's loss from it (l_k = k m_k - (k-1) m_(k-1)).

Dimension glossary: N examples, B batch, F=64 features, H hidden units, C=10 classes.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys

import numpy as np

from core.data import digits
from interop.keras_track import child

OPTIMIZERS = ("sgd", "adam")
FEATURES, CLASSES = 64, 10
LAYERS = ("dense", "dense_1")
ADAM_B1, ADAM_B2 = 0.9, 0.999  # Keras's and optax's defaults
KERAS_EPSILON = 1e-7  # keras.optimizers.Adam's default epsilon ("epsilon hat")
_MODULE = "interop.keras_track.custom_loop"


@dataclasses.dataclass(frozen=True)
class Request:
    seed: int = 0
    examples: int = 128
    batch: int = 32
    epochs: int = 3
    hidden: int = 32
    optimizer: str = "sgd"
    learning_rate: float = 0.1

    @property
    def steps_per_epoch(self) -> int:
        return self.examples // self.batch

    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.epochs


def problem(request: Request) -> str | None:
    if request.optimizer not in OPTIMIZERS:
        return f"optimizer {request.optimizer!r} is not one of {', '.join(OPTIMIZERS)}"
    if request.batch > request.examples:
        return f"a batch of {request.batch} is larger than the {request.examples} examples"
    if request.examples % request.batch:
        return (
            f"{request.examples} examples do not split into batches of {request.batch}: "
            "model.fit would end each epoch with a smaller batch"
        )
    if not request.learning_rate > 0:
        return f"learning rate {request.learning_rate} is not positive"
    return None


def weight_shapes(request: Request) -> dict[str, tuple[int, ...]]:
    return {
        "mlp/dense/kernel": (FEATURES, request.hidden),
        "mlp/dense/bias": (request.hidden,),
        "mlp/dense_1/kernel": (request.hidden, CLASSES),
        "mlp/dense_1/bias": (CLASSES,),
    }


def seeded(request: Request) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """The first ``examples`` digits (x_NF, y_N, a seeded permutation) and NumPy weights."""
    images, labels = digits.load_all()
    rng = np.random.default_rng(request.seed)
    order = rng.permutation(len(labels))[: request.examples]
    x = images[order].reshape(len(order), FEATURES).astype(np.float32)
    weights = {}
    for path, shape in weight_shapes(request).items():
        if len(shape) == 2:
            limit = np.sqrt(6.0 / sum(shape))
            weights[path] = rng.uniform(-limit, limit, size=shape).astype(np.float32)
        else:
            weights[path] = np.zeros(shape, np.float32)
    return x, labels[order].astype(np.int32), weights


def per_step_losses(running_means, steps_per_epoch: int) -> np.ndarray:
    """Each step's loss from Keras's per-batch running mean (reset every epoch)."""
    means = np.asarray(running_means, np.float64).reshape(-1, steps_per_epoch)
    k = np.arange(1, steps_per_epoch + 1, dtype=np.float64)
    totals = means * k
    return np.diff(totals, axis=1, prepend=0.0).reshape(-1)


def keras_adam(learning_rate: float, b1: float = ADAM_B1, b2: float = ADAM_B2, eps=KERAS_EPSILON):
    """Keras's Adam as an optax GradientTransformation: m, v as Keras keeps them, and
    w -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)."""
    import jax
    import jax.numpy as jnp
    import optax

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return (jnp.zeros([], jnp.int32), zeros, zeros)

    def update(grads, state, params=None):
        del params
        count, m, v = state
        t = (count + 1).astype(jnp.float32)
        m = jax.tree.map(lambda m, g: m + (g - m) * (1 - b1), m, grads)
        v = jax.tree.map(lambda v, g: v + (jnp.square(g) - v) * (1 - b2), v, grads)
        alpha = learning_rate * jnp.sqrt(1 - b2**t) / (1 - b1**t)
        updates = jax.tree.map(lambda m, v: -(m * alpha) / (jnp.sqrt(v) + eps), m, v)
        return updates, (count + 1, m, v)

    return optax.GradientTransformation(init, update)


@dataclasses.dataclass(frozen=True)
class Result:
    request: Request
    initial: dict[str, np.ndarray]
    fit_weights: dict[str, np.ndarray]
    loop_weights: dict[str, np.ndarray]
    optax_adam_weights: dict[str, np.ndarray] | None
    fit_losses: np.ndarray  # per step, recovered from Keras's running means
    fit_epoch_losses: np.ndarray  # history["loss"]
    loop_losses: np.ndarray  # per step, before each update
    seconds: float
    fit_s: float
    loop_s: float
    keras_version: str

    @property
    def loop_epoch_losses(self) -> np.ndarray:
        return self.loop_losses.reshape(self.request.epochs, -1).mean(axis=1)


def run(request: Request, folder: str | pathlib.Path) -> Result:
    reason = problem(request)
    if reason is not None:
        raise ValueError(reason)
    x, y, weights = seeded(request)
    arrays = {"x_NF": x, "y_N": y, **{f"w:{k}": v for k, v in weights.items()}}
    done, arrays = child.run_arrays(_MODULE, request, arrays, folder, "custom_loop")

    def group(prefix):
        found = {k.removeprefix(prefix): v for k, v in arrays.items() if k.startswith(prefix)}
        return found or None

    r = done.result
    return Result(
        request,
        weights,
        group("fit:"),
        group("loop:"),
        group("optax_adam:"),
        per_step_losses(arrays["fit_running"], request.steps_per_epoch),
        arrays["fit_epochs"],
        arrays["loop_losses"],
        done.seconds,
        r["fit_s"],
        r["loop_s"],
        r["keras_version"],
    )


# --- the child (KERAS_BACKEND=jax) -------------------------------------------------------------


def _build(request: Request, given: dict):
    import keras

    zeros = {"kernel_initializer": "zeros", "bias_initializer": "zeros"}
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(request.hidden, activation="relu", name=LAYERS[0], **zeros),
            keras.layers.Dense(CLASSES, name=LAYERS[1], **zeros),
        ],
        name="mlp",
    )
    model.set_weights([given[w.path] for w in model.weights])
    return model


def _optax(request: Request, name: str):
    import optax

    if name == "sgd":
        return optax.sgd(request.learning_rate)
    if name == "keras_adam":
        return keras_adam(request.learning_rate)
    return optax.adam(request.learning_rate, ADAM_B1, ADAM_B2, eps=KERAS_EPSILON)


def _loop(request: Request, given: dict, x, y, optimizer_name: str):
    import jax
    import optax

    model = _build(request, given)
    optimizer = _optax(request, optimizer_name)
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def loss_fn(trainable, non_trainable, x_BF, y_B):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, x_BF, training=True)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y_B).mean()
        return loss, non_trainable

    @jax.jit
    def step(trainable, non_trainable, opt_state, x_BF, y_B):
        (loss, non_trainable), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            trainable, non_trainable, x_BF, y_B
        )
        updates, opt_state = optimizer.update(grads, opt_state, trainable)
        return optax.apply_updates(trainable, updates), non_trainable, opt_state, loss

    opt_state = optimizer.init(trainable)
    losses = []
    for _epoch in range(request.epochs):
        for i in range(request.steps_per_epoch):
            sl = slice(i * request.batch, (i + 1) * request.batch)
            trainable, non_trainable, opt_state, loss = step(
                trainable, non_trainable, opt_state, x[sl], y[sl]
            )
            losses.append(float(loss))
    paths = [v.path for v in model.trainable_variables]
    return dict(zip(paths, (np.asarray(t) for t in trainable), strict=True)), losses


def _handle(job: dict) -> dict:
    import time

    import keras

    request = Request(**job["request"])
    with np.load(job["inputs"], allow_pickle=False) as data:
        x, y = data["x_NF"], data["y_N"]
        given = {k.removeprefix("w:"): data[k] for k in data.files if k.startswith("w:")}
    start = time.perf_counter()
    model = _build(request, given)
    if request.optimizer == "sgd":
        optimizer = keras.optimizers.SGD(request.learning_rate)
    else:
        optimizer = keras.optimizers.Adam(
            request.learning_rate, beta_1=ADAM_B1, beta_2=ADAM_B2, epsilon=KERAS_EPSILON
        )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    running = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            running.append(float(logs["loss"]))

    history = model.fit(
        x,
        y,
        batch_size=request.batch,
        epochs=request.epochs,
        shuffle=False,
        verbose=0,
        callbacks=[Record()],
    )
    arrays = {f"fit:{w.path}": np.asarray(w.numpy()) for w in model.trainable_weights}
    arrays["fit_running"] = np.asarray(running, np.float64)
    arrays["fit_epochs"] = np.asarray(history.history["loss"], np.float64)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    name = "sgd" if request.optimizer == "sgd" else "keras_adam"
    weights, losses = _loop(request, given, x, y, name)
    arrays.update({f"loop:{k}": v for k, v in weights.items()})
    arrays["loop_losses"] = np.asarray(losses, np.float64)
    loop_s = time.perf_counter() - start
    if request.optimizer == "adam":
        weights, _ = _loop(request, given, x, y, "optax_adam")
        arrays.update({f"optax_adam:{k}": v for k, v in weights.items()})
    np.savez(job["output"], **arrays)
    return {"fit_s": fit_s, "loop_s": loop_s}


if __name__ == "__main__":
    sys.exit(child.serve(sys.argv[1:], _handle))
