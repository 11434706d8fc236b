"""Reference solution of performance.async_benchmarking.time_step: a timer that waits for
the work and keeps the compiling first call apart from the steady ones."""

import time

import jax


def time_step(step, x, repeats, clock=time.perf_counter):
    """Time a jitted ``step``: its first call (compile included), then ``repeats`` calls.

    Each measurement waits for the step's OUTPUT to be ready (jax.block_until_ready) before
    it reads the clock again: step(x) returns once the work is queued, so a clock read right
    after it measures the dispatch only. The first call is waited for too, or its work would
    still be running when the first sample starts. One clock pair per call: the samples keep
    their spread (a stalled call shows as one slow sample, and the median ignores it).
    """
    start = clock()
    jax.block_until_ready(step(x))
    first_s = clock() - start
    samples = []
    for _ in range(repeats):
        start = clock()
        jax.block_until_ready(step(x))
        samples.append(clock() - start)
    return first_s, samples


# --- The grader's stand-in for a jitted step and for time.perf_counter: leave it as it is. ---


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


def run_on_stand_in(spec):
    """The grader calls this: your time_step on a stand-in step and clock built from spec."""
    clock = StandInClock()
    step = StandInStep(clock, spec["compile_s"], spec["dispatch_s"], spec["work_s"])
    first_s, samples = time_step(step, spec["x"], spec["repeats"], clock=clock)
    return float(first_s), [float(s) for s in samples], step.calls
