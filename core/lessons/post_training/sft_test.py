import numpy as np
import pytest

from core.lessons.post_training import sft


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sft_learns_the_task_over_seeds(seed):
    # The lesson's claim at its defaults (150 steps, lr 3e-3, response-only loss), with margin:
    # held-out accuracy <= 5% before and >= 90% after on every seed.
    result = sft.run(seed, 150, 0.003)
    assert sft.claim_problems(result) == []
    assert result.loss_S[-1] < 0.1 * result.loss_S[0]


def test_all_token_loss_masks_more_positions():
    data = sft.training_data(["cab=", "abc="], 0, 2, "all tokens")
    response = sft.training_data(["cab=", "abc="], 0, 2, "response")
    assert np.all(data["weights_BT"] >= response["weights_BT"])
    assert data["weights_BT"].sum() > response["weights_BT"].sum()
    with pytest.raises(ValueError, match="loss_on"):
        sft.training_data(["cab="], 0, 1, "prompt")
