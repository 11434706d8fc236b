import numpy as np

from core.lessons.reinforcement_learning import evaluate_agents as lesson


def _metrics():
    # 2 seeds per configuration, 3 updates, 2 evaluation episodes
    return {
        "return_sum_U": np.array([[10.0, 0, 30], [20, 20, 0], [0, 50, 50], [5, 5, 5]]),
        "episodes_U": np.array([[1, 0, 1], [1, 1, 0], [0, 1, 1], [1, 1, 1]]),
        "eval_returns_E": np.array([[1.0, 3], [5, 7], [9, 11], [2, 2]]),
    }


def test_outcomes_and_curves_split_the_runs():
    a, b = lesson.final_outcomes(_metrics(), 2)
    np.testing.assert_allclose(a, [2.0, 6.0])
    np.testing.assert_allclose(b, [10.0, 2.0])
    curve_a, curve_b = lesson.training_curves(_metrics(), 2)
    np.testing.assert_allclose(curve_a, [[10, 10, 30], [20, 20, 20]])
    np.testing.assert_allclose(curve_b, [[0, 50, 50], [5, 5, 5]])


def test_band_frame_and_chart():
    bands = np.array([[1.0, 2.0], [0.5, 1.5], [1.5, 2.5]])
    frame = lesson.band_frame({"A": bands}, 512)
    assert list(frame["env steps"]) == [512, 1024]
    assert list(frame["low"]) == [0.5, 1.5]
    assert lesson.band_chart(frame, 0.95).to_dict()["title"].startswith("Training return")
