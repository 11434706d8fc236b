"""PyTorch's attention as an independent reference for core.lm.attention.

Its own module: torch is a large optional package (a TPU host's `core` wheelhouse has none),
and core.lm.attention is reached by many lessons and by the exercises' registry, whose lazy
imports the wheelhouse scanner follows; only the lessons that compare with torch import this.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def torch_reference(q_BTHK, k_BSHK, v_BSHK, causal=False) -> np.ndarray:
    """torch.nn.functional.scaled_dot_product_attention on the same values, in float64.

    Torch wants (B, H, T, K); its is_causal masks key s > query t (T == S here).
    """
    import torch

    def to_torch(a):
        host = np.asarray(jnp.asarray(a).astype(jnp.float32), np.float64)
        return torch.from_numpy(host).permute(0, 2, 1, 3)

    out = torch.nn.functional.scaled_dot_product_attention(
        to_torch(q_BTHK), to_torch(k_BSHK), to_torch(v_BSHK), is_causal=causal
    )
    return out.permute(0, 2, 1, 3).numpy()
