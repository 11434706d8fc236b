"""MicroBatcher: batched results equal the unbatched ones bit for bit and in order, batches
respect max_batch and max_wait, many threads at once, errors reach every caller of a batch,
close() drains or fails what is pending and leaves no thread. Each property is also run
against a deliberately broken batcher (or model) that it must catch."""

import threading

import numpy as np
import pytest

from core.serving import batching

W_F = np.linspace(-1.5, 2.0, 8).astype(np.float32)


def rowwise(x_BF):
    """A per-row model (no reduction across rows): its row for x is the same in any batch."""
    return np.cumsum(np.tanh(x_BF * W_F), axis=1, dtype=np.float32)


def batch_mixing(x_BF):
    """A model whose rows depend on the rest of the batch (batch statistics)."""
    return rowwise(x_BF - x_BF.mean(axis=0, keepdims=True))


class Gate:
    """run_batch that blocks on an event (so requests pile up) and records every batch."""

    def __init__(self, fn=rowwise):
        self.fn, self.open, self.batches = fn, threading.Event(), []
        self.started = threading.Event()

    def __call__(self, x_BF):
        self.started.set()
        self.open.wait(10)
        self.batches.append(x_BF.copy())
        return self.fn(x_BF)


class Reversed(batching.MicroBatcher):
    """Broken: hands the rows of a batch out in reverse."""

    def _run(self, batch):
        futures = [p.future for p in batch][::-1]
        swapped = zip(batch, futures, strict=True)
        super()._run([batching._Pending(p.x, f, p.t_submit) for p, f in swapped])


class Greedy(batching.MicroBatcher):
    """Broken: ignores max_batch once requests pile up."""

    def _take(self):
        batch = super()._take()
        with self._cond:
            while batch and self._queue:
                batch.append(self._queue.popleft())
        return batch


def requests(n, seed=0):
    return np.random.default_rng(seed).uniform(0, 16, (n, 8)).astype(np.float32)


def batched_results(model, x_NF, cls=batching.MicroBatcher, max_batch=8, pile_up=True):
    gate = Gate(model)
    with cls(gate, max_batch=max_batch, max_wait_s=0.05) as batcher:
        if not pile_up:
            gate.open.set()
        fs = [batcher.submit(x) for x in x_NF]
        gate.open.set()
        got = np.stack([f.result(10) for f in fs])
    return got, gate.batches, batcher.stats()


def equals_unbatched(model, cls=batching.MicroBatcher):
    x = requests(37)
    got, batches, stats = batched_results(model, x, cls)
    want = np.stack([model(row[None])[0] for row in x])
    assert stats.largest_batch > 1  # there was batching to get wrong
    return np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_batched_results_equal_unbatched_bitwise():
    assert equals_unbatched(rowwise)


def test_the_bitwise_check_catches_a_batch_dependent_model_and_a_row_mixup():
    assert not equals_unbatched(batch_mixing)
    assert not equals_unbatched(rowwise, Reversed)


@pytest.mark.parametrize("cls,ok", [(batching.MicroBatcher, True), (Reversed, False)])
def test_order_is_kept(cls, ok):
    x = requests(30, seed=1)
    got, batches, _ = batched_results(rowwise, x, cls, max_batch=7)
    assert np.array_equal(np.concatenate(batches), x)  # batches in submission order
    assert np.array_equal(got, rowwise(x)) is ok


@pytest.mark.parametrize("cls,ok", [(batching.MicroBatcher, True), (Greedy, False)])
def test_max_batch_is_respected(cls, ok):
    x = requests(40, seed=2)
    _, batches, stats = batched_results(rowwise, x, cls, max_batch=6)
    sizes = [len(b) for b in batches]
    assert sum(sizes) == 40 and stats.requests == 40 and stats.batches == len(batches)
    assert (max(sizes) <= 6) is ok
    if ok:  # the pile-up behind the first batch fills the next ones
        assert stats.largest_batch == 6
        assert stats.sizes == {s: sizes.count(s) for s in set(sizes)}
        assert stats.max_queue_depth >= 30


def test_one_request_is_flushed_after_max_wait():
    seen = []
    clock = batching.time.monotonic

    def model(x_BF):
        seen.append((clock(), len(x_BF)))
        return rowwise(x_BF)

    with batching.MicroBatcher(model, max_batch=64, max_wait_s=0.2) as batcher:
        t0 = clock()
        y = batcher.submit(requests(1)[0]).result(10)  # resolves with no more requests coming
        assert np.array_equal(y, rowwise(requests(1))[0])
        assert seen[0][1] == 1
        assert seen[0][0] - t0 >= 0.2 * 0.99  # it did wait for company first


def test_unbatched_settings_run_one_request_per_call():
    for max_batch, max_wait in [(1, 0.05), (16, 0.0)]:
        gate = Gate()
        with batching.MicroBatcher(gate, max_batch=max_batch, max_wait_s=max_wait) as b:
            assert b.unbatched
            fs = [b.submit(x) for x in requests(10)]
            gate.open.set()
            [f.result(10) for f in fs]
        assert [len(x) for x in gate.batches] == [1] * 10


def test_many_threads_at_once():
    x = requests(16 * 40, seed=3).reshape(16, 40, 8)
    errors = []
    with batching.MicroBatcher(rowwise, max_batch=8, max_wait_s=0.002) as batcher:

        def client(i):
            for row in x[i]:
                got = batcher(row, timeout=10)
                if not np.array_equal(got, rowwise(row[None])[0]):
                    errors.append(i)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
        [t.start() for t in threads]
        [t.join(60) for t in threads]
        stats = batcher.stats()
    assert not errors
    assert stats.requests == 640 and sum(s * c for s, c in stats.sizes.items()) == 640
    assert stats.largest_batch <= 8 and stats.queue_depth == 0


def test_an_error_goes_to_every_future_of_its_batch_and_the_next_batch_runs():
    def model(x_BF):
        if (x_BF < 0).any():
            raise ArithmeticError("negative input")
        return rowwise(x_BF)

    gate = Gate(model)
    with batching.MicroBatcher(gate, max_batch=4, max_wait_s=5.0) as batcher:  # full batches
        first = [batcher.submit(x) for x in requests(4)]
        gate.started.wait(10)
        bad = [batcher.submit(x) for x in requests(3, seed=4) * np.float32(-1)]
        bad.append(batcher.submit(requests(1)[0]))  # a good row in a bad batch fails too
        after = [batcher.submit(x) for x in requests(4, seed=6)]
        gate.open.set()
        for f in bad:
            with pytest.raises(ArithmeticError, match="negative input"):
                f.result(10)
        rows = np.concatenate([requests(4), requests(4, seed=6)])
        for f, x in zip(first + after, rows, strict=True):
            assert np.array_equal(f.result(10), rowwise(x[None])[0])
        assert batcher.stats().failed_batches == 1 and batcher.stats().batches == 3


def test_a_wrong_output_size_is_an_error_for_the_batch():
    with batching.MicroBatcher(lambda x: x[:1], max_batch=4, max_wait_s=0.05) as batcher:
        fs = [batcher.submit(x) for x in requests(3)]
        for f in fs:
            with pytest.raises(ValueError, match="one row per request"):
                f.result(10)


def batcher_threads():
    return [t for t in threading.enumerate() if t.name == "batcher-under-test"]


@pytest.mark.parametrize("drain", [True, False])
def test_close_with_pending_requests(drain):
    gate = Gate()
    batcher = batching.MicroBatcher(gate, 4, 0.05, name="batcher-under-test")
    running = batcher.submit(requests(1)[0])
    gate.started.wait(10)  # the first batch is in run_batch, the rest wait in the queue
    pending = [batcher.submit(x) for x in requests(9, seed=5)]
    closer = threading.Thread(target=batcher.close, kwargs={"drain": drain})
    closer.start()
    for _ in range(1000):
        if batcher.closed:
            break
        closer.join(0.01)
    with pytest.raises(batching.BatcherClosed):
        batcher.submit(requests(1)[0])
    gate.open.set()
    closer.join(10)
    assert not closer.is_alive() and not batcher.running and not batcher_threads()
    assert np.array_equal(running.result(0), rowwise(requests(1))[0])  # in flight: finished
    for x, f in zip(requests(9, seed=5), pending, strict=True):
        if drain:
            assert np.array_equal(f.result(0), rowwise(x[None])[0])
        else:
            with pytest.raises(batching.BatcherClosed):
                f.result(0)
    assert batcher.stats().requests == (10 if drain else 1)
    batcher.close()  # a second close is harmless


def test_a_full_queue_refuses_and_a_cancelled_request_is_skipped():
    gate = Gate()
    with batching.MicroBatcher(gate, 4, 0.05, max_queue=3) as batcher:
        batcher.submit(requests(1)[0])
        gate.started.wait(10)
        queued = [batcher.submit(x) for x in requests(3)]
        with pytest.raises(batching.QueueFull):
            batcher.submit(requests(1)[0])
        assert batcher.queue_depth == 3
        assert queued[1].cancel()
        gate.open.set()
        assert queued[2].result(10) is not None
    assert batcher.stats().requests == 3  # 1 + the 2 not cancelled


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"max_batch": 0}, "max_batch"),
        ({"max_batch": 2.0}, "max_batch"),
        ({"max_batch": True}, "max_batch"),
        ({"max_wait_s": -0.001}, "max_wait_s"),
        ({"max_wait_s": 60}, "max_wait_s"),
        ({"max_wait_s": "1"}, "max_wait_s"),
        ({"max_queue": 0}, "max_queue"),
        ({"run_batch": None}, "callable"),
    ],
)
def test_bad_settings_are_refused(kwargs, match):
    args = {"run_batch": rowwise, "max_batch": 4, "max_wait_s": 0.01} | kwargs
    with pytest.raises(ValueError, match=match):
        batching.MicroBatcher(**args)


def test_bad_rows_are_refused():
    with batching.MicroBatcher(rowwise, 4, 0.01) as batcher:
        for bad in (np.float32(1.0), np.zeros(0, np.float32), np.array([None, 1])):
            with pytest.raises(ValueError, match="row"):
                batcher.submit(bad)
        batcher(requests(1)[0], 10)
        with pytest.raises(ValueError, match=r"shape \(7,\)"):
            batcher.submit(np.zeros(7, np.float32))
        with pytest.raises(ValueError, match="dtype float64"):
            batcher.submit(np.zeros(8))
