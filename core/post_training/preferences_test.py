import jax
import numpy as np
import pytest

from core import numerics
from core.post_training import losses, model, preferences, task

CONFIG = task.MODEL


@pytest.fixture(scope="module")
def params():
    return jax.tree.map(np.asarray, model.init_params(CONFIG, jax.random.key(0)))


def test_labels_follow_the_bradley_terry_probability(params):
    pairs = preferences.make_pairs(params, task.all_prompts()[:64], jax.random.key(0), 8)
    assert len(pairs) == 512
    # each pair's true rewards are those of its own responses
    responses_w = task.responses_of(pairs.tokens_w_BT, pairs.weights_w_BT)
    assert [
        task.true_reward(p, r) for p, r in zip(pairs.prompts, responses_w, strict=True)
    ] == list(pairs.true_w_B)
    # P(the higher-reward response is chosen) = sigmoid(beta * gap), checked where gap = 1
    gap = pairs.true_w_B - pairs.true_l_B
    one = np.abs(gap) == 1
    if one.sum() >= 30:
        p = 1 / (1 + np.exp(-preferences.LABEL_BETA))
        observed = np.mean(gap[one] > 0)
        assert abs(observed - p) < 4 * np.sqrt(p * (1 - p) / one.sum())


def test_reward_reads_the_last_response_token(params):
    rm = preferences.init_reward_model(params)
    rm["head_D"] = np.random.default_rng(0).normal(size=CONFIG.width).astype(np.float32)
    data = task.encode(["abc=", "abc="], ["cba.", "c."])
    rewards = np.asarray(preferences.reward_B(rm, data["tokens_BT"], data["weights_BT"]))
    hidden = np.asarray(model.hidden_BTD(params, data["tokens_BT"]))
    expected = [hidden[0, 7] @ rm["head_D"], hidden[1, 5] @ rm["head_D"]]  # the "." positions
    assert numerics.scaled_max_error(rewards, expected) < 1e-5
    zero = preferences.init_reward_model(params)
    assert np.all(
        np.asarray(preferences.reward_B(zero, data["tokens_BT"], data["weights_BT"])) == 0
    )


def test_bt_loss_and_the_labeller_optimum(params):
    pairs = preferences.make_pairs(params, task.all_prompts()[:16], jax.random.key(1), 2)
    rm = preferences.init_reward_model(params)
    batch = {k: v for k, v in pairs.arrays().items()}
    assert float(preferences.bt_loss(rm, None, batch)) == pytest.approx(np.log(2), rel=1e-6)
    best = preferences.true_label_loss(pairs)
    margin = preferences.LABEL_BETA * (pairs.true_w_B - pairs.true_l_B)
    assert best == pytest.approx(float(np.mean(np.log1p(np.exp(-margin)))), rel=1e-12)
    assert best == pytest.approx(losses.bradley_terry_reference(margin, 0 * margin), rel=1e-12)
