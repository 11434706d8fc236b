"""The tpu-v5e preset and the attention fields: valid, MXU-shaped, inside one chip's HBM."""

from __future__ import annotations

import pytest

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer.plan import memory

V5E_HBM_BYTES = 15.7 * 2**30


def test_preset_is_valid_and_mxu_shaped():
    c = config_lib.preset("tpu-v5e")
    assert c.compute_dtype == "bfloat16" and c.dropout == 0.0 and c.attention == "flash"
    for size in (c.d_model, c.head_dim, c.hidden, c.seq_len, *c.flash_blocks):
        assert size % 128 == 0, size  # the MXU's 128 x 128 tiles
    assert c.head_dim == 128 and c.hidden % 256 == 0
    assert c.seq_len % c.flash_blocks[0] == 0 and c.seq_len % c.flash_blocks[1] == 0
    assert c.batch_size * c.seq_len >= 8192  # matmul rows per step


def test_preset_fits_one_v5e_without_remat():
    """The plan's analytic accounting (plan/memory.py): arguments (12 N state + batch) plus
    the larger of saved activations and gradients + new state; and, as an upper bound, all of
    them at once; both under the chip's 15.7 GiB. Written out here for the flash core: per
    layer b T (10 D c + 16) + b T F (4 + c) + b H T 4 bytes (c = 2 for bf16)."""
    c = config_lib.preset("tpu-v5e")
    plan = memory.training_memory(c, chips=1)
    b, t, d, f, h, layers = c.batch_size, c.seq_len, c.d_model, c.hidden, c.num_heads, c.num_layers
    per_layer = b * t * (8 * d * 2 + 16) + b * t * f * (4 + 2) + b * h * t * 4
    assert plan["layer_activation_bytes"] == per_layer
    n = plan["params"]
    head = b * t * 4 + b * t * (2 * d * 2 + 8) + 2 * b * t * 256 * 4
    arguments = 12 * n + 16 + 5 * b * t * 4  # f32 params, Adam mu and nu; scalars; batch
    outputs = 12 * n + 16 + 12  # the new state (not donated) and three metrics
    peak = arguments + max(layers * per_layer + head, 4 * n + outputs)
    assert plan["peak_liveness_bytes"] == peak
    assert plan["peak_liveness_bytes"] < V5E_HBM_BYTES
    assert plan["peak_all_at_once_bytes"] < V5E_HBM_BYTES


def test_preset_overrides_and_unknown_name():
    c = config_lib.preset("tpu-v5e", base=config_lib.Config(steps=7))
    assert c.steps == 7 and c.d_model == 2048
    with pytest.raises(ValueError, match="unknown preset 'tpu-v4'; presets: tpu-v5e, quality-v5e"):
        config_lib.preset("tpu-v4")


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"attention": "ring"}, "attention must be one of"),
        ({"attention": "flash", "seq_len": 384, "attention_block_q": 256}, "must divide"),
        ({"attention_block_k": 0}, "attention_block_k must be >= 1"),
    ],
)
def test_attention_fields_refuse(overrides, words):
    with pytest.raises(ValueError, match=words):
        config_lib.Config(**overrides)


def test_flash_blocks_are_capped_at_the_row():
    c = config_lib.Config(attention="flash", seq_len=256, attention_block_q=512)
    assert c.flash_blocks == (256, 256)
