"""Lesson code for "Deploy at the edge: conversion, budgets and device checks".

The app (apps/edge_deploy.py) trains the course's small digits CNN (core.nn.nnx_models.CNN,
the same training loop as the CNN lesson), converts it with interop/tflite.py to LiteRT float
and int8, measures each variant and judges it against a budget the learner sets. What needs
only core lives here: the cached training run, the calibration sets (including the wrong
ones), the budget and its verdicts, the JAX baseline's own figures. The conversion and the
LiteRT runs live in interop/ (core may not import it).

Dimension glossary: N images, B batch, K classes.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import optax
from flax import nnx

from core.data import digits
from core.nn import nnx_models, training
from core.perf import timing
from core.post_training import cache

# The calibration (representative) set for int8. The first is right; the next two are the
# mistakes the check must catch (too few images: the largest activations were never seen
# and clip; the wrong brightness: every real input above 0.1 clips); the last is refused
# (the held-out digits would no longer be held out).
CALIBRATIONS = (
    "training split",
    "200 training images",
    "training split x 0.1",
    "test split",
)
RIGHT_CALIBRATION = CALIBRATIONS[0]
DIM_CALIBRATION = CALIBRATIONS[2]
LEAKING_CALIBRATION = CALIBRATIONS[3]
CACHE_KIND = "edge_deploy.cnn"
CACHE_SOURCES = (
    "core/lessons/deployment/edge_deploy.py",
    "core/nn/nnx_models.py",
    "core/nn/training.py",
    "core/data/digits.py",
    "core/post_training/cache.py",
)


@dataclasses.dataclass(frozen=True)
class Budget:
    """What the target device allows: model file size, latency per inference, accuracy."""

    max_kb: float
    max_latency_ms: float
    min_accuracy: float

    def __post_init__(self):
        if not self.max_kb > 0:
            raise ValueError(f"max size must be > 0 KB, got {self.max_kb}")
        if not self.max_latency_ms > 0:
            raise ValueError(f"max latency must be > 0 ms, got {self.max_latency_ms}")
        if not 0.0 <= self.min_accuracy <= 1.0:
            raise ValueError(f"min accuracy must be in [0, 1], got {self.min_accuracy}")


def verdicts(rows: list[dict], budget: Budget) -> list[dict]:
    """One row per variant: its figures, whether each budget line holds, and what it misses.

    ``rows`` carry "variant", "size (bytes)", "latency (ms)" and "accuracy". A KB is 1000
    bytes here (as a flash size on a data sheet is usually quoted in kB).
    """
    out = []
    for row in rows:
        kb = row["size (bytes)"] / 1000.0
        checks = {
            "size ok": kb <= budget.max_kb,
            "latency ok": row["latency (ms)"] <= budget.max_latency_ms,
            "accuracy ok": row["accuracy"] >= budget.min_accuracy,
        }
        misses = []
        if not checks["size ok"]:
            misses.append(f"{kb:.1f} KB > {budget.max_kb:g} KB")
        if not checks["latency ok"]:
            misses.append(f"{row['latency (ms)']:.3f} ms > {budget.max_latency_ms:g} ms")
        if not checks["accuracy ok"]:
            misses.append(f"{row['accuracy']:.2%} < {budget.min_accuracy:.0%}")
        out.append(
            {
                "variant": row["variant"],
                **checks,
                "meets budget": all(checks.values()),
                "misses": "; ".join(misses) or "-",
            }
        )
    return out


def calibration_problem(choice: str) -> str | None:
    """Why a calibration choice is refused (None when it may be used)."""
    if choice not in CALIBRATIONS:
        return f"calibration must be one of {', '.join(CALIBRATIONS)}, got {choice!r}"
    if choice == LEAKING_CALIBRATION:
        return (
            "calibrating int8 on the test split leaks the held-out digits into the "
            "quantization ranges: the accuracy measured on them would no longer be held out. "
            "Calibrate on training images."
        )
    return None


def calibration_inputs(split: digits.Split, choice: str) -> np.ndarray:
    """The representative inputs x_NYXK of a calibration choice (refused ones raise)."""
    problem = calibration_problem(choice)
    if problem is not None:
        raise ValueError(problem)
    if choice == "200 training images":
        return split.x_train[:200]
    if choice == "training split x 0.1":
        return split.x_train * np.float32(0.1)
    return split.x_train


def _build(channels: tuple[int, int], seed: int) -> nnx_models.CNN:
    return nnx_models.CNN(rngs=nnx.Rngs(params=jax.random.key(seed, impl="rbg")), channels=channels)


def train(
    channels: tuple[int, int],
    epochs: int,
    seed: int,
    test_fraction: float = 0.2,
    learning_rate: float = 0.01,
    batch_size: int = 32,
    progress=None,
) -> tuple[digits.Split, nnx_models.CNN, str]:
    """(split, trained CNN, origin): Adam with a cosine decay, as in the CNN lesson, through
    the course's verified weights cache (origin says "on-disk cache" or "trained in this
    process")."""
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    split = digits.load(test_fraction, seed)
    spec = {
        "model": "core.nn.nnx_models.CNN",
        "channels": [int(c) for c in channels],
        "epochs": int(epochs),
        "seed": int(seed),
        "test_fraction": float(test_fraction),
        "learning_rate": float(learning_rate),
        "batch_size": int(batch_size),
    }

    def compute():
        model = _build(tuple(channels), seed)
        steps = epochs * (len(split.y_train) // batch_size)
        schedule = optax.cosine_decay_schedule(learning_rate, steps)
        optimizer = nnx.Optimizer(model, training.make_optimizer("adam", schedule), wrt=nnx.Param)
        training.fit(
            model,
            optimizer,
            split.x_train,
            split.y_train,
            epochs=epochs,
            batch_size=batch_size,
            seed=seed,
            **({} if progress is None else {"progress": progress}),
        )
        return nnx.to_pure_dict(nnx.state(model))

    weights, origin = cache.cached(CACHE_KIND, spec, compute, sources=CACHE_SOURCES)
    model = _build(tuple(channels), seed)
    state = nnx.state(model)
    nnx.replace_by_pure_dict(state, weights)
    nnx.update(model, state)
    return split, model, origin


def weights_bytes(model: nnx.Module) -> int:
    """Bytes of the model's parameters as stored (float32 here): the JAX variant's "size"."""
    return int(sum(np.asarray(leaf).nbytes for leaf in jax.tree.leaves(nnx.state(model))))


def jax_row(model: nnx.Module, x_test, y_test, repeats: int = 100) -> tuple[dict, np.ndarray]:
    """(row, logits): the JAX model's own figures, the baseline the LiteRT variants face.

    Latency: the median of ``repeats`` jitted batch-of-one calls after a compiled warm-up
    (XLA:CPU, this process's threads), on the first test image.
    """
    forward = nnx.jit(lambda m, x: m(x))
    logits = np.asarray(forward(model, x_test))
    one = np.asarray(x_test[:1])
    jax.block_until_ready(forward(model, one))
    seconds = timing.median_seconds(lambda: forward(model, one), repeats=repeats, warmup=3)
    row = {
        "variant": "JAX float32 (XLA:CPU; the reference, not a device file)",
        "size (bytes)": weights_bytes(model),
        "latency (ms)": seconds * 1e3,
        "accuracy": float(np.mean(logits.argmax(axis=1) == np.asarray(y_test))),
    }
    return row, logits
