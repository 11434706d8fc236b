import numpy as np
import pytest

from core import numerics
from core.lessons.reinforcement_learning import policy_gradients_ppo as lesson


@pytest.mark.parametrize("gamma, lam", [(0.99, 0.95), (0.5, 1.0), (1.0, 0.0)])
def test_gae_errors_small_on_the_lesson_trajectories(gamma, lam):
    out = lesson.gae_errors(3, 16, 3, gamma, lam)
    assert out["advantage"] <= numerics.tolerance("float32")
    assert out["target"] <= numerics.tolerance("float32")
    assert out["trajectory"]["terminated_TN"].sum() == 2
    assert out["trajectory"]["truncated_TN"].sum() == 2


@pytest.mark.parametrize("clip_eps", [0.05, 0.2, 0.5])
def test_surrogate_error_small(clip_eps):
    assert lesson.surrogate_error(0, clip_eps) <= numerics.tolerance("float32")


def test_surrogate_frame_is_flat_beyond_the_clip():
    frame = lesson.surrogate_frame(0.2)
    pos = frame[frame["advantage"] == "A = +1"]
    beyond = pos[pos["ratio"] > 1.25]["objective"].to_numpy()
    np.testing.assert_allclose(beyond, 1.2, rtol=1e-6)
    neg = frame[frame["advantage"] == "A = -1"]
    below = neg[neg["ratio"] < 0.75]["objective"].to_numpy()
    np.testing.assert_allclose(below, -0.8, rtol=1e-6)
