"""Learn a reward model from pairwise preferences, for the lesson "reward_model".

The preference pairs and the Bradley-Terry reward model live in core.post_training.preferences
(the RLHF and DPO lessons reuse them); this module runs the lesson's training and collects
what the app shows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from core.post_training import preferences, task

# The claim at the lesson's defaults: the learned reward orders held-out pairs (with
# different true rewards) like the ground truth at least this often (chance is 0.5);
# reward_model_test proves it over seeds.
AGREES_ABOVE = 0.65


@dataclasses.dataclass(frozen=True)
class Result:
    base: dict
    rm: dict
    train_pairs: preferences.Pairs
    heldout_pairs: preferences.Pairs
    loss_S: np.ndarray
    heldout_agreement: float
    train_agreement: float


def run(seed: int, steps: int, learning_rate: float) -> Result:
    base = task.base_params(seed)
    train_pairs, heldout_pairs = preferences.lesson_data(seed)
    rm, loss_S = preferences.train_reward_model(base, train_pairs, seed, steps, learning_rate)
    return Result(
        base,
        rm,
        train_pairs,
        heldout_pairs,
        loss_S,
        preferences.agreement(rm, heldout_pairs),
        preferences.agreement(rm, train_pairs),
    )


def reward_rows(result: Result) -> list[dict]:
    """Learned vs true reward of every held-out response (chosen and rejected)."""
    pairs, rows = result.heldout_pairs, []
    for side in ("w", "l"):
        tokens, weights = getattr(pairs, f"tokens_{side}_BT"), getattr(pairs, f"weights_{side}_BT")
        learned = np.asarray(preferences.reward_B(result.rm, tokens, weights))
        true = getattr(pairs, f"true_{side}_B")
        rows += [
            {"true reward": float(t), "learned reward": float(r)}
            for t, r in zip(true, learned, strict=True)
        ]
    return rows
