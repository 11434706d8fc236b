"""Model FLOPs per training step (the capstone's one formula, model_math) and MFU."""

from __future__ import annotations

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import model_math
from core.lm import causal_blocked

FLOP_FORMULA = model_math.FLOP_FORMULA
matmul_params = model_math.matmul_params
mfu = model_math.mfu


def flops_per_step(config: config_lib.Config) -> dict:
    """Model FLOPs of one training step (forward + backward) at (batch_size, seq_len).

    MFU counts the formula's FLOPs, the full T x T attention. ``attention_skipped`` says how
    much of that the train step never executes: the causal blocked core
    (core.lm.causal_blocked) skips the key blocks above the diagonal."""
    flops = model_math.train_flops(config, config.batch_size)
    blocked = causal_blocked.training_attention_fn(config.seq_len) is not None
    skipped = causal_blocked.skipped_fraction(causal_blocked.DEFAULT_BLOCKS) if blocked else 0.0
    return {
        "formula": FLOP_FORMULA,
        "matmul_params": matmul_params(config),
        "matmul": float(flops["matmul"]),
        "attention": float(flops["attention"]),
        "total": float(flops["total"]),
        "attention_skipped": float(flops["attention"]) * skipped,
    }
