"""Supervised fine-tuning with a response-only token loss, for the lesson "sft".

The base model (core.post_training.task.base_params) knows the format "abc=" -> letters + "."
but not the task (reverse the letters). SFT trains it on (prompt, reversed prompt) pairs with
the loss on the response tokens only (``loss_on="response"``) or, to compare, on every token
(``"all tokens"``: the model also spends effort predicting the random prompt letters).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from core.post_training import cache, losses, model, task

LOSS_ON = ("response", "all tokens")
SHOWN_SAMPLES = 8
BATCH = task.BASE_BATCH  # the base model's batch and step count: SFT reuses its compiled program
# The claim "SFT learns the task" at the lesson's defaults: held-out greedy accuracy from at
# most LEARNS_BELOW before to at least LEARNS_ABOVE after (sft_test proves it over seeds).
LEARNS_ABOVE = 0.9
LEARNS_BELOW = 0.05


@dataclasses.dataclass(frozen=True)
class Result:
    base: dict
    policy: dict
    train_prompts: list
    heldout_prompts: list
    train_data: dict
    heldout_data: dict
    loss_S: np.ndarray
    accuracy_before: float
    accuracy_after: float
    samples: list  # rows: prompt, correct, base answer, SFT answer

    def identities(self) -> list[dict]:
        return [
            {"identity": "base model (frozen)", "sha256": model.short_hash(self.base)},
            {"identity": "SFT data set (train)", "sha256": task.dataset_hash(self.train_data)},
            {"identity": "held-out data set", "sha256": task.dataset_hash(self.heldout_data)},
            {"identity": "SFT policy (trained)", "sha256": model.short_hash(self.policy)},
        ]


def training_data(train_prompts, seed: int, steps: int, loss_on: str) -> dict:
    """steps x BATCH pairs; the loss mask is the response (or every real token)."""
    if loss_on not in LOSS_ON:
        raise ValueError(f"loss_on must be one of {LOSS_ON}, got {loss_on!r}")
    data = task.sft_data(train_prompts, seed, steps, BATCH)
    if loss_on == "all tokens":
        data["weights_BT"] = data["all_weights_BT"]
    return data


def run(seed: int, steps: int, learning_rate: float, loss_on: str = "response") -> Result:
    """Fine-tune the base model of ``seed`` on its training prompts; measure before/after."""
    base = task.base_params(seed)
    train_prompts, heldout_prompts = task.split_prompts(seed)
    data = training_data(train_prompts, seed + 1, steps, loss_on)
    # through the on-disk cache: lora's full fine-tuning at the defaults is this same run
    policy, loss_S, _ = cache.train(losses.masked_token_loss, base, None, data, learning_rate)
    heldout = task.encode(heldout_prompts, [task.reverse_response(p) for p in heldout_prompts])
    shown = heldout_prompts[:SHOWN_SAMPLES]
    before, after = task.greedy(base, shown), task.greedy(policy, shown)
    samples = [
        {"prompt": p, "correct": task.reverse_response(p), "base model": b, "after SFT": a}
        for p, b, a in zip(shown, before, after, strict=True)
    ]
    return Result(
        base,
        policy,
        train_prompts,
        heldout_prompts,
        {k: v.reshape(-1, task.SEQ_LEN) for k, v in data.items()},
        heldout,
        loss_S,
        task.accuracy(base, heldout_prompts),
        task.accuracy(policy, heldout_prompts),
        samples,
    )


def claim_problems(result: Result) -> list[str]:
    """What is wrong with the claim "SFT learns the task" (empty when it holds)."""
    problems = []
    if not result.accuracy_before <= LEARNS_BELOW:
        problems.append(f"the base model already scores {result.accuracy_before:.2f}")
    if not result.accuracy_after >= LEARNS_ABOVE:
        problems.append(f"after SFT the held-out accuracy is only {result.accuracy_after:.2f}")
    return problems
