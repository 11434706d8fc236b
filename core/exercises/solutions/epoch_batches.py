"""Reference solution of data_checkpoints.input_pipeline.epoch_batches: one epoch of a
shuffled, batched index stream, the last batch padded (with a mask) or dropped."""

import numpy as np


def epoch_order(count, seed, epoch):
    """The example order of epoch ``epoch``: a permutation of range(count), seeded by
    (seed, epoch) (the course's data.epoch_order)."""
    return np.random.default_rng([seed, epoch]).permutation(count)


def epoch_batches(count, batch_size, seed, epoch, drop_remainder):
    """(index_KB, mask_KB): K batches of B example indices, int64, and which rows are real.

    Shuffle (a new order every epoch), cut into rows of B; the last, short batch is padded
    with index 0 and mask False, or left out with drop_remainder. K = ceil(N / B) or N // B.
    """
    order = epoch_order(count, seed, epoch)
    if drop_remainder:
        batches = count // batch_size
        order = order[: batches * batch_size]
    else:
        batches = -(-count // batch_size)
    index_KB = np.zeros(batches * batch_size, np.int64)
    mask_KB = np.zeros(batches * batch_size, bool)
    index_KB[: len(order)] = order
    mask_KB[: len(order)] = True
    return index_KB.reshape(batches, batch_size), mask_KB.reshape(batches, batch_size)
