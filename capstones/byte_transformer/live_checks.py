"""The two checks the report re-runs on the trained model itself (point 1 of the capstone): no
logit depends on a later byte (causality_check: gradients through the whole model on a
held-out window) and the valid-token loss of a held-out batch equals a numpy float64 forward
pass + loss (loss_check). report.py and the capstone app show them."""

from __future__ import annotations

import jax
import numpy as np

from capstones.byte_transformer import training
from core import numerics
from core.lm import tokenizer, transformer
from core.perf import xla_cpu


def causality_check(config, params, batch: dict, window: int = 32, seed: int = 0) -> dict:
    """Largest |d (logits[t] . r) / d embedding[s]| over s > t (must be exactly 0) and the
    smallest over s <= t in the same document (must be > 0), on the first ``window``
    positions of a held-out row, by reverse-mode autodiff through the whole model.

    r is a random direction over the 256 byte logits: a zero Jacobian block gives exactly 0
    for every r, a non-zero one gives non-zero for almost every r, and it costs T backward
    passes instead of T * 256.
    """
    import jax
    import jax.numpy as jnp

    model = training.model_from_params(config, params)
    t = min(window, config.seq_len)
    tokens = jnp.asarray(batch["tokens_BT"][:1, :t])
    segments = np.asarray(batch["segment_ids_BT"][0, :t])
    positions = jnp.asarray(batch["positions_BT"][:1, :t])
    mask = tokenizer.segment_mask_BTS(jnp.asarray(segments[None]), causal=True)[:, None]
    direction_V = jax.random.normal(jax.random.key(seed), (model.config.vocab_size,))

    def projected_logits_T(x):
        return model.unembed(model.backbone(x[None], mask))[0] @ direction_V

    # One compiled program (op by op, the jacrev compiled ~60 small ones), without XLA:CPU's
    # YNN fusions: it miscompiles programs of this shape (core/perf/xla_cpu.py).
    jacobian_TSD = xla_cpu.jit_without_ynn_fusion(jax.jacrev(projected_logits_T))(
        model.embed(tokens, positions)[0]
    )
    norms = np.asarray(jnp.sqrt(jnp.sum(jacobian_TSD**2, axis=-1)), np.float64)
    later = np.triu(np.ones((t, t), bool), 1)
    same = (segments[:, None] == segments[None, :]) & (segments[:, None] != 0)
    return {
        "window": t,
        "max_norm_later": float(norms[later].max()),
        "min_norm_allowed": float(norms[~later & same].min()),
        "passed": bool(norms[later].max() == 0.0 and norms[~later & same].min() > 0),
    }


# The held-out loss vs numpy float64, relative. Not the dtype table's float32 1e-5: the
# loss is a mean over every valid token of a log-softmax of 256 logits, each the end of a
# whole forward pass, so float32 is allowed 1e-4; bfloat16 gets the table's bound.
LOSS_TOLERANCE = {"float32": 1e-4, "bfloat16": numerics.tolerance("bfloat16")}


def loss_tolerance(compute_dtype: str, backend: str | None = None) -> float:
    """LOSS_TOLERANCE for ``compute_dtype``; for float32 on a TPU, numerics' float32 bound at
    HIGHEST where it is larger (the TPU's float32 exp and log set a floor above 1e-4), with
    its reason. The loss is computed at HIGHEST (:func:`valid_token_loss`)."""
    if compute_dtype != "float32":
        return LOSS_TOLERANCE[compute_dtype]
    here = numerics.tolerance("float32", backend=backend, precision="HIGHEST")
    return max(LOSS_TOLERANCE["float32"], here)


def valid_token_loss(model, batch: dict) -> tuple[jax.Array, jax.Array]:
    """(mean loss over the valid tokens, their count): transformer.forward and token_loss
    with every matmul at HIGHEST precision, for the comparison with numpy float64 (a TPU's
    DEFAULT runs a float32 matmul as one bfloat16 pass: the loss moved 2.5e-4 on a v5e)."""
    with jax.default_matmul_precision("highest"):
        logits = transformer.forward(
            model, batch["tokens_BT"], batch["segment_ids_BT"], batch["positions_BT"]
        )
        return transformer.token_loss(logits, batch["targets_BT"], batch["weights_BT"])


def loss_check(config, params, packed: tokenizer.Packed, rows: int = 2) -> dict:
    """The valid-token loss of the first ``rows`` held-out rows: JAX vs numpy float64
    (forward pass and loss written out independently, counting placed document bytes)."""
    rows = min(rows, packed.tokens_BT.shape[0])
    small = tokenizer.Packed(
        packed.tokens_BT[:rows],
        packed.segment_ids_BT[:rows],
        packed.positions_BT[:rows],
        tuple(p for p in packed.placements if p.row < rows),
    )
    model = training.model_from_params(config, params)
    batch = transformer.batch_from_packed(small)
    loss, count = valid_token_loss(model, batch)
    reference_logits = transformer.lm_reference(
        model, small.tokens_BT, small.segment_ids_BT, small.positions_BT
    )
    reference, reference_count = transformer.token_loss_reference(reference_logits, small)
    error = abs(float(loss) - reference) / max(abs(reference), 1e-12)
    tolerance = loss_tolerance(config.compute_dtype)
    return {
        "rows": rows,
        "jax_loss": float(loss),
        "numpy_float64_loss": reference,
        "valid_tokens": int(count),
        "numpy_valid_tokens": reference_count,
        "relative_error": error,
        "tolerance": tolerance,
        "passed": bool(int(count) == reference_count and error <= tolerance),
    }
