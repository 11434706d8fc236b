"""Capacity planning for the model service: a per-replica capacity measured by load runs, an
autoscaling policy replayed on a traffic trace, and canary/shadow rollout gates.

Capacity. ``capacity_from_runs(results, p95_budget_ms)`` is the highest throughput of a load
run (core.serving.load.LoadResult) that met the p95 budget with no failures: what one replica
sustains inside the SLO. It is measured, never typed.

Replay. ``traffic_trace`` generates a seeded trace (requests/s per step): a diurnal sine, a
burst (a window multiplied by ``burst_factor``) and multiplicative noise. ``replay(trace,
policy, capacity_rps, ...)`` steps a fluid queue: each step ``ready`` replicas serve up to
``ready * capacity_rps`` requests/s; what is not served waits in the queue (the backlog). The
step's p95 is the p95 at capacity plus the backlog's drain time, and a step violates the SLO
when that exceeds the budget (any backlog left at the end of a step). After each step the
policy sets the desired replica count; a new replica serves only after ``startup_steps``
(cold start: pull, load, verify, warm) but is paid for from the moment it is asked for;
removing one is immediate. Cost = replica-steps x ``price_per_replica_hour`` x step hours.

Policies (the metric an HPA would scale on):
- ``queue``: desired = ceil((arrivals + backlog / step) / (target_utilization x capacity)),
  the demand (queue depth turned into a rate) over the per-replica target. On a constant
  trace it settles at ceil(load / (u x capacity)), the closed form.
- ``p95``: reactive on the observed p95: one more replica (``step_up``) when p95 is over
  ``upper x budget``, one fewer when it is under ``lower x budget`` and the remaining replicas
  would still run under ``target_utilization``.
- ``fixed``: ``min_replicas`` always (no autoscaling).

Gates. ``rollout`` moves a candidate model version through traffic stages (a shadow stage at
0 % of user traffic: it sees a copy of the requests and its answers are discarded, then
canary stages); at each stage ``observe(fraction)`` returns an Observation (p95, error rate,
agreement with the champion's labels on the same requests) and every gate is checked; the
first failing gate rolls the candidate back to 0 % (automatic rollback), all passing at the
last stage promotes it. ``observe_in_process`` is an ``observe`` that routes a share of real
requests through two predict functions and times them.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import numpy as np

POLICIES = ("queue", "p95", "fixed")


def _number(name, value, low=None, high=None, integer=False):
    kinds = int if integer else int | float
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite {'integer' if integer else 'number'}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
    return value


# --- capacity from load runs -----------------------------------------------------------------


def capacity_from_runs(results: Sequence, p95_budget_ms: float) -> float:
    """The highest throughput (requests/s) among load runs with p95 <= budget and no failure.

    ValueError when no run met the budget (the replica cannot meet the SLO at any tried load)."""
    _number("p95_budget_ms", p95_budget_ms, 0.001)
    good = [r.throughput_rps for r in results if r.p95_ms <= p95_budget_ms and r.failures == 0]
    if not good:
        tried = ", ".join(f"{r.p95_ms:.1f}" for r in results) or "none"
        raise ValueError(
            f"no load run met p95 <= {p95_budget_ms:g} ms without failures (p95s: {tried} ms)"
        )
    return float(max(good))


# --- traffic trace -------------------------------------------------------------------------


def traffic_trace(
    steps: int = 288,
    base_rps: float = 100.0,
    diurnal_amplitude: float = 0.6,
    period_steps: int = 288,
    burst_start: int = 200,
    burst_steps: int = 6,
    burst_factor: float = 3.0,
    noise: float = 0.05,
    seed: int = 0,
) -> np.ndarray:
    """Requests/s per step: base x (1 + amplitude x diurnal) x burst x lognormal noise.

    The diurnal part is lowest at step 0 and highest at period/2 (a day of 5-minute steps at
    the defaults); the burst multiplies ``burst_steps`` steps from ``burst_start``."""
    _number("steps", steps, 1, 100_000, integer=True)
    _number("base_rps", base_rps, 0.0)
    _number("diurnal_amplitude", diurnal_amplitude, 0.0, 0.99)
    _number("period_steps", period_steps, 1, integer=True)
    _number("burst_start", burst_start, 0, integer=True)
    _number("burst_steps", burst_steps, 0, integer=True)
    _number("burst_factor", burst_factor, 0.0, 100.0)
    _number("noise", noise, 0.0, 1.0)
    t = np.arange(steps)
    load = base_rps * (1 - diurnal_amplitude * np.cos(2 * np.pi * t / period_steps))
    load = load * np.where((t >= burst_start) & (t < burst_start + burst_steps), burst_factor, 1)
    if noise:
        load = load * np.random.default_rng(seed).lognormal(0.0, noise, steps)
    return load


# --- autoscaling replay --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Policy:
    kind: str = "queue"
    target_utilization: float = 0.7
    min_replicas: int = 1
    max_replicas: int = 64
    startup_steps: int = 1
    step_up: int = 1
    upper: float = 1.0
    lower: float = 0.5

    def __post_init__(self):
        if self.kind not in POLICIES:
            raise ValueError(f"policy kind must be one of {POLICIES}, got {self.kind!r}")
        _number("target_utilization", self.target_utilization, 0.05, 1.0)
        _number("min_replicas", self.min_replicas, 1, 10_000, integer=True)
        _number("max_replicas", self.max_replicas, 1, 10_000, integer=True)
        if self.max_replicas < self.min_replicas:
            raise ValueError(
                f"max_replicas {self.max_replicas} is below min_replicas {self.min_replicas}"
            )
        _number("startup_steps", self.startup_steps, 0, 1000, integer=True)
        _number("step_up", self.step_up, 1, 1000, integer=True)
        _number("upper", self.upper, 0.01, 100.0)
        _number("lower", self.lower, 0.0, 100.0)
        if self.lower >= self.upper:
            raise ValueError(f"lower {self.lower} must be below upper {self.upper}")

    def desired(self, replicas, arrivals_rps, backlog, p95_ms, capacity_rps, step_s, budget):
        """The replica count this policy asks for after a step (before min/max clamping)."""
        if self.kind == "fixed":
            return self.min_replicas
        per_replica = self.target_utilization * capacity_rps
        if self.kind == "queue":
            return math.ceil((arrivals_rps + backlog / step_s) / per_replica - 1e-9)
        if p95_ms > self.upper * budget:
            return replicas + self.step_up
        if p95_ms < self.lower * budget and replicas > 1:
            if arrivals_rps <= (replicas - 1) * per_replica:
                return replicas - 1
        return replicas


@dataclasses.dataclass(frozen=True)
class Replay:
    load_rps: np.ndarray  # arrivals per step
    ready: np.ndarray  # replicas serving during the step
    provisioned: np.ndarray  # replicas paid for during the step (ready + starting)
    served_rps: np.ndarray
    backlog: np.ndarray  # requests waiting at the end of the step
    p95_ms: np.ndarray
    violation: np.ndarray  # bool: p95 over the budget
    cost: np.ndarray  # cumulative
    capacity_rps: float
    p95_budget_ms: float
    step_s: float

    @property
    def violation_steps(self) -> int:
        return int(self.violation.sum())

    @property
    def total_cost(self) -> float:
        return float(self.cost[-1]) if self.cost.size else 0.0

    def rows(self) -> list[dict]:
        """One dict per step (for a table or a chart)."""
        return [
            {
                "step": i,
                "load_rps": float(self.load_rps[i]),
                "ready": int(self.ready[i]),
                "provisioned": int(self.provisioned[i]),
                "backlog": float(self.backlog[i]),
                "p95_ms": float(self.p95_ms[i]),
                "violation": bool(self.violation[i]),
                "cost": float(self.cost[i]),
            }
            for i in range(len(self.load_rps))
        ]


def replay(
    trace,
    policy: Policy,
    capacity_rps: float,
    p95_at_capacity_ms: float,
    p95_budget_ms: float,
    step_s: float = 300.0,
    price_per_replica_hour: float = 1.0,
    initial_replicas: int | None = None,
) -> Replay:
    """The policy replayed on ``trace`` (requests/s per step); see the module docstring."""
    load = np.asarray(trace, np.float64)
    if load.ndim != 1 or load.size == 0 or not np.all(np.isfinite(load)) or (load < 0).any():
        raise ValueError("the trace must be a non-empty 1-D array of finite requests/s >= 0")
    _number("capacity_rps", capacity_rps, 1e-9)
    _number("p95_at_capacity_ms", p95_at_capacity_ms, 0.0)
    _number("p95_budget_ms", p95_budget_ms, 1e-9)
    if p95_at_capacity_ms > p95_budget_ms:
        raise ValueError(
            f"p95 at capacity {p95_at_capacity_ms:g} ms is over the budget {p95_budget_ms:g} ms: "
            "that capacity does not meet the SLO"
        )
    _number("step_s", step_s, 1e-3)
    _number("price_per_replica_hour", price_per_replica_hour, 0.0)
    start = policy.min_replicas if initial_replicas is None else initial_replicas
    _number("initial_replicas", start, policy.min_replicas, policy.max_replicas, integer=True)
    n = load.size
    ready, provisioned = np.zeros(n, int), np.zeros(n, int)
    served, backlog_out, p95, cost = (np.zeros(n) for _ in range(4))
    starting: list[int] = []  # steps left for each replica still starting
    current, backlog, paid = start, 0.0, 0.0
    for i in range(n):
        ready[i], provisioned[i] = current, current + len(starting)
        capacity = current * capacity_rps
        demand = load[i] + backlog / step_s
        served[i] = min(demand, capacity)
        backlog = max(0.0, backlog + (load[i] - served[i]) * step_s)
        backlog_out[i] = backlog
        wait_ms = 1000.0 * backlog / capacity if capacity > 0 else math.inf
        p95[i] = p95_at_capacity_ms + wait_ms
        paid += provisioned[i] * price_per_replica_hour * step_s / 3600.0
        cost[i] = paid
        # the policy acts on what it observed; replicas asked for earlier come up
        starting = [s - 1 for s in starting]
        current += sum(1 for s in starting if s <= 0)
        starting = [s for s in starting if s > 0]
        want = policy.desired(
            current, load[i], backlog, p95[i], capacity_rps, step_s, p95_budget_ms
        )
        want = min(max(want, policy.min_replicas), policy.max_replicas)
        if want > current + len(starting):
            new = want - current - len(starting)
            if policy.startup_steps == 0:
                current += new
            else:
                starting += [policy.startup_steps] * new
        elif want < current + len(starting):
            drop = current + len(starting) - want
            cancel = min(drop, len(starting))  # cancel starting ones first
            starting = starting[: len(starting) - cancel]
            current -= drop - cancel
    violation = p95 > p95_budget_ms * (1 + 1e-12)
    return Replay(
        load, ready, provisioned, served, backlog_out, p95, violation, cost,
        float(capacity_rps), float(p95_budget_ms), float(step_s),
    )  # fmt: skip


def closed_form_replicas(load_rps: float, capacity_rps: float, target_utilization=1.0) -> int:
    """ceil(load / (utilization x capacity)): the replicas a constant load needs."""
    return max(1, math.ceil(load_rps / (target_utilization * capacity_rps) - 1e-9))


# --- canary and shadow gates ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Gates:
    max_p95_ms: float = 50.0
    max_error_rate: float = 0.001
    min_agreement: float = 0.95
    min_requests: int = 50

    def __post_init__(self):
        _number("max_p95_ms", self.max_p95_ms, 1e-6)
        _number("max_error_rate", self.max_error_rate, 0.0, 1.0)
        _number("min_agreement", self.min_agreement, 0.0, 1.0)
        _number("min_requests", self.min_requests, 1, integer=True)


@dataclasses.dataclass(frozen=True)
class Observation:
    """What a stage measured of the candidate: its requests, p95, error rate and the share of
    its answers (labels) equal to the champion's on the same requests."""

    requests: int
    p95_ms: float
    error_rate: float
    agreement: float


@dataclasses.dataclass(frozen=True)
class GateCheck:
    stage: str
    fraction: float
    gate: str
    value: float
    limit: float
    passed: bool


@dataclasses.dataclass(frozen=True)
class Rollout:
    decision: str  # "promoted" or "rolled back"
    checks: list[GateCheck]
    final_fraction: float  # candidate's share of user traffic after the rollout
    failed: GateCheck | None

    def rows(self) -> list[dict]:
        return [dataclasses.asdict(c) for c in self.checks]


def check_gates(obs: Observation, gates: Gates, stage: str, fraction: float) -> list[GateCheck]:
    def check(gate, value, limit, passed):
        return GateCheck(stage, fraction, gate, float(value), float(limit), bool(passed))

    return [
        check("requests", obs.requests, gates.min_requests, obs.requests >= gates.min_requests),
        check("p95_ms", obs.p95_ms, gates.max_p95_ms, obs.p95_ms <= gates.max_p95_ms),
        check(
            "error_rate", obs.error_rate, gates.max_error_rate,
            obs.error_rate <= gates.max_error_rate,
        ),
        check(
            "agreement", obs.agreement, gates.min_agreement,
            obs.agreement >= gates.min_agreement,
        ),
    ]  # fmt: skip


def rollout(
    observe: Callable[[float], Observation],
    gates: Gates,
    stages: Sequence[float] = (0.0, 0.05, 0.25, 1.0),
) -> Rollout:
    """Shadow (fraction 0) then canary stages; the first failed gate rolls back to 0 %."""
    stages = list(stages)
    if not stages or any(not 0.0 <= s <= 1.0 for s in stages) or stages != sorted(stages):
        raise ValueError(f"stages must be non-empty increasing fractions in [0, 1], got {stages}")
    checks: list[GateCheck] = []
    for fraction in stages:
        name = "shadow" if fraction == 0 else f"canary {fraction:.0%}"
        stage_checks = check_gates(observe(fraction), gates, name, fraction)
        checks += stage_checks
        failed = next((c for c in stage_checks if not c.passed), None)
        if failed is not None:
            return Rollout("rolled back", checks, 0.0, failed)
    return Rollout("promoted", checks, stages[-1], None)


def observe_in_process(
    champion: Callable[[np.ndarray], np.ndarray],
    candidate: Callable[[np.ndarray], np.ndarray],
    x_NF: np.ndarray,
    seed: int = 0,
    shadow_share: float = 1.0,
) -> Callable[[float], Observation]:
    """An ``observe`` for ``rollout``: each stage sends one request per row of ``x_NF``; a
    canary stage routes ``fraction`` of them (seeded) to the candidate, a shadow stage copies
    ``shadow_share`` of them to it. Predict functions take (1, F) rows and return labels;
    each candidate call is timed; an exception is an error; agreement compares labels with
    the champion's on the same rows."""
    x = np.asarray(x_NF)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"x_NF must be a non-empty (N, F) array, got shape {x.shape}")
    stage_index = [0]

    def observe(fraction: float) -> Observation:
        rng = np.random.default_rng([seed, stage_index[0]])
        stage_index[0] += 1
        share = shadow_share if fraction == 0 else fraction
        routed = np.flatnonzero(rng.random(len(x)) < share)
        times, errors, agree = [], 0, 0
        for i in routed:
            row = x[i : i + 1]
            want = np.asarray(champion(row))
            t0 = time.perf_counter()
            try:
                got = np.asarray(candidate(row))
            except Exception:  # a failed request, counted, never raised
                errors += 1
                times.append(1000.0 * (time.perf_counter() - t0))
                continue
            times.append(1000.0 * (time.perf_counter() - t0))
            agree += bool(np.array_equal(got, want))
        n = len(routed)
        if n == 0:
            return Observation(0, 0.0, 0.0, 0.0)
        p95 = float(np.percentile(times, 95, method="inverted_cdf"))
        answered = n - errors
        return Observation(n, p95, errors / n, agree / answered if answered else 0.0)

    return observe
