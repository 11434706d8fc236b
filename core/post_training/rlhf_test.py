import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.post_training import losses, model, preferences, rlhf, task

F32 = numerics.tolerance("float32")
PROMPTS = ["abc=", "aab=", "fed=", "cab=", "abc=", "eee="]
RESPONSES = ["cba.", "baa.", "dd", "cabab", "x.", "e."]  # "dd": cut off, no "."


@pytest.fixture(scope="module")
def params():
    return jax.tree.map(np.asarray, model.init_params(task.MODEL, jax.random.key(0)))


def test_features_and_rewards_match_the_string_functions():
    rng = np.random.default_rng(0)
    prompts = PROMPTS + [task.all_prompts()[i] for i in rng.integers(0, 216, 40)]
    responses = RESPONSES + task.random_responses(rng, 40)
    data = task.encode(prompts, responses)
    ours = np.asarray(rlhf.features_BF(data["tokens_BT"], data["weights_BT"]))
    assert numerics.max_abs_error(ours, rlhf.features_reference(prompts, responses)) == 0
    assert ours[:6].tolist() == [[3, 0], [3, 0], [2, 0], [5, 0], [0, 1], [1, 0]]
    true = np.asarray(rlhf.true_reward_B(data["tokens_BT"], data["weights_BT"]))
    expected = [task.true_reward(p, r) for p, r in zip(prompts, responses, strict=True)]
    assert true.tolist() == expected
    assert true[:6].tolist() == [4, 4, 1, 1, 0, 1]
    proxy_F = np.array([0.5, -0.25])
    proxy = np.asarray(
        rlhf.proxy_reward_B(jnp.float32(proxy_F), data["tokens_BT"], data["weights_BT"])
    )
    assert numerics.scaled_max_error(proxy, ours @ proxy_F) < F32


def _pairs_from(prompts, a, b, a_wins):
    da, db = task.encode(prompts, a), task.encode(prompts, b)
    pick = lambda x, y: np.where(a_wins[:, None], x, y)  # noqa: E731
    zeros = np.zeros(len(prompts))
    return preferences.Pairs(
        list(prompts),
        pick(da["tokens_BT"], db["tokens_BT"]),
        pick(da["weights_BT"], db["weights_BT"]),
        pick(db["tokens_BT"], da["tokens_BT"]),
        pick(db["weights_BT"], da["weights_BT"]),
        zeros,
        zeros,
    )


def test_fit_proxy_recovers_bradley_terry_weights():
    rng = np.random.default_rng(1)
    n, w_true = 4000, np.array([0.8, -0.4])
    prompts = [task.all_prompts()[i] for i in rng.integers(0, 216, n)]
    a, b = task.random_responses(rng, n), task.random_responses(rng, n)
    f = lambda r: rlhf.features_reference(prompts, r)  # noqa: E731
    p_a = 1 / (1 + np.exp(-(f(a) - f(b)) @ w_true))
    pairs = _pairs_from(prompts, a, b, rng.random(n) < p_a)
    w = rlhf.fit_proxy(pairs)
    assert np.all(np.abs(w - w_true) < 0.15)  # ~4 standard errors at n = 4000
    # the maximum of the likelihood: the gradient of the log-likelihood vanishes there
    diff = np.asarray(
        rlhf.features_BF(pairs.tokens_w_BT, pairs.weights_w_BT)
        - rlhf.features_BF(pairs.tokens_l_BT, pairs.weights_l_BT),
        np.float64,
    )
    assert np.abs(diff.T @ (1 - 1 / (1 + np.exp(-diff @ w)))).max() < 1e-6 * n


def test_group_size_and_configs_are_validated():
    assert "standard deviation is 0" in rlhf.group_size_problem(1)
    assert "do not divide" in rlhf.group_size_problem(3)
    assert rlhf.group_size_problem(4) is None
    with pytest.raises(ValueError, match="method"):
        rlhf.RunConfig("x", method="dpo")
    with pytest.raises(ValueError, match="aggregation"):
        rlhf.RunConfig("x", aggregation="mean")
    with pytest.raises(ValueError, match="kl_coef"):
        rlhf.RunConfig("x", kl_coef=-1.0)
    with pytest.raises(ValueError, match="clip"):
        rlhf.RunConfig("x", clip=0.0)


def test_sampler_logprobs_equal_the_forward_pass(params):
    prompt_BP = task.prompt_tokens(task.all_prompts()[: rlhf.BATCH])
    tokens, weights, logp = task.sample_tokens(params, prompt_BP, jax.random.key(3))
    forward = np.asarray(model.token_logprobs_BT(params, tokens)) * np.asarray(weights)
    assert numerics.scaled_max_error(logp, forward) < F32


def test_train_runs_one_program_for_both_methods(params):
    configs = [
        rlhf.RunConfig("ppo", "ppo", 0.1, 0.2, "token"),
        rlhf.RunConfig("grpo", "grpo", 0.1, 0.2, "sequence"),
    ]
    prompts = task.all_prompts()[:40]
    runs = rlhf.train_runs(params, [0.4, -0.1], prompts, configs, jax.random.key(0), 2, 4)
    for run in runs:
        assert all(v.shape == (2,) and np.all(np.isfinite(v)) for v in run.metrics_S.values())
        assert model.short_hash(run.policy) != model.short_hash(run.behaviour)
        assert model.short_hash(run.behaviour) != model.short_hash(params)  # step 2's sampler
    grpo = runs[1]
    expected = losses.grpo_advantages_reference(grpo.last_proxy_B.reshape(-1, 4)).reshape(-1)
    assert numerics.scaled_max_error(grpo.last_batch["advantages_B"], expected) < F32
    ppo = runs[0].last_batch["advantages_B"]  # whitened over the batch
    assert abs(ppo.mean()) < 1e-5 and abs(ppo.std() - 1) < 1e-3
    with pytest.raises(ValueError, match="standard deviation"):
        rlhf.train_runs(params, [0.4, -0.1], prompts, configs, jax.random.key(0), 2, 1)
