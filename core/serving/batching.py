"""Micro-batching: many single requests, one model call.

A MicroBatcher owns one background thread. ``submit(x_F)`` queues one request row and returns
a ``concurrent.futures.Future``; the thread takes the oldest request, keeps collecting until
``max_batch`` rows are waiting or ``max_wait_s`` has elapsed since that first request, stacks
them into ``x_BF``, calls ``run_batch(x_BF) -> y_BK`` once and resolves each future with its
own row ``y_BK[i]`` (a copy), in submission order. An exception from ``run_batch`` (or an
output of the wrong leading size) goes to every future of that batch and the thread carries on.

``max_batch=1`` or ``max_wait_s=0`` is the unbatched service: every request is its own call.

``close()`` stops new submissions, then either drains the queue (``drain=True``: every pending
request still runs) or fails every pending future with ``BatcherClosed``; it joins the thread,
so no thread is left behind. ``stats()`` holds the counters (batches, requests, the batch size
histogram, failed batches, the queue depth now and its maximum).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable
from concurrent import futures

import numpy as np


class BatcherClosed(RuntimeError):
    """The batcher was closed: the request was not (or will not be) run."""


class QueueFull(RuntimeError):
    """The batcher's queue holds ``max_queue`` requests already (the caller should shed load)."""


@dataclasses.dataclass(frozen=True)
class Stats:
    """Counters of one MicroBatcher since it started."""

    batches: int
    requests: int
    failed_batches: int
    sizes: dict[int, int]  # batch size -> how many batches had it
    queue_depth: int
    max_queue_depth: int

    @property
    def mean_batch(self) -> float:
        return self.requests / self.batches if self.batches else 0.0

    @property
    def largest_batch(self) -> int:
        return max(self.sizes, default=0)


@dataclasses.dataclass
class _Pending:
    x: np.ndarray
    future: futures.Future
    t_submit: float


class MicroBatcher:
    """Collect single requests into batches for ``run_batch`` on one background thread."""

    def __init__(
        self,
        run_batch: Callable[[np.ndarray], np.ndarray],
        max_batch: int,
        max_wait_s: float,
        *,
        max_queue: int | None = None,
        name: str = "micro-batcher",
        clock: Callable[[], float] = time.monotonic,
    ):
        if not callable(run_batch):
            raise ValueError(f"run_batch must be callable, got {type(run_batch).__name__}")
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be an integer >= 1, got {max_batch!r}")
        if isinstance(max_wait_s, bool) or not isinstance(max_wait_s, int | float):
            raise ValueError(f"max_wait_s must be a number of seconds, got {max_wait_s!r}")
        if not (0.0 <= float(max_wait_s) <= 10.0):
            raise ValueError(f"max_wait_s must be in [0, 10] seconds, got {max_wait_s!r}")
        if max_queue is not None and (
            isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1
        ):
            raise ValueError(f"max_queue must be an integer >= 1 or None, got {max_queue!r}")
        self.run_batch = run_batch
        self.unbatched = max_batch == 1 or float(max_wait_s) == 0.0
        self.max_batch = 1 if self.unbatched else max_batch
        self.max_wait_s = float(max_wait_s)
        self.max_queue = max_queue
        self._clock = clock
        self._queue: collections.deque[_Pending] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._row_shape: tuple[int, ...] | None = None
        self._row_dtype: np.dtype | None = None
        self._batches = 0
        self._requests = 0
        self._failed = 0
        self._sizes: collections.Counter[int] = collections.Counter()
        self._max_depth = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # --- client side ---------------------------------------------------------------------

    def submit(self, x_F) -> futures.Future:
        """Queue one request row; its Future resolves to the model's row for it.

        Every row must have the shape and dtype of the first one submitted (ValueError)."""
        x = np.asarray(x_F)
        if x.ndim < 1 or x.size == 0:
            raise ValueError(f"a request is one non-empty row (ndim >= 1), got shape {x.shape}")
        if x.dtype == object:
            raise ValueError("a request row must be numeric, got dtype object")
        future: futures.Future = futures.Future()
        with self._cond:
            if self._closed:
                raise BatcherClosed("the batcher is closed; no new requests are accepted")
            if self._row_shape is None:
                self._row_shape, self._row_dtype = x.shape, x.dtype
            elif x.shape != self._row_shape or x.dtype != self._row_dtype:
                raise ValueError(
                    f"request row has shape {x.shape} dtype {x.dtype}; this batcher's rows are "
                    f"shape {self._row_shape} dtype {self._row_dtype}"
                )
            if self.max_queue is not None and len(self._queue) >= self.max_queue:
                raise QueueFull(f"{len(self._queue)} requests are queued (max_queue)")
            self._queue.append(_Pending(np.array(x, copy=True), future, self._clock()))
            self._max_depth = max(self._max_depth, len(self._queue))
            self._cond.notify_all()
        return future

    def __call__(self, x_F, timeout: float | None = None) -> np.ndarray:
        """submit and wait: the row of ``run_batch`` for ``x_F``."""
        return self.submit(x_F).result(timeout)

    @property
    def queue_depth(self) -> int:
        with self._cond:
            return len(self._queue)

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stats(self) -> Stats:
        with self._cond:
            return Stats(
                batches=self._batches,
                requests=self._requests,
                failed_batches=self._failed,
                sizes=dict(sorted(self._sizes.items())),
                queue_depth=len(self._queue),
                max_queue_depth=self._max_depth,
            )

    def close(self, drain: bool = True, timeout: float | None = 30.0) -> None:
        """Stop accepting; run (drain) or fail (BatcherClosed) what is queued; join the thread.

        RuntimeError if the thread is still busy after ``timeout`` seconds (a stuck
        run_batch); calling close again is harmless."""
        with self._cond:
            self._closed = True
            if not drain:
                while self._queue:
                    pending = self._queue.popleft()
                    if pending.future.set_running_or_notify_cancel():
                        pending.future.set_exception(
                            BatcherClosed("the batcher closed before this request ran")
                        )
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"the batcher thread is still running after {timeout} s")

    def __enter__(self) -> MicroBatcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close(drain=exc[0] is None)

    # --- the batching thread -------------------------------------------------------------

    def _take(self) -> list[_Pending] | None:
        """The next batch (None: closed and nothing left to run)."""
        with self._cond:
            while not self._queue:
                if self._closed:
                    return None
                self._cond.wait()
            deadline = self._queue[0].t_submit + self.max_wait_s
            while len(self._queue) < self.max_batch and not self._closed:
                left = deadline - self._clock()
                if left <= 0:
                    break
                self._cond.wait(left)
            if not self._queue:  # close(drain=False) emptied it while we waited
                return None if self._closed else []
            n = min(self.max_batch, len(self._queue))
            return [self._queue.popleft() for _ in range(n)]

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            batch = [p for p in batch if p.future.set_running_or_notify_cancel()]
            if batch:
                self._run(batch)

    def _run(self, batch: list[_Pending]) -> None:
        n = len(batch)
        error: BaseException | None = None
        try:
            y = np.asarray(self.run_batch(np.stack([p.x for p in batch])))
            if y.ndim < 1 or y.shape[0] != n:
                raise ValueError(
                    f"run_batch returned shape {y.shape} for a batch of {n}; "
                    f"it must return one row per request (leading size {n})"
                )
        except Exception as exc:  # the batch's callers get it, the thread carries on
            error = exc
        with self._cond:
            self._batches += 1
            self._requests += n
            self._sizes[n] += 1
            self._failed += error is not None
        for i, pending in enumerate(batch):
            if error is not None:
                pending.future.set_exception(error)
            else:
                pending.future.set_result(np.array(y[i], copy=True))
