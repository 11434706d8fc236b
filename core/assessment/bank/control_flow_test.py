"""The item ``control_flow.key_reuse`` beyond the generic contract (core/assessment/items_test.py):
every defect repeats its draw over seeds, exactly where it says."""

from __future__ import annotations

import numpy as np

from core.assessment.bank import control_flow
from core.assessment.bank.common import run_source

ITEM = control_flow.KeyReuse()


def test_key_reuse_every_defect_repeats_its_draw_over_seeds():
    item = ITEM
    for seed in range(6):
        params = item.seeded(seed)[1]
        for defect in item.defects:
            evidence = item.evidence(defect, params)
            assert all(evidence.facts.values()), (seed, defect, evidence.facts)
            assert len(item.program(defect, params).splitlines()) <= 25


def test_key_reuse_parent_reuse_repeats_w_b_exactly():
    """The claim the explanation makes: the loop started from the split parent re-creates
    k_init, and its second step's subkey is k_b."""
    item = ITEM
    params = {"key_seed": 7, "width": 4, "steps": 3}
    namespace, _ = run_source(item.program("parent_reused", params))
    assert np.array_equal(np.asarray(namespace["noise_TD"][1]), np.asarray(namespace["w_b"]))
