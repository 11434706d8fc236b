"""Learning-rate schedules as pure functions of the step (0, 1, 2, ...), as optax counts them.

    constant(v)(t)                          = v
    linear(a, b, n, begin)(t)               = a + (b - a) clip((t - begin) / n, 0, 1)
    warmup_cosine(a, peak, w, n, end)(t)    = a + (peak - a) t / w                 for t < w
                                            = end + (peak - end) (1 + cos(pi r)) / 2,
                                              r = clip((t - w) / (n - w), 0, 1)    for t >= w

``n`` of warmup_cosine counts the warmup too (optax.warmup_cosine_decay_schedule's
``decay_steps``).
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Constant:
    value: float

    def __call__(self, step):
        return jnp.full(jnp.shape(step), self.value, jnp.float32)


@dataclasses.dataclass(frozen=True)
class Linear:
    init_value: float
    end_value: float
    transition_steps: int
    transition_begin: int = 0

    def __post_init__(self):
        if self.transition_steps <= 0:
            raise ValueError(f"transition_steps must be > 0, got {self.transition_steps}")
        if self.transition_begin < 0:
            raise ValueError(f"transition_begin must be >= 0, got {self.transition_begin}")

    def __call__(self, step):
        t = jnp.asarray(step, jnp.float32)
        fraction = jnp.clip((t - self.transition_begin) / self.transition_steps, 0.0, 1.0)
        return self.init_value + (self.end_value - self.init_value) * fraction


@dataclasses.dataclass(frozen=True)
class WarmupCosine:
    init_value: float
    peak_value: float
    warmup_steps: int
    decay_steps: int  # total, warmup included
    end_value: float = 0.0

    def __post_init__(self):
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.decay_steps <= self.warmup_steps:
            raise ValueError(
                f"decay_steps ({self.decay_steps}) must exceed warmup_steps ({self.warmup_steps})"
            )

    def __call__(self, step):
        t = jnp.asarray(step, jnp.float32)
        w = self.warmup_steps
        warm = self.init_value + (self.peak_value - self.init_value) * t / max(w, 1)
        r = jnp.clip((t - w) / (self.decay_steps - w), 0.0, 1.0)
        cosine = self.end_value + (self.peak_value - self.end_value) * 0.5 * (
            1 + jnp.cos(math.pi * r)
        )
        return jnp.where(t < w, warm, cosine)


def constant(value: float) -> Constant:
    return Constant(value)


def linear(init_value, end_value, transition_steps, transition_begin=0) -> Linear:
    return Linear(init_value, end_value, transition_steps, transition_begin)


def warmup_cosine(init_value, peak_value, warmup_steps, decay_steps, end_value=0.0):
    return WarmupCosine(init_value, peak_value, warmup_steps, decay_steps, end_value)
