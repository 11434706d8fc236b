"""Lesson code of "Policy gradients and PPO": the checks on the current controls, the charts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from core import numerics
from core.rl import ppo, references

# The app's flag defaults (tests/test_app_claims.py checks they are the app's). The claim of
# the default run, proven over seeds in policy_gradients_ppo_test.py: the greedy return
# averaged over the seeds is at least TRAINED_RETURN_CLAIM, over 3x the median of untrained
# networks' and above the same seeds' untrained networks. An untrained network's greedy
# return is heavy-tailed: its median over many seeds is below UNTRAINED_GREEDY_MEDIAN (a
# random policy averages ~22), though about one initial network in six balances past 100
# steps by luck.
PPO_LESSON = {
    "algorithm": "ppo",
    "total_steps": 8192,
    "seeds": 2,
    "num_envs": 4,
    "num_steps": 128,
    "num_minibatches": 4,
    "update_epochs": 4,
    "learning_rate": 2.5e-4,
    "clip_eps": 0.2,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "ent_coef": 0.01,
    "seed": 0,
}
EVAL_EPISODES = 16
UNTRAINED_GREEDY_MEDIAN = 30.0
TRAINED_RETURN_CLAIM = 100.0
# The run counts |r - 1| > eps on float32 ratios, the reference on float64 ones: a ratio
# within float32 rounding of 1 +- eps may be counted by one and not the other.
CLIP_COUNT_SLACK_SAMPLES = 2


def lesson_config(values: dict) -> ppo.Config:
    """The training run of the app's control values (names as in PPO_LESSON)."""
    return ppo.Config(
        algorithm=values["algorithm"],
        num_envs=values["num_envs"],
        num_steps=values["num_steps"],
        total_timesteps=values["total_steps"],
        num_minibatches=values["num_minibatches"],
        update_epochs=values["update_epochs"],
        learning_rate=values["learning_rate"],
        clip_eps=values["clip_eps"],
        gamma=values["gamma"],
        gae_lambda=values["gae_lambda"],
        ent_coef=values["ent_coef"],
        eval_episodes=EVAL_EPISODES,
        log_ratios=True,  # the per-epoch clip fraction and KL are checked from them
    )


def untrained_greedy_returns(config: ppo.Config, keys_S: jax.Array) -> np.ndarray:
    """(S,) greedy return of each run's initial network (the one ``ppo.make_train`` starts
    from for that key), mean over the same evaluation episodes as after training."""

    def one(key):
        init_key, _, _, eval_key = jax.random.split(key, 4)
        network = ppo.init_network(init_key, config.hidden)
        return ppo.evaluate(network, eval_key, config.eval_episodes).mean()

    compiled = jax.jit(jax.vmap(one)).lower(keys_S).compile(compiler_options=ppo.FAST_COMPILE)
    return np.asarray(compiled(keys_S))


def claim_holds(values: dict, eval_mean_S) -> bool | None:
    """The default run's claim on its measured greedy returns (mean over the seeds at least
    TRAINED_RETURN_CLAIM); None away from the defaults (no claim is made there: a short or
    badly tuned run may not beat anything)."""
    if values != PPO_LESSON:
        return None
    return float(np.mean(eval_mean_S)) >= TRAINED_RETURN_CLAIM


def gae_errors(seed: int, steps: int, envs: int, gamma: float, lam: float) -> dict:
    """ppo.gae (float32, lax.scan backward) vs the NumPy float64 forward sums on a random
    trajectory with two terminations and two truncations; the errors and the trajectory."""
    t = references.trajectory(seed, steps, envs, ends=min(2, steps * envs // 4))
    done = t["terminated_TN"] | t["truncated_TN"]
    advantage, target = ppo.gae(
        jnp.asarray(t["reward_TN"], jnp.float32),
        jnp.asarray(t["value_TN"], jnp.float32),
        jnp.asarray(t["next_value_TN"], jnp.float32),
        jnp.asarray(t["terminated_TN"]),
        jnp.asarray(done),
        gamma,
        lam,
    )
    ref_adv, ref_target = references.gae_reference(**t, gamma=gamma, lam=lam)
    return {
        "advantage": numerics.scaled_max_error(advantage, ref_adv),
        "target": numerics.scaled_max_error(target, ref_target),
        "trajectory": t,
        "advantage_TN": np.asarray(advantage),
    }


def surrogate_error(seed: int, clip_eps: float, samples: int = 512) -> float:
    """ppo.clipped_surrogate (float32) vs its closed form (NumPy float64), on ratios in
    [0.2, 2.5] and normal advantages, relative to the objective's scale."""
    rng = np.random.default_rng(seed)
    ratio, advantage = rng.uniform(0.2, 2.5, samples), rng.normal(size=samples)
    result = ppo.clipped_surrogate(
        jnp.asarray(ratio, jnp.float32), jnp.asarray(advantage, jnp.float32), clip_eps
    )
    return numerics.scaled_max_error(
        result, references.clipped_surrogate_reference(ratio, advantage, clip_eps)
    )


def surrogate_frame(clip_eps: float) -> pd.DataFrame:
    """The per-sample objective min(rho A, clip(rho) A) against rho, for A = +1 and A = -1."""
    import jax

    rho = np.linspace(0.0, 2.0, 201)
    rows = []
    for a in (1.0, -1.0):
        # one sample at a time: vmap the mean over a batch of one
        per = jax.vmap(lambda r, a=a: ppo.clipped_surrogate(r[None], jnp.array([a]), clip_eps))(
            jnp.asarray(rho, jnp.float32)
        )
        rows += [
            {"ratio": float(r), "objective": float(v), "advantage": f"A = {a:+g}"}
            for r, v in zip(rho, np.asarray(per), strict=True)
        ]
    return pd.DataFrame(rows)


def curve_frame(metrics: dict, config: ppo.Config, label: str) -> pd.DataFrame:
    """Long rows (env steps, seed, mean training-episode return) of a vmapped run."""
    curve_SU = ppo.learning_curve(metrics["return_sum_U"], metrics["episodes_U"])
    steps = (np.arange(curve_SU.shape[-1]) + 1) * config.batch_size
    return pd.DataFrame(
        [
            {
                "env steps": int(steps[u]),
                "seed": str(s),
                "return": float(curve_SU[s, u]),
                "run": label,
            }
            for s in range(curve_SU.shape[0])
            for u in range(curve_SU.shape[1])
        ]
    )


def epoch_drift_reference(log_ratio_SUEB, clip_eps: float) -> dict[str, np.ndarray]:
    """NumPy float64 from the run's logged log ratios (S seeds, U updates, E epochs, B
    samples): per (seed, update, epoch) the clip fraction (|r - 1| > eps), the estimated KL
    mean(r - 1 - log r) and the largest |r - 1|, r = exp(log ratio)."""
    log_r = np.asarray(log_ratio_SUEB, np.float64)
    ratio = np.exp(log_r)
    return {
        "clip_fraction": np.mean(np.abs(ratio - 1.0) > clip_eps, axis=-1),
        "approx_kl": np.mean(ratio - 1.0 - log_r, axis=-1),
        "largest |r - 1|": np.max(np.abs(ratio - 1.0), axis=-1),
    }


def epoch_drift_frame(metrics: dict, reference: dict) -> pd.DataFrame:
    """One row per epoch: the run's clip fraction and KL (mean over seeds and updates) and
    the largest |r - 1| any sample reached in that epoch (from the logged ratios)."""
    clip_SUE = np.asarray(metrics["clip_fraction_by_epoch_U"], np.float64)
    kl_SUE = np.asarray(metrics["approx_kl_by_epoch_U"], np.float64)
    return pd.DataFrame(
        {
            "epoch": np.arange(1, clip_SUE.shape[-1] + 1),
            "clip fraction": clip_SUE.mean(axis=(0, 1)),
            "approx KL": kl_SUE.mean(axis=(0, 1)),
            "largest |r - 1|": reference["largest |r - 1|"].max(axis=(0, 1)),
        }
    )
