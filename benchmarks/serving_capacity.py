"""The predict service under locust: micro-batching vs unbatched at one p95 budget, and a
load run of at least 10,000 requests from 32 concurrent clients.

    python benchmarks/serving_capacity.py [--quick] [--record] [--p95-budget-ms 50]
                                          [-o benchmarks/results/serving_capacity.json]

1. Throughput at the p95 budget: for each window setting (unbatched = max batch 1; then
   micro-batching windows) a fresh service on 127.0.0.1 is swept over closed-loop locust user
   counts; a setting's figure is its best throughput among the runs whose p95 met the budget
   with no failure (core.serving.capacity.capacity_from_runs). The issue's goal: the best
   window >= 3x unbatched.
2. The load run: 32 users against the best window until at least 10,000 requests (--quick:
   a few seconds, fewer requests, said so), zero failures and zero 5xx required.
3. Context, no HTTP: the same model behind a MicroBatcher in process, 32 client threads,
   rows/s batched vs one model call per row. It shows what batching saves per call when the
   model call is the cost, and so where the HTTP figure's ceiling comes from.

Locust: ONE locust process (no --processes): the machine has 2 cores, one for the server
(uvicorn, one worker) and one for locust; a second locust worker would take the server's
core. Users up to 64 per run: gevent users are cheap; the limit is locust's one core, so
each run reports ``locust_cpu``, the cores locust itself used (near 1.0: the client, not
the server, is the bottleneck and the figure is a lower bound of the service's).
Every figure is this machine's CPU, not a TPU's. ``--record`` writes
benchmarks/records/serving_capacity/<date>_<machine>.json.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from core import lab  # noqa: E402

lab.use_cpu_devices(1)

from benchmarks import _report  # noqa: E402
from core.lessons.deployment import inference_capacity as lesson  # noqa: E402
from core.perf import allocator  # noqa: E402
from core.serving import batching, capacity  # noqa: E402
from core.serving.predict import export  # noqa: E402

NAME = "serving_capacity"
GOAL_RATIO = 3.0
LOAD_USERS = 32
LOAD_REQUESTS = 10_000
COLUMNS = [
    "setting", "users", "requests", "failures", "errors_5xx", "throughput_rps", "p50_ms",
    "p95_ms", "p99_ms", "mean_batch", "locust_cpu",
]  # fmt: skip


def _rows_per_s(call, x, clients: int, seconds: float) -> float:
    done = [0] * clients
    stop = time.monotonic() + seconds

    def client(k):
        i = k
        while time.monotonic() < stop:
            call(x[i % len(x)])
            done[k] += 1
            i += clients

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - start)


def in_process(artifacts, settings, clients: int, seconds: float) -> list[dict]:
    """Rows/s of the model behind a MicroBatcher (or a lock, unbatched), ``clients`` threads."""
    rows = []
    x = lesson.held_out(0, 256)
    lock = threading.Lock()

    def unbatched(row):
        with lock:
            return artifacts.run(row[None])[1][0]

    for max_batch, max_wait_ms in settings:
        if max_batch == 1 or max_wait_ms == 0:
            rate, mean_batch = _rows_per_s(unbatched, x, clients, seconds), 1.0
        else:
            run = lesson.padded_run(artifacts, max_batch)
            with batching.MicroBatcher(run, max_batch, max_wait_ms / 1000) as batcher:
                rate = _rows_per_s(batcher, x, clients, seconds)
                mean_batch = batcher.stats().mean_batch
        rows.append(
            {
                "setting": lesson.setting_name(max_batch, max_wait_ms),
                "clients": clients,
                "rows_per_s": rate,
                "mean_batch": mean_batch,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 s runs, 2 user counts")
    parser.add_argument("--p95-budget-ms", type=float, default=50.0, help="the SLO's p95")
    parser.add_argument("--run-time-s", type=int, default=10, help="seconds per sweep run")
    parser.add_argument("--record", action="store_true", help="write a benchmark record")
    parser.add_argument("-o", "--output", default=str(_report.RESULTS_DIR / f"{NAME}.json"))
    args = parser.parse_args(argv)
    if not 1 <= args.run_time_s <= 120:
        parser.error("--run-time-s must be in [1, 120]")
    if not 1 <= args.p95_budget_ms <= 10_000:
        parser.error("--p95-budget-ms must be in [1, 10000]")
    quick = args.quick
    run_time = 2 if quick else args.run_time_s
    users_levels = [4, 16] if quick else [1, 2, 4, 8, 16, 32, 64]
    settings = [(1, 0.0), (16, 2.0), (64, 5.0)]
    load_time = 3 if quick else 40  # 32 users x 40 s; the record counts the requests served

    faults_before = allocator.page_faults()
    trained = export.train(seed=0, steps=60 if quick else 300)
    with tempfile.TemporaryDirectory(prefix="serving-capacity-") as tmp:
        export.write_artifacts(trained, tmp, max_batch=64, model_version="champion")
        artifacts = export.load_artifacts(tmp)
        print(f"sweep: settings {settings}, users {users_levels}, {run_time} s per run ...")
        sweep = lesson.load_runs(tmp, settings, users_levels, run_time)
        for row in sweep:
            row.pop("result")
        print(_report.format_table(sweep, COLUMNS))
        at_budget = {}
        for max_batch, max_wait_ms in settings:
            name = lesson.setting_name(max_batch, max_wait_ms)
            runs = [_Run(r) for r in sweep if r["setting"] == name]
            try:
                at_budget[name] = capacity.capacity_from_runs(runs, args.p95_budget_ms)
            except ValueError:
                at_budget[name] = 0.0
        unbatched = at_budget["unbatched"]
        best_name = max((n for n in at_budget if n != "unbatched"), key=at_budget.get)
        ratio = at_budget[best_name] / unbatched if unbatched else float("nan")
        print(
            f"\nthroughput at p95 <= {args.p95_budget_ms:g} ms: "
            + ", ".join(f"{n} {v:.0f} req/s" for n, v in at_budget.items())
            + f"; best window / unbatched = {ratio:.2f}x (goal >= {GOAL_RATIO:g}x: "
            + ("met" if ratio >= GOAL_RATIO else "NOT met")
            + ")"
        )
        best = next(s for s in settings if lesson.setting_name(*s) == best_name)
        print(f"\nload run: {LOAD_USERS} users, {load_time} s, {best_name} ...")
        (big,) = lesson.load_runs(tmp, [best], [LOAD_USERS], load_time)
        result = big.pop("result")
        print(_report.format_table([big], COLUMNS))
        enough = result.requests >= LOAD_REQUESTS
        clean = result.failures == 0 and result.errors_5xx == 0
        print(
            f"{result.requests} requests ({'>=' if enough else '<'} {LOAD_REQUESTS}"
            f"{', --quick' if quick and not enough else ''}), failures {result.failures}, "
            f"5xx {result.errors_5xx}: "
            + ("quick run, not the 10,000-request measurement" if quick else "")
            + ("" if quick else "PASS" if enough and clean else "FAIL")
        )
        context = in_process(artifacts, settings, LOAD_USERS, 1.0 if quick else 5.0)
        print("\nin process (no HTTP), 32 client threads:")
        print(_report.format_table(context, ["setting", "clients", "rows_per_s", "mean_batch"]))
    faults_after = allocator.page_faults()
    malloc = allocator.in_force()
    minor_faults = faults_after["minor_faults"] - faults_before["minor_faults"]
    print(f"\nmalloc: {malloc}; minor page faults over the run: {minor_faults}")
    document = {
        "benchmark": NAME,
        "machine": _report.machine_label(),
        "quick": quick,
        "p95_budget_ms": args.p95_budget_ms,
        "run_time_s": run_time,
        "sweep": sweep,
        "throughput_at_budget": at_budget,
        "ratio_best_window_to_unbatched": ratio,
        "load_run": big,
        "in_process": context,
        "malloc": malloc,
        "minor_faults": minor_faults,
    }
    print(f"wrote {_report.write_json(document, args.output)}")
    if args.record:
        command = "python benchmarks/serving_capacity.py --record" + (
            " --quick" if quick else f" --run-time-s {run_time}"
        )
        command += f" --p95-budget-ms {args.p95_budget_ms:g}"
        figures = {
            **{f"{n}: throughput at p95 budget (req/s)": v for n, v in at_budget.items()},
            "best window / unbatched at the p95 budget": ratio,
            "load run requests": result.requests,
            "load run failures": result.failures,
            "load run 5xx": result.errors_5xx,
            "load run p50 (ms)": result.p50_ms,
            "load run p95 (ms)": result.p95_ms,
            "load run p99 (ms)": result.p99_ms,
            "load run throughput (req/s)": result.throughput_rps,
            "load run locust CPU (cores)": big["locust_cpu"],
            **{f"in process {r['setting']} (rows/s)": r["rows_per_s"] for r in context},
        }
        notes = (
            f"digits MLP 64-64-10 ({'60' if quick else '300'} steps), jax.export artifact, one "
            f"uvicorn worker and ONE locust process on this CPU (2 cores shared by both); "
            f"load run: {LOAD_USERS} users, {load_time} s, {best_name}; malloc: {malloc}"
        )
        return _report.keep_record(NAME, command, figures, notes)
    return 0


class _Run:
    """A sweep row as capacity_from_runs reads it."""

    def __init__(self, row: dict):
        self.throughput_rps, self.p95_ms = row["throughput_rps"], row["p95_ms"]
        self.failures = row["failures"] + row["errors_5xx"]


if __name__ == "__main__":
    raise SystemExit(main())
