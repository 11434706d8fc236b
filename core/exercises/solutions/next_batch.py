"""Reference solution of data_checkpoints.resume_data_position.next_batch: the next batch of a
sampler that shuffles every epoch and batches the stream of epochs, from its saved position."""

import numpy as np


def epoch_order(count, seed, epoch):
    """The example order of epoch ``epoch``: a permutation of range(count), seeded by
    (seed, epoch) (the course's data.epoch_order)."""
    return np.random.default_rng([seed, epoch]).permutation(count)


def next_batch(seed, epoch, position, count, batch_size):
    """The example indices of the next batch, (batch_size,) int64.

    The saved position says ``position`` examples of epoch ``epoch``'s order are read. The
    batch takes the rest of that order, then the orders of the following epochs (each its own
    permutation), until it holds batch_size indices: with batch_size > count it spans more
    than two epochs.
    """
    needed = position + batch_size  # read from the start of epoch `epoch`, then drop `position`
    epochs = -(-needed // count)  # the epochs this batch reaches into
    stream = np.concatenate([epoch_order(count, seed, epoch + i) for i in range(epochs)])
    return stream[position:needed].astype(np.int64)
