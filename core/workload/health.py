"""A job's health: heartbeats and stall detection, step time, tokens/s and MFU, and a Prometheus
metrics endpoint.

- ``JobMetrics``: the job's own prometheus_client registry (step, loss, step time, tokens,
  heartbeat time, FLOPs per step); ``MetricsServer`` serves it over HTTP on 127.0.0.1 (port 0:
  any free port) from a daemon thread and is stopped with the job (``core.workload.job
  --metrics-port``).
- ``scrape(url)``: reads the endpoint over HTTP and parses the exposition text with
  prometheus_client's own parser (an independent reader of what the job wrote).
- ``StallDetector``: fed a job's events (core.workload.events), raises an alert when no step
  has arrived for ``stall_after_s`` seconds (heartbeats alone do not count: a hung step keeps
  its heartbeat thread alive, which is exactly the case to catch).
- ``throughput``/``mfu``: tokens/s and model FLOP utilization from step events and FLOPs per
  step against a machine's peak FLOP/s. On this machine the peak is a CPU's measured matmul
  rate (core.perf.machine): the number is a CPU MFU, never a TPU's.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
import urllib.request
from collections.abc import Iterable, Sequence

LOOPBACK = "127.0.0.1"
SCRAPE_TIMEOUT_S = 5.0  # a loopback scrape of a few metrics answers in milliseconds


class JobMetrics:
    """The metrics a training job exports, in a registry of its own (never the global one)."""

    def __init__(self, job_id: str):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"job": job_id}
        self._labels = labels

        def gauge(name, doc):
            return Gauge(name, doc, list(labels), registry=self.registry).labels(**labels)

        self.step = gauge("job_step", "Last finished training step")
        self.loss = gauge("job_loss", "Loss of the last finished step")
        self.step_time = gauge("job_step_time_seconds", "Wall time of the last step")
        self.last_step_ts = gauge("job_last_step_timestamp_seconds", "When the last step ended")
        self.heartbeat_ts = gauge("job_heartbeat_timestamp_seconds", "Last heartbeat")
        self.start_step = gauge("job_start_step", "Step this process started from (resume)")
        self.flops = gauge("job_flops_per_step", "XLA's FLOP count of one train step")
        self.tokens = Counter(
            "job_tokens",
            "Tokens (real examples) trained by this process",
            list(labels),
            registry=self.registry,
        ).labels(**labels)
        self.steps = Counter(
            "job_steps", "Steps trained by this process", list(labels), registry=self.registry
        ).labels(**labels)
        self.step_hist = Histogram(
            "job_step_duration_seconds",
            "Step wall time",
            list(labels),
            registry=self.registry,
            buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
        ).labels(**labels)

    def started(self, start_step: int, flops_per_step: float | None) -> None:
        self.start_step.set(start_step)
        self.step.set(start_step)
        if flops_per_step:
            self.flops.set(flops_per_step)

    def stepped(self, step: int, loss: float, step_time_s: float, tokens: int) -> None:
        self.step.set(step)
        self.loss.set(loss)
        self.step_time.set(step_time_s)
        self.step_hist.observe(step_time_s)
        self.tokens.inc(tokens)
        self.steps.inc()
        self.last_step_ts.set(time.time())

    def heartbeat(self, ts: float) -> None:
        self.heartbeat_ts.set(ts)


class MetricsServer:
    """prometheus_client's HTTP exposition of ``registry`` on 127.0.0.1 (``port`` 0: any free)."""

    def __init__(self, registry, port: int = 0):
        from prometheus_client import start_http_server

        self._server, self._thread = start_http_server(port, addr=LOOPBACK, registry=registry)
        self.port = self._server.server_address[1]
        self.url = f"http://{LOOPBACK}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def parse_exposition(text: str) -> dict[str, float]:
    """``{"name{label=value,...}": value}`` for every sample, by prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = float(sample.value)
    return samples


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> dict[str, float]:
    """GET the exposition at ``url`` (loopback only) and parse it."""
    if not url.startswith(f"http://{LOOPBACK}:"):
        raise ValueError(f"scrape only loopback endpoints (http://{LOOPBACK}:PORT/...), got {url}")
    with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (loopback)
        return parse_exposition(response.read().decode("utf-8"))


def sample(samples: dict[str, float], name: str, job: str) -> float | None:
    """One job-labelled sample's value from ``scrape``'s dict (None if absent)."""
    return samples.get(f"{name}{{job={job}}}")


# -- stall detection --


@dataclasses.dataclass(frozen=True)
class Alert:
    kind: str  # "stall"
    job: str
    ts: float  # when it was raised
    last_step: int
    silent_s: float  # seconds since the last step event
    message: str


class StallDetector:
    """No step event for ``stall_after_s`` seconds -> one "stall" alert (until a step arrives).

    ``startup_s`` (optional): the limit from "running" to the FIRST step instead, which
    includes XLA's compilation of the step (seconds on a CPU, minutes for a large model on a
    slice); without it a tight threshold pages on every start.
    """

    def __init__(self, stall_after_s: float, clock=time.time, startup_s: float | None = None):
        if not stall_after_s > 0:
            raise ValueError(f"stall_after_s must be > 0, got {stall_after_s}")
        if startup_s is not None and not startup_s >= stall_after_s:
            raise ValueError(f"startup_s must be >= stall_after_s, got {startup_s}")
        self.stall_after_s = stall_after_s
        self.startup_s = startup_s
        self.clock = clock
        self.awaiting_first_step = False
        self.job: str | None = None
        self.last_step = 0
        self.last_step_ts: float | None = None  # None until the job is running
        self.last_heartbeat_ts: float | None = None
        self.alerts: list[Alert] = []
        self._alerting = False

    def observe(self, events: Iterable[dict]) -> None:
        for event in events:
            self.job = event.get("job", self.job)
            kind = event["event"]
            if kind == "running":
                self.last_step = int(event.get("start_step", 0))
                self.last_step_ts = float(event["ts"])
                self.awaiting_first_step = True
            elif kind == "step":
                self.last_step, self.last_step_ts = int(event["step"]), float(event["ts"])
                self._alerting = False
                self.awaiting_first_step = False
            elif kind == "heartbeat":
                self.last_heartbeat_ts = float(event["ts"])
            elif kind in ("succeeded", "failed", "preempted"):
                self.last_step_ts = None  # ended: silence is not a stall

    def check(self, now: float | None = None) -> Alert | None:
        """A new alert if the job is stalled now and was not already alerted on."""
        now = self.clock() if now is None else now
        if self.last_step_ts is None or self._alerting:
            return None
        silent = now - self.last_step_ts
        startup = self.awaiting_first_step and self.startup_s is not None
        limit = self.startup_s if startup else self.stall_after_s
        if silent < limit:
            return None
        beating = self.last_heartbeat_ts is not None and self.last_heartbeat_ts > self.last_step_ts
        alert = Alert(
            "stall",
            self.job or "?",
            now,
            self.last_step,
            silent,
            (
                f"no first step for {silent:.1f} s after start (startup limit {limit:g} s); "
                if startup
                else f"no step for {silent:.1f} s after step {self.last_step} "
                f"(threshold {limit:g} s); "
            )
            + (
                "heartbeats continue: the process is alive, a step is hung"
                if beating
                else "no heartbeat either: the process may be dead or frozen"
            ),
        )
        self.alerts.append(alert)
        self._alerting = True
        return alert


def watch(
    tail, detector: StallDetector, until, poll_s: float = 0.05, timeout_s: float = 60.0
) -> list[dict]:
    """Feed ``tail``'s new events to ``detector`` until ``until(events)`` or the timeout.

    Returns every event seen. Alerts are in ``detector.alerts``.
    """
    seen: list[dict] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = tail.new_events()
        seen.extend(new)
        detector.observe(new)
        detector.check()
        if until(seen):
            break
        time.sleep(poll_s)
    return seen


# -- throughput and utilization --


def step_events(events: Iterable[dict]) -> list[dict]:
    return [e for e in events if e["event"] == "step"]


@dataclasses.dataclass(frozen=True)
class Throughput:
    steps: int
    tokens: int
    median_step_s: float
    tokens_per_s: float  # total tokens / total step time
    flops_per_step: float | None
    achieved_flop_per_s: float | None
    peak_flop_per_s: float | None
    mfu: float | None  # achieved / peak
    peak_label: str


def throughput(
    events: Sequence[dict],
    flops_per_step: float | None,
    peak_flop_per_s: float | None,
    peak_label: str,
    skip_first: int = 1,
) -> Throughput:
    """Tokens/s and MFU of a job's step events (the first ``skip_first`` steps compile)."""
    steps = step_events(events)
    steady = steps[skip_first:] if len(steps) > skip_first else steps
    if not steady:
        raise ValueError("no step events to measure")
    seconds = sum(float(e["step_time_s"]) for e in steady)
    tokens = sum(int(e["tokens"]) for e in steady)
    achieved = flops_per_step * len(steady) / seconds if flops_per_step else None
    return Throughput(
        steps=len(steady),
        tokens=tokens,
        median_step_s=statistics.median(float(e["step_time_s"]) for e in steady),
        tokens_per_s=tokens / seconds,
        flops_per_step=flops_per_step,
        achieved_flop_per_s=achieved,
        peak_flop_per_s=peak_flop_per_s,
        mfu=achieved / peak_flop_per_s if achieved and peak_flop_per_s else None,
        peak_label=peak_label,
    )


def mlp_train_flops(batch: int, features: int, hidden: int, classes: int) -> float:
    """Closed form: matmul FLOPs of one train step of the job's MLP (forward + backward).

    Forward 2 B (F H + H C); backward twice that (gradients of activations and weights),
    except that the input's gradient is not needed: 2 B F H is skipped. Elementwise work
    (ReLU, dropout, softmax, Adam) is excluded; XLA counts it, so XLA's total is a little
    higher (see MLP_ELEMENTWISE_SHARE).
    """
    forward = 2 * batch * (features * hidden + hidden * classes)
    backward = 2 * forward - 2 * batch * features * hidden
    return float(forward + backward)


def gaps(events: Sequence[dict], kind: str) -> list[tuple[float, float]]:
    """(ts, seconds since the previous event of ``kind``) for each event of that kind."""
    times = [float(e["ts"]) for e in events if e["event"] == kind]
    return [(b, b - a) for a, b in zip(times, times[1:], strict=False)]


class Poller:
    """Polls a job's log in a thread of its own (for a UI that refreshes while the job runs)."""

    def __init__(self, tail, detector: StallDetector, poll_s: float = 0.1):
        self.tail, self.detector, self.poll_s = tail, detector, poll_s
        self.events: list[dict] = []
        self._lock = threading.Lock()

    def poll(self) -> list[dict]:
        new = self.tail.new_events()
        with self._lock:
            self.events.extend(new)
            self.detector.observe(new)
            self.detector.check()
            return list(self.events)
