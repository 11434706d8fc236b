"""Lesson code of "Probability, likelihood, and stable losses".

A softmax turns logits x into probabilities p_i = exp(x_i) / sum_j exp(x_j). Written that way
it overflows once a logit passes log(float32 max) ~ 88.7 (exp gives inf, inf / inf = NaN) and
underflows to 0 for logits far below the largest (log 0 = -inf). Shifting by the largest logit
m changes nothing mathematically and keeps every exponent <= 0:

    logsumexp(x)   = m + log sum_j exp(x_j - m)
    log_softmax(x) = (x - m) - log sum_j exp(x_j - m)
    softmax(x)     = exp(log_softmax(x))

The negative log-likelihood of integer targets y is mean_n -log_softmax(x_n)[y_n]; the
cross-entropy against smoothed targets q = (1 - eps) onehot(y) + eps / C is
mean_n -sum_c q_nc log_softmax(x_n)_c (eps = 0: the NLL).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

FLOAT32_MAX = float(np.finfo(np.float32).max)
OVERFLOW_LOGIT = math.log(FLOAT32_MAX)  # exp(x) is inf in float32 past ~88.72
FORMS = ("logsumexp", "softmax", "log_softmax", "nll", "cross_entropy")


def problem(log10_scale: float, temperature: float) -> str | None:
    """Why these inputs cannot make a float32 loss, or None."""
    if temperature <= 0:
        return (
            f"a temperature of {temperature:g} makes no sense: softmax(x / T) needs T > 0 "
            "(T = 0 divides by zero, a negative T flips which class is likeliest)"
        )
    spread = 2 * 10.0**log10_scale / temperature  # largest logit minus smallest, after / T
    if spread > FLOAT32_MAX:
        return (
            f"logits within +-1e{log10_scale:g} at temperature {temperature:g} give "
            f"log-probabilities down to -{spread:.3g}, past float32's range (+-{FLOAT32_MAX:.3g}):"
            " no float32 loss, stable or not, can hold them"
        )
    return None


def make_batch(key, examples: int, classes: int, log10_scale: float, temperature: float):
    """(logits_NC float32 in [-10^s, 10^s] / T, targets_N int32): the largest |logit| before
    the temperature is 10^log10_scale (computed in float64, then rounded once to float32)."""
    scale = np.float32(10.0**log10_scale)
    return _make_batch(key, examples, classes, scale, np.float32(temperature))


@functools.partial(jax.jit, static_argnames=("examples", "classes"))
def _make_batch(key, examples, classes, scale, temperature):
    k_logits, k_targets = jax.random.split(key)
    z = jax.random.normal(k_logits, (examples, classes))
    logits = (z / jnp.max(jnp.abs(z))) * scale / temperature
    targets = jax.random.randint(k_targets, (examples,), 0, classes)
    return logits, targets


def smoothed_targets(targets_N, classes: int, smoothing: float):
    """q_NC = (1 - eps) onehot + eps / C."""
    return (1 - smoothing) * jax.nn.one_hot(targets_N, classes) + smoothing / classes


def naive(logits_NC, targets_N, smoothing: float) -> dict:
    """The textbook forms: exp, sum, divide, log. Overflow and underflow pass straight through."""
    e = jnp.exp(logits_NC)
    total = jnp.sum(e, axis=-1, keepdims=True)
    softmax = e / total
    log_softmax = jnp.log(softmax)
    q = smoothed_targets(targets_N, logits_NC.shape[-1], smoothing)
    picked = jnp.take_along_axis(log_softmax, targets_N[:, None], axis=-1)[:, 0]
    return {
        "logsumexp": jnp.log(total[:, 0]),
        "softmax": softmax,
        "log_softmax": log_softmax,
        "nll": -jnp.mean(picked),
        "cross_entropy": -jnp.mean(jnp.sum(q * log_softmax, axis=-1)),
    }


def stable(logits_NC, targets_N, smoothing: float) -> dict:
    """The shifted forms: every exponent <= 0, the log taken of a sum in [1, C]."""
    m = jnp.max(logits_NC, axis=-1, keepdims=True)
    shifted = logits_NC - m
    log_total = jnp.log(jnp.sum(jnp.exp(shifted), axis=-1, keepdims=True))
    log_softmax = shifted - log_total
    q = smoothed_targets(targets_N, logits_NC.shape[-1], smoothing)
    picked = jnp.take_along_axis(log_softmax, targets_N[:, None], axis=-1)[:, 0]
    n = logits_NC.shape[0]  # divide before summing: a mean of values near float32 max
    return {
        "logsumexp": (m + log_total)[:, 0],
        "softmax": jnp.exp(log_softmax),
        "log_softmax": log_softmax,
        "nll": -jnp.sum(picked / n),
        "cross_entropy": -jnp.sum(jnp.sum(q * log_softmax, axis=-1) / n),
    }


def scipy_reference(logits_NC, targets_N, smoothing: float) -> dict:
    """The same quantities from scipy.special in float64, on the same (float32) logits."""
    from scipy import special

    x = np.asarray(logits_NC, np.float64)
    y = np.asarray(targets_N)
    classes = x.shape[-1]
    log_softmax = special.log_softmax(x, axis=-1)
    q = (1 - smoothing) * np.eye(classes)[y] + smoothing / classes
    return {
        "logsumexp": special.logsumexp(x, axis=-1),
        "softmax": special.softmax(x, axis=-1),
        "log_softmax": log_softmax,
        "nll": -np.mean(log_softmax[np.arange(len(y)), y]),
        "cross_entropy": -np.mean(np.sum(q * log_softmax, axis=-1)),
    }


_naive_jit = jax.jit(lambda x, y, eps: naive(x, y, eps))
_stable_jit = jax.jit(lambda x, y, eps: stable(x, y, eps))


def sweep(key, classes: int, log10_scales, errors_of) -> list[dict]:
    """For each scale: the error ``errors_of(result, reference)`` of the naive and the stable
    logsumexp and NLL vs scipy on a batch of 16 (inf where the naive form overflowed)."""
    rows = []
    for s in log10_scales:
        logits, targets = make_batch(key, 16, classes, float(s), 1.0)
        reference = scipy_reference(logits, targets, 0.0)
        for form, values in (
            ("naive", naive(logits, targets, 0.0)),
            ("stable", stable(logits, targets, 0.0)),
        ):
            for quantity in ("logsumexp", "nll"):
                error = errors_of(np.asarray(values[quantity]), reference[quantity])
                rows.append(
                    {
                        "log10 largest |logit|": float(s),
                        "form": form,
                        "quantity": quantity,
                        "error": error,
                    }
                )
    return rows
