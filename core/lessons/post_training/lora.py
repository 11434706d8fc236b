"""LoRA on the frozen base model vs full fine-tuning, for the lesson "lora".

Both start from the same base model (core.post_training.task.base_params) and see the same
SFT batches (response-only loss on the reversal task); LoRA trains rank-R adapters on the
chosen kernels, full fine-tuning trains every weight.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from core.post_training import cache, lora, losses, task

BATCH = task.BASE_BATCH


@dataclasses.dataclass(frozen=True)
class Result:
    base: dict
    adapters: dict
    full: dict
    scale: float
    data: dict
    heldout_prompts: list
    lora_loss_S: np.ndarray
    full_loss_S: np.ndarray
    accuracy: dict  # model name -> held-out accuracy


def rank_problem(rank: int, targets: tuple[str, ...]) -> str | None:
    """Why ``rank`` cannot be used on these kernels (None when it can)."""
    # every adapted kernel has one side of width D (attention: D x D, MLP: D x 4D)
    del targets
    smallest = task.MODEL.width
    if rank > smallest:
        return (
            f"rank {rank} exceeds the smallest side {smallest} of an adapted kernel: B·A would "
            "not be low-rank (and could not even reach full rank beyond it)"
        )
    return None


def run(seed, rank, alpha, targets, steps, learning_rate, full_learning_rate=0.003) -> Result:
    base = task.base_params(seed)
    train_prompts, heldout_prompts = task.split_prompts(seed)
    data = task.sft_data(train_prompts, seed + 1, steps, BATCH)
    adapters = lora.init_adapters(base, rank, targets, jax.random.key(seed))
    scale = alpha / rank
    adapters, lora_loss_S = lora.train(base, adapters, scale, data, learning_rate)
    # through the on-disk cache: at the SFT lesson's steps and seed this is its trained policy
    full, full_loss_S, _ = cache.train(
        losses.masked_token_loss, base, None, data, full_learning_rate
    )
    accuracy = {
        "base": task.accuracy(base, heldout_prompts),
        "base + LoRA adapter": task.accuracy(base, heldout_prompts, adapters, scale),
        "full fine-tuning": task.accuracy(full, heldout_prompts),
    }
    return Result(
        base,
        adapters,
        full,
        scale,
        {k: v.reshape(-1, task.SEQ_LEN) for k, v in data.items()},
        heldout_prompts,
        lora_loss_S,
        full_loss_S,
        accuracy,
    )
