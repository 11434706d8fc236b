"""The performance items beyond the generic contract (core/assessment/items_test.py): the roofline
bound worked out by hand with both bounds among the seeds, and every host-sync defect changes its
own count."""

from __future__ import annotations

import pytest

from core.assessment.bank import performance
from core.assessment.items import rng
from core.tpu import specs

ROOFLINE = performance.RooflineBound()


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


@pytest.mark.parametrize("defect", sorted(performance.HostSync.defects))
def test_host_sync_every_defect_changes_its_own_count(defect):
    item = performance.HostSync()
    params = item.params(rng(item.id, 0))
    evidence = item.evidence(defect, params)
    assert all(evidence.facts.values()), (defect, evidence.facts)
    assert "| this program | fixed |" in evidence.markdown
