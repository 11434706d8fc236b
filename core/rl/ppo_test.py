import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.rl import ppo, references


def _gae(t, gamma, lam):
    done = t["terminated_TN"] | t["truncated_TN"]
    return ppo.gae(
        jnp.asarray(t["reward_TN"], jnp.float32),
        jnp.asarray(t["value_TN"], jnp.float32),
        jnp.asarray(t["next_value_TN"], jnp.float32),
        jnp.asarray(t["terminated_TN"]),
        jnp.asarray(done),
        gamma,
        lam,
    )


@pytest.mark.parametrize("seed, steps, envs", [(0, 12, 3), (1, 40, 2), (2, 5, 1)])
@pytest.mark.parametrize("gamma, lam", [(0.99, 0.95), (0.9, 1.0), (0.5, 0.0)])
def test_gae_matches_the_numpy_float64_reference(seed, steps, envs, gamma, lam):
    t = references.trajectory(seed, steps, envs, ends=min(3, steps * envs // 2))
    advantage, target = _gae(t, gamma, lam)
    ref_adv, ref_target = references.gae_reference(**t, gamma=gamma, lam=lam)
    assert numerics.scaled_max_error(advantage, ref_adv) <= numerics.tolerance("float32")
    assert numerics.scaled_max_error(target, ref_target) <= numerics.tolerance("float32")


def test_gae_bootstraps_from_the_final_observation_on_truncation_only():
    t = references.trajectory(3, 10, 1, ends=1)
    (k,) = np.flatnonzero(t["truncated_TN"][:, 0])
    (j,) = np.flatnonzero(t["terminated_TN"][:, 0])
    base, _ = _gae(t, 0.99, 0.95)
    bumped = dict(t, next_value_TN=t["next_value_TN"].copy())
    bumped["next_value_TN"][k, 0] += 1.0
    bumped["next_value_TN"][j, 0] += 1.0
    changed, _ = _gae(bumped, 0.99, 0.95)
    # the truncated step's own advantage moves by gamma * 1; the terminated one not at all
    assert float(changed[k, 0] - base[k, 0]) == pytest.approx(0.99, rel=1e-5)
    assert float(changed[j, 0] - base[j, 0]) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("clip_eps", [0.1, 0.2, 0.5])
def test_clipped_surrogate_matches_its_closed_form(clip_eps):
    rng = np.random.default_rng(int(clip_eps * 10))
    ratio = rng.uniform(0.3, 2.0, 257)
    advantage = rng.normal(size=257)
    result = ppo.clipped_surrogate(jnp.asarray(ratio), jnp.asarray(advantage), clip_eps)
    reference = references.clipped_surrogate_reference(ratio, advantage, clip_eps)
    assert numerics.scaled_max_error(result, reference) <= numerics.tolerance("float32")


def test_config_validates():
    with pytest.raises(ValueError, match="num_minibatches"):
        ppo.Config(num_envs=3, num_steps=5, num_minibatches=4)
    with pytest.raises(ValueError, match="total_timesteps"):
        ppo.Config(total_timesteps=10)
    with pytest.raises(ValueError, match="algorithm"):
        ppo.Config(algorithm="dqn")
    with pytest.raises(ValueError, match="unknown hyperparameters"):
        ppo.hparams_of(ppo.Config(), {"lr": 1.0})


def test_learning_curve_carries_forward():
    curve = ppo.learning_curve(np.array([0.0, 30.0, 0.0, 50.0]), np.array([0, 2, 0, 1]))
    np.testing.assert_allclose(curve, [0.0, 15.0, 15.0, 50.0])


# The lesson's claim at tiny size: PPO's greedy return after ~16k steps beats the untrained
# (near-uniform) policy's ~20-40 by far, on every one of 4 seeds, and the training-episode
# return rises from the first updates to the last. One vmapped call; fast-compiled.
TINY = ppo.Config(total_timesteps=16_384, eval_episodes=8)
UNTRAINED_RETURN_BOUND = 60.0  # a random CartPole policy averages ~22 steps


@pytest.mark.slow
def test_ppo_improves_over_seeds():
    seeds = 4
    fn = ppo.compile_runs(TINY, seeds, fast_compile=True)
    _, metrics = fn(jax.random.split(jax.random.key(7), seeds), ppo.run_hparams(TINY, seeds))
    curve = ppo.learning_curve(metrics["return_sum_U"], metrics["episodes_U"])
    eval_mean = np.asarray(metrics["eval_returns_E"]).mean(axis=1)
    assert np.all(eval_mean > 2 * UNTRAINED_RETURN_BOUND), eval_mean
    assert np.all(curve[:, -4:].mean(axis=1) > 1.5 * curve[:, :4].mean(axis=1)), curve


def test_per_epoch_clip_fraction_and_kl_match_the_logged_ratios_in_float64():
    config = ppo.Config(
        total_timesteps=1024, num_envs=4, num_steps=64, update_epochs=3, eval_episodes=0,
        learning_rate=3e-3, log_ratios=True,
    )  # fmt: skip
    _, metrics = jax.jit(ppo.make_train(config))(jax.random.key(2))
    u, e, b = config.num_updates, config.epochs, config.batch_size
    log_r = np.asarray(metrics["log_ratio_by_epoch_U"], np.float64)
    assert log_r.shape == (u, e, b)
    ratio = np.exp(log_r)
    clip = np.mean(np.abs(ratio - 1) > config.clip_eps, axis=-1)
    kl = np.mean(ratio - 1 - log_r, axis=-1)
    assert metrics["clip_fraction_by_epoch_U"].shape == (u, e)
    assert np.abs(np.asarray(metrics["clip_fraction_by_epoch_U"]) - clip).max() <= 2 / b
    assert numerics.scaled_max_error(metrics["approx_kl_by_epoch_U"], kl) <= 1e-5
    # the first minibatch of every update's first epoch sees the old policy: r == 1 exactly
    first = log_r[:, 0, : b // config.minibatches]
    assert np.all(first == 0.0)
    # later epochs move the policy: the KL estimate is positive there
    assert np.all(kl[:, -1] > 0)
