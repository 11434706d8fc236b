import math

import numpy as np
import pytest

from core.lessons.reinforcement_learning import functional_env
from core.rl import cartpole, gymnasium_parity


@pytest.mark.parametrize("theta", [0.0, 0.2, -0.2])
def test_pole_tip_is_a_pole_length_from_the_pivot(theta):
    tip_x, tip_y = functional_env.pole_tip(np.array([0.5, 0.0, theta, 0.0]))
    length = math.hypot(tip_x - 0.5, tip_y - functional_env.CART_HEIGHT)
    assert length == pytest.approx(2 * cartpole.DEFAULT.length)
    assert np.sign(tip_x - 0.5) == np.sign(theta)  # positive theta leans right (gymnasium)


def test_frame_chart_and_rows():
    chart = functional_env.frame_chart(np.zeros(4), title="t")
    assert chart.to_dict()["title"] == "t"
    frame = functional_env.states_frame(np.arange(8.0).reshape(2, 4))
    assert len(frame) == 8 and set(frame["variable"]) == set(cartpole.OBS_NAMES)
    parity = gymnasium_parity.side_by_side(0, 30, "random")
    rows = functional_env.parity_rows(parity)
    assert rows[0]["value"] == 30


def test_states_chart_holds_the_longest_run():
    # 1500 steps of random actions end ~70 episodes: ~1,570 frames (the app's slider top)
    chart = functional_env.states_chart(np.zeros((1600, 4)))
    spec = chart.to_dict()  # raised MaxRowsError with four rows per frame
    assert spec["transform"][0]["fold"] == list(cartpole.OBS_NAMES)
