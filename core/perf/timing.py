"""Timing asynchronous JAX work correctly: warm up, block, repeat, report medians.

JAX dispatches work asynchronously: ``f(x)`` returns as soon as the computation is
enqueued, long before it has finished, and the first call of a jitted function also
traces and compiles. Three ways to get a wrong number:

1. time the first call: compile time (plus the run) masquerades as step time;
2. stop the clock without ``block_until_ready``: you time the dispatch, not the work;
3. trust one sample: timings are noisy; report the median and the spread of many.

Every function takes a ``clock`` (default ``time.perf_counter``) so tests can drive it
with a fake clock and check the bookkeeping exactly, never asserting real wall time.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax


@dataclasses.dataclass(frozen=True)
class Summary:
    """Robust statistics of timing samples, in seconds."""

    count: int
    median: float
    p10: float
    p90: float
    minimum: float
    maximum: float
    iqr: float  # interquartile range: the spread of the middle half

    def row(self, label: str, scale: float = 1e3, unit: str = "ms") -> dict:
        return {
            "timing": label,
            f"median ({unit})": f"{self.median * scale:.3g}",
            f"p10-p90 ({unit})": f"{self.p10 * scale:.3g}-{self.p90 * scale:.3g}",
            f"min ({unit})": f"{self.minimum * scale:.3g}",
            "samples": self.count,
        }


def summarize(samples: Sequence[float]) -> Summary:
    """Median, 10th/90th percentiles, min, max and IQR (linear interpolation, like numpy)."""
    if len(samples) == 0:
        raise ValueError("no samples to summarize: time at least one repeat")
    values = sorted(float(s) for s in samples)

    def percentile(q: float) -> float:
        position = (len(values) - 1) * q
        low = int(position)
        high = min(low + 1, len(values) - 1)
        return values[low] + (values[high] - values[low]) * (position - low)

    return Summary(
        count=len(values),
        median=statistics.median(values),
        p10=percentile(0.10),
        p90=percentile(0.90),
        minimum=values[0],
        maximum=values[-1],
        iqr=percentile(0.75) - percentile(0.25),
    )


@dataclasses.dataclass(frozen=True)
class Timings:
    """Samples of one way of timing, in seconds."""

    label: str
    samples: tuple[float, ...]

    @property
    def summary(self) -> Summary:
        return summarize(self.samples)


def timed_call(fn: Callable, *args, clock=time.perf_counter) -> tuple[Any, float]:
    """(output, seconds) of one call of ``fn(*args)``, the clock stopped after
    ``jax.block_until_ready`` (JAX returns when the work is queued, not when it is done).
    On the first call of a jitted function the seconds include tracing and compiling."""
    start = clock()
    output = jax.block_until_ready(fn(*args))
    return output, clock() - start


def time_first_call(fn: Callable, *args, block: bool = True, clock=time.perf_counter) -> float:
    """Seconds for the first call of ``fn``: tracing + compiling + (if ``block``) running."""
    if block:
        return timed_call(fn, *args, clock=clock)[1]
    start = clock()
    fn(*args)
    return clock() - start


def time_calls(
    fn: Callable,
    *args,
    repeats: int = 10,
    warmup: int = 1,
    block: bool = True,
    clock=time.perf_counter,
    label: str = "",
) -> Timings:
    """Time ``repeats`` calls of ``fn(*args)`` after ``warmup`` untimed (blocked) calls.

    ``block=False`` is the classic mistake: the clock stops when the work is enqueued.
    Every call's output is blocked on before the next call starts either way (outside the
    timed region when ``block=False``), so samples never overlap.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(repeats):
        start = clock()
        out = fn(*args)
        if block:
            jax.block_until_ready(out)
        samples.append(clock() - start)
        jax.block_until_ready(out)
    return Timings(label or ("blocked" if block else "not blocked"), tuple(samples))


def median_seconds(
    fn: Callable[[], object], repeats: int, warmup: int = 0, clock=time.perf_counter
) -> float:
    """Median seconds of ``repeats`` blocked calls of ``fn()`` after ``warmup`` untimed ones:
    the one-number form of ``time_calls`` for a function of no arguments."""
    return time_calls(fn, repeats=repeats, warmup=warmup, clock=clock).summary.median


def interleaved(
    steppers: Mapping[str, Callable[[], object]],
    rounds: int,
    warmup: int = 0,
    *,
    alternate: bool = False,
    pause_s: float = 0.0,
    progress: Callable[[str], None] | None = None,
    clock=time.perf_counter,
    cpu_clock=time.process_time,
    sleep=time.sleep,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Time several ways of doing one step against each other: (wall, cpu) seconds per name,
    one sample of each stepper per round.

    Each stepper first runs ``warmup`` untimed (blocked) calls. Then every round times one
    blocked call of each, in the mapping's order, or, with ``alternate``, in reverse order
    on every other round (A B, B A, ...) so neither always runs right after the other. A
    machine shared with other work then slows all of them alike, and the ratio of medians
    stays fair where timing one after the other would not. ``pause_s`` sleeps before each
    sample (outside the clock): another framework's spinning worker threads go idle.
    ``cpu`` is process CPU time (all threads) per call; ``progress`` gets one line per
    warmed stepper and per round.
    """
    if rounds < 1 or warmup < 0:
        raise ValueError(f"rounds must be >= 1 and warmup >= 0, got {rounds}, {warmup}")
    if not steppers:
        raise ValueError("interleaved needs at least one stepper")
    for name, step in steppers.items():
        for _ in range(warmup):
            jax.block_until_ready(step())
        if progress is not None:
            progress(f"  warmed {name}")
    wall: dict[str, list[float]] = {name: [] for name in steppers}
    cpu: dict[str, list[float]] = {name: [] for name in steppers}
    names = list(steppers)
    for number in range(rounds):
        order = names[::-1] if alternate and number % 2 else names
        for name in order:
            if pause_s > 0:
                sleep(pause_s)
            cpu_start, start = cpu_clock(), clock()
            jax.block_until_ready(steppers[name]())
            wall[name].append(clock() - start)
            cpu[name].append(cpu_clock() - cpu_start)
        if progress is not None:
            progress(
                f"  round {number + 1}/{rounds}: "
                + ", ".join(f"{n} {wall[n][-1]:.3f}s" for n in names)
            )
    return wall, cpu


@dataclasses.dataclass(frozen=True)
class Compiled:
    """An executable from ``jitted.lower(*args).compile()`` and the seconds of each part."""

    executable: Any  # jax.stages.Compiled: call it like the jitted function
    lower_s: float  # trace to a jaxpr + lower to StableHLO
    compile_s: float  # XLA optimizes and generates code

    @property
    def total_s(self) -> float:
        return self.lower_s + self.compile_s


def lower_and_compile(jitted, *args, clock=time.perf_counter) -> Compiled:
    """Lower and compile ``jitted`` for ``args`` ahead of time, timing the two apart."""
    start = clock()
    lowered = jitted.lower(*args)
    lowered_at = clock()
    executable = lowered.compile()
    compiled_at = clock()
    return Compiled(executable, lowered_at - start, compiled_at - lowered_at)


def time_compile(jitted, *args, clock=time.perf_counter) -> dict[str, float]:
    """Seconds to trace+lower and to compile ``jitted`` for ``args``, measured apart."""
    compiled = lower_and_compile(jitted, *args, clock=clock)
    return {"trace + lower (s)": compiled.lower_s, "compile (s)": compiled.compile_s}


def dispatch_and_compute(
    fn: Callable, *args, repeats: int = 10, clock=time.perf_counter
) -> dict[str, Summary]:
    """Per call: time until ``fn`` returns (dispatch) and until the result is ready (total).

    The difference is the work JAX did asynchronously after handing control back.
    """
    jax.block_until_ready(fn(*args))  # warm up: compile outside the measurement
    dispatch, total = [], []
    for _ in range(repeats):
        start = clock()
        out = fn(*args)
        returned = clock()
        jax.block_until_ready(out)
        done = clock()
        dispatch.append(returned - start)
        total.append(done - start)
    return {"dispatch (returned)": summarize(dispatch), "total (ready)": summarize(total)}


def samples_rows(timings: Sequence[Timings], scale: float = 1e3) -> list[dict]:
    """Long-format rows for a strip/box chart: one row per sample, times in ms."""
    return [
        {"timing": t.label, "repeat": i, "ms": s * scale}
        for t in timings
        for i, s in enumerate(t.samples)
    ]
