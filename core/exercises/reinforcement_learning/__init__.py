"""Exercises of the phase "Reinforcement learning", one module per lesson (policy_gradients_ppo,
batched_rollouts, functional_env; what they share is in _shared).

- ``reinforcement_learning.policy_gradients_ppo.clipped_objective`` (predict): PPO's clipped
  objective of five samples, two of them clipped and two not, whatever side of the range.
- ``reinforcement_learning.policy_gradients_ppo.gae`` (code): GAE's backward recursion over a
  rollout of N environments, stopped at episode ends, bootstrapped at the rollout's end.
- ``reinforcement_learning.batched_rollouts.episodes_ended`` (predict): how many episodes end
  in a rollout of N environments x T steps under a time limit too short for the pole to fall.
- ``reinforcement_learning.batched_rollouts.discounted_returns`` (code): the discounted return
  to go of every step of a (T, N) trajectory with auto-resets in it.
- ``reinforcement_learning.functional_env.euler_position`` (predict): the cart's position
  after one explicit-Euler step, whatever the push.
- ``reinforcement_learning.functional_env.walk_step`` (code): a pure, batched step function of
  a tiny environment with terminated, truncated and the automatic reset.
"""

from __future__ import annotations

from core.assessment.items import Item
from core.exercises.reinforcement_learning._shared import PHASE
from core.exercises.reinforcement_learning.batched_rollouts import (
    DiscountedReturns,
    EpisodesEnded,
)
from core.exercises.reinforcement_learning.functional_env import EulerPosition, WalkStep
from core.exercises.reinforcement_learning.policy_gradients_ppo import ClippedObjective, Gae

__all__ = ["ITEMS", "PHASE"]

ITEMS: tuple[Item, ...] = (
    ClippedObjective(),
    Gae(),
    EpisodesEnded(),
    DiscountedReturns(),
    EulerPosition(),
    WalkStep(),
)
