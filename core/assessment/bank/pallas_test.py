"""The item ``pallas.blocked_kernel`` beyond the generic contract (core/assessment/items_test.py):
the solution refuses bad shapes and the feedback locates wrong blocks."""

from __future__ import annotations

import numpy as np
import pytest

from core.assessment.bank import pallas


def test_pallas_solution_refuses_bad_shapes():
    from core.assessment.solutions import pallas_kernel

    x, y = np.ones((16, 8), np.float32), np.ones((8, 16), np.float32)
    with pytest.raises(ValueError, match="does not divide M=16"):
        pallas_kernel.blocked_matmul(x, y, 6, 8, 8)
    with pytest.raises(ValueError, match="K must agree"):
        pallas_kernel.blocked_matmul(x, np.ones((16, 16), np.float32), 8, 8, 8)


def test_blocked_kernel_feedback_locates_wrong_blocks():
    item = pallas.BlockedKernel()
    source = item.planted_wrong()[
        "output index map with swapped grid indices (blocks land transposed)"
    ]
    first = item.run_tests(3, source)[0]
    assert not first.passed and "wrong output blocks (i, j): [(0, 1), (1, 0)]" in first.message
