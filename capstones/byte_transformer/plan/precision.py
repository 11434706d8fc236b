"""The precision policy of the plan: the dtype of every kind of number, its bytes per element
and why (core.lm.transformer.Precision)."""

from __future__ import annotations

from capstones.byte_transformer import config as config_lib
from core.tpu import budget

COMPUTE = "compute"  # the config's compute dtype (and its bytes per element)
INT8_WITH_SCALE = "int8 + scale"  # 1 + 4 / K bytes per element

# (quantity, dtype, bytes per element, why); "why" is formatted with lr, d, f and k
POLICY = (
    (
        "weights (params)",
        "float32",
        4,
        "AdamW moves a weight by about lr = {lr:g} per step (its update is ~lr * sign(g)); "
        "bfloat16 keeps 8 mantissa bits (relative spacing 2^-8 = 0.0039), so an update below "
        "half a spacing of the weight rounds away. Parameters stay float32 (Precision.params).",
    ),
    (
        "activations / matmul inputs",
        COMPUTE,
        COMPUTE,
        "Precision.compute (config compute_dtype). bfloat16 halves activation memory and HBM "
        "traffic and is the MXU's native input; float32 is the exact default for this tiny "
        "model.",
    ),
    (
        "matmul accumulator",
        "float32",
        4,
        "preferred_element_type=float32 in every einsum (transformer._dense): a dot product "
        "over D={d} or F={f} terms summed in bfloat16 stops growing once an increment falls "
        "below half its spacing (transformer.running_sums).",
    ),
    (
        "softmax and LayerNorm statistics",
        "float32",
        4,
        "scores, exp-sums, means and variances are long reductions (T keys, D channels); "
        "core.lm.attention and transformer.LayerNorm compute them in float32 and cast the result "
        "back to the compute dtype.",
    ),
    (
        "logits and loss",
        "float32",
        4,
        "token_loss casts logits to float32: log-sum-exp over V=256 and the mean over B*T "
        "tokens would lose digits in bfloat16.",
    ),
    (
        "gradients",
        "float32",
        4,
        "jax.grad returns the parameters' dtype; the global-norm clip sums squares of every "
        "gradient.",
    ),
    (
        "optimizer moments (Adam mu, nu)",
        "float32",
        4,
        "nu holds squared gradients (1e-12 and smaller); optax keeps the moments in the "
        "parameters' dtype, and a bfloat16 nu would bias sqrt(nu) in every update.",
    ),
    ("KV cache fp32", "float32", 4, "exact reference for decoding."),
    (
        "KV cache bf16",
        "bfloat16",
        2,
        "half the bytes read per decoded token (decoding is bandwidth-bound); keys/values "
        "are already matmul outputs rounded to the compute dtype.",
    ),
    (
        "KV cache int8 (+ float32 scale per position and head)",
        "int8",
        INT8_WITH_SCALE,
        "a quarter of fp32 plus one float32 scale per K={k} values (1 + 4/{k} bytes per "
        "element); error bounded by scale/2 per entry.",
    ),
    (
        "token ids, segment ids, positions, targets / loss weights",
        "int32 / float32",
        4,
        "indices for gathers and masks; weights mark the valid next-byte targets.",
    ),
)


def precision_rows(config: config_lib.Config) -> list[dict]:
    """The precision policy: every kind of number, its dtype, bytes per element and why."""
    compute = config.compute_dtype
    k = config.head_dim
    per_element = {COMPUTE: budget.dtype_bytes(compute), INT8_WITH_SCALE: round(1 + 4 / k, 4)}
    values = {"lr": config.learning_rate, "d": config.d_model, "f": config.hidden, "k": k}
    return [
        {
            "quantity": quantity,
            "dtype": compute if dtype == COMPUTE else dtype,
            "bytes_per_element": per_element.get(nbytes, nbytes),
            "why": why.format(**values),
        }
        for quantity, dtype, nbytes, why in POLICY
    ]
