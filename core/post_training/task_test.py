import jax
import numpy as np
import pytest

from core.post_training import task


def test_prompts_split_disjoint_and_complete():
    train, heldout = task.split_prompts(0)
    assert len(train) + len(heldout) == len(task.ALPHABET) ** task.PROMPT_LETTERS
    assert not set(train) & set(heldout)
    assert task.split_prompts(0) == (train, heldout) and task.split_prompts(1) != (train, heldout)


def test_encode_marks_the_response_targets_only():
    data = task.encode(["cab=", "aaa="], ["bac.", "f."])
    assert data["tokens_BT"].shape == (2, task.SEQ_LEN)
    row = data["tokens_BT"][0]
    assert bytes(row[:8].astype(np.uint8)) == b"cab=bac." and row[8] == task.PAD_ID
    # position t predicts t+1: positions 3..6 predict "b", "a", "c", "."
    np.testing.assert_array_equal(data["weights_BT"][0], [0, 0, 0, 1, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(data["weights_BT"][1], [0, 0, 0, 1, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(data["all_weights_BT"][1], [1, 1, 1, 1, 1, 0, 0, 0, 0])
    assert task.responses_of(data["tokens_BT"], data["weights_BT"]) == ["bac.", "f."]
    with pytest.raises(ValueError, match="prompt"):
        task.encode(["ab="], ["ba."])


def test_true_reward():
    assert task.true_reward("cab=", "bac.") == task.MAX_REWARD
    assert task.true_reward("cab=", "bad.") == 3
    assert task.true_reward("cab=", "bacd.") == 3  # right letters, wrong length
    assert task.true_reward("cab=", "b.") == 1
    assert task.true_reward("cab=", "fff.") == 1  # well formed only
    assert task.true_reward("cab=", "ffff") == 0


def test_random_responses_have_the_format():
    responses = task.random_responses(np.random.default_rng(0), 200)
    lengths = {len(r) - 1 for r in responses}
    assert lengths == set(range(1, task.MAX_LETTERS + 1))
    assert all(r.endswith(".") and set(r[:-1]) <= set(task.ALPHABET) for r in responses)


@pytest.fixture(scope="module")
def base():
    return task.base_params(0)


def test_base_model_knows_the_format_not_the_task(base):
    train, heldout = task.split_prompts(0)
    assert task.accuracy(base, heldout) <= 0.05
    tokens, weights = task.sample(base, heldout, jax.random.key(0))
    responses = task.responses_of(tokens, weights)
    well_formed = [r.endswith(".") and set(r[:-1]) <= set(task.ALPHABET) for r in responses]
    assert np.mean(well_formed) > 0.8  # 150 steps learn the format, mostly
    assert len(set(responses)) > 20  # diverse
    # sampling is reproducible from the key and weights mark exactly the response tokens
    again = task.sample(base, heldout, jax.random.key(0))
    np.testing.assert_array_equal(again[0], tokens)
    assert np.all(weights[:, : task.PROMPT_TOKENS - 1] == 0)
    after = np.zeros_like(weights, bool)
    after[:, task.PROMPT_TOKENS :] = weights[:, task.PROMPT_TOKENS - 1 : -1] == 0
    assert np.all(tokens[after] == task.PAD_ID)
    # the model of a seed is deterministic
    assert task.dataset_hash(base) == task.dataset_hash(task.base_params(0))
