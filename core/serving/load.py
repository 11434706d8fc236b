"""A bounded locust load run against a service on this machine, and its result.

``run_load(url, LoadSpec(users=32, spawn_rate=32, run_time_s=5))`` runs
``python -m locust -f core/serving/locustfile.py --headless -u USERS -r RATE --run-time Ts
--host URL --json`` in its OWN process (the server keeps its cores' GIL to itself), killed
if it outlives ``run_time_s + grace_s``, and returns a LoadResult: requests, failures, the
HTTP status counts (5xx apart), p50/p95/p99/mean/max latency (ms), throughput (requests/s
over the run) and the CPU seconds locust itself used. The URL must be loopback
(http://127.0.0.1:PORT, localhost, [::1]): a load generator is not pointed at somebody
else's machine.

Latency percentiles come from the exact per-request times the locustfile writes when locust
quits (``LAB_LOAD_RECORD``), not from locust's summary, which rounds times into buckets; the
request and failure counts are cross-checked against locust's final ``--json`` summary (its
CSV lags that summary by one write: it is not read). Percentiles are numpy's "inverted_cdf"
(nearest rank: a latency some request actually had).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time
import urllib.parse

import numpy as np

from core import documents

LOCUSTFILE = pathlib.Path(__file__).with_name("locustfile.py")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclasses.dataclass(frozen=True)
class LoadSpec:
    """One locust run: ``users`` closed-loop clients, started ``spawn_rate`` per second,
    for ``run_time_s`` seconds, each request carrying ``rows`` rows."""

    users: int
    spawn_rate: float
    run_time_s: float
    rows: int = 1
    seed: int = 0

    def __post_init__(self):
        for name, low, high in (("users", 1, 512), ("rows", 1, 64), ("seed", 0, 2**31)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        for name, low, high in (("spawn_rate", 0.1, 10_000), ("run_time_s", 1, 3600)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not low <= value <= high:
                raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
        if int(self.run_time_s) != self.run_time_s:
            raise ValueError(f"run_time_s must be whole seconds, got {self.run_time_s!r}")


@dataclasses.dataclass(frozen=True)
class LoadResult:
    users: int
    rows: int
    requests: int
    failures: int
    statuses: dict[int, int]  # HTTP status -> count (0: no response)
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    duration_s: float
    throughput_rps: float  # requests per second over the run
    client_cpu_s: float = 0.0  # CPU seconds the locust process used (its core's share)

    @property
    def errors_5xx(self) -> int:
        return sum(n for status, n in self.statuses.items() if 500 <= status < 600)

    @property
    def error_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    @property
    def rows_per_s(self) -> float:
        return self.throughput_rps * self.rows

    def as_dict(self) -> dict:
        return dataclasses.asdict(self) | {"errors_5xx": self.errors_5xx}


def check_url(url: str) -> str:
    """``url`` without a trailing slash if it is http on a loopback host with a port;
    ValueError naming the problem otherwise."""
    if not isinstance(url, str):
        raise ValueError(f"the target must be a URL string, got {type(url).__name__}")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http":
        raise ValueError(f"the target must be http://127.0.0.1:PORT, got scheme {parts.scheme!r}")
    if parts.hostname not in LOOPBACK:
        raise ValueError(
            f"refusing to load-test host {parts.hostname!r}: only this machine's loopback "
            f"({', '.join(LOOPBACK)}) is a target"
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"the target {url!r} has a bad port: {exc}") from None
    if port is None or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"the target must be http://HOST:PORT with nothing after, got {url!r}")
    return url.rstrip("/")


def locust_command(url: str, spec: LoadSpec, locustfile=LOCUSTFILE) -> list[str]:
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile),
        "--headless",
        "-u",
        str(spec.users),
        "-r",
        f"{spec.spawn_rate:g}",
        "--run-time",
        f"{int(spec.run_time_s)}s",
        "--stop-timeout",
        "2s",
        "--host",
        check_url(url),
        "--json",
        "--only-summary",
        "--loglevel",
        "WARNING",
        "--exit-code-on-error",
        "0",
    ]


def percentiles(times_ms, qs=(50, 95, 99)) -> list[float]:
    """Nearest-rank percentiles (a latency some request had) of ``times_ms``."""
    times = np.asarray(times_ms, np.float64)
    if times.size == 0:
        raise ValueError("no requests completed: no latency percentiles")
    return [float(v) for v in np.percentile(times, qs, method="inverted_cdf")]


def parse(summary_json: str, record: dict, spec: LoadSpec) -> LoadResult:
    """The result of one run from locust's ``--json`` summary and the locustfile's record."""
    entries = documents.parse_json(summary_json, "locust's --json summary")
    if not isinstance(entries, list) or not entries:
        raise ValueError("locust's summary lists no endpoint: no request was made")
    requests = sum(int(e["num_requests"]) for e in entries)
    failures = sum(int(e["num_failures"]) for e in entries)
    start = min(float(e["start_time"]) for e in entries)
    end = max(float(e["last_request_timestamp"] or start) for e in entries)
    times, statuses = record.get("times_ms"), record.get("statuses")
    if not isinstance(times, list) or not isinstance(statuses, list) or len(times) != len(statuses):
        raise ValueError("the locustfile's record lacks matching times_ms and statuses lists")
    if len(times) != requests:
        raise ValueError(
            f"locust counted {requests} requests but the locustfile recorded {len(times)}"
        )
    counts: dict[int, int] = {}
    for status in statuses:
        counts[int(status)] = counts.get(int(status), 0) + 1
    not_ok = sum(n for status, n in counts.items() if status != 200)
    if failures < not_ok:
        raise ValueError(f"locust counted {failures} failures but {not_ok} responses were not 200")
    p50, p95, p99 = percentiles(times)
    duration = max(end - start, 1e-9)
    return LoadResult(
        users=spec.users,
        rows=spec.rows,
        requests=requests,
        failures=failures,
        statuses=dict(sorted(counts.items())),
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        mean_ms=float(np.mean(times)),
        max_ms=float(np.max(times)),
        duration_s=duration,
        throughput_rps=requests / duration,
    )


def run_load(
    url: str,
    spec: LoadSpec,
    grace_s: float = 30.0,
    locustfile=LOCUSTFILE,
    workdir=None,
) -> LoadResult:
    """One locust run in its own process against ``url`` (loopback only), bounded in time."""
    command = locust_command(url, spec, locustfile)
    limit = spec.run_time_s + grace_s
    with tempfile.TemporaryDirectory(prefix="lab-load-", dir=workdir) as tmp:
        record_path = pathlib.Path(tmp) / "record.json"
        env = os.environ | {
            "LAB_LOAD_ROWS": str(spec.rows),
            "LAB_LOAD_SEED": str(spec.seed),
            "LAB_LOAD_RECORD": str(record_path),
        }
        t0 = time.monotonic()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            done = subprocess.run(
                command, cwd=tmp, env=env, capture_output=True, text=True, timeout=limit
            )
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"locust ran past {limit:g} s and was killed") from None
        if done.returncode != 0 or not record_path.exists():
            tail = (done.stderr or "").strip().splitlines()[-5:]
            raise RuntimeError(
                f"locust exited {done.returncode} after {time.monotonic() - t0:.1f} s: "
                + " | ".join(tail)
            )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        record = json.loads(record_path.read_text(encoding="utf-8"))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dataclasses.replace(parse(done.stdout, record, spec), client_cpu_s=cpu)
