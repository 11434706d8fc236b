"""The capstone's model arithmetic: parameter counts and FLOPs of one training step.

One formula for both the ``bench`` command (MFU, whole batch) and the ``plan`` command
(per chip, with and without remat). Dimension glossary: b rows (the global batch B for
bench, B / chips for plan), T seq_len, D d_model, F MLP width, V vocabulary (256 bytes),
L layers, S max_len.

FLOPs count matmuls only (a multiply-add is 2 FLOPs): the weight matmuls q, k, v, o, MLP
in and out and the output head, and attention's two T x T matmuls (QK^T and PV over the
full T x T: causality is a mask, so the causal half is NOT discounted). The backward pass
has two matmuls per forward matmul, so a training step is 3 x the forward. Embeddings
(gathers), biases, LayerNorms, softmax, GELU, dropout, the loss and the optimizer are not
counted. Tested against the dot_generals of the train step's jaxpr (model_math_test.py).

Remat (jax.checkpoint around every block) adds the matmuls the backward pass recomputes:
with policy ``nothing_saveable`` every block's forward except its last matmul (the MLP's
w_out: its output is needed by no backward rule, so JAX does not recompute it); with
``dots_saveable`` no matmul at all (every dot_general output is saved; only elementwise
work is recomputed).
"""

from __future__ import annotations

from capstones.byte_transformer import config as config_lib
from core.lm import tokenizer

PARAM_FORMULA = "2 V D + S D + L (4 D^2 + 2 D F + F + 5 D) + 2 D"
FLOP_FORMULA = (
    "6 * N_matmul * B * T + 12 * L * B * T^2 * D; N_matmul = L * (4 D^2 + 2 D F) + D V "
    "(q, k, v, o, MLP in/out, head; embeddings, biases, LayerNorms excluded); a multiply-add "
    "is 2 FLOPs; forward + backward (backward = 2 x forward); attention's QK^T and PV over "
    "the full T x T (causal half not discounted); elementwise, softmax, LayerNorm, loss and "
    "optimizer FLOPs not counted"
)
# matmul FLOPs one block's forward recomputes in the backward pass, per jax.checkpoint policy
REMAT_RECOMPUTE = {
    "nothing_saveable": "L (b T (8 D^2 + 2 D F) + 4 b T^2 D): each block's forward but w_out",
    "dots_saveable": "0: every matmul output is saved",
}


def param_counts(config: config_lib.Config) -> dict[str, int]:
    """TinyLM's parameters by part (closed form; see core/lm/transformer.py)."""
    v, d, f, s = tokenizer.VOCAB_SIZE, config.d_model, config.hidden, config.max_len
    per_block_attention = 4 * d * d  # wq, wk, wv (D, H, K) and wo (H, K, D); no biases
    per_block_mlp = d * f + f + f * d + d  # w_in, b_in, w_out, b_out
    per_block_norms = 2 * 2 * d  # two LayerNorms, scale and bias each
    return {
        "token embedding (V x D)": v * d,
        "position embedding (S x D)": s * d,
        "attention (L x 4 D^2)": config.num_layers * per_block_attention,
        "MLP (L x (2 D F + F + D))": config.num_layers * per_block_mlp,
        "LayerNorms (L x 4 D + 2 D)": config.num_layers * per_block_norms + 2 * d,
        "output head (D x V)": d * v,
    }


def param_count(config: config_lib.Config) -> int:
    return sum(param_counts(config).values())


def matmul_params(config: config_lib.Config) -> int:
    """Parameters that take part in a matmul: L * (4 D^2 + 2 D F) + D V."""
    d, f, v = config.d_model, config.hidden, tokenizer.VOCAB_SIZE
    return config.num_layers * (4 * d * d + 2 * d * f) + d * v


def _remat_policy(remat: bool | str | None) -> str | None:
    """None (no remat), or a policy name; True means ``nothing_saveable``."""
    if remat is None or remat is False:
        return None
    policy = "nothing_saveable" if remat is True else remat
    if policy not in REMAT_RECOMPUTE:
        raise ValueError(f"remat policy must be one of {tuple(REMAT_RECOMPUTE)}, got {remat!r}")
    return policy


def recompute_flops(config: config_lib.Config, rows: int, remat: bool | str | None) -> int:
    """Matmul FLOPs the backward pass recomputes under remat (REMAT_RECOMPUTE)."""
    policy = _remat_policy(remat)
    if policy != "nothing_saveable":
        return 0
    t, d, f = config.seq_len, config.d_model, config.hidden
    n = rows * t
    block_but_w_out = n * (2 * 4 * d * d + 2 * d * f) + 2 * 2 * rows * t * t * d
    return config.num_layers * block_but_w_out


def train_flops(
    config: config_lib.Config, rows: int, remat: bool | str | None = None
) -> dict[str, int]:
    """Matmul FLOPs of one training step on ``rows`` rows of seq_len:
    {"matmul": 6 N_matmul b T, "attention": 12 L b T^2 D, "recompute": remat's extra,
    "total"}."""
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    b, t, d = rows, config.seq_len, config.d_model
    matmul = 6 * matmul_params(config) * b * t
    attention = 12 * config.num_layers * b * t * t * d
    recompute = recompute_flops(config, rows, remat)
    return {
        "matmul": matmul,
        "attention": attention,
        "recompute": recompute,
        "total": matmul + attention + recompute,
    }


CAUSAL_FLOP_FORMULA = (
    "6 * N_matmul * B * T + 6 * L * B * T^2 * D: the weight matmuls as FLOP_FORMULA; "
    "attention's QK^T and PV (2 * 2 * B * T^2 * D per layer forward over the full T x T, "
    "x 3 for forward + backward) HALVED, since a causal row t needs keys 0..t only; the MFU "
    "the TPU scripts report divides this by the step time and the chip's bf16 peak"
)


def causal_train_flops(config: config_lib.Config, rows: int) -> dict[str, int]:
    """Model FLOPs of one training step with causal attention counted once (CAUSAL_FLOP_FORMULA):
    {"weights": 6 N_matmul b T, "attention": 6 L b T^2 D, "total"} for ``rows`` rows."""
    full = train_flops(config, rows)
    return {
        "weights": full["matmul"],
        "attention": full["attention"] // 2,
        "total": full["matmul"] + full["attention"] // 2,
    }


def mfu(flops: float, seconds: float, peak_flop_per_s: float) -> float:
    """Model FLOPs utilization: (flops / seconds) / peak_flop_per_s."""
    if seconds <= 0 or peak_flop_per_s <= 0:
        raise ValueError(f"seconds and peak must be > 0, got {seconds}, {peak_flop_per_s}")
    return flops / seconds / peak_flop_per_s
