import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.perf import timing


class FakeClock:
    """A clock that advances by a fixed step each time it is read."""

    def __init__(self, step=1.0):
        self.counter = itertools.count()
        self.step = step

    def __call__(self):
        return next(self.counter) * self.step


@pytest.mark.parametrize(
    "samples", [[3.0], [5.0, 1.0], [0.4, 0.1, 0.3, 0.2, 9.0], list(np.linspace(0, 1, 11) ** 2)]
)
def test_summary_matches_numpy(samples):
    summary = timing.summarize(samples)
    values = np.asarray(samples, np.float64)
    assert summary.median == pytest.approx(np.median(values))
    assert summary.p10 == pytest.approx(np.percentile(values, 10))
    assert summary.p90 == pytest.approx(np.percentile(values, 90))
    q25, q75 = np.percentile(values, [25, 75])
    assert summary.iqr == pytest.approx(q75 - q25)
    assert (summary.minimum, summary.maximum, summary.count) == (
        values.min(),
        values.max(),
        len(values),
    )


def test_summary_needs_samples():
    with pytest.raises(ValueError, match="no samples"):
        timing.summarize([])


def test_time_calls_reads_the_clock_twice_per_repeat():
    calls = []
    clock = FakeClock(step=0.5)
    result = timing.time_calls(
        lambda x: calls.append(x) or x, jnp.ones(2), repeats=4, warmup=2, clock=clock
    )
    assert len(calls) == 6  # 2 warm-up + 4 timed
    assert result.samples == (0.5, 0.5, 0.5, 0.5)
    assert result.summary.median == 0.5


def test_blocking_waits_for_the_result():
    # the blocked timing ends after block_until_ready; the unblocked one before it
    seen = []

    class Recorder:
        def block_until_ready(self):
            seen.append("blocked")
            return self

    original = jax.block_until_ready
    try:
        jax.block_until_ready = lambda x: seen.append("block") or x
        timing.time_calls(
            lambda: Recorder(),
            repeats=1,
            warmup=0,
            block=True,
            clock=lambda: seen.append("clock") or 0.0,
        )
        assert seen == ["clock", "block", "clock", "block"]
        seen.clear()
        timing.time_calls(
            lambda: Recorder(),
            repeats=1,
            warmup=0,
            block=False,
            clock=lambda: seen.append("clock") or 0.0,
        )
        assert seen == ["clock", "clock", "block"]
    finally:
        jax.block_until_ready = original


def test_first_call_and_compile_time_are_separate():
    f = jax.jit(lambda x: jnp.sin(x) @ x.T)
    x = jnp.ones((4, 4))
    parts = timing.time_compile(f, x, clock=FakeClock())
    assert parts == {"trace + lower (s)": 1.0, "compile (s)": 1.0}
    assert timing.time_first_call(f, x, clock=FakeClock(2.0)) == 2.0


def test_timed_call_returns_the_blocked_output_and_its_seconds():
    seen = []
    original = jax.block_until_ready
    try:
        jax.block_until_ready = lambda x: seen.append("block") or x
        clock = FakeClock(step=0.5)
        out, seconds = timing.timed_call(
            lambda a, b: seen.append("call") or a + b, 2, 3, clock=clock
        )
    finally:
        jax.block_until_ready = original
    assert (out, seconds) == (5, 0.5) and seen == ["call", "block"]
    out, _ = timing.timed_call(jax.jit(lambda x: 2 * x), jnp.arange(3.0))
    np.testing.assert_array_equal(out, [0.0, 2.0, 4.0])


def test_lower_and_compile_returns_a_working_executable_and_both_parts():
    f = jax.jit(lambda x: jnp.sin(x) @ x.T)
    x = jnp.ones((4, 4))
    compiled = timing.lower_and_compile(f, x, clock=FakeClock(step=0.25))
    assert (compiled.lower_s, compiled.compile_s, compiled.total_s) == (0.25, 0.25, 0.5)
    np.testing.assert_allclose(compiled.executable(x), f(x))


def test_dispatch_and_compute_orders_the_clock_reads():
    result = timing.dispatch_and_compute(
        jax.jit(lambda x: x + 1), jnp.ones(3), repeats=3, clock=FakeClock()
    )
    assert result["dispatch (returned)"].median == 1.0
    assert result["total (ready)"].median == 2.0


def test_samples_rows_long_format():
    rows = timing.samples_rows([timing.Timings("a", (0.001, 0.002)), timing.Timings("b", (0.003,))])
    assert [(r["timing"], r["repeat"], r["ms"]) for r in rows] == [
        ("a", 0, 1.0),
        ("a", 1, 2.0),
        ("b", 0, 3.0),
    ]


def test_bad_repeats():
    with pytest.raises(ValueError, match="repeats"):
        timing.time_calls(lambda: 0, repeats=0)


def test_median_seconds_blocks_each_timed_call():
    calls = []
    clock = FakeClock(step=0.25)
    median = timing.median_seconds(lambda: calls.append(1) or jnp.ones(2), 3, warmup=1, clock=clock)
    assert len(calls) == 4 and median == 0.25


class Recorder:
    """Steppers, clocks and sleep that append to one log, so the order can be checked."""

    def __init__(self):
        self.log = []
        self.wall = itertools.count()
        self.cpu = itertools.count(100, 10)

    def stepper(self, name):
        return lambda: self.log.append(name)

    def clock(self):
        self.log.append("clock")
        return float(next(self.wall))

    def cpu_clock(self):
        return float(next(self.cpu))

    def sleep(self, seconds):
        self.log.append(f"sleep {seconds}")


def test_interleaved_warms_up_then_one_sample_per_stepper_per_round():
    r = Recorder()
    lines = []
    wall, cpu = timing.interleaved(
        {name: r.stepper(name) for name in "abc"},
        rounds=3,
        warmup=2,
        progress=lines.append,
        clock=r.clock,
        cpu_clock=r.cpu_clock,
        sleep=r.sleep,
    )
    steps = [entry for entry in r.log if entry in "abc"]
    assert steps == ["a", "a", "b", "b", "c", "c"] + ["a", "b", "c"] * 3
    # every timed call sits between its two clock reads; no pause by default
    assert r.log[6:12] == ["clock", "a", "clock", "clock", "b", "clock"]
    # the fake wall clock advances by 1 per read, the cpu clock by 10
    assert wall == {name: [1.0] * 3 for name in "abc"}
    assert cpu == {name: [10.0] * 3 for name in "abc"}
    assert lines[:3] == ["  warmed a", "  warmed b", "  warmed c"]
    assert lines[3] == "  round 1/3: a 1.000s, b 1.000s, c 1.000s" and len(lines) == 6


def test_interleaved_alternates_and_pauses_outside_the_clock():
    r = Recorder()
    wall, _ = timing.interleaved(
        {"a": r.stepper("a"), "b": r.stepper("b")},
        rounds=4,
        alternate=True,
        pause_s=0.05,
        clock=r.clock,
        cpu_clock=r.cpu_clock,
        sleep=r.sleep,
    )
    assert [entry for entry in r.log if entry in "ab"] == list("abbaabba")
    assert r.log[:4] == ["sleep 0.05", "clock", "a", "clock"]
    assert all(len(samples) == 4 for samples in wall.values())


def test_interleaved_blocks_on_what_a_stepper_returns():
    seen = []
    original = jax.block_until_ready
    try:
        jax.block_until_ready = lambda x: seen.append(x) or x
        timing.interleaved({"a": lambda: "out"}, rounds=2, warmup=1, clock=FakeClock())
    finally:
        jax.block_until_ready = original
    assert seen == ["out"] * 3


def test_interleaved_bad_arguments():
    with pytest.raises(ValueError, match="rounds"):
        timing.interleaved({"a": lambda: None}, rounds=0)
    with pytest.raises(ValueError, match="warmup"):
        timing.interleaved({"a": lambda: None}, rounds=1, warmup=-1)
    with pytest.raises(ValueError, match="at least one stepper"):
        timing.interleaved({}, rounds=1)
