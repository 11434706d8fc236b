"""Reference solution of transformers.causal_attention: causal scaled dot-product attention."""

import jax
import jax.numpy as jnp


def causal_attention(q_BTHD, k_BTHD, v_BTHD):
    """out_BTHD (B, T, H, D) from q, k, v (B, T, H, D) float32: at query position t and head h,
    softmax over key positions s <= t of q_t . k_s / sqrt(D), times v_s.

    B batch, T positions, H heads, D head dim.
    """
    head_dim, seq_len = q_BTHD.shape[-1], q_BTHD.shape[1]
    scores_BHTS = jnp.einsum("bthd,bshd->bhts", q_BTHD, k_BTHD) / jnp.sqrt(jnp.float32(head_dim))
    # Query t may look at keys s <= t; the diagonal is always allowed, so no row is all -inf.
    allowed_TS = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))
    scores_BHTS = jnp.where(allowed_TS, scores_BHTS, -jnp.inf)
    probs_BHTS = jax.nn.softmax(scores_BHTS, axis=-1)  # over the key axis S
    return jnp.einsum("bhts,bshd->bthd", probs_BHTS, v_BTHD)
