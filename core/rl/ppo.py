"""REINFORCE with a baseline and PPO on CartPole: ``make_train(config) -> train(key)``.

The pattern of purejaxrl: the whole pipeline (env resets, rollouts, GAE, minibatch epochs,
Adam, evaluation) is one pure function of a PRNG key, jitted end to end; ``jax.vmap(train)``
trains several seeds in one call.

Pieces, each tested against an independent reference in ``ppo_test.py``:

- ``gae``: generalized advantage estimation with the terminated/truncated split. For step t,
  ``delta_t = r_t + gamma * (1 - terminated_t) * V(final_obs_t) - V(obs_t)``, where
  ``final_obs_t`` is the observation the step reached *before* the auto-reset (on a
  truncation the episode had a future: bootstrap from where it was cut, never from the next
  episode's first observation); the recursion ``A_t = delta_t + gamma * lambda * (1 - done_t)
  * A_{t+1}`` stops at every episode end, terminated or truncated.
- ``clipped_surrogate``: PPO's objective ``mean(min(rho A, clip(rho, 1 - eps, 1 + eps) A))``.
- ``make_train``: "ppo" (clipped objective, GAE, minibatch epochs, entropy bonus, a learning
  rate annealed linearly to 0) or "reinforce" (the vanilla policy gradient with a learned
  value baseline: lambda = 1, so the advantage is the Monte Carlo return minus V, one
  gradient step per rollout, no clipping).

Shapes: T rollout steps, N environments, B = T * N transitions, A = 2 actions, H hidden.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from core.rl import cartpole, rollout

ALGORITHMS = ("ppo", "reinforce")
SOLVED_RETURN = 475.0  # CartPole-v1's reward threshold (gymnasium's spec.reward_threshold)


@dataclasses.dataclass(frozen=True)
class Config:
    """Hyperparameters (purejaxrl's CartPole defaults for PPO)."""

    algorithm: str = "ppo"
    num_envs: int = 4  # N
    num_steps: int = 128  # T: rollout length per update
    total_timesteps: int = 500_000  # environment steps over the whole run
    update_epochs: int = 4
    num_minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    hidden: int = 64  # H: two tanh layers each for actor and critic
    eval_episodes: int = 32  # greedy episodes at the end of training
    # Keep every sample's log(pi_new / pi_old) after each minibatch step (U x E x B floats):
    # what an independent recomputation of the clip fraction and KL per epoch needs.
    log_ratios: bool = False

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches", "hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_episodes < 0:
            raise ValueError(f"eval_episodes must be >= 0, got {self.eval_episodes}")
        if self.total_timesteps < self.batch_size:
            raise ValueError(
                f"total_timesteps {self.total_timesteps} is less than one rollout of "
                f"num_envs * num_steps = {self.batch_size} steps"
            )
        if self.batch_size % self.minibatches:
            raise ValueError(
                f"num_minibatches {self.minibatches} does not divide the batch of "
                f"num_envs * num_steps = {self.batch_size} transitions"
            )
        if not (0 < self.gamma <= 1 and 0 <= self.gae_lambda <= 1):
            raise ValueError(
                f"need 0 < gamma <= 1, 0 <= lambda <= 1: {self.gamma}, {self.gae_lambda}"
            )
        if not self.clip_eps > 0 or not self.learning_rate > 0:
            raise ValueError(
                f"clip_eps and learning_rate must be > 0: {self.clip_eps}, {self.learning_rate}"
            )

    @property
    def batch_size(self) -> int:  # B
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.batch_size

    @property
    def epochs(self) -> int:
        return 1 if self.algorithm == "reinforce" else self.update_epochs

    @property
    def minibatches(self) -> int:
        return 1 if self.algorithm == "reinforce" else self.num_minibatches

    @property
    def lam(self) -> float:
        return 1.0 if self.algorithm == "reinforce" else self.gae_lambda


# --- the actor-critic network (plain JAX: two MLPs with tanh, purejaxrl's sizes and gains) ---


def init_network(key: jax.Array, hidden: int, obs_dim: int = 4, actions: int = 2) -> dict:
    """{"actor": [(W, b)] * 3, "critic": [(W, b)] * 3}: W ~ N(0, gain^2 / fan_in), biases 0;
    gain sqrt(2) for the tanh layers, 0.01 for the actor's last (a near-uniform first policy),
    1 for the critic's (purejaxrl's gains).

    Not purejaxrl's orthogonal init: vmapped over seeds, its batched QR (a LAPACK custom call
    that splits the batch over XLA:CPU's thread pool) deadlocked the pool when two of them ran
    at once (jax 0.10.2, 5 seeds; seen in gdb: two threads in jax::OrthogonalQr /
    ParallelBatchMap, the program never finishing). A Gaussian init has no custom call."""

    def mlp(key, sizes, last_gain):
        keys = jax.random.split(key, len(sizes) - 1)
        layers = []
        for i, (k, d_in, d_out) in enumerate(zip(keys, sizes[:-1], sizes[1:], strict=True)):
            gain = last_gain if i == len(sizes) - 2 else jnp.sqrt(2.0)
            w = gain * jax.random.normal(k, (d_in, d_out)) / jnp.sqrt(d_in)
            layers.append((w, jnp.zeros((d_out,))))
        return layers

    actor_key, critic_key = jax.random.split(key)
    return {
        "actor": mlp(actor_key, (obs_dim, hidden, hidden, actions), 0.01),
        "critic": mlp(critic_key, (obs_dim, hidden, hidden, 1), 1.0),
    }


HPARAMS = ("learning_rate", "ent_coef", "vf_coef", "clip_eps")


def hparams_of(config: Config, overrides: dict | None = None) -> dict:
    """The HPARAMS of ``config``, with ``overrides`` (traced arrays are fine) on top."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(HPARAMS))
    if unknown:
        raise ValueError(f"unknown hyperparameters {unknown}; known: {HPARAMS}")
    return {name: overrides.get(name, getattr(config, name)) for name in HPARAMS}


def _mlp(layers, x):
    for w, b in layers[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = layers[-1]
    return x @ w + b


def policy_logits(network: dict, obs_X4: jax.Array) -> jax.Array:
    """(..., A) action logits."""
    return _mlp(network["actor"], obs_X4)


def value(network: dict, obs_X4: jax.Array) -> jax.Array:
    """(...) state values."""
    return _mlp(network["critic"], obs_X4)[..., 0]


# --- the estimators ---


def gae(
    reward_T,
    value_T,
    next_value_T,
    terminated_T,
    done_T,
    gamma: float,
    lam: float,
) -> tuple[jax.Array, jax.Array]:
    """(advantage_T, return_target_T) by generalized advantage estimation (time first; any
    trailing batch axes). ``next_value_T`` is V of each step's final observation (before the
    auto-reset); ``terminated_T`` cuts the bootstrap, ``done_T`` (terminated or truncated)
    cuts the recursion. The target for the critic is advantage + value."""
    not_terminated = 1.0 - terminated_T.astype(value_T.dtype)
    not_done = 1.0 - done_T.astype(value_T.dtype)
    delta_T = reward_T + gamma * not_terminated * next_value_T - value_T

    def backward(next_advantage, inputs):
        delta, keep = inputs
        advantage = delta + gamma * lam * keep * next_advantage
        return advantage, advantage

    _, advantage_T = jax.lax.scan(
        backward, jnp.zeros_like(delta_T[0]), (delta_T, not_done), reverse=True
    )
    return advantage_T, advantage_T + value_T


def clipped_surrogate(ratio_B, advantage_B, clip_eps: float) -> jax.Array:
    """PPO's clipped objective (to maximize): mean(min(rho A, clip(rho, 1-eps, 1+eps) A))."""
    clipped = jnp.clip(ratio_B, 1.0 - clip_eps, 1.0 + clip_eps)
    return jnp.mean(jnp.minimum(ratio_B * advantage_B, clipped * advantage_B))


class Batch(NamedTuple):
    obs_B4: jax.Array
    action_B: jax.Array
    log_prob_B: jax.Array
    value_B: jax.Array
    advantage_B: jax.Array
    target_B: jax.Array


def loss(
    network: dict, batch: Batch, config: Config, hparams: dict | None = None
) -> tuple[jax.Array, dict]:
    """The loss to minimize and its parts. PPO: -clipped surrogate + vf_coef * clipped value
    loss - ent_coef * entropy (advantages normalized per minibatch, as purejaxrl does).
    REINFORCE: -mean(log pi(a|s) A) + vf_coef * value loss - ent_coef * entropy.
    ``hparams`` overrides HPARAMS of ``config`` with (traced) values."""
    hp = hparams_of(config, hparams)
    logits_BA = policy_logits(network, batch.obs_B4)
    log_probs_BA = jax.nn.log_softmax(logits_BA)
    log_prob_B = jnp.take_along_axis(log_probs_BA, batch.action_B[:, None], axis=1)[:, 0]
    entropy = -jnp.mean(jnp.sum(jnp.exp(log_probs_BA) * log_probs_BA, axis=1))
    value_B = value(network, batch.obs_B4)
    advantage_B = batch.advantage_B
    advantage_B = (advantage_B - advantage_B.mean()) / (advantage_B.std() + 1e-8)
    if config.algorithm == "ppo":
        ratio_B = jnp.exp(log_prob_B - batch.log_prob_B)
        policy_objective = clipped_surrogate(ratio_B, advantage_B, hp["clip_eps"])
        value_clipped = batch.value_B + jnp.clip(
            value_B - batch.value_B, -hp["clip_eps"], hp["clip_eps"]
        )
        value_loss = 0.5 * jnp.mean(
            jnp.maximum((value_B - batch.target_B) ** 2, (value_clipped - batch.target_B) ** 2)
        )
        clip_fraction = jnp.mean(jnp.abs(ratio_B - 1.0) > hp["clip_eps"])
        # KL(pi_old || pi_new) estimated from the sampled actions: mean(r - 1 - log r) >= 0
        # (Schulman's "k3" estimator, http://joschu.net/blog/kl-approx.html)
        log_ratio_B = log_prob_B - batch.log_prob_B
        approx_kl = jnp.mean(ratio_B - 1.0 - log_ratio_B)
    else:
        policy_objective = jnp.mean(log_prob_B * advantage_B)
        value_loss = 0.5 * jnp.mean((value_B - batch.target_B) ** 2)
        clip_fraction = approx_kl = jnp.zeros(())
        log_ratio_B = jnp.zeros_like(log_prob_B)
    total = -policy_objective + hp["vf_coef"] * value_loss - hp["ent_coef"] * entropy
    parts = {
        "policy_objective": policy_objective,
        "value_loss": value_loss,
        "entropy": entropy,
        "clip_fraction": clip_fraction,
        "approx_kl": approx_kl,
        "log_ratio_B": jax.lax.stop_gradient(log_ratio_B),  # per sample, before the step
    }
    return total, parts


def evaluate(
    network: dict, key: jax.Array, episodes: int, params: cartpole.Params = cartpole.DEFAULT
) -> jax.Array:
    """(episodes,) returns of one full episode each under the greedy policy (argmax)."""
    state_E, obs_E4 = rollout.batch_reset(key, episodes, params)

    def one_step(carry, step_key):
        state_E, obs_E4, alive_E, return_E = carry
        action_E = jnp.argmax(policy_logits(network, obs_E4), axis=-1)
        state_E, obs_E4, reward_E, term_E, trunc_E, _ = rollout.batch_step(
            jax.random.split(step_key, episodes), state_E, action_E, params
        )
        return_E = return_E + jnp.where(alive_E, reward_E, 0.0)
        alive_E = alive_E & ~(term_E | trunc_E)
        return (state_E, obs_E4, alive_E, return_E), None

    carry = (state_E, obs_E4, jnp.ones((episodes,), bool), jnp.zeros((episodes,)))
    keys = jax.random.split(key, params.max_steps)
    (_, _, _, return_E), _ = jax.lax.scan(one_step, carry, keys)
    return return_E


def make_train(config: Config, params: cartpole.Params = cartpole.DEFAULT):
    """``train(key, hparams=None) -> (network, metrics)``: a pure function of the key (jit
    it, vmap it over seeds); ``hparams`` ({name: value} for names in HPARAMS) may be traced,
    so one compiled program trains several configurations (vmap over them too).

    metrics (U = config.num_updates): ``return_sum_U`` and ``episodes_U`` (the returns of the
    training episodes that ended during each update, summed, and their count), the loss
    parts per update (``*_U``, means over epochs and minibatches; ``clip_fraction_by_epoch_U``
    and ``approx_kl_by_epoch_U`` (U, E), each epoch's mean over its minibatches, measured on
    each minibatch before its step; with ``config.log_ratios`` also ``log_ratio_by_epoch_U``
    (U, E, B), every sample's log ratio they were computed from), and ``eval_returns_E``
    (greedy episodes after training, E = config.eval_episodes).
    """
    N, T, U = config.num_envs, config.num_steps, config.num_updates
    minibatch = config.batch_size // config.minibatches

    # Adam's direction, scaled by a (traced) learning rate: one program serves any rate.
    optimizer = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm), optax.scale_by_adam(eps=1e-5)
    )

    def collect(network, state_N, obs_N4, key):
        def one_step(carry, step_key):
            state_N, obs_N4 = carry
            action_key, env_key = jax.random.split(step_key)
            logits_NA = policy_logits(network, obs_N4)
            action_N = jax.random.categorical(action_key, logits_NA)
            log_prob_N = jnp.take_along_axis(
                jax.nn.log_softmax(logits_NA), action_N[:, None], axis=1
            )[:, 0]
            value_N = value(network, obs_N4)
            state_N, next_obs_N4, reward_N, term_N, trunc_N, info = rollout.batch_step(
                jax.random.split(env_key, N), state_N, action_N, params
            )
            next_value_N = value(network, info["final_obs"])
            done_N = term_N | trunc_N
            out = (
                obs_N4,
                action_N,
                log_prob_N,
                value_N,
                reward_N,
                next_value_N,
                term_N,
                done_N,
                info["episode_return"],
            )
            return (state_N, next_obs_N4), out

        (state_N, obs_N4), out = jax.lax.scan(one_step, (state_N, obs_N4), jax.random.split(key, T))
        return state_N, obs_N4, out

    def update(carry, inputs):
        network, opt_state, state_N, obs_N4, hp = carry
        key, u = inputs
        # purejaxrl's annealing: linear from the full rate at the first update to 0 after the last
        anneal = 1.0 - u / U if config.anneal_lr else 1.0
        rate = hp["learning_rate"] * anneal
        rollout_key, shuffle_key = jax.random.split(key)
        state_N, obs_N4, traj = collect(network, state_N, obs_N4, rollout_key)
        obs, action, log_prob, value_old, reward, next_value, term, done, ep_return = traj
        advantage_TN, target_TN = gae(
            reward, value_old, next_value, term, done, config.gamma, config.lam
        )
        flat = Batch(
            obs.reshape(-1, 4),
            action.reshape(-1),
            log_prob.reshape(-1),
            value_old.reshape(-1),
            advantage_TN.reshape(-1),
            target_TN.reshape(-1),
        )

        def epoch(carry, epoch_key):
            order = jax.random.permutation(epoch_key, config.batch_size)
            shuffled = jax.tree.map(
                lambda a: a[order].reshape(config.minibatches, minibatch, *a.shape[1:]), flat
            )

            def minibatch_step(carry, batch):
                network, opt_state = carry
                grad_fn = jax.value_and_grad(loss, has_aux=True)
                (_, parts), grads = grad_fn(network, batch, config, hp)
                direction, opt_state = optimizer.update(grads, opt_state, network)
                network = jax.tree.map(lambda p, d: p - rate * d, network, direction)
                return (network, opt_state), parts

            return jax.lax.scan(minibatch_step, carry, shuffled)

        (network, opt_state), parts = jax.lax.scan(
            epoch, (network, opt_state), jax.random.split(shuffle_key, config.epochs)
        )
        log_ratio_EMB = parts.pop("log_ratio_B")
        metrics = {name: jnp.mean(v) for name, v in parts.items()}
        # per epoch (mean over its minibatches): how far the policy moved from the old one
        metrics["clip_fraction_by_epoch"] = jnp.mean(parts["clip_fraction"], axis=1)
        metrics["approx_kl_by_epoch"] = jnp.mean(parts["approx_kl"], axis=1)
        if config.log_ratios:
            metrics["log_ratio_by_epoch"] = log_ratio_EMB.reshape(config.epochs, -1)
        metrics["return_sum"] = jnp.sum(jnp.where(done, ep_return, 0.0))
        metrics["episodes"] = jnp.sum(done)
        return (network, opt_state, state_N, obs_N4, hp), metrics

    def train(key: jax.Array, hparams: dict | None = None):
        init_key, reset_key, update_key, eval_key = jax.random.split(key, 4)
        network = init_network(init_key, config.hidden)
        opt_state = optimizer.init(network)
        state_N, obs_N4 = rollout.batch_reset(reset_key, N, params)
        hp = hparams_of(config, hparams)
        inputs = (jax.random.split(update_key, U), jnp.arange(U, dtype=jnp.float32))
        (network, *_), metrics = jax.lax.scan(
            update, (network, opt_state, state_N, obs_N4, hp), inputs
        )
        metrics = {f"{name}_U": v for name, v in metrics.items()}
        if config.eval_episodes:
            metrics["eval_returns_E"] = evaluate(network, eval_key, config.eval_episodes, params)
        return network, metrics

    return train


FAST_COMPILE = rollout.FAST_COMPILE


def compile_runs(config: Config, runs: int, fast_compile: bool = False, params=cartpole.DEFAULT):
    """``fn(keys_R, hparams_R) -> (network_R, metrics_R)``: ``runs`` trainings in one
    vmapped, compiled call (``hparams_R`` maps every name in HPARAMS to an (R,) array:
    several seeds of several configurations at once). Compiled ahead of time, so the
    caller can time the first call apart: see ``core.perf.timing``."""
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    fn = jax.jit(jax.vmap(make_train(config, params)))
    keys = jax.random.split(jax.random.key(0), runs)
    hparams = {name: jnp.full((runs,), float(getattr(config, name))) for name in HPARAMS}
    lowered = fn.lower(keys, hparams)
    return lowered.compile(compiler_options=FAST_COMPILE if fast_compile else None)


def run_hparams(config: Config, runs: int, **overrides) -> dict:
    """The (runs,) hyperparameter arrays for ``compile_runs``: ``config``'s values, or an
    override (a scalar or a sequence of ``runs`` values)."""
    hp = hparams_of(config, overrides)
    return {name: jnp.broadcast_to(jnp.asarray(v, jnp.float32), (runs,)) for name, v in hp.items()}


def learning_curve(return_sum_U, episodes_U):
    """(U,) mean training-episode return per update, carrying the last value forward
    through updates in which no episode ended (0 before the first one). NumPy or JAX in,
    NumPy out (leading axes, e.g. seeds, are kept)."""
    import numpy as np

    sums, counts = np.asarray(return_sum_U, float), np.asarray(episodes_U, float)
    curve = np.zeros_like(sums)
    last = np.zeros(sums.shape[:-1])
    for u in range(sums.shape[-1]):
        has = counts[..., u] > 0
        last = np.where(has, sums[..., u] / np.maximum(counts[..., u], 1), last)
        curve[..., u] = last
    return curve
