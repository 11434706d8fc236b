"""Pairwise preferences from a known ground-truth reward, and a reward model learned from them.

Two responses to a prompt are sampled from the base model (the behaviour policy of the data
set); a simulated labeller prefers a over b with the Bradley-Terry probability

    P(a > b) = sigmoid(LABEL_BETA * (r*(a) - r*(b)))        r* = task.true_reward

so the labels are noisy where the rewards are close (a coin flip on ties). The reward
model is the base model's Transformer with a scalar head on the features of the response's
last token (its "."); it is trained with the Bradley-Terry loss
(losses.bradley_terry_loss) on the training pairs and judged on held-out prompts.

Glossary: B pairs, T positions, D width.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from core.post_training import cache, losses, model, task

LABEL_BETA = 2.0  # how sharply the simulated labeller follows the true reward
PAIRS_PER_PROMPT = 4
RM_STEPS = 150
RM_BATCH = 64
RM_LEARNING_RATE = 3e-3


@dataclasses.dataclass(frozen=True)
class Pairs:
    """Preference pairs: chosen (w) and rejected (l) responses with their true rewards."""

    prompts: list
    tokens_w_BT: np.ndarray
    weights_w_BT: np.ndarray
    tokens_l_BT: np.ndarray
    weights_l_BT: np.ndarray
    true_w_B: np.ndarray
    true_l_B: np.ndarray

    def __len__(self) -> int:
        return len(self.prompts)

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "tokens_w_BT": self.tokens_w_BT,
            "weights_w_BT": self.weights_w_BT,
            "tokens_l_BT": self.tokens_l_BT,
            "weights_l_BT": self.weights_l_BT,
        }

    def hash(self) -> str:
        return task.dataset_hash({**self.arrays(), "w": self.true_w_B, "l": self.true_l_B})


def make_pairs(behaviour: dict, prompts, key, pairs_per_prompt: int = PAIRS_PER_PROMPT) -> Pairs:
    """Sample two responses per (repeated) prompt from ``behaviour`` and label them."""
    repeated = [p for p in prompts for _ in range(pairs_per_prompt)]
    key_a, key_b, key_label = jax.random.split(key, 3)
    tokens_a, weights_a = task.sample(behaviour, repeated, key_a)
    tokens_b, weights_b = task.sample(behaviour, repeated, key_b)
    true_a = rewards_of(repeated, tokens_a, weights_a)
    true_b = rewards_of(repeated, tokens_b, weights_b)
    p_a = 1.0 / (1.0 + np.exp(-LABEL_BETA * (true_a - true_b)))
    a_wins = np.asarray(jax.random.uniform(key_label, (len(repeated),))) < p_a
    pick = lambda x, y: np.where(a_wins.reshape(-1, *[1] * (x.ndim - 1)), x, y)  # noqa: E731
    return Pairs(
        repeated,
        pick(tokens_a, tokens_b),
        pick(weights_a, weights_b),
        pick(tokens_b, tokens_a),
        pick(weights_b, weights_a),
        pick(true_a, true_b),
        pick(true_b, true_a),
    )


def rewards_of(prompts, tokens_BT, weights_BT) -> np.ndarray:
    """task.true_reward of each sampled response."""
    responses = task.responses_of(tokens_BT, weights_BT)
    return np.array([task.true_reward(p, r) for p, r in zip(prompts, responses, strict=True)])


def true_label_loss(pairs: Pairs) -> float:
    """The Bradley-Terry loss of the labeller's own reward (LABEL_BETA * r*): the expected
    best a learned reward can reach on these labels (NumPy float64)."""
    return losses.bradley_terry_reference(LABEL_BETA * pairs.true_w_B, LABEL_BETA * pairs.true_l_B)


# --- the reward model ------------------------------------------------------------------------


def init_reward_model(base: dict) -> dict:
    """The base model's weights plus a zero scalar head (every reward starts at 0)."""
    return {"lm": base, "head_D": np.zeros(task.MODEL.width, np.float32)}


@jax.jit
def reward_B(rm: dict, tokens_BT, weights_BT):
    """The scalar reward of each (prompt, response): the head on the features of the
    response's last token (position PROMPT_TOKENS - 1 + response length)."""
    hidden = model.hidden_BTD(rm["lm"], tokens_BT)
    last = task.PROMPT_TOKENS - 1 + jnp.sum(weights_BT, axis=1).astype(jnp.int32)
    features = jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
    return features @ rm["head_D"]


def bt_loss(rm, _frozen, batch):
    """Bradley-Terry loss of the reward model on a batch of pairs."""
    b = batch["tokens_w_BT"].shape[0]  # one forward pass over chosen and rejected stacked
    tokens = jnp.concatenate([batch["tokens_w_BT"], batch["tokens_l_BT"]])
    weights = jnp.concatenate([batch["weights_w_BT"], batch["weights_l_BT"]])
    rewards = reward_B(rm, tokens, weights)
    return losses.bradley_terry_loss(rewards[:b], rewards[b:])


def batches(pairs: Pairs, seed: int, steps: int, batch: int) -> dict[str, np.ndarray]:
    """steps x batch pairs drawn (with replacement) from ``pairs``."""
    picks = np.random.default_rng(seed).integers(0, len(pairs), (steps, batch))
    return {k: v[picks] for k, v in pairs.arrays().items()}


def train_reward_model(base, pairs: Pairs, seed: int, steps=RM_STEPS, lr=RM_LEARNING_RATE):
    """(reward model, losses_S): Bradley-Terry training from the base model's weights."""
    rm, losses_S, _ = cache.train(
        bt_loss, init_reward_model(base), None, batches(pairs, seed, steps, RM_BATCH), lr
    )
    return rm, losses_S


def agreement(rm: dict, pairs: Pairs) -> float:
    """Fraction of pairs with different true rewards that the reward model orders like r*."""
    r_w = np.asarray(reward_B(rm, pairs.tokens_w_BT, pairs.weights_w_BT))
    r_l = np.asarray(reward_B(rm, pairs.tokens_l_BT, pairs.weights_l_BT))
    differ = pairs.true_w_B != pairs.true_l_B
    same_order = np.sign(r_w - r_l) == np.sign(pairs.true_w_B - pairs.true_l_B)
    return float(np.mean(same_order[differ]))


@functools.lru_cache(maxsize=2)
def lesson_data(seed: int = 0) -> tuple[Pairs, Pairs]:
    """(train pairs, held-out pairs) from the base model of ``seed`` (cached in-process)."""
    base = task.base_params(seed)
    train_prompts, heldout_prompts = task.split_prompts(seed)
    key_train, key_heldout = jax.random.split(jax.random.fold_in(jax.random.key(seed), 17))
    return make_pairs(base, train_prompts, key_train), make_pairs(
        base, heldout_prompts, key_heldout
    )


@functools.lru_cache(maxsize=2)
def lesson_reward_model(seed: int = 0) -> dict:
    """The reward model of ``seed`` at the lesson defaults (cached in-process): the frozen
    reward of the RLHF lesson."""
    train_pairs, _ = lesson_data(seed)
    return train_reward_model(task.base_params(seed), train_pairs, seed)[0]
