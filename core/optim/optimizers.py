"""Hand-written optimizers as pure (init, update) pairs over pytrees, in optax's shape.

``opt.init(params) -> state``; ``opt.update(grads, state, params) -> (updates, state)``;
``apply_updates(params, updates)`` adds them. The formulas, for a gradient g at step t = 1, 2, ...:

    sgd        u = -lr_t g
    momentum   v = beta v + g;                   u = -lr_t v          (optax.sgd(lr, momentum))
    adam       m = b1 m + (1 - b1) g;  s = b2 s + (1 - b2) g^2
               m_hat = m / (1 - b1^t); s_hat = s / (1 - b2^t)
               u = -lr_t m_hat / (sqrt(s_hat) + eps)                  (optax.adam, eps_root 0)
    adamw      u = -lr_t (m_hat / (sqrt(s_hat) + eps) + wd p)         (optax.adamw)

torch.optim.AdamW writes the same step as ``p *= 1 - lr_t wd`` then
``p -= (lr_t / (1 - b1^t)) m / (sqrt(s) / sqrt(1 - b2^t) + eps)``: eps is added after the
bias correction of s in both, the decay uses the undecayed p in both, so the two agree to float
rounding. ``lr_t`` is a number or a schedule ``step -> lr`` (step counts from 0, as in optax).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

Schedule = Callable[[jax.Array], jax.Array]


class Optimizer(NamedTuple):
    """A pure optimizer: ``init(params) -> state``, ``update(grads, state, params)``."""

    init: Callable[[Any], Any]
    update: Callable[[Any, Any, Any], tuple[Any, Any]]


def _lr(learning_rate: float | Schedule, count: jax.Array) -> jax.Array:
    return learning_rate(count) if callable(learning_rate) else jnp.asarray(learning_rate)


def _validate_lr(learning_rate: float | Schedule) -> None:
    if not callable(learning_rate) and not learning_rate > 0:
        raise ValueError(f"learning rate must be > 0, got {learning_rate}")


def apply_updates(params, updates):
    """params + updates, leaf by leaf (optax.apply_updates)."""
    return jax.tree.map(lambda p, u: (p + u).astype(p.dtype), params, updates)


class SgdState(NamedTuple):
    count: jax.Array  # steps taken so far (int32)


def sgd(learning_rate: float | Schedule) -> Optimizer:
    """Plain gradient descent: u = -lr g."""
    _validate_lr(learning_rate)

    def init(params):
        del params
        return SgdState(jnp.zeros([], jnp.int32))

    def update(grads, state, params=None):
        del params
        lr = _lr(learning_rate, state.count)
        return jax.tree.map(lambda g: -lr * g, grads), SgdState(state.count + 1)

    return Optimizer(init, update)


class MomentumState(NamedTuple):
    count: jax.Array
    velocity: Any  # pytree like params


def momentum(learning_rate: float | Schedule, beta: float = 0.9) -> Optimizer:
    """Heavy-ball momentum: v = beta v + g, u = -lr v (optax.sgd(lr, momentum=beta))."""
    _validate_lr(learning_rate)
    if not 0 <= beta < 1:
        raise ValueError(f"momentum beta must be in [0, 1), got {beta}")

    def init(params):
        return MomentumState(jnp.zeros([], jnp.int32), jax.tree.map(jnp.zeros_like, params))

    def update(grads, state, params=None):
        del params
        lr = _lr(learning_rate, state.count)
        velocity = jax.tree.map(lambda v, g: beta * v + g, state.velocity, grads)
        updates = jax.tree.map(lambda v: -lr * v, velocity)
        return updates, MomentumState(state.count + 1, velocity)

    return Optimizer(init, update)


@dataclasses.dataclass(frozen=True)
class AdamConfig:
    """Adam(W) hyperparameters; ``weight_decay`` 0 is Adam."""

    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self):
        for name in ("b1", "b2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if not self.eps > 0:
            raise ValueError(f"eps must be > 0, got {self.eps}")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")


class AdamState(NamedTuple):
    count: jax.Array
    mu: Any  # first moment m, pytree like params
    nu: Any  # second moment s, pytree like params


def adamw(learning_rate: float | Schedule, config: AdamConfig = AdamConfig()) -> Optimizer:
    """AdamW as optax.adamw writes it (decoupled decay scaled by lr; eps after bias correction)."""
    _validate_lr(learning_rate)
    b1, b2, eps, wd = config.b1, config.b2, config.eps, config.weight_decay

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return AdamState(jnp.zeros([], jnp.int32), zeros, jax.tree.map(jnp.zeros_like, params))

    def update(grads, state, params=None):
        if wd and params is None:
            raise ValueError("adamw with weight decay needs params in update")
        lr = _lr(learning_rate, state.count)
        t = (state.count + 1).astype(jnp.float32)
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, grads)
        nu = jax.tree.map(lambda s, g: b2 * s + (1 - b2) * g * g, state.nu, grads)
        c1, c2 = 1 - b1**t, 1 - b2**t

        def step(m, s, p):
            direction = (m / c1) / (jnp.sqrt(s / c2) + eps)
            if wd:
                direction = direction + wd * p
            return -lr * direction

        leaves_p = params if params is not None else mu  # unused without decay
        updates = jax.tree.map(step, mu, nu, leaves_p)
        return updates, AdamState(state.count + 1, mu, nu)

    return Optimizer(init, update)


def adam(learning_rate: float | Schedule, b1=0.9, b2=0.999, eps=1e-8) -> Optimizer:
    """Adam (optax.adam): adamw without weight decay."""
    return adamw(learning_rate, AdamConfig(b1=b1, b2=b2, eps=eps, weight_decay=0.0))


def run(optimizer: Optimizer, params, grads_sequence) -> tuple[Any, Any]:
    """Apply ``optimizer`` to a fixed gradient sequence (a pytree whose leaves have a leading
    step axis S); returns (params after every step with that leading axis, final state)."""

    def body(carry, grads):
        params, state = carry
        updates, state = optimizer.update(grads, state, params)
        params = apply_updates(params, updates)
        return (params, state), params

    (_, state), params_S = jax.lax.scan(body, (params, optimizer.init(params)), grads_sequence)
    return params_S, state
