"""Exercises of the lesson "Recover data position and resume": how many examples the lesson's
Grain pipeline has fed the run at its step-K checkpoint (predict), and the next batch of a
sampler restored from (seed, epoch, position), across epoch boundaries (code)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.data_checkpoints._shared import PHASE, equal_test, reference_order


class ExamplesRead(PredictItem):
    """The lesson's pipeline pads the last batch of every epoch, so a checkpoint's batch count
    is not examples / B: K batches hold K // bpe whole epochs and K % bpe full batches."""

    id = "data_checkpoints.resume_data_position.examples_read"
    phase = PHASE
    lesson = "resume_data_position"
    title = "Examples read at the step-K checkpoint"
    units = "examples"
    rel_tol = 0.0
    abs_tol = 0.5  # a count: exact (every planted mistake is at least one example away)
    hints = (
        "Grain's position in the checkpoint is a batch count: `{'next_index': K}`. How many "
        "batches does one epoch take, when the last one is padded and batches never straddle "
        "two epochs?",
        "One epoch is ceil(N / B) batches and N real examples (its last batch holds the "
        "remainder plus padding). K batches are K // ceil(N/B) whole epochs and then K % "
        "ceil(N/B) full batches of the next epoch.",
        "examples read = (K // ceil(N/B)) · N + (K % ceil(N/B)) · B. K · B counts the "
        "padding rows as examples.",
    )

    def params(self, generator):
        while True:
            count = int(generator.integers(20, 101))
            batch = int(generator.integers(3, 17))
            per_epoch = -(-count // batch)
            if count % batch == 0 or per_epoch < 3:
                continue  # no padding, or too few batches for an epoch boundary to matter
            steps = int(generator.integers(per_epoch + 1, 3 * per_epoch))
            if steps % per_epoch:  # inside an epoch: both partial counts are in play
                seed = int(generator.integers(0, 10_000))  # the order; not the count
                return {"examples": count, "batch_size": batch, "steps": steps, "seed": seed}

    def prompt(self, params) -> str:
        n, b, k = params["examples"], params["batch_size"], params["steps"]
        return (
            f"The lesson's trainer reads **N = {n}** examples in batches of **B = {b}** from "
            "its Grain pipeline (`recovery_demo.pipeline`: shuffled again every epoch, the last "
            "batch of each epoch padded to B rows with a mask, so a batch never holds two "
            f"epochs). Its checkpoint at step **K = {k}** stores Grain's position "
            f"`{{'next_index': {k}}}`. **Predict how many real examples** (padding rows not "
            f"counted) the run has trained on in steps 1..{k}; the lesson's library then runs "
            f"the pipeline for {k} batches and counts the masked rows."
        )

    def live(self, params) -> float:
        from core import data
        from core.state import recovery_demo

        config = recovery_demo.TrainConfig(
            seed=params["seed"], examples=params["examples"], batch_size=params["batch_size"]
        )
        iterator = data.grain_iterator(recovery_demo.pipeline(config))
        read = data.take_ids(iterator, params["steps"])
        if iterator.get_state() != {"next_index": params["steps"]}:  # the lesson's claim
            raise AssertionError(f"Grain's position after {params['steps']} batches")
        return float(sum(len(ids) for ids in read))

    @staticmethod
    def _parts(params) -> tuple[int, int, int]:
        per_epoch = -(-params["examples"] // params["batch_size"])
        return per_epoch, params["steps"] // per_epoch, params["steps"] % per_epoch

    def derive(self, params):
        n, b, k = params["examples"], params["batch_size"], params["steps"]
        per_epoch, epochs, rest = self._parts(params)
        value = epochs * n + rest * b
        return float(value), (
            f"An epoch is ceil({n} / {b}) = **{per_epoch} batches**: {per_epoch - 1} full ones "
            f"and a last one with {n - (per_epoch - 1) * b} real rows and "
            f"{per_epoch * b - n} padding rows. K = {k} batches are {k} // {per_epoch} = "
            f"**{epochs} whole epochs** ({epochs * n} examples) and {k} % {per_epoch} = "
            f"**{rest} full batches** of epoch {epochs} ({rest * b} examples): "
            f"**{value} examples**. The fresh process that restores `{{'next_index': {k}}}` "
            f"reads batch {rest} of epoch {epochs} next. A sampler that batches the stream of "
            f"epochs (no padding, batches run across the boundary, like grain.DataLoader) "
            f"would have read K·B = {k * b} instead: the code exercise below."
        )

    def wrong(self, params, expected):
        n, b, k = params["examples"], params["batch_size"], params["steps"]
        _per_epoch, epochs, rest = self._parts(params)
        return {
            "K·B: padding rows counted as examples": k * b,
            "whole epochs only: the partial epoch left out": epochs * n,
            "this epoch's batches only": rest * b,
        }


_STUB = '''\
import numpy as np


def epoch_order(count, seed, epoch):
    """The example order of epoch `epoch`: a permutation of range(count), seeded by
    (seed, epoch) (the course's data.epoch_order)."""
    return np.random.default_rng([seed, epoch]).permutation(count)


def next_batch(seed, epoch, position, count, batch_size):
    """The example indices of the next batch after a restart, as an uninterrupted run reads it.

    The sampler shuffles every epoch (epoch_order) and batches the stream of epochs: a batch
    may end one epoch and begin the next (as grain.DataLoader's Batch after an IndexSampler).
    The checkpoint saved (seed, epoch, position): `position` examples of epoch `epoch`'s order
    are already read, 0 <= position < count. Returns a (batch_size,) int array; batch_size may
    exceed count.
    """
    raise NotImplementedError
'''

_RESTART_EPOCH = """\
import numpy as np


def epoch_order(count, seed, epoch):
    return np.random.default_rng([seed, epoch]).permutation(count)


def next_batch(seed, epoch, position, count, batch_size):
    # the epoch is restored, the position within it is not: the epoch starts over
    epochs = -(-batch_size // count)
    stream = np.concatenate([epoch_order(count, seed, epoch + i) for i in range(epochs)])
    return stream[:batch_size]
"""

_OLD_PERMUTATION = """\
import numpy as np


def epoch_order(count, seed, epoch):
    return np.random.default_rng([seed, epoch]).permutation(count)


def next_batch(seed, epoch, position, count, batch_size):
    # past the boundary the saved epoch's order is read again, not the next epoch's
    order = epoch_order(count, seed, epoch)
    repeats = -(-(position + batch_size) // count)
    return np.tile(order, repeats)[position : position + batch_size]
"""

_SKIPS_A_BATCH = """\
import numpy as np


def epoch_order(count, seed, epoch):
    return np.random.default_rng([seed, epoch]).permutation(count)


def next_batch(seed, epoch, position, count, batch_size):
    # the saved position taken as the batch being read when the checkpoint was written
    start = position + batch_size
    epochs = -(-(start + batch_size) // count)
    stream = np.concatenate([epoch_order(count, seed, epoch + i) for i in range(epochs)])
    return stream[start : start + batch_size]
"""

_STOPS_AT_EPOCH_END = """\
import numpy as np


def epoch_order(count, seed, epoch):
    return np.random.default_rng([seed, epoch]).permutation(count)


def next_batch(seed, epoch, position, count, batch_size):
    # one epoch's order only: a batch that reaches the boundary comes back short
    return epoch_order(count, seed, epoch)[position : position + batch_size]
"""


def replay(seed: int, count: int, batch_size: int, steps: int) -> list[tuple[int, int, np.ndarray]]:
    """The uninterrupted run, one example at a time: for steps 1..steps, the sampler's state
    (epoch, position) before that step's batch, and the batch. The independent reference: it
    never jumps to a position, it walks there."""
    epoch, position, order = 0, 0, reference_order(count, seed, 0)
    run = []
    for _ in range(steps):
        state, batch = (epoch, position), []
        for _ in range(batch_size):
            batch.append(int(order[position]))
            position += 1
            if position == count:  # the epoch is used up: the next one is a new permutation
                epoch, position = epoch + 1, 0
                order = reference_order(count, seed, epoch)
        run.append((*state, np.asarray(batch, np.int64)))
    return run


class NextBatch(CodeItem):
    id = "data_checkpoints.resume_data_position.next_batch"
    phase = PHASE
    lesson = "resume_data_position"
    title = "The next batch after a restart"
    function_name = "next_batch"
    stub = _STUB
    solution_module = "core.exercises.solutions.next_batch"
    hints = (
        "`position` examples of epoch `epoch`'s order are gone; the batch starts at "
        "order[position]. What happens when fewer than batch_size examples are left in it?",
        "The rest of the epoch is not enough: carry on with epoch + 1's order, a new "
        "permutation (epoch_order(count, seed, epoch + 1)), not the saved epoch's again. With "
        "batch_size > count, epoch + 2 and later too.",
        "Concatenate epoch_order(count, seed, epoch + i) for i = 0, 1, ... until it holds "
        "position + batch_size indices, and return stream[position : position + batch_size].",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `next_batch(seed, epoch, position, count, batch_size)`: a fresh process "
            "restored the sampler's state from a checkpoint and must read the batch the "
            "uninterrupted run would read next. The hidden tests replay whole runs from step "
            "0, example by example, stop at a step, and give you the state the run had there: "
            "inside an epoch, at an epoch's first example, across an epoch boundary, with a "
            "batch larger than the data set, and hundreds of epochs in. Indices must be "
            "exactly equal."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "the epoch restarts: the position within it is lost": _RESTART_EPOCH,
            "the saved epoch's permutation reused after the boundary": _OLD_PERMUTATION,
            "off by one batch: the batch after the next": _SKIPS_A_BATCH,
            "the batch stops at the epoch's end (the padded pipeline's habit)": (
                _STOPS_AT_EPOCH_END
            ),
        }

    @staticmethod
    def _pick(run, accept, generator):
        steps = [step for step in run if accept(*step[:2])]
        if not steps:
            raise AssertionError("no step of the replayed run has the case's state")
        return steps[int(generator.integers(len(steps)))]

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        tests = []

        def case(name, count, batch_size, steps, accept):
            sampler_seed = int(generator.integers(0, 2**31))
            run = replay(sampler_seed, count, batch_size, steps)
            epoch, position, expected = self._pick(run, accept, generator)
            got = function(sampler_seed, epoch, position, count, batch_size)
            label = (
                f"{name} (count {count}, batch {batch_size}, epoch {epoch}, position {position})"
            )
            tests.append(equal_test(label, got, expected, "the batch"))

        def sizes(low, high):
            while True:  # the epoch's last batch is short: batches cross the boundary
                count, batch = int(generator.integers(low, high)), int(generator.integers(3, 9))
                if count % batch:
                    return count, batch

        count, batch = sizes(20, 61)
        inside = lambda e, p: e >= 1 and 0 < p and p + batch <= count  # noqa: E731
        case("inside a later epoch", count, batch, 4 * count // batch, inside)
        count, batch = sizes(20, 61)
        across = lambda e, p: p + batch > count  # noqa: E731
        case("across an epoch boundary", count, batch, 4 * count // batch, across)
        # An epoch whose first example starts a batch, after epochs that ended mid-batch: the
        # first such step is at lcm(count, batch) examples.
        count, batch = sizes(10, 41)
        steps = 2 * int(np.lcm(count, batch)) // batch + 1
        case("at an epoch's first example", count, batch, steps, lambda e, p: e >= 1 and p == 0)
        count = int(generator.integers(3, 7))
        batch = int(generator.integers(2 * count + 1, 3 * count))  # never a multiple of count
        case(
            "a batch larger than the data set (it spans three or four epochs)",
            count, batch, 6, lambda e, p: p > 0,
        )  # fmt: skip
        count, batch = int(generator.integers(30, 51)), int(generator.integers(7, 14))
        steps = 300 * count // batch
        case("hundreds of epochs in", count, batch, steps, lambda e, p: e >= 250)
        return tests
