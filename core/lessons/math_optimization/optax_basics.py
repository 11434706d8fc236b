"""Lesson code of "Optimize with Optax".

An optax optimizer is a ``GradientTransformation``: a pair of pure functions
``init(params) -> state`` and ``update(updates, state, params) -> (updates, state)``.
``optax.chain`` runs several in order, each transforming the previous one's output. Here the
lesson's own transformation, heavy-ball momentum ``v = beta v + g`` (the same as
``optax.trace``), is chained with optax's clipping, weight decay and learning-rate scaling and
trains a linear model, params {"w": (D,), "b": ()}, on least squares.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core.nn import chunked

OPTIMIZERS = ("sgd", "composed (lesson momentum)", "adam")
TRACE_CHAIN = "composed (optax.trace)"  # the composed chain with optax.trace as its momentum


class MomentumState(NamedTuple):
    velocity: optax.Updates  # a pytree shaped like params


def lesson_momentum(beta: float) -> optax.GradientTransformation:
    """Heavy-ball momentum as a GradientTransformation: v = beta v + g, emits v."""
    # checked when beta is a number; inside train's compiled step it is traced (train checks it)
    if isinstance(beta, int | float | np.floating) and not 0 <= beta < 1:
        raise ValueError(f"momentum beta must be in [0, 1), got {beta}")

    def init_fn(params):
        return MomentumState(jax.tree.map(jnp.zeros_like, params))

    def update_fn(updates, state, params=None):
        del params
        velocity = jax.tree.map(lambda v, g: beta * v + g, state.velocity, updates)
        return velocity, MomentumState(velocity)

    return optax.GradientTransformation(init_fn, update_fn)


def composed(learning_rate, beta, weight_decay, clip_norm, momentum=None):
    """clip -> momentum -> decoupled weight decay -> -lr: ``momentum`` defaults to the lesson's
    own transformation; pass ``optax.trace(beta)`` for optax's."""
    return optax.chain(
        optax.clip_by_global_norm(clip_norm),
        momentum if momentum is not None else lesson_momentum(beta),
        optax.add_decayed_weights(weight_decay),
        optax.scale_by_learning_rate(learning_rate),
    )


def problem(learning_rate: float, clip_norm: float) -> str | None:
    if learning_rate <= 0:
        return (
            f"a learning rate of {learning_rate:g} makes no sense: "
            "scale_by_learning_rate multiplies by -lr, so lr <= 0 climbs the loss (or stands "
            "still)"
        )
    if clip_norm <= 0:
        return f"a clip norm of {clip_norm:g} would scale every gradient to nothing"
    return None


@functools.partial(jax.jit, static_argnames=("examples", "features"))
def make_data(key, examples: int, features: int):
    kx, kw, kn, kp = jax.random.split(key, 4)
    x = jax.random.normal(kx, (examples, features))
    y = x @ jax.random.normal(kw, (features,)) + 0.5 + 0.1 * jax.random.normal(kn, (examples,))
    params = {"w": jax.random.normal(kp, (features,)), "b": jnp.zeros(())}
    return x, y, params


def loss(params, x_ND, y_N):
    return jnp.mean((x_ND @ params["w"] + params["b"] - y_N) ** 2) / 2


def _train_step(carry, _index, x_ND, y_N, hyper, *, optimizer):
    """One update of carry = (params, state) by ``make_optimizer(optimizer, *hyper)``, built
    inside the trace from traced hyperparameters: ((params, state), (new params, loss before))."""
    p, state = carry
    value, grads = jax.value_and_grad(loss)(p, x_ND, y_N)
    updates, state = make_optimizer(optimizer, *hyper).update(grads, state, p)
    p = optax.apply_updates(p, updates)
    return (p, state), (p, value)


# Steps per compiled chunk (core.nn.chunked): the steps control moves by 10. With the
# hyperparameters traced, one program per optimizer serves every step count and every value
# of lr, beta, weight decay and clip norm; a jitted closure over a freshly built optax chain
# compiled again on every call.
STEPS_CHUNK = 10
_train_chunks = chunked.ChunkedScan(_train_step, chunk=STEPS_CHUNK)


@functools.partial(jax.jit, static_argnames="optimizer")
def _init_state(params, hyper, optimizer):
    return make_optimizer(optimizer, *hyper).init(params)


_final_loss = jax.jit(loss)


def train(optimizer: str, hyper, params, x_ND, y_N, steps: int):
    """Train with ``make_optimizer(optimizer, *hyper)``, hyper = (learning rate, beta, weight
    decay, clip norm): (params after every step, stacked; losses (steps + 1,); final state)."""
    make_optimizer(optimizer, *hyper)  # refuses an unknown name or a bad beta, with numbers
    hyper = tuple(np.float32(h) for h in hyper)  # traced: a new value compiles nothing
    state = _init_state(params, hyper, optimizer)
    (p, state), (path, losses) = _train_chunks(
        (params, state), x_ND, y_N, hyper, steps=steps, optimizer=optimizer
    )
    return path, np.append(losses, np.asarray(_final_loss(p, x_ND, y_N))), state


def reference_training(params, x_ND, y_N, steps, learning_rate, beta, weight_decay, clip_norm):
    """The composed optimizer in NumPy float64 with the closed-form least-squares gradient:
    params after every step {"w": (S, D), "b": (S,)}."""
    x, y = np.asarray(x_ND, np.float64), np.asarray(y_N, np.float64)
    w, b = np.asarray(params["w"], np.float64), float(params["b"])
    vw, vb = np.zeros_like(w), 0.0
    out_w, out_b = [], []
    for _ in range(steps):
        r = x @ w + b - y
        gw, gb = x.T @ r / len(y), float(np.mean(r))
        norm = np.sqrt(np.sum(gw**2) + gb**2)
        scale = min(1.0, clip_norm / norm) if norm > 0 else 1.0
        gw, gb = gw * scale, gb * scale
        vw, vb = beta * vw + gw, beta * vb + gb
        w = w - learning_rate * (vw + weight_decay * w)
        b = b - learning_rate * (vb + weight_decay * b)
        out_w.append(w)
        out_b.append(b)
    return {"w": np.stack(out_w), "b": np.array(out_b)}


def state_rows(state) -> list[dict]:
    """One row per leaf of an optimizer state: its path, shape, dtype, number of values."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(state)
    return [
        {
            "leaf": jax.tree_util.keystr(path),
            "shape": str(tuple(np.shape(leaf))),
            "dtype": str(np.asarray(leaf).dtype),
            "values": int(np.size(leaf)),
        }
        for path, leaf in leaves
    ]


def make_optimizer(name, learning_rate, beta, weight_decay, clip_norm):
    if name == "sgd":
        return optax.sgd(learning_rate)
    if name == "adam":
        return optax.adam(learning_rate)
    if name == "composed (lesson momentum)":
        return composed(learning_rate, beta, weight_decay, clip_norm)
    if name == TRACE_CHAIN:  # the same chain with optax's momentum: the app's reference
        return composed(learning_rate, beta, weight_decay, clip_norm, optax.trace(beta))
    raise ValueError(f"unknown optimizer {name!r}")
