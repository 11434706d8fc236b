import numpy as np
import pytest

from core.rl import references


def test_gae_reference_by_hand():
    # One env, 3 steps: the 2nd step truncates (bootstrap from its final obs, cut the sum),
    # the 3rd terminates (no bootstrap). gamma 0.5, lambda 0.5.
    r = np.array([[1.0], [2.0], [3.0]])
    v = np.array([[0.5], [1.0], [1.5]])
    nv = np.array([[1.0], [4.0], [9.0]])
    term = np.array([[False], [False], [True]])
    trunc = np.array([[False], [True], [False]])
    adv, target = references.gae_reference(r, v, nv, term, trunc, 0.5, 0.5)
    d0, d1, d2 = 1 + 0.5 * 1 - 0.5, 2 + 0.5 * 4 - 1.0, 3 - 1.5
    np.testing.assert_allclose(adv[:, 0], [d0 + 0.25 * d1, d1, d2])
    np.testing.assert_allclose(target, adv + v)


def test_clipped_surrogate_reference_cases():
    rho = np.array([0.5, 1.5, 0.5, 1.5, 1.0])
    a = np.array([1.0, 1.0, -1.0, -1.0, 2.0])
    # A>0: min(rho, 1.2); A<0: max(rho, 0.8) times A
    expected = np.mean([0.5, 1.2, -0.8, -1.5, 2.0])
    assert references.clipped_surrogate_reference(rho, a, 0.2) == pytest.approx(expected)


def test_trajectory_has_both_kinds_of_end():
    t = references.trajectory(0, 6, 3, ends=2)
    assert t["terminated_TN"].sum() == 2 and t["truncated_TN"].sum() == 2
    assert not np.any(t["terminated_TN"] & t["truncated_TN"])
    with pytest.raises(ValueError):
        references.trajectory(0, 1, 1, ends=1)
