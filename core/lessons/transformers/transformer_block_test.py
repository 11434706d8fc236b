from __future__ import annotations

import jax
import numpy as np
import pytest

from core import numerics
from core.lessons.transformers import transformer_block
from core.lm import transformer


def reference_gaps(block, x_BTD, order_T, rope):
    """The same gaps from the NumPy float64 block (core/lm/reference.py), masks written out."""
    x = np.asarray(x_BTD, np.float64)
    t = x.shape[1]
    weights = transformer.block_weights(block)
    positions = np.arange(t)[None] if rope else None
    gaps = {}
    for causal in (False, True):
        mask = (np.tril(np.ones((t, t), bool)) if causal else np.ones((t, t), bool))[None]
        y = transformer.block_reference(weights, x, mask, rope_positions_BT=positions)
        y_swapped = transformer.block_reference(
            weights, x[:, order_T], mask, rope_positions_BT=positions
        )
        gaps[causal] = (np.abs(y_swapped[0] - y[0, order_T]).max(-1), y)
    return gaps


@pytest.mark.parametrize(
    "rope, width, heads, seq_len, swap",
    [
        (True, 16, 2, 8, 3),
        (False, 16, 2, 8, 3),
        (True, 24, 3, 12, 11),
        (False, 32, 4, 5, 1),
    ],
)
def test_order_test_matches_numpy_float64(rope, width, heads, seq_len, swap):
    config = transformer.TransformerConfig(
        width=width, num_heads=heads, num_layers=1, max_len=seq_len, rope=rope
    )
    block = transformer.Block(config, jax.random.key(seq_len))
    x = np.asarray(jax.random.normal(jax.random.key(1), (1, seq_len, width)), np.float32)
    result = transformer_block.order_test(block, x, swap)
    reference = reference_gaps(block, x, result.order_T, rope)
    scale = max(np.abs(reference[True][1]).max(), 1.0)
    for causal in (False, True):
        gap_error = np.abs(result.gaps[causal] - reference[causal][0]).max() / scale
        assert gap_error <= numerics.tolerance("float32"), (causal, gap_error)
    causal_error = numerics.scaled_max_error(result.causal_y_BTD, reference[True][1])
    assert causal_error <= numerics.tolerance("float32")
    # what the lesson shows: without positions and without a mask the block is
    # permutation-equivariant; with RoPE it is not; causal, the positions between the two
    # swapped tokens always change (they see one of the two tokens, not the other)
    assert (result.gaps[False].max() < 1e-4) is not rope
    assert result.gaps[True][:swap].max() > 1e-3


def test_the_order_test_equals_separate_block_calls():
    config = transformer.TransformerConfig(
        width=16, num_heads=2, num_layers=1, max_len=6, rope=True
    )
    block = transformer.Block(config, jax.random.key(0))
    x = np.asarray(jax.random.normal(jax.random.key(2), (1, 6, 16)), np.float32)
    result = transformer_block.order_test(block, x, 4)
    positions = np.arange(6)[None]
    for causal in (False, True):
        y = np.asarray(transformer.block_forward(block, x, positions, causal))
        y_swapped = np.asarray(
            transformer.block_forward(block, x[:, result.order_T], positions, causal)
        )
        separate = np.abs(y_swapped[0] - y[0, result.order_T]).max(-1)
        np.testing.assert_allclose(result.gaps[causal], separate, atol=1e-5)


@pytest.mark.parametrize("swap", [0, 6, -1])
def test_a_swap_outside_the_sequence_is_refused(swap):
    with pytest.raises(ValueError, match="swap must name a token"):
        transformer_block.swapped_order(6, swap)
