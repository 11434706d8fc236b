"""KV-cache bytes per token per layer in fp32, bf16 and int8: closed form from the shapes,
cross-checked against the nbytes of real cache arrays."""

from __future__ import annotations

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import kv_cache

CACHE_FORMULA = (
    "k and v per token per layer: fp32 2 * D * 4, bf16 2 * D * 2, int8 2 * D * 1 + "
    "2 * H * 4 (a float32 scale per (token, head) for each of k and v)"
)


def cache_bytes_closed_form(config: config_lib.Config, precision: str) -> int:
    d, h = config.d_model, config.num_heads
    per_element = {"fp32": 4, "bf16": 2, "int8": 1}[precision]
    return 2 * d * per_element + (2 * h * 4 if precision == "int8" else 0)


def cache_bytes(config: config_lib.Config, slots: int = 16) -> dict:
    """Closed form vs measured (array nbytes of a real kv_cache cache, per token per layer)."""
    model_config = config.model_config()
    slots = min(slots, config.max_len)
    out: dict = {"formula": CACHE_FORMULA}
    for precision in kv_cache.PRECISIONS:
        cache = kv_cache.init_cache(model_config, 1, slots, precision)
        arrays = [cache.k_LBSHK, cache.v_LBSHK, cache.k_scale_LBSH, cache.v_scale_LBSH]
        stored = sum(a.nbytes for a in arrays if a is not None)  # length_B is per row
        out[precision] = {
            "closed_form": cache_bytes_closed_form(config, precision),
            "measured": stored / (config.num_layers * slots),
        }
    for precision in kv_cache.PRECISIONS:
        out[precision]["ratio_vs_fp32"] = out[precision]["closed_form"] / out["fp32"]["closed_form"]
    return out
