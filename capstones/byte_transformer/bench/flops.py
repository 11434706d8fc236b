"""Model FLOPs per training step (the capstone's one formula, model_math) and MFU."""

from __future__ import annotations

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import model_math

FLOP_FORMULA = model_math.FLOP_FORMULA
matmul_params = model_math.matmul_params
mfu = model_math.mfu


def flops_per_step(config: config_lib.Config) -> dict:
    """Model FLOPs of one training step (forward + backward) at (batch_size, seq_len)."""
    flops = model_math.train_flops(config, config.batch_size)
    return {
        "formula": FLOP_FORMULA,
        "matmul_params": matmul_params(config),
        "matmul": float(flops["matmul"]),
        "attention": float(flops["attention"]),
        "total": float(flops["total"]),
    }
