"""The item ``tpu_systems.kv_cache_hbm`` against figures worked out by hand and their sources, and
its share of HBM stays plausible over many seeds."""

from __future__ import annotations

import pytest

from core.assessment.bank import tpu_systems
from core.tpu import specs

MANY_SEEDS = range(200)
KV = tpu_systems.KvCacheHbm()


def test_kv_cache_by_hand():
    # Llama-2-7B-like with GQA: 2 x 32 x 4 x 8192 x 8 x 128 x 2 B = 4 GiB; 2 GiB per chip of
    # a v5e's 16 GB: 2**31 / 16e9 = 13.4217728 %.
    params = {
        "generation": "v5e",
        "layers": 32,
        "kv_heads": 8,
        "heads": 32,
        "head_dim": 128,
        "batch": 4,
        "context": 8192,
        "kv_dtype": "bfloat16",
        "chips": 2,
    }
    assert KV.live(params) == pytest.approx(13.4217728, rel=1e-9)
    value, text = KV.derive(params)
    assert value == pytest.approx(13.4217728, rel=1e-9)
    assert specs.SOURCES["scaling-book"] in text
    wrong = KV.wrong(params, value)
    assert wrong["units: GiB and GB mixed"] == pytest.approx(2 / 16 * 100)  # 2 GiB over "16"


def test_kv_cache_cites_tpu7x_in_gib():
    params = {
        "generation": "tpu7x",
        "layers": 64,
        "kv_heads": 8,
        "heads": 64,
        "head_dim": 128,
        "batch": 16,
        "context": 32768,
        "kv_dtype": "int8",
        "chips": 4,
    }
    # 2 x 64 x 16 x 32768 x 8 x 128 x 1 B = 64 GiB; 16 GiB per chip of 192 GiB = 8.333 %
    assert KV.live(params) == pytest.approx(100 / 12, rel=1e-9)
    assert "192 GiB" in KV.prompt(params)
    assert specs.SOURCES["cloud-tpu7x"] in KV.derive(params)[1]


def test_kv_share_stays_plausible():
    for seed in MANY_SEEDS:
        params, percent, _derived, _text = KV.seeded(seed)
        assert 2.0 <= percent <= 95.0
        assert params["kv_heads"] % params["chips"] == 0
        assert params["heads"] > params["kv_heads"]  # GQA: the query-heads mistake differs
