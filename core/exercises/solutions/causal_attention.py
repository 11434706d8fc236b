"""Reference solution of transformers.attention.causal_attention: one causal attention head."""

import jax
import jax.numpy as jnp


def causal_attention(q_TK, k_TK, v_TK):
    """(T, K) outputs: row i averages v_0..v_i, weighted by softmax_j<=i(q_i . k_j / sqrt(K)).

    The mask goes on the scores, before the softmax: -inf above the diagonal makes those
    weights exactly 0 and leaves each row a distribution over the keys it may see.
    """
    tokens, channels = q_TK.shape
    scores_TT = q_TK @ k_TK.T / jnp.sqrt(jnp.float32(channels))
    allowed_TT = jnp.tril(jnp.ones((tokens, tokens), dtype=bool))
    scores_TT = jnp.where(allowed_TT, scores_TT, -jnp.inf)
    return jax.nn.softmax(scores_TT, axis=-1) @ v_TK
