"""The item ``arrays.plausible_bug`` beyond the generic contract (core/assessment/items_test.py):
each program computes what NumPy float64 says it does, and every defect's evidence holds over
seeds."""

from __future__ import annotations

import numpy as np
import pytest

from core.assessment.bank import arrays
from core.assessment.bank.common import run_source

ITEM = arrays.PlausibleBug()

PLAUSIBLE = {
    "counts": [[1, 3, 2, 2], [4, 1, 1, 2], [2, 2, 2, 2], [1, 1, 1, 5], [3, 3, 1, 1]],
    "values": [1, 2, 3, 5],
    "updated": 2,
    "new_value": 3.5,
    "targets": [2.0, 2.5, 3.0, 4.0, 2.2],
}


def _plausible_reference(params, defect=None) -> float:
    """The script's mean squared error in NumPy float64, with or without one defect."""
    counts = np.asarray(params["counts"], dtype=np.float64)
    values = np.asarray(params["values"], dtype=np.float64)
    targets = np.asarray(params["targets"], dtype=np.float64)
    values[params["updated"]] = params["new_value"]
    probs = counts / counts.sum(axis=0 if defect == "wrong_axis" else 1, keepdims=True)
    if defect == "integer_dtype":
        probs[0] = 0.0  # full_like of an int row: 1/K truncated
    elif defect != "discarded_update":
        probs[0] = 1.0 / counts.shape[1]
    pred = probs @ values
    if defect == "broadcast_column":
        targets = targets[:, None]
    return float(np.mean((pred - targets) ** 2))


@pytest.mark.parametrize(
    "defect", [None, "wrong_axis", "broadcast_column", "discarded_update", "integer_dtype"]
)
def test_plausible_bug_programs_compute_what_they_say(defect):
    item = ITEM
    namespace, printed = run_source(item.program(defect or "none", PLAUSIBLE))
    reference = _plausible_reference(PLAUSIBLE, defect)
    assert float(namespace["mse"]) == pytest.approx(reference, rel=1e-5)
    assert printed == f"mse = {reference:.4f}"
    if defect is None:
        # by hand, values [1, 2, 3.5, 5]: row 0 uniform 11.5/4, then (4+2+3.5+10)/8, 23/8,
        # (1+2+3.5+25)/8, (3+6+3.5+5)/8
        by_hand = [2.875, 2.4375, 2.875, 3.9375, 2.1875]
        assert np.asarray(namespace["pred"]) == pytest.approx(by_hand)


def test_plausible_bug_every_defect_is_evidenced_over_seeds():
    item = ITEM
    for seed in range(12):
        params = item.seeded(seed)[1]
        for defect in item.defects:
            evidence = item.evidence(defect, params)
            assert all(evidence.facts.values()), (seed, defect, evidence.facts)
            assert len(item.program(defect, params).splitlines()) <= 25
