"""Exercises of the lesson "Benchmark asynchronous work correctly": what an unblocked timer
measures, and a timer that keeps compile time and steady-state time apart.

- ``blocked_over_unblocked`` (predict): the ratio of the lesson's blocked median to its
  unblocked one, for a step of known work and dispatch overhead.
- ``time_step`` (code): time a step's first call and its next calls, each until its result
  is ready. Graded on a deterministic stand-in for a jitted step and a clock (the stand-in
  compiles on its first call, returns after its dispatch, runs the work behind it), never on
  wall-clock time.

A learner's code runs in a process of its own that receives only plain values, so the
stand-in travels inside the stub: ``run_on_stand_in(spec)`` builds it from the hidden test's
numbers and calls the learner's ``time_step``; the grader computes every expected time from
the same numbers by itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.performance._shared import PHASE, _relative_error


class StandInClock:
    """time.perf_counter's stand-in: it moves only when the stand-in step makes it."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class StandInResult:
    """What a call returns at once; its values are ready at ``ready_at``."""

    def __init__(self, clock, ready_at):
        self.clock, self.ready_at = clock, ready_at

    def block_until_ready(self):
        self.clock.now = max(self.clock.now, self.ready_at)
        return self


class StandInStep:
    """A jitted step as JAX runs it: the first call compiles (the caller waits), every call
    returns after its dispatch, and the device runs the calls' work one after another."""

    def __init__(self, clock, compile_s, dispatch_s, work_s):
        self.clock, self.compile_s = clock, compile_s
        self.dispatch_s, self.work_s = list(dispatch_s), list(work_s)
        self.calls, self.device_free_at = 0, 0.0

    def __call__(self, x):
        if self.calls >= len(self.work_s):
            raise RuntimeError(f"the step was called more than {len(self.work_s)} times")
        if self.calls == 0:
            self.clock.now += self.compile_s
        self.clock.now += self.dispatch_s[self.calls]
        start = max(self.clock.now, self.device_free_at)
        self.device_free_at = start + self.work_s[self.calls]
        self.calls += 1
        return StandInResult(self.clock, self.device_free_at)


_RUN_ON_STAND_IN = '''\
def run_on_stand_in(spec):
    """The grader calls this: your time_step on a stand-in step and clock built from spec."""
    clock = StandInClock()
    step = StandInStep(clock, spec["compile_s"], spec["dispatch_s"], spec["work_s"])
    first_s, samples = time_step(step, spec["x"], spec["repeats"], clock=clock)
    return float(first_s), [float(s) for s in samples], step.calls
'''

STAND_IN = (
    "\n\n# --- The grader's stand-in for a jitted step and for time.perf_counter: leave it as "
    "it is. ---\n\n\n"
    + "\n\n".join(inspect.getsource(c) for c in (StandInClock, StandInResult, StandInStep))
    + "\n\n"
    + _RUN_ON_STAND_IN
)

_HEADER = "import time\n\nimport jax\n\n\n"

_TIMER_STUB = '''\
def time_step(step, x, repeats, clock=time.perf_counter):
    """Time a jitted ``step``: its first call, then ``repeats`` more calls, one at a time.

    step(x) returns as soon as the work is queued (JAX dispatches asynchronously); its first
    call also compiles. Read the time only through ``clock()``.
    Returns (first_s, samples): first_s, the seconds of the first call until its result is
    ready (compile included); samples, a list of ``repeats`` floats, the seconds of each
    later call until its result is ready. Call the step exactly 1 + repeats times.
    """
    raise NotImplementedError
'''

_TIMER_NO_BLOCK = """\
def time_step(step, x, repeats, clock=time.perf_counter):
    start = clock()
    step(x)
    first_s = clock() - start
    samples = []
    for _ in range(repeats):
        start = clock()
        step(x)
        samples.append(clock() - start)
    return first_s, samples
"""

_TIMER_BLOCKS_INPUT = """\
def time_step(step, x, repeats, clock=time.perf_counter):
    start = clock()
    step(x)
    jax.block_until_ready(x)
    first_s = clock() - start
    samples = []
    for _ in range(repeats):
        start = clock()
        step(x)
        jax.block_until_ready(x)
        samples.append(clock() - start)
    return first_s, samples
"""

_TIMER_FIRST_UNBLOCKED = """\
def time_step(step, x, repeats, clock=time.perf_counter):
    start = clock()
    step(x)  # only a warm-up: no need to wait for it
    first_s = clock() - start
    samples = []
    for _ in range(repeats):
        start = clock()
        jax.block_until_ready(step(x))
        samples.append(clock() - start)
    return first_s, samples
"""

_TIMER_NO_WARMUP = """\
def time_step(step, x, repeats, clock=time.perf_counter):
    samples = []
    for _ in range(repeats):
        start = clock()
        jax.block_until_ready(step(x))
        samples.append(clock() - start)
    return samples[0], samples
"""

_TIMER_ONE_CLOCK = """\
def time_step(step, x, repeats, clock=time.perf_counter):
    start = clock()
    jax.block_until_ready(step(x))
    first_s = clock() - start
    start = clock()
    for _ in range(repeats):
        out = step(x)
    jax.block_until_ready(out)
    per_call = (clock() - start) / repeats
    return first_s, [per_call] * repeats
"""


def _timer_source(body: str) -> str:
    return _HEADER + body + STAND_IN


# Times are whole ticks of 2^-20 s, so every sum the stand-in forms is exact in
# float64; a learner's subtraction of two clock readings is exact too. 1e-9 leaves room for
# any other order of arithmetic; the smallest planted mistake moves a time by a dispatch.
TIMER_RTOL = 1e-9
TICK_S = 2.0**-20


def expected_times(spec: dict) -> tuple[float, np.ndarray]:
    """(first_s, samples) of a correct timer, float64, from the spec alone: the first call
    compiles, dispatches and works; each later call, started on an idle device (the one
    before it was waited for), takes its dispatch plus its work."""
    dispatch = np.asarray(spec["dispatch_s"], np.float64)
    work = np.asarray(spec["work_s"], np.float64)
    first = float(spec["compile_s"]) + dispatch[0] + work[0]
    return first, dispatch[1:] + work[1:]


class TimeStep(CodeItem):
    id = "performance.async_benchmarking.time_step"
    phase = PHASE
    lesson = "async_benchmarking"
    title = "A timer for asynchronous work"
    function_name = "run_on_stand_in"
    stub = _timer_source(_TIMER_STUB)
    solution_module = "core.exercises.solutions.time_step"
    hints = (
        "Two traps: step(x) returns before its work is done, and the first call compiles. "
        "What must happen before you read the clock the second time, and what must you wait "
        "for before you start timing the steady calls?",
        "Wait on the step's OUTPUT: jax.block_until_ready(step(x)) (or out.block_until_ready())"
        " before each clock() that ends a measurement; the input x is ready long before. Wait "
        "for the first call too, or its work spills into the next measurement.",
        "first: start = clock(); jax.block_until_ready(step(x)); first_s = clock() - start. "
        "Then the same, once per repeat, appending each difference to samples: one clock "
        "pair per call, not one around the loop.",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `time_step(step, x, repeats, clock)`: the lesson's right way to time a "
            "step, compile apart from the steady calls. Leave the stand-in below it as it is: "
            "the hidden tests call `run_on_stand_in` with seeded numbers (a compile of up to "
            "2 s, steps of milliseconds, one call stalled by a pause, a tiny step whose "
            "dispatch outlasts its work, a single repeat), and compare your times with the "
            "ones those numbers imply, worked out apart in float64 (relative error at most "
            f"{TIMER_RTOL:g}); no test reads a real clock."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "no block_until_ready: the dispatch is timed, not the work": _timer_source(
                _TIMER_NO_BLOCK
            ),
            "blocks on the input x, not on the step's output": _timer_source(_TIMER_BLOCKS_INPUT),
            "the first call not waited for: its work spills into the first sample": (
                _timer_source(_TIMER_FIRST_UNBLOCKED)
            ),
            "no warm-up: the compiling call is one of the samples": _timer_source(_TIMER_NO_WARMUP),
            "one clock around the loop, divided by repeats": _timer_source(_TIMER_ONE_CLOCK),
        }

    def _spec(self, generator, repeats: int, work_ms, dispatch_us, stall: bool) -> dict:
        def ticks(seconds):
            return np.round(np.asarray(seconds, np.float64) / TICK_S) * TICK_S

        calls = repeats + 1
        work = ticks(generator.uniform(*work_ms, calls) * 1e-3)
        if stall:  # a pause (garbage collection, another process) in one later call
            work[int(generator.integers(1, calls))] *= 12
        return {
            "compile_s": float(ticks(generator.uniform(0.2, 2.0))),
            "dispatch_s": ticks(generator.uniform(*dispatch_us, calls) * 1e-6).tolist(),
            "work_s": work.tolist(),
            "repeats": repeats,
            "x": [1.0, 2.0],
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        cases = [
            ("steps of milliseconds", int(generator.integers(5, 10)), (2, 20), (20, 80), False),
            ("one call stalled by a pause", int(generator.integers(6, 12)), (1, 5), (20, 60), True),
            ("a tiny step: dispatch outlasts work", int(generator.integers(4, 8)),
             (0.002, 0.008), (30, 90), False),
            ("a single repeat", 1, (5, 10), (20, 40), False),
        ]  # fmt: skip
        tests = []
        for name, repeats, work_ms, dispatch_us, stall in cases:
            spec = self._spec(generator, repeats, work_ms, dispatch_us, stall)
            tests.extend(self._compare(function, spec, f"{name} (repeats={repeats})"))
        return tests

    def _compare(self, function, spec, name) -> list[HiddenTest]:
        first, samples = expected_times(spec)
        got = function(spec)
        if not isinstance(got, tuple | list) or len(got) != 3:
            return [HiddenTest(name, False, "run_on_stand_in must return what the stub's does")]
        got_first, got_samples, calls = got
        tests = [
            HiddenTest(
                f"{name}: calls",
                calls == spec["repeats"] + 1,
                f"the step was called {calls} times; 1 + repeats = {spec['repeats'] + 1}",
            )
        ]
        error, why = _relative_error(got_first, first)
        tests.append(
            HiddenTest(
                f"{name}: first_s",
                bool(error is not None and error <= TIMER_RTOL),
                why
                or f"{float(got_first) * 1e3:.6g} ms; off by {error:.2g} of the right time "
                f"(tolerance {TIMER_RTOL:g}; compile, dispatch and work of the first call)",
            )
        )
        try:
            values = np.asarray(got_samples, np.float64)
        except (TypeError, ValueError):
            values = np.zeros(0)
        if values.shape != samples.shape:
            tests.append(
                HiddenTest(
                    f"{name}: samples",
                    False,
                    f"{values.size} samples; expected {samples.size}, one per repeat",
                )
            )
            return tests
        errors = np.abs(values - samples) / samples
        worst = int(np.argmax(errors))
        tests.append(
            HiddenTest(
                f"{name}: samples",
                bool(np.isfinite(values).all()) and float(errors.max()) <= TIMER_RTOL,
                f"sample {worst} is {values[worst] * 1e6:.4g} µs, off by {errors[worst]:.2g} of "
                f"the right time (tolerance {TIMER_RTOL:g}); median of yours "
                f"{np.median(values) * 1e6:.4g} µs",
            )
        )
        return tests


class BlockedOverUnblocked(PredictItem):
    """Unblocked, a warm call's clock stops at the dispatch; blocked, after the work:
    (dispatch + work) / dispatch."""

    id = "performance.async_benchmarking.blocked_over_unblocked"
    phase = PHASE
    lesson = "async_benchmarking"
    title = "Blocked over unblocked: what the wrong timer misses"
    units = "x"
    rel_tol = 0.02
    hints = (
        "The unblocked timer stops the clock when step(x) returns: how long is that, for a "
        "warm step? And the blocked one waits until the result is ready: what does that add?",
        'A warm call returns after its dispatch overhead (the lesson\'s "returns after" '
        "column); its result is ready after the dispatch plus the work, here two n x n "
        "matmuls at the machine's FLOP rate (tanh and the division are too small to count).",
        "ratio = (dispatch + work) / dispatch, with work = 2 matmuls x 2n³ FLOPs / "
        "(FLOP/s). Mind the units: µs, GFLOP/s.",
    )

    def params(self, generator):
        while True:  # work from half to 20 times the dispatch: neither term negligible
            n = int(generator.choice([64, 96, 128, 160, 192, 256, 320, 384]))
            gflops = int(generator.choice([50, 80, 100, 150, 200, 300]))
            dispatch_us = int(generator.integers(15, 81))
            work_us = 4.0 * n**3 / (gflops * 1e9) * 1e6
            if 0.5 <= work_us / dispatch_us <= 20:
                return {"n": n, "gflops": gflops, "dispatch_us": dispatch_us}

    def prompt(self, params) -> str:
        n = params["n"]
        return (
            f"The lesson's step, `tanh(x @ x) @ x / n`, runs on a **{n} x {n}** float32 "
            f"matrix on a machine that does **{params['gflops']} GFLOP/s** on these matmuls; "
            f"each call's dispatch (until `step(x)` returns) takes **{params['dispatch_us']} "
            "µs**, and the device starts the work once it is dispatched. The lesson times the "
            "warm step with `timing.time_calls(..., block=False)` and with `block=True`. "
            "**Predict the ratio of the blocked median to the unblocked median** (count only "
            "the two matmuls' FLOPs); the lesson's library then times a deterministic "
            "stand-in of this step."
        )

    def live(self, params) -> float:
        from core.perf import roofline, timing

        n, repeats = params["n"], 5
        work_s = 2 * roofline.matmul_cost(n, n, n, 4).flops / (params["gflops"] * 1e9)
        medians = []
        for block in (False, True):
            clock = StandInClock()
            calls = 1 + repeats
            step = StandInStep(clock, 1.0, [params["dispatch_us"] * 1e-6] * calls, [work_s] * calls)
            timings = timing.time_calls(
                step, None, repeats=repeats, warmup=1, block=block, clock=clock
            )
            medians.append(timings.summary.median)
        return medians[1] / medians[0]

    def derive(self, params):
        n, gflops, dispatch_us = params["n"], params["gflops"], params["dispatch_us"]
        flops = 2 * 2 * n**3
        work_us = flops / (gflops * 1e9) * 1e6
        value = (dispatch_us + work_us) / dispatch_us
        return value, (
            f"Unblocked, the clock stops when `step(x)` returns: the dispatch, {dispatch_us} "
            f"µs; the work is still running. Blocked, it stops when the result is ready: the "
            f"dispatch plus the work. The work: two {n} x {n} matmuls of 2n³ FLOPs, "
            f"{flops:,} FLOPs at {gflops} GFLOP/s = {work_us:.4g} µs. Ratio = "
            f"({dispatch_us} + {work_us:.4g}) / {dispatch_us} = **{value:.4g}x**. The bigger the "
            "step, the more the unblocked timer misses; for a tiny step both are the dispatch, "
            "the ratio tends to 1, and the step is overhead-bound: jit more work into it."
        )

    def wrong(self, params, expected):
        n, gflops, dispatch_us = params["n"], params["gflops"], params["dispatch_us"]
        work_us = 4.0 * n**3 / (gflops * 1e9) * 1e6
        return {
            "work over dispatch (the dispatch left out of the blocked time)": work_us / dispatch_us,
            "half the work (one matmul, or n³ FLOPs a matmul)": (dispatch_us + work_us / 2)
            / dispatch_us,
            "unblocked over blocked (upside down)": 1 / expected,
        }
