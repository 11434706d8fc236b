"""Lesson "Health, logs, and workload observability": one real job watched the way an on-call
engineer watches a TPU training run, through two independent channels of the same process.

- The job (core.workload.job) writes structured JSON events (running, step, heartbeat, ...)
  to its log, and serves its own Prometheus registry on 127.0.0.1 (``--metrics-port 0``).
- The watcher (``watch_job``) tails the log, feeds a StallDetector (core.workload.health),
  scrapes the metrics endpoint over HTTP while the job runs, and, when a step hangs
  (``--fault hang@K``: the training thread blocks, the heartbeat thread keeps beating), raises
  one alert, takes a settled scrape of the frozen process and kills it (the on-call action
  for a hung collective: the job is restarted from its last checkpoint elsewhere, lesson 3).
- ``agreement`` compares the scrape with the log; ``stall_reference`` decides from the log's
  own step times (NumPy) how many alerts a detector with this threshold must raise.

Every throughput figure is this CPU's: MFU is against the CPU's measured matmul peak
(core.perf.machine) and labelled "CPU MFU"; it says nothing about a TPU.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from collections.abc import Callable

import numpy as np

from core import runtime
from core.workload import events, health, job, runner

JOB_ID = "observed"
POLL_S = 0.05  # the watcher's loop period: an alert comes at most this late past the threshold
SCRAPE_EVERY_S = 0.25  # Prometheus scrapes every 15-60 s; a tiny job needs a finer look
# From "running" to the first step the job compiles its step (seconds for this tiny job on a
# CPU, minutes for a large model on a slice): held to this limit, not the threshold.
STARTUP_S = 20.0
MIN_HANG_AT = 3  # steps 1 (compiles) and 2 (the first steady one) must finish before a hang
JOB_TIMEOUT_S = 120.0  # the runner kills the job past this whatever happens (bounded lifetime)
SETTLE_TRIES = 20  # pairs of back-to-back scrapes tried until two agree (see settled_scrape)
# The gauges and counters the check reads; heartbeat_ts moves while the job hangs, so it is
# not among them.
SETTLED_KEYS = (
    "job_step",
    "job_steps_total",
    "job_tokens_total",
    "job_loss",
    "job_step_duration_seconds_sum",
)


def job_argv(
    run_dir, steps: int, hang_at: int, step_seconds: float, heartbeat_s: float, seed: int
) -> list[str]:
    """The job's command line: metrics on any free loopback port, one save at the end."""
    fault = ["--fault", f"hang@{hang_at}"] if hang_at else []
    return job.command(
        run_dir, JOB_ID, steps,
        "--step-seconds", repr(float(step_seconds)), "--heartbeat-s", repr(float(heartbeat_s)),
        "--metrics-port", "0", "--save-every", str(steps), *fault, f"seed={seed}",
    )  # fmt: skip


def problem(
    steps: int, hang_at: int, step_seconds: float, heartbeat_s: float, stall_after_s: float
) -> str | None:
    """Why these controls cannot make the lesson's point, or None."""
    if stall_after_s < heartbeat_s:
        return (
            f"a stall threshold of {stall_after_s:g} s is shorter than the heartbeat interval "
            f"({heartbeat_s:g} s): the watcher could not tell a hung step from the normal wait "
            "for the next beat. Choose a threshold of at least one heartbeat interval"
        )
    if step_seconds >= stall_after_s:
        return (
            f"each healthy step takes at least {step_seconds:g} s, not less than the "
            f"{stall_after_s:g} s threshold: every step would page. Raise the threshold"
        )
    if hang_at > steps:
        return f"a hang at step {hang_at} of a {steps}-step job never happens (0: no hang)"
    if 0 < hang_at < MIN_HANG_AT:
        return (
            f"a hang at step {hang_at} leaves no steady step to measure (step 1 compiles; before "
            f"it the startup limit of {STARTUP_S:g} s applies, not the threshold): hang at step "
            f"{MIN_HANG_AT} or later, or 0 for no hang"
        )
    # The runner kills the job at JOB_TIMEOUT_S whatever happens; the steps up to the hang and
    # the threshold after it (or every step) must fit, with the startup limit before them.
    needed = hang_at * step_seconds + stall_after_s if hang_at else steps * step_seconds
    if needed > JOB_TIMEOUT_S - STARTUP_S:
        what = (
            f"{hang_at} steps of {step_seconds:g} s then the {stall_after_s:g} s threshold"
            if hang_at
            else f"{steps} steps of {step_seconds:g} s"
        )
        return (
            f"{what} take {needed:g} s of steps, past the {JOB_TIMEOUT_S:g} s this lesson lets "
            f"the job live ({STARTUP_S:g} s of it kept for the startup): the runner would kill "
            "it first. Choose fewer or shorter steps, an earlier hang or a shorter threshold"
        )
    return None


def settled_scrape(url: str, tries: int = SETTLE_TRIES) -> dict[str, float] | None:
    """A scrape taken between two steps' bookkeeping: two back-to-back GETs that agree on
    SETTLED_KEYS (the job updates them one after another at the end of a step, so a single
    GET can land half way). None if the endpoint is gone or never settles."""
    for _ in range(tries):
        try:
            a, b = health.scrape(url), health.scrape(url)
        except OSError:
            return None
        if all(health.sample(a, k, JOB_ID) == health.sample(b, k, JOB_ID) for k in SETTLED_KEYS):
            return b
    return None


@dataclasses.dataclass
class Watched:
    """What the watcher saw of one job."""

    argv: list[str]
    run_dir: pathlib.Path
    stall_after_s: float
    events: list[dict]  # the job's log, read back from the file at the end
    raw_lines: list[str]
    scrapes: list[tuple[float, dict[str, float]]]  # (wall time, samples) while it ran
    settled: dict[str, float] | None  # the scrape the check compares with the log
    settled_ts: float | None
    alerts: list[health.Alert]
    end: runner.Transition
    metrics_url: str | None
    killed_at: float | None  # when the watcher killed the hung job (None: it ended itself)

    @property
    def steps(self) -> list[dict]:
        return health.step_events(self.events)

    @property
    def running(self) -> dict | None:
        return next((e for e in self.events if e["event"] == "running"), None)


def watch_job(
    run_dir,
    steps: int,
    hang_at: int,
    step_seconds: float,
    heartbeat_s: float,
    stall_after_s: float,
    seed: int = 0,
    on_poll: Callable[[list[dict], list[tuple[float, dict]], list[health.Alert]], None]
    | None = None,
    refresh_s: float = 0.5,
) -> Watched:
    """Run the job under the runner and watch it; a stall alert ends it (SIGKILL).

    ``on_poll(events, scrapes, alerts)`` is called about every ``refresh_s`` (a UI redraws
    its charts there). Nothing outlives the call: the runner kills the group in ``finally``.
    """
    if reason := problem(steps, hang_at, step_seconds, heartbeat_s, stall_after_s):
        raise ValueError(reason)
    run_dir = pathlib.Path(run_dir)
    argv = job_argv(run_dir, steps, hang_at, step_seconds, heartbeat_s, seed)
    detector = health.StallDetector(stall_after_s, startup_s=max(STARTUP_S, stall_after_s))
    scrapes: list[tuple[float, dict]] = []
    settled = settled_ts = url = killed_at = None
    env = runtime.child_env(PYTHONUNBUFFERED="1")  # on the CPU while this holds a TPU
    r = runner.JobRunner(argv, job.events_path(run_dir), timeout_s=JOB_TIMEOUT_S, env=env)
    try:
        r.start()
        fed, next_scrape, next_draw = 0, 0.0, 0.0
        while not r.done:
            r.poll()
            detector.observe(r.events[fed:])
            fed = len(r.events)
            if url is None and (running := next((e for e in r.events if e["event"] == "running"),
                                                None)):  # fmt: skip
                url = running.get("metrics_url")
            now = time.monotonic()
            if url and not r.done and now >= next_scrape:
                next_scrape = now + SCRAPE_EVERY_S
                if (s := settled_scrape(url, tries=1)) is not None:
                    scrapes.append((time.time(), s))
                    settled, settled_ts = s, scrapes[-1][0]
            if detector.check() is not None and hang_at:
                # The process is frozen between steps: what it exports now is final.
                if (s := settled_scrape(url)) is not None:
                    settled, settled_ts = s, time.time()
                    scrapes.append((settled_ts, s))
                killed_at = time.time()
                r.kill()
                r.wait()
                break
            if on_poll is not None and now >= next_draw:
                next_draw = now + refresh_s
                on_poll(list(r.events), list(scrapes), list(detector.alerts))
            time.sleep(POLL_S)
        end = r.transitions[-1]
    finally:
        r.close()
    path = job.events_path(run_dir)
    raw = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return Watched(
        argv=argv,
        run_dir=run_dir,
        stall_after_s=stall_after_s,
        events=events.read_events(path) if path.exists() else [],
        raw_lines=raw,
        scrapes=scrapes,
        settled=settled,
        settled_ts=settled_ts,
        alerts=list(detector.alerts),
        end=end,
        metrics_url=url,
        killed_at=killed_at,
    )


# -- the two channels compared, and the detector's decision from the log alone --


def agreement(w: Watched) -> dict[str, float]:
    """|scraped - logged| per metric, the log read as raw JSON lines (json + NumPy float64).

    The scrape shows the job after step k = job_step; the log's steps 1..k must add up to it.
    """
    if w.settled is None:
        raise ValueError("no settled scrape of the metrics endpoint was taken")
    get = lambda name: health.sample(w.settled, name, JOB_ID)  # noqa: E731
    logged = [json.loads(line) for line in w.raw_lines if line.strip()]
    k = int(get("job_step"))
    upto = [e for e in logged if e["event"] == "step" and e["step"] <= k]
    times = np.array([e["step_time_s"] for e in upto], dtype=np.float64)
    running = next(e for e in logged if e["event"] == "running")
    errors = {
        "steps (job_steps_total vs step events)": abs(get("job_steps_total") - len(upto)),
        "tokens (job_tokens_total vs sum of logged tokens)": abs(
            get("job_tokens_total") - sum(int(e["tokens"]) for e in upto)
        ),
        "loss of step k (gauge vs log)": abs(get("job_loss") - float(upto[-1]["loss"]))
        if upto
        else 0.0,
        "step time sum (histogram _sum vs log, relative)": abs(
            get("job_step_duration_seconds_sum") - times.sum()
        )
        / max(times.sum(), 1e-300),
        "FLOPs per step (gauge vs running event)": abs(
            get("job_flops_per_step") - float(running["flops_per_step"] or 0.0)
        ),
    }
    for le in HISTOGRAM_CHECKED_BUCKETS:
        name = f"job_step_duration_seconds_bucket{{job={JOB_ID},le={le}}}"
        errors[f"steps <= {le} s (bucket vs np.count_nonzero)"] = abs(
            w.settled.get(name, float("nan")) - np.count_nonzero(times <= float(le))
        )
    return errors


HISTOGRAM_CHECKED_BUCKETS = ("0.01", "0.1", "1.0", "+Inf")  # among JobMetrics' bucket bounds


@dataclasses.dataclass(frozen=True)
class StallReference:
    """How many alerts a detector with this threshold must raise, from the log's step times."""

    gaps_s: tuple[float, ...]  # between consecutive steps (first step: from "running")
    final_silence_s: float | None  # last step -> the kill (None if the job ended itself)
    definite: int  # silences past threshold + 2 polls: an alert must have fired for each
    possible: int  # silences past the threshold at all: no more alerts than this
    max_healthy_gap_s: float  # the longest gap between steps that did arrive (after step 1)


def stall_reference(w: Watched, startup_s: float = STARTUP_S) -> StallReference:
    logged = [json.loads(line) for line in w.raw_lines if line.strip()]
    running = next((e for e in logged if e["event"] == "running"), None)
    step_ts = np.array([e["ts"] for e in logged if e["event"] == "step"], dtype=np.float64)
    if running is None:
        return StallReference((), None, 0, 0, 0.0)
    ts = np.concatenate([[float(running["ts"])], step_ts])
    gaps = np.diff(ts)
    limits = np.full(gaps.shape, w.stall_after_s)
    if limits.size:
        limits[0] = max(startup_s, w.stall_after_s)  # the first step compiles
    final = None
    if w.killed_at is not None:
        final = w.killed_at - ts[-1]
        gaps = np.append(gaps, final)
        limits = np.append(limits, w.stall_after_s if step_ts.size else startup_s)
    slack = 2 * POLL_S  # a silence just past the threshold may end before the next poll
    return StallReference(
        gaps_s=tuple(float(g) for g in gaps),
        final_silence_s=final,
        definite=int(np.count_nonzero(gaps >= limits + slack)),
        possible=int(np.count_nonzero(gaps >= limits)),
        max_healthy_gap_s=float(np.diff(step_ts).max()) if step_ts.size > 1 else 0.0,
    )


def heartbeats_during_hang(w: Watched) -> int:
    """Heartbeats logged after the last step (the hung step's silence)."""
    last = max((float(e["ts"]) for e in w.steps), default=None)
    if last is None:
        return 0
    return sum(1 for e in w.events if e["event"] == "heartbeat" and float(e["ts"]) > last)


# -- throughput, utilization, FLOPs --


def model_flops(batch: int, features: int, hidden: int, classes: int) -> dict[str, float]:
    """Per-step FLOP counts of the job's MLP: the matmul closed form (MFU's numerator) and the
    6 N rule (N parameters, one token per example) beside it."""
    params = features * hidden + hidden + hidden * classes + classes
    return {
        "matmuls (closed form, forward + backward)": health.mlp_train_flops(
            batch, features, hidden, classes
        ),
        "6 N per token (N = parameters)": 6.0 * params * batch,
    }


def cpu_peak() -> tuple[float, str]:
    """This CPU's sustained float32 matmul FLOP/s: the saved machine report, else a quick
    256x256 measurement (a low estimate of the peak, so the MFU errs high)."""
    from core.perf import machine

    report = machine.load()
    if report is not None:
        return float(report["peak_flop_per_s"]), report["machine"]
    measured = machine.measure_matmul(256, "float32", repeats=3)
    return float(measured["flop_per_s"]), f"{machine.machine_label()}, quick 256x256 matmul"


def throughput_rows(t: health.Throughput, xla: health.Throughput) -> list[dict]:
    return [
        {"figure": "steady steps measured (first step compiles, left out)", "value": t.steps},
        {"figure": "median step time (ms)", "value": t.median_step_s * 1e3},
        {"figure": "tokens/s (one token = one real example)", "value": t.tokens_per_s},
        {"figure": "model FLOP/s (matmul closed form)", "value": t.achieved_flop_per_s},
        {"figure": "CPU MFU (model FLOPs / this CPU's matmul peak)", "value": t.mfu},
        {"figure": "XLA-counted FLOP/s (HLO cost analysis, incl. Adam, softmax)",
         "value": xla.achieved_flop_per_s},
        {"figure": "CPU utilization by XLA's count", "value": xla.mfu},
        {"figure": "peak used", "value": t.peak_label},
    ]  # fmt: skip


# -- tables and chart data --


def event_rows(evts: list[dict], t0: float | None = None) -> list[dict]:
    """The parsed log, one row per event, time from the first event."""
    t0 = evts[0]["ts"] if t0 is None and evts else (t0 or 0.0)
    rows = []
    for e in evts:
        rest = {k: v for k, v in e.items() if k not in ("ts", "job", "event", "config")}
        rows.append({"t (s)": e["ts"] - t0, "event": e["event"], "step": e.get("step"),
                     "fields": ", ".join(f"{k}={_short(v)}" for k, v in rest.items()
                                         if k != "step")})  # fmt: skip
    return rows


def _short(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def series(evts: list[dict], scrapes: list[tuple[float, dict]], t0: float) -> dict[str, list]:
    """Chart rows: per step (time, loss), per heartbeat (since last step, gap), per scrape."""
    steps = [
        {"t (s)": e["ts"] - t0, "step": e["step"], "step time (ms)": e["step_time_s"] * 1e3,
         "loss": e["loss"]}
        for e in evts if e["event"] == "step"
    ]  # fmt: skip
    beats = [e for e in evts if e["event"] == "heartbeat"]
    heart = [
        {"t (s)": e["ts"] - t0, "since last step (s)": e["since_step_s"],
         "gap to previous beat (s)": (e["ts"] - p["ts"]) if p else None}
        for p, e in zip([None, *beats[:-1]], beats, strict=True)
    ]  # fmt: skip
    scraped = [
        {"t (s)": ts - t0, "step": health.sample(s, "job_step", JOB_ID), "channel": "scraped"}
        for ts, s in scrapes
    ] + [{"t (s)": r["t (s)"], "step": r["step"], "channel": "logged"} for r in steps]
    return {"steps": steps, "heartbeats": heart, "channels": scraped}


# -- the check's terms --


def check_terms(
    w: Watched, hang_at: int, tokens_per_s: float, closed_form_flops: float, batch_size: int
) -> tuple[dict[str, float], dict[str, float], dict[str, bool]]:
    """(errors, tolerances, facts) for the lesson's lab.Check, all from independent readers:
    the scrape vs the raw log (``agreement``), the tokens vs steps x batch size, tokens/s vs
    the raw log in float64, the alerts vs ``stall_reference``'s NumPy gaps."""
    from core import numerics

    errors = agreement(w)
    tol = dict.fromkeys(errors, numerics.tolerance("int32"))  # counts: exact
    for name in (
        "loss of step k (gauge vs log)",
        "step time sum (histogram _sum vs log, relative)",
    ):
        # the same float64s, written and parsed (NumPy, on the host)
        tol[name] = numerics.tolerance("float64", backend="cpu")
    k = int(health.sample(w.settled, "job_step", JOB_ID))
    scraped_tokens = health.sample(w.settled, "job_tokens_total", JOB_ID)
    errors["tokens scraped vs k x batch_size (closed form)"] = abs(scraped_tokens - k * batch_size)
    tol["tokens scraped vs k x batch_size (closed form)"] = numerics.tolerance("int32")
    logged = [json.loads(line) for line in w.raw_lines if line.strip()]
    steady = [e for e in logged if e["event"] == "step"][1:]  # the first step compiles
    seconds = np.sum(np.array([e["step_time_s"] for e in steady], dtype=np.float64))
    name = "tokens/s vs steady steps x batch / their seconds (float64, raw log)"
    errors[name] = abs(tokens_per_s - len(steady) * batch_size / seconds) / tokens_per_s
    tol[name] = numerics.tolerance("float64", backend="cpu")

    ref = stall_reference(w)
    xla_flops = float((w.running or {}).get("flops_per_step") or 0.0)
    facts = {
        "alerts as the log's step gaps require (NumPy: definite <= alerts <= possible)": (
            ref.definite <= len(w.alerts) <= ref.possible
        ),
        "no gap between arrived steps reached the threshold (healthy steps: no alert)": (
            ref.max_healthy_gap_s < w.stall_after_s
        ),
        "matmul closed form <= XLA's count of the whole step": closed_form_flops <= xla_flops,
    }
    if hang_at:
        silence = ref.final_silence_s
        facts |= {
            "exactly one alert, at the step before the hang": (
                [a.last_step for a in w.alerts] == [hang_at - 1]
            ),
            "the hang's silence reached the threshold (log vs kill time)": (
                silence is not None and silence >= w.stall_after_s
            ),
            "heartbeats continued through the hang (alive, not dead)": (
                heartbeats_during_hang(w) >= 1
                and bool(w.alerts)
                and "a step is hung" in w.alerts[0].message
            ),
            "the hung job was killed (SIGKILL) after the alert": w.end.signal == "SIGKILL",
        }
    else:
        facts |= {
            "no alert for the healthy job": not w.alerts,
            "the job succeeded": w.end.state == "succeeded",
        }
    return errors, tol, facts


# -- charts (Altair) --


def live_chart(evts: list[dict], scrapes: list[tuple[float, dict]], stall_after_s: float):
    """Seconds since the last step at each heartbeat with the stall threshold drawn, and the
    step time per step; None before the first heartbeat."""
    import altair as alt
    import pandas as pd

    if not evts:
        return None
    data = series(evts, scrapes, evts[0]["ts"])
    if not data["heartbeats"]:
        return None
    since = pd.DataFrame(data["heartbeats"])
    beat = (
        alt.Chart(since)
        .mark_line(point=True)
        .encode(x="t (s):Q", y=alt.Y("since last step (s):Q"), tooltip=list(since.columns))
    )
    rule = (
        alt.Chart(pd.DataFrame({"threshold (s)": [stall_after_s]}))
        .mark_rule(color="red", strokeDash=[4, 3])
        .encode(y="threshold (s):Q")
    )
    parts = [
        (beat + rule).properties(
            title="Heartbeats: seconds since the last step (red: the stall threshold)",
            height=160,
            width=560,
        )
    ]
    if data["steps"]:
        steps = pd.DataFrame(data["steps"])
        parts.append(
            alt.Chart(steps)
            .mark_line(point=True)
            .encode(
                x="step:Q",
                y=alt.Y("step time (ms):Q", scale=alt.Scale(type="log")),
                tooltip=list(steps.columns),
            )
            .properties(title="Step time per step (log scale; step 1 compiles)", height=140)
            .properties(width=560)
        )
    return alt.vconcat(*parts)
