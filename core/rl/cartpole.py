"""CartPole as pure functions: ``reset(key) -> (state, obs)``, ``step(key, state, action)``.

The dynamics are gymnasium's ``CartPole-v1`` (Barto, Sutton & Anderson 1983; explicit Euler,
tau = 0.02 s) with its ``TimeLimit`` of 500 steps, and the same split of the two ways an
episode ends that gymnasium and gymnax 1.0 use:

- **terminated**: the pole fell past 12 degrees or the cart left [-2.4, 2.4]: the episode's
  natural end, there is no future value to bootstrap from;
- **truncated**: the time limit ran out (the 500th step); the state still had a future, so a
  value-based learner bootstraps from the final observation.

``step`` resets automatically when either happens: the returned ``state`` and ``obs`` are
then the new episode's first ones, and the observation the episode ended on is kept in
``info["final_obs"]`` (equal to ``obs`` on every other step). State arrays take the dtype
JAX gives them (float32, or float64 inside ``jax.enable_x64()``), so the same code runs the
float64 parity check against gymnasium.

Shapes: obs_4 = (x [m], x_dot [m/s], theta [rad], theta_dot [rad/s]); action is 0 (push
left) or 1 (push right). Everything vmaps over environments and jits.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Params:
    """The constants of CartPole-v1 (gymnasium's names; SI units)."""

    gravity: float = 9.8  # m/s^2
    masscart: float = 1.0  # kg
    masspole: float = 0.1  # kg
    length: float = 0.5  # m: half the pole's length
    force_mag: float = 10.0  # N
    tau: float = 0.02  # s between updates (explicit Euler)
    theta_threshold_radians: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4  # m
    max_steps: int = 500  # gymnasium's TimeLimit for CartPole-v1
    reset_bound: float = 0.05  # reset state ~ U(-0.05, 0.05)^4

    def __post_init__(self):
        positive = ("gravity", "masscart", "masspole", "length", "force_mag", "tau")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"CartPole {name} must be > 0, got {getattr(self, name)}")
        if self.max_steps < 1:
            raise ValueError(f"CartPole max_steps must be >= 1, got {self.max_steps}")

    @property
    def total_mass(self) -> float:
        return self.masspole + self.masscart

    @property
    def polemass_length(self) -> float:
        return self.masspole * self.length


DEFAULT = Params()
OBS_NAMES = ("x", "x_dot", "theta", "theta_dot")
NUM_ACTIONS = 2


class State(NamedTuple):
    """One environment's state: the physics, the step count and the running return."""

    physics_4: jax.Array  # (x, x_dot, theta, theta_dot)
    time: jax.Array  # int32: steps taken in this episode
    episode_return: jax.Array  # reward collected in this episode so far


def reset(key: jax.Array, params: Params = DEFAULT) -> tuple[State, jax.Array]:
    """A new episode: every state variable uniform in [-reset_bound, reset_bound]."""
    physics_4 = jax.random.uniform(key, (4,), minval=-params.reset_bound, maxval=params.reset_bound)
    state = State(physics_4, jnp.zeros((), jnp.int32), jnp.zeros((), physics_4.dtype))
    return state, physics_4


def dynamics(physics_4: jax.Array, action: jax.Array, params: Params = DEFAULT) -> jax.Array:
    """One explicit-Euler step of the cart and pole (gymnasium's equations, in its order)."""
    x, x_dot, theta, theta_dot = physics_4
    force = jnp.where(action == 1, params.force_mag, -params.force_mag)
    costheta, sintheta = jnp.cos(theta), jnp.sin(theta)
    temp = (force + params.polemass_length * theta_dot**2 * sintheta) / params.total_mass
    thetaacc = (params.gravity * sintheta - costheta * temp) / (
        params.length * (4.0 / 3.0 - params.masspole * costheta**2 / params.total_mass)
    )
    xacc = temp - params.polemass_length * thetaacc * costheta / params.total_mass
    return jnp.stack(
        [
            x + params.tau * x_dot,
            x_dot + params.tau * xacc,
            theta + params.tau * theta_dot,
            theta_dot + params.tau * thetaacc,
        ]
    )


def is_terminal(physics_4: jax.Array, params: Params = DEFAULT) -> jax.Array:
    """True when the cart left the track or the pole fell (gymnasium's strict inequalities)."""
    x, theta = physics_4[0], physics_4[2]
    return (jnp.abs(x) > params.x_threshold) | (jnp.abs(theta) > params.theta_threshold_radians)


def step(
    key: jax.Array, state: State, action: jax.Array, params: Params = DEFAULT
) -> tuple[State, jax.Array, jax.Array, jax.Array, jax.Array, dict]:
    """(state, obs, reward, terminated, truncated, info) after ``action``, reset when done.

    ``key`` is used only for the reset. reward is 1 for every step, the last included
    (gymnasium's default reward). truncated is True on the ``max_steps``-th step of an
    episode, even if that step also terminated (gymnasium's TimeLimit sets it regardless).
    info: ``final_obs`` (the observation the step reached, before any reset),
    ``episode_return`` and ``episode_length`` (of the episode this step belongs to; the
    finished episode's totals when done).
    """
    physics_4 = dynamics(state.physics_4, action, params)
    time = state.time + 1
    reward = jnp.ones((), physics_4.dtype)
    episode_return = state.episode_return + reward
    terminated = is_terminal(physics_4, params)
    truncated = time >= params.max_steps
    done = terminated | truncated
    reset_state, reset_obs = reset(key, params)
    carried = State(physics_4, time, episode_return)
    new_state = jax.tree.map(lambda a, b: jnp.where(done, a, b), reset_state, carried)
    obs = jnp.where(done, reset_obs, physics_4)
    info = {"final_obs": physics_4, "episode_return": episode_return, "episode_length": time}
    return new_state, obs, reward, terminated, truncated, info
