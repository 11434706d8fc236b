"""Exercises of the phase "Neural network training".

- ``nn_training.tiny_mlp.first_loss`` (predict): the loss of an untrained classifier.
- ``nn_training.tiny_mlp.cross_entropy`` (code): a stable mean softmax cross-entropy.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, Item, PredictItem, rng

PHASE = "Neural network training"


class FirstLoss(PredictItem):
    """Before training, with weights near zero, every class gets the same probability."""

    id = "nn_training.tiny_mlp.first_loss"
    phase = PHASE
    lesson = "tiny_mlp"
    title = "The loss before the first step"
    units = "nats"
    rel_tol = 0.01
    hints = (
        "With all weights near zero every logit is near zero. What does softmax make of C "
        "equal logits?",
        "Each class then gets probability 1/C, whatever the input. Cross-entropy is the mean "
        "of -log(probability of the true class).",
        "-log(1/C) = ln C, in nats (natural log): for 10 classes about 2.303.",
    )
    INIT_SCALE = 1e-3  # the textbook std times this: logits of order 1e-3, probabilities ~1/C

    def params(self, generator):
        return {
            "classes": int(generator.integers(3, 9)),  # the dataset holds 2-8 classes
            "hidden": int(generator.choice([16, 32, 64])),
            "depth": int(generator.integers(1, 4)),
            "points": 256,
            "seed": int(generator.integers(0, 2**16)),
        }

    def prompt(self, params) -> str:
        layers = f"{params['depth']} hidden layer{'s' if params['depth'] > 1 else ''}"
        return (
            f"The lesson's MLP classifies 2-D points into **{params['classes']} classes** "
            f"({layers} of {params['hidden']} ReLUs). Its weights start "
            f"at {self.INIT_SCALE:g} times the He standard deviation, so every logit is close "
            "to zero. **Predict the mean cross-entropy on 256 points before the first step**, "
            "in nats; the lesson's library then computes it."
        )

    def live(self, params) -> float:
        import jax

        from core.nn import mlp

        data_key, init_key = jax.random.split(jax.random.key(params["seed"]))
        x_ND, y_N = mlp.make_dataset(data_key, "blobs", params["points"], 0.5, params["classes"])
        sizes = mlp.layer_sizes(2, params["hidden"], params["depth"], params["classes"])
        weights = mlp.init_params(init_key, sizes, "he", scale=self.INIT_SCALE)
        return float(mlp.loss(weights, x_ND, y_N))

    def derive(self, params):
        classes = params["classes"]
        value = math.log(classes)
        return value, (
            f"Every logit is about 0, so softmax gives each of the {classes} classes "
            f"probability 1/{classes}, whatever the point. Cross-entropy is the mean of "
            f"-ln(1/{classes}) = ln {classes} = **{value:.4f} nats**. A first loss far above "
            "ln C means the initial logits are large (a scale or init problem); far below "
            "means the labels leak into the inputs."
        )

    def wrong(self, params, expected):
        classes = params["classes"]
        return {
            "bits for nats: log2 C": math.log2(classes),
            "the probability 1/C for the loss": 1.0 / classes,
        }


_CROSS_ENTROPY_STUB = '''\
import jax.numpy as jnp


def cross_entropy(logits_NC, labels_N):
    """Mean softmax cross-entropy, in nats.

    logits_NC: (N, C) float32 scores; labels_N: (N,) int class ids in [0, C).
    Returns a scalar: the mean over the N examples of -log softmax(logits)[label].
    It must stay finite for logits in the thousands.
    """
    raise NotImplementedError
'''

_CROSS_ENTROPY_NAIVE = """\
import jax.numpy as jnp


def cross_entropy(logits_NC, labels_N):
    probs_NC = jnp.exp(logits_NC) / jnp.sum(jnp.exp(logits_NC), axis=-1, keepdims=True)
    return -jnp.mean(jnp.log(probs_NC[jnp.arange(labels_N.shape[0]), labels_N]))
"""

_CROSS_ENTROPY_SUM = """\
import jax
import jax.numpy as jnp


def cross_entropy(logits_NC, labels_N):
    log_probs_NC = jax.nn.log_softmax(logits_NC, axis=-1)
    return -jnp.sum(log_probs_NC[jnp.arange(labels_N.shape[0]), labels_N])
"""

_CROSS_ENTROPY_WRONG_AXIS = """\
import jax
import jax.numpy as jnp


def cross_entropy(logits_NC, labels_N):
    log_probs_NC = jax.nn.log_softmax(logits_NC, axis=0)
    return -jnp.mean(log_probs_NC[jnp.arange(labels_N.shape[0]), labels_N])
"""

CROSS_ENTROPY_RTOL = 1e-5  # float32 inputs; the reference is float64


def cross_entropy_reference(logits_NC, labels_N) -> float:
    """The definition in float64 NumPy, the log-sum-exp shifted by each row's max."""
    logits = np.asarray(logits_NC, np.float64)
    top_N = logits.max(axis=-1)
    log_norm_N = top_N + np.log(np.exp(logits - top_N[:, None]).sum(axis=-1))
    picked_N = logits[np.arange(len(labels_N)), np.asarray(labels_N)]
    return float(np.mean(log_norm_N - picked_N))


class CrossEntropy(CodeItem):
    id = "nn_training.tiny_mlp.cross_entropy"
    phase = PHASE
    lesson = "tiny_mlp"
    title = "A cross-entropy that survives large logits"
    function_name = "cross_entropy"
    stub = _CROSS_ENTROPY_STUB
    solution_module = "core.exercises.solutions.cross_entropy"
    hints = (
        "softmax(z) = exp(z) / sum(exp(z)); log softmax(z) = z - log(sum(exp(z))). Take the "
        "log of the formula instead of the log of the probabilities.",
        "exp(1000.0) is inf in float32. Subtracting the same number m from every logit of a row "
        "changes no probability: z - m - log(sum(exp(z - m))). Which m keeps every exp <= 1?",
        "m = the row's max. Pick each row's true-class entry with "
        "jnp.take_along_axis(log_probs_NC, labels_N[:, None], axis=-1), then the mean of minus it.",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `cross_entropy(logits_NC, labels_N)`: the lesson's training loss. The "
            "hidden tests call it on float32 logits of three sizes, one batch of them in the "
            "thousands (where exp overflows), and compare with a float64 NumPy reference "
            f"(relative error at most {CROSS_ENTROPY_RTOL:g})."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "exp without the max shift (overflows)": _CROSS_ENTROPY_NAIVE,
            "the sum over examples, not the mean": _CROSS_ENTROPY_SUM,
            "softmax over the batch axis": _CROSS_ENTROPY_WRONG_AXIS,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        cases = [
            ("small logits", int(generator.integers(5, 9)), int(generator.integers(3, 6)), 1.0),
            ("typical logits", 64, int(generator.integers(8, 12)), 4.0),
            ("logits in the thousands", 16, int(generator.integers(3, 8)), 2000.0),
        ]
        tests = []
        for name, rows, classes, scale in cases:
            logits = (generator.normal(size=(rows, classes)) * scale).astype(np.float32)
            labels = generator.integers(0, classes, size=rows).astype(np.int32)
            tests.append(self._compare(function, logits, labels, f"{name}: N={rows}, C={classes}"))
        return tests

    def _compare(self, function, logits, labels, name) -> HiddenTest:
        expected = cross_entropy_reference(logits, labels)
        got = np.asarray(function(logits, labels), np.float64)
        if got.shape != ():
            return HiddenTest(name, False, f"returned shape {got.shape}; expected a scalar")
        value = float(got)
        if not math.isfinite(value):
            return HiddenTest(name, False, f"returned {value}; the reference is {expected:.6g}")
        error = abs(value - expected) / max(abs(expected), 1e-12)
        return HiddenTest(
            name,
            error <= CROSS_ENTROPY_RTOL,
            f"got {value:.6g}, reference {expected:.6g}: relative error {error:.1e} "
            f"(tolerance {CROSS_ENTROPY_RTOL:g})",
        )


ITEMS: tuple[Item, ...] = (FirstLoss(), CrossEntropy())
