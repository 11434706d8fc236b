"""The assessment item of the phase "Transformers & language models".

- ``transformers.causal_attention`` (code): causal scaled dot-product attention in jax.numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, Item, rng

_ATTENTION_STUB = '''\
import jax
import jax.numpy as jnp


def causal_attention(q_BTHD, k_BTHD, v_BTHD):
    """Causal scaled dot-product attention.

    q_BTHD, k_BTHD, v_BTHD: (B, T, H, D) float32 (batch, positions, heads, head dim).
    Returns out_BTHD, (B, T, H, D): for query position t and head h, the weighted average
    of v[:, s, h] over key positions s <= t, with weights softmax over s of
    q[:, t, h] . k[:, s, h] / sqrt(D). Position t never sees a later position s > t.
    """
    raise NotImplementedError
'''

_ATTENTION_NO_MASK = """\
import jax
import jax.numpy as jnp


def causal_attention(q_BTHD, k_BTHD, v_BTHD):
    scores = jnp.einsum("bthd,bshd->bhts", q_BTHD, k_BTHD) / jnp.sqrt(q_BTHD.shape[-1])
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1), v_BTHD)
"""

_ATTENTION_WRONG_AXIS = """\
import jax
import jax.numpy as jnp


def causal_attention(q_BTHD, k_BTHD, v_BTHD):
    t = q_BTHD.shape[1]
    scores = jnp.einsum("bthd,bshd->bhts", q_BTHD, k_BTHD) / jnp.sqrt(q_BTHD.shape[-1])
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -1e30)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-2), v_BTHD)
"""

_ATTENTION_NO_SCALE = """\
import jax
import jax.numpy as jnp


def causal_attention(q_BTHD, k_BTHD, v_BTHD):
    t = q_BTHD.shape[1]
    scores = jnp.einsum("bthd,bshd->bhts", q_BTHD, k_BTHD)
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -1e30)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1), v_BTHD)
"""

_ATTENTION_STRICT_MASK = """\
import jax
import jax.numpy as jnp


def causal_attention(q_BTHD, k_BTHD, v_BTHD):
    t = q_BTHD.shape[1]
    scores = jnp.einsum("bthd,bshd->bhts", q_BTHD, k_BTHD) / jnp.sqrt(q_BTHD.shape[-1])
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool), k=-1), scores, -1e30)
    return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(scores, axis=-1), v_BTHD)
"""

ATTENTION_TOLERANCE = 1e-5  # max |out - float64 reference|, float32 inputs of size ~1


def causal_attention_reference(q_BTHD, k_BTHD, v_BTHD) -> np.ndarray:
    """The definition in float64 NumPy, one query position at a time (no mask needed: the
    keys s <= t are sliced)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q_BTHD, k_BTHD, v_BTHD))
    out = np.zeros_like(q)
    for t in range(q.shape[1]):
        scores_BHS = np.einsum("bhd,bshd->bhs", q[:, t], k[:, : t + 1]) / math.sqrt(q.shape[-1])
        weights = np.exp(scores_BHS - scores_BHS.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        out[:, t] = np.einsum("bhs,bshd->bhd", weights, v[:, : t + 1])
    return out


def _attention_shapes(seed: int, item_id: str) -> list[tuple[int, int, int, int]]:
    """(B, T, H, D) of the hidden tests: T = 1, a short odd T and a longer T that is not a
    power of two. Few shapes over all seeds: each new shape compiles the learner's ops."""
    generator = rng(item_id, seed)
    return [
        (2, 1, 2, 4),
        (2, int(generator.choice([5, 7])), 2, 8),
        (1, int(generator.choice([11, 13])), 3, 8),
    ]


class CausalAttention(CodeItem):
    id = "transformers.causal_attention"
    phase = "Transformers & language models"
    lesson = "attention"
    title = "Causal scaled dot-product attention"
    function_name = "causal_attention"
    stub = _ATTENTION_STUB
    solution_module = "core.assessment.solutions.causal_attention"

    def prompt(self, seed: int) -> str:
        shapes = ", ".join(str(s) for s in _attention_shapes(seed, self.id))
        return (
            "Complete `causal_attention(q_BTHD, k_BTHD, v_BTHD)` in jax.numpy: scaled "
            "dot-product attention in which position t attends to positions 0..t only. The "
            f"hidden tests call it on float32 (B, T, H, D) inputs of shapes {shapes}, compare "
            f"with a float64 NumPy reference (max error {ATTENTION_TOLERANCE:g}), and check "
            "that changing the keys and values of later positions leaves the earlier outputs "
            "unchanged."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "no causal mask": _ATTENTION_NO_MASK,
            "softmax over the query axis": _ATTENTION_WRONG_AXIS,
            "no 1/sqrt(D) scale": _ATTENTION_NO_SCALE,
            "the mask hides the diagonal (s < t)": _ATTENTION_STRICT_MASK,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        tests = []
        last_inputs = None
        for shape in _attention_shapes(seed, self.id):
            q, k, v = (generator.normal(size=shape).astype(np.float32) for _ in range(3))
            name = f"matches the float64 reference at (B, T, H, D) = {shape}"
            tests.append(self._compare(function, (q, k, v), name))
            last_inputs = (q, k, v)
        tests.append(self._causality(function, last_inputs, generator))
        return tests

    def _compare(self, function, inputs, name) -> HiddenTest:
        out = np.asarray(function(*inputs))
        expected = causal_attention_reference(*inputs)
        if out.shape != expected.shape:
            return HiddenTest(name, False, f"returned shape {out.shape}, expected {expected.shape}")
        error = float(np.max(np.abs(out.astype(np.float64) - expected)))
        if not math.isfinite(error):
            return HiddenTest(name, False, "the output holds NaN or inf")
        worst = np.unravel_index(np.argmax(np.abs(out - expected)), out.shape)
        where = (
            f" (worst at query position t={int(worst[1])})" if error > ATTENTION_TOLERANCE else ""
        )
        return HiddenTest(
            name,
            error <= ATTENTION_TOLERANCE,
            f"max |out - reference| = {error:.2e}{where}; tolerance {ATTENTION_TOLERANCE:g}",
        )

    def _causality(self, function, inputs, generator) -> HiddenTest:
        q, k, v = inputs
        seq_len = q.shape[1]
        cut = int(generator.integers(1, seq_len))  # positions cut.. change, 0..cut-1 must not
        k2, v2 = k.copy(), v.copy()
        k2[:, cut:] = generator.normal(size=k2[:, cut:].shape)
        v2[:, cut:] = generator.normal(size=v2[:, cut:].shape)
        before = np.asarray(function(q, k, v))[:, :cut]
        after = np.asarray(function(q, k2, v2))[:, :cut]
        change = float(np.max(np.abs(after.astype(np.float64) - before)))
        name = (
            f"changing keys and values at positions {cut}..{seq_len - 1} leaves outputs "
            f"0..{cut - 1} unchanged (T={seq_len})"
        )
        passed = change <= 1e-6
        return HiddenTest(
            name,
            passed,
            f"max change of an earlier output = {change:.2e}"
            + ("" if passed else ": earlier positions see the future"),
        )


ITEMS: tuple[Item, ...] = (CausalAttention(),)
