"""The byte-level data both framework scripts train on: generated here, sharded per process.

The text is made from a fixed vocabulary by a seeded generator (no download, the same bytes on
every host), cut into (context bytes -> next byte) examples. ``shard`` gives each process of a
job its examples: one seeded permutation per epoch, strided by rank, so the shards are disjoint
and together hold every example exactly once. Only the standard library and NumPy: the PyTorch/
XLA and TensorFlow environments both import this module.
"""

from __future__ import annotations

import random

import numpy as np

VOCAB = 256  # bytes
_SUBJECTS = ("the cat", "a dog", "the model", "my tpu", "the chip", "a learner", "the host")
_VERBS = ("sees", "trains", "shards", "reads", "loves", "compiles", "sends")
_OBJECTS = ("the data", "a batch", "the loss", "every byte", "the mesh", "a graph", "the step")


def make_text(sentences: int = 400, seed: int = 0) -> bytes:
    """``sentences`` generated sentences ("the cat trains a batch."), deterministic in seed."""
    rng = random.Random(seed)
    words = (
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}."
        for _ in range(sentences)
    )
    return " ".join(words).encode("ascii")


def examples(text: bytes, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Every window of ``text``: x (n, context) int32 bytes, y (n,) int32 the byte after it."""
    if len(text) <= context:
        raise ValueError(f"text of {len(text)} bytes has no window of {context} + 1 bytes")
    data = np.frombuffer(text, dtype=np.uint8).astype(np.int32)
    n = len(data) - context
    x = np.lib.stride_tricks.sliding_window_view(data[:-1], context)[:n].copy()
    return x, data[context:].copy()


def shard(n: int, rank: int, world: int, seed: int = 0, epoch: int = 0) -> np.ndarray:
    """This rank's example indices: a seeded permutation of range(n), every world-th from rank.

    Disjoint across ranks, their union is range(n) (each index once); sizes differ by at most 1.
    """
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in 0..{world - 1} (world size {world})")
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return order[rank::world]


def batches(indices: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Consecutive batches of ``indices``, the remainder dropped: every step has one shape (an XLA
    device compiles the step once)."""
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    full = len(indices) // batch_size
    return [indices[i * batch_size : (i + 1) * batch_size] for i in range(full)]


def steps_per_epoch(n: int, world: int, batch_size: int) -> int:
    """Steps every rank can take in one epoch (the smallest shard's full batches): the ranks of a
    data-parallel job must take the same number of steps (each step all-reduces gradients)."""
    return (n // world) // batch_size
