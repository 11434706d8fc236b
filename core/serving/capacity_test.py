"""Capacity: the replay against closed forms (replicas = ceil(load / (u x capacity)) on a
constant trace, cost = replicas x steps x price, requests conserved), a burst that must break
the SLO for a policy without headroom and does not for one with enough, the capacity picked
from load runs, and the rollout gates: a degraded, a slow and an erroring canary are rolled
back at the gate they fail, a good one is promoted. Planted: a floor() policy, a rollout that
ignores its gates."""

import dataclasses
import math
import time

import numpy as np
import pytest

from core.serving import capacity

CAP, P95_CAP, BUDGET = 40.0, 20.0, 50.0


def run(trace, policy, **kwargs):
    return capacity.replay(trace, policy, CAP, P95_CAP, BUDGET, **kwargs)


class FloorPolicy(capacity.Policy):
    """Broken: rounds the replica count down."""

    def desired(self, replicas, arrivals, backlog, p95, cap, step_s, budget):
        return math.floor((arrivals + backlog / step_s) / (self.target_utilization * cap))


@pytest.mark.parametrize(
    "load,u", [(100.0, 1.0), (120.0, 1.0), (39.0, 1.0), (100.0, 0.7), (333.0, 0.5), (5.0, 0.9)]
)
def test_constant_trace_settles_at_the_closed_form(load, u):
    want = math.ceil(load / (u * CAP))
    out = run(np.full(60, load), capacity.Policy("queue", target_utilization=u, startup_steps=2))
    assert (out.ready[-30:] == want).all() and not out.violation[-30:].any()
    started = run(np.full(60, load), capacity.Policy("queue", u), initial_replicas=want)
    assert (started.ready == want).all() and started.violation_steps == 0
    assert capacity.closed_form_replicas(load, CAP, u) == want


def test_a_floor_policy_is_caught_by_the_closed_form():
    out = run(np.full(60, 100.0), FloorPolicy("queue", target_utilization=1.0))
    assert not (out.ready[-30:] == math.ceil(100 / CAP)).all()
    assert out.violation[-30:].any()


def test_cost_and_requests_are_conserved():
    trace = capacity.traffic_trace(steps=100, base_rps=80, burst_start=50, seed=3)
    out = run(trace, capacity.Policy("queue", 0.8, startup_steps=1), step_s=60)
    paid = np.cumsum(out.provisioned) * 1.0 * 60 / 3600
    np.testing.assert_allclose(out.cost, paid, rtol=1e-12)
    arrived = trace.sum() * 60
    np.testing.assert_allclose(out.served_rps.sum() * 60 + out.backlog[-1], arrived, rtol=1e-9)
    fixed = run(np.full(10, 10.0), capacity.Policy("fixed", min_replicas=3), step_s=1800)
    assert fixed.total_cost == pytest.approx(3 * 10 * 0.5)


BURST = {"steps": 288, "base_rps": 100, "burst_start": 150, "burst_steps": 6, "noise": 0.0}


def test_a_policy_without_headroom_must_violate_on_the_burst_and_does():
    trace = capacity.traffic_trace(**BURST, burst_factor=3.0)
    peak = trace[: BURST["burst_start"]].max()  # the diurnal peak, burst excluded
    # a fixed fleet sized for the diurnal peak: over budget on every burst step, never before
    fixed = run(trace, capacity.Policy("fixed", min_replicas=math.ceil(peak / CAP)))
    burst = slice(150, 156)
    assert fixed.violation[burst].all() and not fixed.violation[:150].any()
    # a reactive autoscaler cannot outrun a cold start: the burst's first step is violated
    for kind in ("queue", "p95"):
        out = run(trace, capacity.Policy(kind, 0.7, startup_steps=1))
        assert out.violation[150], kind
        assert out.ready[151:156].max() > out.ready[149], kind  # it did scale up
    # headroom of 1 / burst factor absorbs it, at a price
    roomy = run(trace, capacity.Policy("queue", target_utilization=0.3, startup_steps=1))
    assert not roomy.violation[100:].any()
    assert roomy.total_cost > run(trace, capacity.Policy("queue", 0.7)).total_cost


def test_the_p95_policy_scales_down_when_quiet():
    trace = np.concatenate([np.full(20, 300.0), np.full(40, 20.0)])
    out = run(trace, capacity.Policy("p95", 0.7, startup_steps=0))
    assert out.ready[-1] == 1 and out.ready[:20].max() >= math.ceil(300 / CAP)


def test_traffic_trace_shape():
    t = capacity.traffic_trace(steps=288, base_rps=100, diurnal_amplitude=0.5, noise=0.0,
                               burst_start=200, burst_steps=4, burst_factor=2.0)  # fmt: skip
    assert t[0] == pytest.approx(50) and t[144] == pytest.approx(150)
    assert t[200] == pytest.approx(2 * 100 * (1 - 0.5 * np.cos(2 * np.pi * 200 / 288)))
    assert t[204] == pytest.approx(100 * (1 - 0.5 * np.cos(2 * np.pi * 204 / 288)))
    a, b = capacity.traffic_trace(seed=1), capacity.traffic_trace(seed=1)
    assert np.array_equal(a, b) and not np.array_equal(a, capacity.traffic_trace(seed=2))


@dataclasses.dataclass
class Run:
    throughput_rps: float
    p95_ms: float
    failures: int = 0


def test_capacity_is_the_best_run_inside_the_budget():
    runs = [Run(100, 5), Run(300, 30), Run(500, 49.9), Run(900, 80), Run(700, 10, failures=1)]
    assert capacity.capacity_from_runs(runs, 50) == 500
    assert capacity.capacity_from_runs(runs, 30) == 300
    with pytest.raises(ValueError, match="no load run met p95 <= 4 ms"):
        capacity.capacity_from_runs(runs, 4)


W = np.random.default_rng(0).normal(size=(64, 10))
X = np.random.default_rng(1).uniform(0, 16, (400, 64))


def champion(row):
    return np.argmax(row @ W, axis=-1)


def close_copy(row):  # a second version whose weights differ a little
    return np.argmax(row @ (W + 1e-9), axis=-1)


def degraded(row):
    return np.argmax(row @ W[:, ::-1], axis=-1)


def slow(row):
    time.sleep(0.02)
    return champion(row)


def flaky(row):
    if row[0, 0] < 0.8:  # about 5 % of the rows
        raise RuntimeError("out of memory")
    return champion(row)


GATES = capacity.Gates(max_p95_ms=10.0, max_error_rate=0.01, min_agreement=0.95, min_requests=5)


def rollout(candidate, rollout_fn=capacity.rollout):
    return rollout_fn(
        capacity.observe_in_process(champion, candidate, X, seed=0, shadow_share=0.25), GATES
    )


def test_a_good_canary_is_promoted():
    out = rollout(close_copy)
    assert out.decision == "promoted" and out.final_fraction == 1.0 and out.failed is None
    assert [c.stage for c in out.checks[::4]] == ["shadow", "canary 5%", "canary 25%",
                                                  "canary 100%"]  # fmt: skip
    assert all(c.passed for c in out.checks)


@pytest.mark.parametrize(
    "candidate,gate,stage",
    [(degraded, "agreement", "shadow"), (slow, "p95_ms", "shadow"), (flaky, "error_rate", None)],
)
def test_a_failing_canary_is_rolled_back_at_its_gate(candidate, gate, stage):
    out = rollout(candidate)
    assert out.decision == "rolled back" and out.final_fraction == 0.0
    assert out.failed.gate == gate and not out.failed.passed
    assert stage is None or out.failed.stage == stage
    assert out.checks[-1].stage == out.failed.stage  # nothing ran after the failed stage


def test_a_rollout_that_ignores_its_gates_is_caught():
    def careless(observe, gates, stages=(0.0, 0.05, 0.25, 1.0)):
        checks = [c for s in stages for c in capacity.check_gates(observe(s), gates, "s", s)]
        return capacity.Rollout("promoted", checks, 1.0, None)

    assert rollout(degraded, careless).decision != "rolled back"  # what the test above catches


@pytest.mark.parametrize(
    "make",
    [
        lambda: capacity.Policy("hpa"),
        lambda: capacity.Policy(target_utilization=0),
        lambda: capacity.Policy(min_replicas=3, max_replicas=2),
        lambda: capacity.Policy(lower=1.0, upper=1.0),
        lambda: capacity.replay([], capacity.Policy(), CAP, P95_CAP, BUDGET),
        lambda: capacity.replay([1.0, np.nan], capacity.Policy(), CAP, P95_CAP, BUDGET),
        lambda: capacity.replay([1.0], capacity.Policy(), CAP, 60.0, BUDGET),
        lambda: capacity.replay([1.0], capacity.Policy(), 0.0, P95_CAP, BUDGET),
        lambda: capacity.traffic_trace(steps=0),
        lambda: capacity.rollout(lambda f: None, GATES, stages=(0.5, 0.1)),
        lambda: capacity.observe_in_process(champion, champion, np.zeros(3)),
    ],
)
def test_bad_settings_are_refused(make):
    with pytest.raises(ValueError):
        make()
