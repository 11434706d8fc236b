"""The TPU items against figures worked out by hand, their sources, and their behaviour over
many seeds (the generic contract in items_test.py checks three)."""

from __future__ import annotations

import pytest

from core.assessment import items
from core.assessment.bank import tpu
from core.tpu import specs

MANY_SEEDS = range(200)

SLICE_CHIPS = tpu.SliceChips()
JOB = tpu.JobDefect()
KV = tpu.KvCacheHbm()
ROOFLINE = tpu.RooflineBound()
MFU = tpu.ModelFlopsUtilization()


@pytest.mark.parametrize(
    ("name", "chips"),
    [
        ("v5p-32", 16),  # 32 TensorCores, 2 per chip
        ("v5p-8", 4),
        ("v5litepod-16", 16),  # v5e names count chips
        ("v6e-8", 8),
        ("tpu7x:2x2x4", 16),  # a topology: 2 x 2 x 4 chips
    ],
)
def test_slice_chips_by_hand(name, chips):
    params = {"name": name}
    assert SLICE_CHIPS.live(params) == chips
    assert SLICE_CHIPS.derive(params)[0] == chips


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


@pytest.mark.parametrize(
    ("params", "microseconds", "kind"),
    [
        # 2 x 4096^3 = 1.374e11 FLOP / 1.97e14 FLOP/s = 697.66 us; bytes 3 x 4096^2 x 2 =
        # 1.007e8 B / 8.2e11 B/s = 122.8 us: compute-bound
        ({"generation": "v5e", "m": 4096, "k": 4096, "n": 4096}, 697.66, "compute-bound"),
        # (8 x 8192 + 8192^2 + 8 x 8192) x 2 = 134,479,872 B / 1.6e12 B/s = 84.05 us; 1.07e9
        # FLOP / 9.2e14 = 1.17 us: memory-bound
        ({"generation": "v6e", "m": 8, "k": 8192, "n": 8192}, 84.05, "memory-bound"),
    ],
)
def test_roofline_by_hand(params, microseconds, kind):
    assert ROOFLINE.live(params) == pytest.approx(microseconds, rel=1e-4)
    value, text = ROOFLINE.derive(params)
    assert value == pytest.approx(microseconds, rel=1e-4)
    assert f"**{kind}**" in text
    assert "ridge point" in text and specs.SOURCES["scaling-book"] in text


def test_roofline_seeds_give_both_bounds():
    kinds = set()
    for seed in range(40):
        text = ROOFLINE.seeded(seed)[3]
        kinds.add("compute" if "**compute-bound**" in text else "memory")
    assert kinds == {"compute", "memory"}


def test_mfu_by_hand():
    # 6 x 7e9 x 40,000 = 1.68e15 FLOP/s over 8 x 9.2e14 = 7.36e15 FLOP/s: 22.826 %
    params = {
        "generation": "v6e",
        "slice": "v6e-8",
        "chips": 8,
        "parameters": 7e9,
        "tokens_per_s": 40000.0,
        "tokens_per_step": 2048 * 64,
    }
    assert MFU.live(params) == pytest.approx(100 * 1.68e15 / 7.36e15, rel=1e-9)
    value, text = MFU.derive(params)
    assert value == pytest.approx(22.826087, rel=1e-6)
    assert specs.SOURCES["scaling-book"] in text


@pytest.mark.parametrize("item", [SLICE_CHIPS, KV, ROOFLINE, MFU], ids=lambda i: i.id)
def test_planted_mistakes_fail_on_many_seeds(item):
    """Every seed has at least two planted mistakes, each outside the tolerance, and the
    library and the derivation agree."""
    for seed in MANY_SEEDS:
        _params, live, derived, _text = item.seeded(seed)
        assert abs(live - derived) <= 1e-9 * abs(derived), (seed, live, derived)
        wrong = item.wrong_answers(seed)
        assert len(wrong) >= 2, (seed, wrong)
        for mistake, answer in wrong.items():
            assert not item.matches(answer, live), (seed, mistake, answer, live)


def test_kv_share_stays_plausible():
    for seed in MANY_SEEDS:
        params, percent, _derived, _text = KV.seeded(seed)
        assert 2.0 <= percent <= 95.0
        assert params["kv_heads"] % params["chips"] == 0
        assert params["heads"] > params["kv_heads"]  # GQA: the query-heads mistake differs


def test_every_generation_is_asked():
    for item in (SLICE_CHIPS, KV, ROOFLINE, MFU):
        generations = set()
        for seed in range(60):
            params = item.seeded(seed)[0]
            if "name" in params:
                generations.add(SLICE_CHIPS._by_rule(params["name"])[0])
            else:
                generations.add(params["generation"])
        assert generations == set(specs.GENERATIONS), (item.id, generations)


def test_job_programs_differ_from_the_fixed_one_by_their_defect_only():
    params = JOB.seeded(3)[1]
    fixed = JOB._source(params)
    for defect, (good, bad) in tpu._JOB_PLANTS.items():
        assert fixed.count(good) == 1, defect
        program = JOB.program(defect, params)
        assert program != fixed and program.replace(bad, good) == fixed
        assert 10 <= len(program.strip().splitlines()) <= 35


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 17, 2026])
@pytest.mark.parametrize("defect", sorted(tpu.JobDefect.defects))
def test_job_evidence_holds_for_every_defect(defect, seed):
    params = JOB.seeded(seed)[1]
    evidence = JOB.evidence(defect, params)
    assert all(evidence.facts.values()), evidence.facts
    assert "| worker |" in evidence.markdown


def test_job_defect_seeds_plant_every_defect():
    planted = {JOB.seeded(seed)[0] for seed in range(40)}
    assert planted == set(tpu.JobDefect.defects)


def test_items_use_their_own_streams():
    assert items.rng(KV.id, 5).random() != items.rng(ROOFLINE.id, 5).random()
