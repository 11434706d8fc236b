import numpy as np
import pytest

from core import numerics
from core.lessons.post_training import rlhf_ppo
from core.post_training import losses, model, rlhf

D = rlhf_ppo.RLHF_PPO_LESSON


@pytest.mark.slow
@pytest.mark.parametrize("rl_seed", [1, 4, 7])
def test_without_kl_the_proxy_is_over_optimised_for_no_true_reward_over_seeds(rl_seed):
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
    assert rlhf_ppo.over_optimisation_problems(hacked, penalised) == []
    # the exploit: long responses without "." (the proxy sees neither length nor format)
    assert rlhf_ppo.at_end(hacked, "response letters") > 4.3  # 5 is the cap


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


def _run_with(metrics: dict, steps: int = 10) -> rlhf.Run:
    full = {m: np.full(steps, v, np.float64) for m, v in metrics.items()}
    full["proxy reward"] = np.linspace(0.2, metrics["proxy reward"], steps)
    return rlhf.Run(rlhf.ppo_config(), full, {}, {}, {}, np.zeros(1))


def test_a_true_reward_bought_by_the_proxy_is_not_called_over_optimisation():
    # The issue: the unpenalised run's true reward rose as much as the penalised one's and
    # the lesson still called it hacking. The claim now names the true reward: the
    # unpenalised run may not end above the penalised one by more than TRUE_PER_EXTRA_PROXY
    # units of true reward per unit of its extra proxy reward.
    penalised = {"ends with '.'": 0.9, "KL k3 (nats)": 0.5, "proxy reward": 0.7}
    drifted = {"ends with '.'": 0.0, "KL k3 (nats)": 5.0, "proxy reward": 1.3}
    ok = rlhf_ppo.over_optimisation_problems(
        _run_with({**drifted, "true reward": 1.0}), _run_with({**penalised, "true reward": 1.05})
    )
    assert ok == []
    # a little true reward for much proxy (0.15 for 0.6, as seed 0 did here) is not "bought"
    little = rlhf_ppo.over_optimisation_problems(
        _run_with({**drifted, "true reward": 1.2}), _run_with({**penalised, "true reward": 1.05})
    )
    assert little == []
    bought = rlhf_ppo.over_optimisation_problems(
        _run_with({**drifted, "true reward": 1.5}), _run_with({**penalised, "true reward": 1.05})
    )
    assert len(bought) == 1 and "bought true reward" in bought[0]
    below = rlhf_ppo.over_optimisation_problems(
        _run_with({**drifted, "proxy reward": 0.6, "true reward": 1.0}),
        _run_with({**penalised, "true reward": 1.05}),
    )
    assert below == ["without the penalty the proxy did not end above the penalised run's"]


def test_the_app_calls_it_hacking_nowhere_below_its_title():
    # The title cell is another engineer's (its words are reported, not edited here).
    from core import curriculum

    source = (curriculum.APPS_DIR / "rlhf_ppo.py").read_text(encoding="utf-8")
    title_end = source.index("@app.cell", source.index("{lab.phase_line"))
    setup = source[: source.index("@app.cell")]
    assert "hack" not in setup.lower() and "hack" not in source[title_end:].lower()


def _far_apart_logits(rng, shape=(16, 8, 256)):
    # a policy far from its reference: logits of scale 3 apart (as after PPO without a KL)
    return (rng.normal(size=shape) * 3).astype(np.float32), (rng.normal(size=shape) * 3)


def test_k3s_expectation_is_its_closed_form_even_where_a_sample_z_test_fails():
    rng = np.random.default_rng(0)
    policy, ref = _far_apart_logits(rng)
    ref = ref.astype(np.float32)
    ours, closed = rlhf_ppo.k3_expectation_pair(policy, ref, policy, ref)
    exact = losses.exact_kl_reference(policy, ref)
    assert numerics.scaled_max_error(ours, closed) < numerics.tolerance("float32")
    assert numerics.scaled_max_error(closed, exact) < 1e-9  # nothing left out here
    # the sample z statistic the check used to judge (|z| < 5): far from the reference it is
    # not a standard normal draw (k3 heavy-tailed: the sample mean mostly falls short)
    p = np.exp(policy - policy.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    zs = []
    for draw in range(20):
        u = np.random.default_rng(draw).random(p.shape[:-1] + (1,))
        tokens = np.minimum((np.cumsum(p, -1) < u).sum(-1), p.shape[-1] - 1)
        lp = np.log(np.take_along_axis(p, tokens[..., None], -1)[..., 0])
        q = np.exp(ref - ref.max(-1, keepdims=True))
        q /= q.sum(-1, keepdims=True)
        lq = np.log(np.take_along_axis(q, tokens[..., None], -1)[..., 0])
        k3 = losses.kl_estimators_reference(lp, lq)["k3"]
        zs.append(rlhf_ppo._bias_in_standard_errors(k3, exact, np.ones_like(k3)))
    assert np.median(zs) < -2  # a standard normal's median of 20 draws is about 0


def test_a_biased_k3_is_caught_by_the_expectation(monkeypatch):
    rng = np.random.default_rng(1)
    policy, ref = _far_apart_logits(rng, (2, 3, 32))
    ref = ref.astype(np.float32)
    real = losses.kl_estimators

    def k3_with_the_ratio_upside_down(logp, ref_logp):  # exp(r) - 1 - r: biased
        out = dict(real(logp, ref_logp))
        r = logp - ref_logp
        out["k3"] = np.exp(r) - 1 - r
        return out

    monkeypatch.setattr(losses, "kl_estimators", k3_with_the_ratio_upside_down)
    ours, closed = rlhf_ppo.k3_expectation_pair(policy, ref, policy, ref)
    assert numerics.scaled_max_error(ours, closed) > 1.0
