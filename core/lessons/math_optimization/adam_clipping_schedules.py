"""Lesson code of "Adam, clipping, and learning-rate schedules".

One fixed gradient sequence (the same for every implementation) drives the hand-written AdamW
of ``core.optim.optimizers``, ``optax.adamw`` and ``torch.optim.AdamW`` (the last two run by
``core.optim.references``); the learning rate follows one of three schedules
(``core.optim.schedules`` against optax's); the same gradients, clipped by their global norm
(``core.optim.transforms`` against ``optax.clip_by_global_norm``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core.optim import optimizers, references, schedules, transforms

SCHEDULES = ("warmup_cosine", "linear", "constant")
# b2 stops at 0.999: at 0.9999, 1 - b2^t computed in float32 (optax, ours) keeps ~3 digits for
# thousands of steps while torch computes it in float64 on the host; the two then part by ~3e-5.
B2_CHOICES = ("0.99", "0.995", "0.999")
EPS_CHOICES = ("1e-08", "1e-06", "1e-04")
PARAM_SHAPES = {"w": (8, 4), "b": (4,)}  # a small layer: 36 parameters
SPIKE_FRACTION = 0.05  # steps whose gradient is 20x larger (what clipping is for)
SPIKE_FACTOR = 20.0
# optax and the hand-written AdamW round differently in float32; over <= 200 steps the
# parameters (scale ~1) stay a few ulps apart: the bound, relative to max(|p|, 1).
OPTAX_AGREEMENT = 1e-6


def problem(schedule: str, warmup: int, steps: int, weight_decay: float) -> str | None:
    """Why these settings cannot run, or None."""
    if weight_decay < 0:
        return (
            f"a weight decay of {weight_decay:g} is negative: decoupled decay multiplies the "
            "weights by (1 - lr x decay) each step, so a negative value grows them without bound"
        )
    if schedule == "warmup_cosine" and warmup >= steps:
        return (
            f"a warmup of {warmup} steps leaves no step to decay in a run of {steps} steps: "
            "warmup-cosine needs warmup < steps"
        )
    return None


def make_schedule(name: str, peak: float, warmup: int, steps: int, end: float):
    """(ours, optax's) for the schedule ``name``: warmup-cosine from 0 to ``peak`` over
    ``warmup`` steps then down to ``end`` at ``steps``; linear from ``peak`` to ``end``;
    constant ``peak``."""
    if name == "warmup_cosine":
        return (
            schedules.warmup_cosine(0.0, peak, warmup, steps, end),
            optax.warmup_cosine_decay_schedule(0.0, peak, warmup, steps, end),
        )
    if name == "linear":
        return schedules.linear(peak, end, steps), optax.linear_schedule(peak, end, steps)
    if name == "constant":
        return schedules.constant(peak), optax.constant_schedule(peak)
    raise ValueError(f"unknown schedule {name!r}; known: {', '.join(SCHEDULES)}")


def evaluate(schedule, steps_T) -> np.ndarray:
    """A schedule at every step of ``steps_T`` as float64 (optax's constant gives one scalar
    for an array of steps: broadcast it)."""
    steps_T = np.asarray(steps_T)
    values = jax.jit(schedule)(steps_T)  # one compiled program, not one per primitive
    return np.broadcast_to(np.asarray(values, np.float64), steps_T.shape).copy()


@functools.partial(jax.jit, static_argnames="steps")
def gradient_sequence(key: jax.Array, steps: int, scale: float):
    """(params, grads_S): float32 params ~ N(0, 1) and ``steps`` gradients ~ N(0, scale^2),
    with a few spikes SPIKE_FACTOR larger; leaves shaped PARAM_SHAPES (grads with S first)."""
    keys = jax.random.split(key, 2 * len(PARAM_SHAPES) + 1)
    params, grads_S = {}, {}
    spikes_S = jax.random.bernoulli(keys[-1], SPIKE_FRACTION, (steps,))
    factor_S = jnp.where(spikes_S, SPIKE_FACTOR, 1.0)
    for i, (name, shape) in enumerate(PARAM_SHAPES.items()):
        params[name] = jax.random.normal(keys[2 * i], shape)
        noise = jax.random.normal(keys[2 * i + 1], (steps, *shape))
        grads_S[name] = scale * noise * factor_S.reshape((steps,) + (1,) * len(shape))
    return params, grads_S


def ours_adamw(params, grads_S, schedule, b1, b2, eps, weight_decay):
    """params after every step (leaves with leading S) of the hand-written AdamW."""
    config = optimizers.AdamConfig(b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
    params_S, _ = jax.jit(lambda p, g: optimizers.run(optimizers.adamw(schedule, config), p, g))(
        params, grads_S
    )
    return params_S


def optax_adamw(params, grads_S, schedule, b1, b2, eps, weight_decay):
    """params after every step of optax.adamw on the same gradients."""
    tx = optax.adamw(schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
    return references.optax_run(tx, params, grads_S)


def clip_sequences(grads_S, max_norm: float):
    """(ours, optax's) clipped gradients of every step, and the global norms before and after
    (each S,)."""
    ours_S, theirs_S, before_S, after_S = _clip_sequences(grads_S, max_norm)
    return ours_S, theirs_S, np.asarray(before_S), np.asarray(after_S)


@functools.partial(jax.jit, static_argnames="max_norm")
def _clip_sequences(grads_S, max_norm):
    ours_S = jax.vmap(lambda g: transforms.clip_by_global_norm(g, max_norm))(grads_S)
    tx = optax.clip_by_global_norm(max_norm)
    theirs_S = jax.vmap(lambda g: tx.update(g, optax.EmptyState())[0])(grads_S)
    before_S = jax.vmap(transforms.global_norm)(grads_S)
    after_S = jax.vmap(transforms.global_norm)(ours_S)
    return ours_S, theirs_S, before_S, after_S


def per_step_difference(a_S, b_S) -> np.ndarray:
    """max |a - b| over every leaf, per step (S,), in float64."""
    diffs = [
        np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).reshape(len(a), -1).max(1)
        for a, b in zip(jax.tree.leaves(a_S), jax.tree.leaves(b_S), strict=True)
    ]
    return np.max(np.stack(diffs), axis=0)
