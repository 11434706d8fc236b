import numpy as np
import pytest

from core.lessons.post_training import rlhf_ppo
from core.post_training import losses, model, rlhf

D = rlhf_ppo.RLHF_PPO_LESSON


@pytest.mark.slow
@pytest.mark.parametrize("rl_seed", [1, 2, 3])
def test_reward_hacking_without_kl_and_not_with_it_over_seeds(rl_seed):
    # The lesson's claim at its defaults (base model and pairs of seed 0), over RL seeds.
    result = rlhf_ppo.run(
        D["seed"],
        D["kl_coef"],
        D["clip"],
        D["steps"],
        D["group"],
        D["aggregation"],
        rl_seed=rl_seed,
        only_ppo=True,
    )
    hacked, penalised = result.runs
    assert rlhf_ppo.hacking_problems(hacked, penalised) == []
    # the hack: proxy far above what the true reward gives, long responses without "."
    assert rlhf_ppo.at_end(hacked, "response letters") > 4.3  # 5 is the cap
    assert rlhf_ppo.at_end(hacked, "proxy reward") > rlhf_ppo.at_end(penalised, "proxy reward")


def test_clipped_loss_reference_matches_the_jax_loss():
    rng = np.random.default_rng(0)
    w = np.zeros((5, 7), np.float32)
    for row, n in enumerate([1, 2, 3, 5, 6]):
        w[row, :n] = 1
    logp, old = rng.normal(size=(2, 5, 7)) * 0.3
    adv = rng.normal(size=5)
    for agg in losses.AGGREGATIONS:
        ours = float(
            losses.clipped_policy_loss(
                np.float32(logp), np.float32(old), np.float32(adv), w, 0.2, agg
            )
        )
        assert ours == pytest.approx(
            rlhf_ppo.clipped_loss_reference(logp, old, adv, w, 0.2, agg), rel=1e-5
        )


@pytest.mark.slow
def test_the_dpo_lessons_rlhf_policy_is_this_lessons_ppo_run():
    # apps/dpo.py shows rlhf.rlhf_policy beside DPO as "the RLHF lesson's policy": the same run
    result = rlhf_ppo.run(
        0, D["kl_coef"], D["clip"], D["steps"], D["group"], D["aggregation"], only_ppo=True
    )
    policy, run = rlhf.rlhf_policy(result.base, result.train_pairs, result.prompts, 0)
    assert run.config == result.runs[1].config
    assert model.short_hash(policy) == model.short_hash(result.runs[1].policy)
