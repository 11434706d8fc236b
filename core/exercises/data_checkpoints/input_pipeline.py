"""Exercises of the lesson "Design an input pipeline": the share of an epoch's rows that are
padding (predict), and one epoch of a shuffled, batched, padded or dropped index stream
(code)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.data_checkpoints._shared import (
    PHASE,
    as_int_array,
    first_difference,
    reference_order,
)


class PaddingShare(PredictItem):
    """Padding keeps one batch shape (one compiled program) at a price: the rows of the last
    batch that hold no example are computed anyway."""

    id = "data_checkpoints.input_pipeline.padding_share"
    phase = PHASE
    lesson = "input_pipeline"
    title = "The share of an epoch's rows that are padding"
    units = "%"
    # 1% of the value: two decimals are enough; every planted mistake lies at least 3% away
    rel_tol = 0.01
    MISTAKE_GAP = 0.03
    hints = (
        "The model computes on every row of every batch, padding included. How many batches "
        "does the epoch have, and how many rows do they hold together?",
        "ceil(N / B) batches of B rows each; N of those rows are examples, the rest of the "
        "last batch is padding (mask False).",
        "padding share = (ceil(N/B)·B − N) / (ceil(N/B)·B) × 100: the padding rows over ALL "
        "rows computed, not over the N examples.",
    )

    @staticmethod
    def _rows(params) -> tuple[int, int]:
        n, b = params["examples"], params["batch_size"]
        batches = -(-n // b)
        return batches * b, batches * b - n

    def params(self, generator):
        while True:
            params = {
                "examples": int(generator.integers(10, 201)),
                "batch_size": int(generator.integers(4, 65)),
                "seed": int(generator.integers(0, 10_000)),
            }
            rows, padding = self._rows(params)
            if padding == 0 or rows // params["batch_size"] < 2:
                continue  # no padding to count, or one batch only
            value = 100 * padding / rows
            wrongs = self._wrong_values(params).values()
            if all(abs(w - value) > self.MISTAKE_GAP * value for w in wrongs):
                return params

    def prompt(self, params) -> str:
        n, b = params["examples"], params["batch_size"]
        return (
            f"The lesson's pipeline batches **N = {n}** examples with **batch size B = {b}**, "
            "drop_remainder off: every batch has B rows, the last one padded, the mask saying "
            "which rows are real. **Predict the share of all the rows the model computes on in "
            "one epoch that are padding**, in percent; the lesson's library then builds the "
            f"epoch (`data.batches`, seed {params['seed']}) and counts the masked-out rows."
        )

    def live(self, params) -> float:
        from core import data

        features, classes = 3, 4
        source = data.ColumnSource(
            data.make_columns(params["seed"], params["examples"], features, classes)
        )
        contract = data.classification_contract(features, classes)
        batched = data.batches(source, contract, params["batch_size"], params["seed"])
        rows = sum(len(batch["mask"]) for batch in batched)
        padding = sum(int((~batch["mask"]).sum()) for batch in batched)
        return 100 * padding / rows

    def derive(self, params):
        n, b = params["examples"], params["batch_size"]
        rows, padding = self._rows(params)
        value = 100 * padding / rows
        return value, (
            f"ceil({n} / {b}) = **{rows // b} batches** of {b} rows: **{rows} rows** computed "
            f"per epoch, {n} of them examples, so the last batch carries **{padding} padding "
            f"rows**: {padding} / {rows} = **{value:.3g}%** of the epoch's compute is on "
            "padding (the mask keeps it out of the loss, not out of the matmuls). The share "
            "is at most (B − 1) / (ceil(N/B)·B): small when an epoch has many batches, large "
            "when B is close to N. drop_remainder=True removes it by leaving "
            f"{n % b} examples out of each epoch instead."
        )

    def _wrong_values(self, params) -> dict[str, float]:
        n, b = params["examples"], params["batch_size"]
        rows, padding = self._rows(params)
        return {
            "padding over the N examples, not over all rows": 100 * padding / n,
            "the remainder's share: (N mod B) over all rows": 100 * (n % b) / rows,
            "padding over one batch, not the epoch": 100 * padding / b,
        }

    def wrong(self, params, expected):
        return self._wrong_values(params)


_STUB = '''\
import numpy as np


def epoch_order(count, seed, epoch):
    """The example order of epoch `epoch`: a permutation of range(count), seeded by
    (seed, epoch) (the course's data.epoch_order)."""
    return np.random.default_rng([seed, epoch]).permutation(count)


def epoch_batches(count, batch_size, seed, epoch, drop_remainder):
    """One epoch of the pipeline's batches, as example indices.

    Shuffle the count examples (epoch_order: a new order every epoch), cut the order into
    batches of batch_size. The last batch, when short, is padded (index 0, mask False) or,
    with drop_remainder, left out. Returns (index_KB, mask_KB): int array and bool array of
    shape (K, batch_size), K the number of batches (K = 0 when no batch is left).
    """
    raise NotImplementedError
'''

_SAME_ORDER = """\
import numpy as np


def epoch_batches(count, batch_size, seed, epoch, drop_remainder):
    order = np.random.default_rng(seed).permutation(count)  # one order for every epoch
    batches = count // batch_size if drop_remainder else -(-count // batch_size)
    order = order[: batches * batch_size]
    index = np.zeros(batches * batch_size, np.int64)
    mask = np.zeros(batches * batch_size, bool)
    index[: len(order)], mask[: len(order)] = order, True
    return index.reshape(batches, batch_size), mask.reshape(batches, batch_size)
"""

_BATCHES_SHUFFLED = """\
import numpy as np


def epoch_batches(count, batch_size, seed, epoch, drop_remainder):
    # cut range(count) into batches first, then shuffle the batches: the same groups every epoch
    batches = count // batch_size if drop_remainder else -(-count // batch_size)
    order = np.arange(batches * batch_size)
    index = np.where(order < count, order, 0).reshape(batches, batch_size)
    mask = (order < count).reshape(batches, batch_size)
    shuffle = np.random.default_rng([seed, epoch]).permutation(batches)
    return index[shuffle], mask[shuffle]
"""

_PADDING_REAL = """\
import numpy as np


def epoch_batches(count, batch_size, seed, epoch, drop_remainder):
    order = np.random.default_rng([seed, epoch]).permutation(count)
    batches = count // batch_size if drop_remainder else -(-count // batch_size)
    order = order[: batches * batch_size]
    index = np.zeros(batches * batch_size, np.int64)
    index[: len(order)] = order
    mask = np.ones((batches, batch_size), bool)  # every row counted, padding too
    return index.reshape(batches, batch_size), mask
"""

_ALWAYS_PADDED = """\
import numpy as np


def epoch_batches(count, batch_size, seed, epoch, drop_remainder):
    order = np.random.default_rng([seed, epoch]).permutation(count)
    batches = -(-count // batch_size)  # drop_remainder ignored: always padded
    index = np.zeros(batches * batch_size, np.int64)
    mask = np.zeros(batches * batch_size, bool)
    index[:count], mask[:count] = order, True
    return index.reshape(batches, batch_size), mask.reshape(batches, batch_size)
"""


def reference_batches(
    count: int, batch_size: int, seed: int, epoch: int, drop_remainder: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The epoch's (index_KB, mask_KB), row by row in a Python loop over the NumPy order."""
    order = reference_order(count, seed, epoch)
    index, mask, row = [], [], []
    for example in order:
        row.append(int(example))
        if len(row) == batch_size:
            index.append(row)
            mask.append([True] * batch_size)
            row = []
    if row and not drop_remainder:
        mask.append([True] * len(row) + [False] * (batch_size - len(row)))
        index.append(row + [0] * (batch_size - len(row)))
    shape = (len(index), batch_size)
    return np.asarray(index, np.int64).reshape(shape), np.asarray(mask, bool).reshape(shape)


class EpochBatches(CodeItem):
    id = "data_checkpoints.input_pipeline.epoch_batches"
    phase = PHASE
    lesson = "input_pipeline"
    title = "A shuffled, batched, padded index stream"
    function_name = "epoch_batches"
    stub = _STUB
    solution_module = "core.exercises.solutions.epoch_batches"
    hints = (
        "Three steps, in this order: shuffle the examples (not the batches), cut the order "
        "into rows of B, then decide what happens to a short last row.",
        "K = ceil(N / B) batches when padding, N // B with drop_remainder. Padded slots hold "
        "index 0 and mask False; with B > N and drop_remainder there is no batch: arrays of "
        "shape (0, B).",
        "order = epoch_order(count, seed, epoch); keep order[:K·B] when dropping; write it "
        "into a zero int64 array of K·B entries, set mask True on the first len(order), and "
        "reshape both to (K, B).",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `epoch_batches(count, batch_size, seed, epoch, drop_remainder)`: the "
            "lesson's pipeline as example indices, the order the model sees in one epoch. The "
            "hidden tests compare your (index, mask) arrays exactly with a row-by-row NumPy "
            "loop: padded and dropped, epoch 0 and a later epoch, N a multiple of B, a batch "
            "larger than the data set (padded: one batch; dropped: none), and tens of "
            "thousands of examples."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "one order for every epoch (seeded by seed alone)": _SAME_ORDER,
            "the batches shuffled, not the examples": _BATCHES_SHUFFLED,
            "padding rows marked real (mask all True)": _PADDING_REAL,
            "drop_remainder ignored: the short batch always padded": _ALWAYS_PADDED,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)

        def short(low, high, batch):
            while True:  # a count that leaves a short last batch
                count = int(generator.integers(low, high))
                if count % batch:
                    return count

        batch = int(generator.integers(3, 9))
        multiple = int(generator.integers(3, 9))
        tiny = int(generator.integers(2, 6))
        big_batch = int(generator.integers(500, 1500))
        cases = [
            ("padded, epoch 0", short(10, 50, batch), batch, 0, False),
            ("padded, a later epoch", short(10, 50, batch), batch, int(generator.integers(1, 10)),
             False),
            ("drop_remainder", short(10, 50, batch), batch, int(generator.integers(0, 10)), True),
            ("N a multiple of B, drop_remainder", multiple * batch, batch, 3, True),
            ("a batch larger than the data set, padded: one batch", tiny, tiny + 3, 1, False),
            ("a batch larger than the data set, dropped: no batch", tiny, tiny + 3, 1, True),
            ("tens of thousands of examples", short(20_000, 40_000, big_batch), big_batch,
             int(generator.integers(0, 100)), False),
        ]  # fmt: skip
        tests = []
        for name, count, batch_size, epoch, drop in cases:
            data_seed = int(generator.integers(0, 2**31))
            label = f"{name} (N {count}, B {batch_size}, epoch {epoch})"
            got = function(count, batch_size, data_seed, epoch, drop)
            expected = reference_batches(count, batch_size, data_seed, epoch, drop)
            tests.append(self._compare(label, got, *expected))
        return tests

    @staticmethod
    def _compare(name, got, index, mask) -> HiddenTest:
        if not isinstance(got, tuple | list) or len(got) != 2:
            return HiddenTest(name, False, "expected a pair (index_KB, mask_KB)")
        got_index, why = as_int_array(got[0], "index_KB", index.shape)
        if got_index is None:
            return HiddenTest(name, False, why)
        got_mask, why = as_int_array(got[1], "mask_KB", mask.shape)
        if got_mask is None:
            return HiddenTest(name, False, why)
        if not np.isin(got_mask, (0, 1)).all():
            return HiddenTest(name, False, "mask_KB holds values other than True and False")
        problems = []
        if not np.array_equal(got_mask.astype(bool), mask):
            problems.append("mask: " + first_difference(got_mask, mask.astype(np.int64)))
        if not np.array_equal(got_index, index):
            problems.append("index: " + first_difference(got_index, index))
        shape = f"{index.shape[0]} batches of {index.shape[1]}"
        return HiddenTest(name, not problems, "; ".join(problems) or f"exactly equal ({shape})")
