import pytest

from core.lessons.post_training import reward_model
from core.post_training import preferences


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_learned_reward_agrees_with_the_ground_truth_over_seeds(seed):
    result = reward_model.run(seed, preferences.RM_STEPS, preferences.RM_LEARNING_RATE)
    assert result.heldout_agreement >= reward_model.AGREES_ABOVE
    assert result.loss_S[-20:].mean() < 0.69  # below log 2, the loss of a constant reward
