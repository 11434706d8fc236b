"""Exercises of the phase "Transformers & language models".

- ``transformers.attention.causal_weights`` (predict): how many attention weights a causal mask
  leaves nonzero.
- ``transformers.attention.causal_attention`` (code): one head of scaled, causally masked
  dot-product attention.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, Item, PredictItem, rng

PHASE = "Transformers & language models"


class CausalWeights(PredictItem):
    """A causal mask lets query i see keys 0..i: row i keeps i + 1 weights."""

    id = "transformers.attention.causal_weights"
    phase = PHASE
    lesson = "attention"
    title = "What a causal mask leaves"
    units = ""  # a count of weights
    rel_tol = 0.0
    abs_tol = 0.5  # a count: the nearest integer is the answer
    hints = (
        "Draw the T x T grid of (query i, key j) for a small T, say 4, and cross out every "
        "key a query may not see. How many are left in row i?",
        "Query i sees keys 0, 1, ..., i: row i keeps i + 1 weights, so the rows keep "
        "1, 2, ..., T. Add them up, then multiply by the heads.",
        "1 + 2 + ... + T = T(T + 1)/2 per head; H heads of the same mask keep H T(T + 1)/2.",
    )

    def params(self, generator):
        return {
            "seq_len": int(generator.integers(5, 25)),
            "heads": int(generator.integers(1, 5)),
            "head_dim": int(generator.choice([4, 8, 16])),
            "seed": int(generator.integers(0, 2**16)),
        }

    def prompt(self, params) -> str:
        t, h = params["seq_len"], params["heads"]
        return (
            f"The lesson's attention runs on **T = {t} tokens** with **{h} head"
            f"{'s' if h > 1 else ''}** of {params['head_dim']} channels, causal mask on, one "
            "sequence of random inputs. **Predict how many of its attention weights (softmax "
            "probabilities, over all heads) are not zero**; the lesson's library then counts "
            "them."
        )

    def live(self, params) -> float:
        import jax

        from core.lm import attention

        t, h, k = params["seq_len"], params["heads"], params["head_dim"]
        q_key, k_key, v_key = jax.random.split(jax.random.key(params["seed"]), 3)
        q, key, v = (jax.random.normal(kk, (1, t, h, k)) for kk in (q_key, k_key, v_key))
        probs_BHTS = attention.attention_pieces(q, key, v, causal=True).probs_BHTS
        return float(np.count_nonzero(np.asarray(probs_BHTS)))

    def derive(self, params):
        t, h = params["seq_len"], params["heads"]
        value = h * t * (t + 1) / 2
        return value, (
            f"Query i may see keys 0..i, so row i of each head's {t} x {t} grid keeps i + 1 "
            f"weights: 1 + 2 + ... + {t} = {t}·{t + 1}/2 = {t * (t + 1) // 2} per head, times "
            f"{h} head{'s' if h > 1 else ''} = **{value:.0f}**. The masked entries are exactly "
            "0 after the softmax (their score is a huge negative number, and exp of it "
            "underflows to 0), and every allowed one is positive. Just over half of the T² "
            "scores are used, and a causal kernel can skip the blocks above the diagonal."
        )

    def wrong(self, params, expected):
        t, h = params["seq_len"], params["heads"]
        return {
            "no mask: T squared per head": float(h * t * t),
            "the diagonal masked too: T(T - 1)/2": float(h * t * (t - 1) / 2),
            "one head only": float(t * (t + 1) / 2) if h > 1 else float(t * t),
        }


_ATTENTION_STUB = '''\
import jax
import jax.numpy as jnp


def causal_attention(q_TK, k_TK, v_TK):
    """One head of causal scaled dot-product attention.

    q_TK, k_TK, v_TK: (T, K) float32 queries, keys and values of T tokens.
    Returns (T, K): row i is the average of the values of tokens 0..i, weighted by the
    softmax over j <= i of q_i . k_j / sqrt(K). Query i must not see any key j > i.
    """
    raise NotImplementedError
'''

_ATTENTION_UNSCALED = """\
import jax
import jax.numpy as jnp


def causal_attention(q_TK, k_TK, v_TK):
    T = q_TK.shape[0]
    scores = q_TK @ k_TK.T
    allowed = jnp.tril(jnp.ones((T, T), bool))
    scores = jnp.where(allowed, scores, -jnp.inf)
    return jax.nn.softmax(scores, axis=-1) @ v_TK
"""

_ATTENTION_NO_MASK = """\
import jax
import jax.numpy as jnp


def causal_attention(q_TK, k_TK, v_TK):
    scores = q_TK @ k_TK.T / jnp.sqrt(q_TK.shape[-1])
    return jax.nn.softmax(scores, axis=-1) @ v_TK
"""

_ATTENTION_MASK_AFTER_SOFTMAX = """\
import jax
import jax.numpy as jnp


def causal_attention(q_TK, k_TK, v_TK):
    T = q_TK.shape[0]
    probs = jax.nn.softmax(q_TK @ k_TK.T / jnp.sqrt(q_TK.shape[-1]), axis=-1)
    return (probs * jnp.tril(jnp.ones((T, T)))) @ v_TK
"""

_ATTENTION_QUERY_AXIS = """\
import jax
import jax.numpy as jnp


def causal_attention(q_TK, k_TK, v_TK):
    T = q_TK.shape[0]
    scores = q_TK @ k_TK.T / jnp.sqrt(q_TK.shape[-1])
    scores = jnp.where(jnp.tril(jnp.ones((T, T), bool)), scores, -jnp.inf)
    return jax.nn.softmax(scores, axis=0) @ v_TK
"""

ATTENTION_TOLERANCE = 1e-5  # float32 inputs of order 1; the reference is float64


def causal_attention_reference(q_TK, k_TK, v_TK) -> np.ndarray:
    """The definition in float64 NumPy, row by row: query i against keys 0..i only."""
    q, k, v = (np.asarray(a, np.float64) for a in (q_TK, k_TK, v_TK))
    out = np.empty_like(q)
    for i in range(len(q)):
        scores = k[: i + 1] @ q[i] / math.sqrt(q.shape[-1])
        weights = np.exp(scores - scores.max())
        out[i] = weights @ v[: i + 1] / weights.sum()
    return out


class CausalAttention(CodeItem):
    id = "transformers.attention.causal_attention"
    phase = PHASE
    lesson = "attention"
    title = "One head of causal attention"
    function_name = "causal_attention"
    stub = _ATTENTION_STUB
    solution_module = "core.exercises.solutions.causal_attention"
    hints = (
        "Three steps: scores (T x T) from queries and keys, a softmax along the keys, then a "
        "weighted sum of the values. Where does the mask go, and what is it divided by?",
        "Divide q @ k.T by sqrt(K) (keeps the scores' spread independent of K). Mask BEFORE the "
        "softmax: set the scores above the diagonal to -inf (jnp.where with jnp.tril), so the "
        "allowed weights of each row still sum to 1.",
        "jax.nn.softmax(scores, axis=-1): each row (one query) is a distribution over its "
        "keys. Then probs @ v_TK.",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `causal_attention(q_TK, k_TK, v_TK)`: the core of the lesson, for one "
            "head. The hidden tests call it on float32 inputs of three sizes, one with large "
            "scores, and compare every output with a float64 NumPy reference that attends row "
            f"by row (absolute error at most {ATTENTION_TOLERANCE:g} on outputs of order 1)."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "scores not divided by sqrt(K)": _ATTENTION_UNSCALED,
            "no causal mask": _ATTENTION_NO_MASK,
            "mask applied after the softmax (rows no longer sum to 1)": (
                _ATTENTION_MASK_AFTER_SOFTMAX
            ),
            "softmax over the queries, not the keys": _ATTENTION_QUERY_AXIS,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        cases = [
            ("short", int(generator.integers(3, 6)), int(generator.choice([4, 8])), 1.0),
            ("longer", int(generator.integers(12, 20)), 16, 1.0),
            ("large scores", int(generator.integers(6, 10)), 8, 6.0),
        ]
        tests = []
        for name, tokens, channels, scale in cases:
            q, k, v = (
                (generator.normal(size=(tokens, channels)) * s).astype(np.float32)
                for s in (scale, scale, 1.0)
            )
            tests.append(self._compare(function, q, k, v, f"{name}: T={tokens}, K={channels}"))
        return tests

    def _compare(self, function, q, k, v, name) -> HiddenTest:
        expected = causal_attention_reference(q, k, v)
        got = np.asarray(function(q, k, v), np.float64)
        if got.shape != expected.shape:
            return HiddenTest(name, False, f"returned shape {got.shape}; expected {expected.shape}")
        if not np.isfinite(got).all():
            return HiddenTest(name, False, "returned a value that is not finite")
        error = np.abs(got - expected)
        row = int(np.unravel_index(np.argmax(error), error.shape)[0])
        return HiddenTest(
            name,
            float(error.max()) <= ATTENTION_TOLERANCE,
            f"largest error {error.max():.1e} at query row {row} (tolerance "
            f"{ATTENTION_TOLERANCE:g}; row 0 may only see key 0, so its output must be v[0])",
        )


ITEMS: tuple[Item, ...] = (CausalWeights(), CausalAttention())
