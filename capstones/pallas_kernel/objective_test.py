"""The model's loss and gradients with the flash kernel as its attention core equal those
with the reference core and the float64 PyTorch twin; the kernel core never ignores a
document mask."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from capstones.pallas_kernel import objective
from core import numerics
from core.lm import tokenizer

pytest.importorskip("torch")

TINY = dataclasses.replace(objective.SMALL, num_layers=1)


@pytest.fixture(scope="module")
def compared():
    # interpret=True: jax's HLO interpreter (the cheaper one; the CLI defaults to TPU mode)
    return objective.compare(TINY, seed=5, interpret=True, anchor=True)


def test_loss_and_every_gradient_match(compared):
    tol = objective.TOLERANCE
    assert compared["leaves"] == 17  # embeddings, 1 block, final norm, head
    assert compared["loss error (relative)"] <= tol
    assert compared["worst gradient error"] <= tol
    assert compared["loss error vs float64"] <= tol
    assert compared["worst gradient error vs float64"] <= tol
    assert 4.0 < compared["loss reference"] < 7.0  # near log(256) = 5.5 at initialisation


def test_gradient_errors_flag_a_wrong_leaf():
    reference = {"a": np.array([1e-3, -2e-3]), "b": {"c": np.array([[5e-4]])}}
    same = objective.leaf_errors(reference, reference)
    assert same == {"a": 0.0, "b/c": 0.0}
    wrong = {"a": reference["a"], "b": {"c": np.array([[5.1e-4]])}}
    assert objective.leaf_errors(wrong, reference)["b/c"] == pytest.approx(0.02)


def _qkv(t=16):
    rng = np.random.default_rng(0)
    return [jnp.asarray(rng.standard_normal((1, t, 2, 8)), jnp.float32) for _ in range(3)]


def _document_mask(t=16):
    segments = np.array([[1] * (t // 2) + [2] * (t // 2)], np.int32)
    return tokenizer.segment_mask_BTS(segments, causal=True)[:, None]


def test_a_concrete_document_mask_is_refused():
    attend = objective.kernel_attention(8, 8, interpret=True)
    with pytest.raises(ValueError, match="causal-only"):
        attend(*_qkv(), _document_mask())


def test_a_traced_document_mask_poisons_the_output():
    attend = jax.jit(objective.kernel_attention(8, 8, interpret=True))
    q, k, v = _qkv()
    assert bool(jnp.isnan(attend(q, k, v, _document_mask())).all())
    causal = jnp.tril(jnp.ones((16, 16), bool))[None, None]
    honoured = attend(q, k, v, causal)
    assert numerics.scaled_max_error(honoured[:, 0], v[:, 0]) <= 1e-6  # row 0 sees key 0 only


def test_rows_are_single_documents():
    batch = objective.single_document_batch(TINY, seed=1)
    corpus = objective.data_lib.load_corpus(TINY)
    texts = [d.content for d in corpus.train]
    for tokens, targets in zip(batch["tokens_BT"], batch["targets_BT"], strict=True):
        row = bytes(np.append(tokens, targets[-1]).astype(np.uint8))
        assert any(row in text for text in texts)  # a contiguous piece of one file
        assert (targets[:-1] == tokens[1:]).all()
    assert (batch["weights_BT"] == 1).all()
