"""The lesson "Inference capacity, batching, and autoscaling": the predict service
(core.serving.predict) under load, micro-batched by a time window, sized and autoscaled.

- Versions: the champion (the digits MLP trained small, exported with jax.export) and two
  candidate exports of it: its weights rounded through bfloat16 (a compressed copy, a good
  canary) and its weights with seeded Gaussian noise of ``noise`` x each leaf's std (a
  degraded one).
- Bitwise batching: rows sent one by one through a MicroBatcher from several threads equal
  the same rows run alone, bit for bit, when every call runs at ONE compiled shape (the
  batch padded to max_batch rows): at a fixed shape a row's result does not depend on its
  neighbours. The service pads to bucket sizes (1, 2, 4, ...), and XLA:CPU's matmul at
  another shape may round differently in the last bits: ``bucket_drift`` measures that.
- Load: locust runs (core.serving.load) against the service at several window settings.
- Autoscaling: a trace with a constant part (where the replica count has a closed form) then
  a diurnal day with a burst, in units of the per-replica capacity measured by the load run.
- Gates: the candidates go through shadow then canary stages (core.serving.capacity).
"""

from __future__ import annotations

import dataclasses
import pathlib
import threading

import ml_dtypes
import numpy as np

from core.serving import batching, capacity, load
from core.serving.predict import app as predict_app
from core.serving.predict import export

FEATURES = export.FEATURES
CONSTANT_STEPS = 36  # the trace's constant part (3 hours of 5-minute steps)
DAY_STEPS = 288  # a day of 5-minute steps
STEP_S = 300.0
BURST_START = CONSTANT_STEPS + 200  # mid-afternoon of the day
BURST_STEPS = 6  # half an hour
GATE_ROWS = 240  # requests per rollout stage (digits held-out images)
CANARY_STAGES = (0.0, 0.1, 0.5, 1.0)


@dataclasses.dataclass(frozen=True)
class Versions:
    champion: pathlib.Path
    candidates: dict[str, pathlib.Path]  # name -> artifact dir
    info: dict


def _weights_rounded_bf16(weights: dict) -> dict:
    return {
        n: np.asarray(w, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
        for n, w in weights.items()
    }


def _weights_noisy(weights: dict, noise: float, seed: int) -> dict:
    rng = np.random.default_rng([seed, 7])
    return {
        n: (w + rng.normal(0.0, noise * float(np.std(w)), w.shape)).astype(np.float32)
        for n, w in sorted(weights.items())
    }


def build_versions(out_dir, seed: int, steps: int, max_batch: int, noise: float) -> Versions:
    """Train the champion, write it and the two candidate exports under ``out_dir``."""
    return write_versions(export.train(seed=seed, steps=steps), out_dir, max_batch, noise, seed)


def write_versions(trained, out_dir, max_batch: int, noise: float, seed: int) -> Versions:
    """Export the trained champion and its two candidates (artifacts of ``max_batch`` rows)."""
    _check_noise(noise)
    champion = write_champion(trained, out_dir, max_batch)
    return write_candidates(trained, champion, out_dir, max_batch, noise, seed)


def write_champion(trained, out_dir, max_batch: int) -> pathlib.Path:
    """Export the trained champion (artifacts of ``max_batch`` rows) to ``out_dir/champion``."""
    champion = pathlib.Path(out_dir) / "champion"
    export.write_artifacts(trained, champion, max_batch, model_version="champion")
    return champion


def write_candidates(
    trained, champion: pathlib.Path, out_dir, max_batch: int, noise: float, seed: int
) -> Versions:
    """Export the champion's two candidates to ``out_dir/candidate{0,1}``; the Versions with
    the ``champion`` already written (the candidates alone follow the noise control)."""
    _check_noise(noise)
    candidates = {
        "bfloat16-rounded weights": _weights_rounded_bf16(trained.weights),
        f"noisy weights ({noise:g} std)": _weights_noisy(trained.weights, noise, seed),
    }
    dirs = {}
    for i, (name, weights) in enumerate(candidates.items()):
        dirs[name] = pathlib.Path(out_dir) / f"candidate{i}"
        export.write_artifacts(
            export.Trained(weights, trained.info), dirs[name], max_batch,
            model_version=f"candidate{i}",
        )  # fmt: skip
    return Versions(pathlib.Path(champion), dirs, trained.info)


def _check_noise(noise: float) -> None:
    if not 0.0 <= noise <= 5.0:
        raise ValueError(f"noise must be in [0, 5] (x each leaf's std), got {noise}")


def held_out(seed: int, count: int) -> np.ndarray:
    """``count`` held-out digits (raw pixels in [0, 16], float32), cycled if needed."""
    x, _ = export.test_inputs(seed, 10_000)
    return np.resize(x, (count, FEATURES)).astype(np.float32)


def padded_run(artifacts, size: int):
    """run_batch for a MicroBatcher: probabilities of a batch padded to ``size`` rows."""

    def run_batch(x_BF: np.ndarray) -> np.ndarray:
        padded = np.zeros((size, x_BF.shape[1]), x_BF.dtype)
        padded[: len(x_BF)] = x_BF
        return artifacts.run(padded)[1][: len(x_BF)]

    return run_batch


def through_batcher(run_batch, x_NF, max_batch: int, max_wait_s: float, threads: int = 8):
    """Every row of ``x_NF`` submitted alone through a MicroBatcher by ``threads`` clients
    at once; (results in row order, the batcher's stats)."""
    out = [None] * len(x_NF)
    with batching.MicroBatcher(run_batch, max_batch, max_wait_s) as batcher:

        def client(k):
            for i in range(k, len(x_NF), threads):
                out[i] = batcher(x_NF[i], timeout=60)

        workers = [threading.Thread(target=client, args=(k,)) for k in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        stats = batcher.stats()
    return np.stack(out), stats


def batched_vs_unbatched(artifacts, x_NF, max_batch: int, max_wait_s: float) -> dict:
    """The rows through the batcher and each row alone, both at the one padded shape; the
    same rows at the service's bucket of 1 (its unbatched path)."""
    run = padded_run(artifacts, max_batch)
    batched, stats = through_batcher(run, x_NF, max_batch, max_wait_s)
    alone = np.stack([run(row[None])[0] for row in x_NF])
    bucket1 = np.stack([artifacts.run(row[None])[1][0] for row in x_NF])
    return {"batched": batched, "alone": alone, "bucket1": bucket1, "stats": stats}


def bitwise_equal(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def load_runs(artifacts_dir, settings, users_levels, run_time_s: int, seed: int = 0) -> list:
    """One locust run per (max_batch, max_wait_ms) setting and users level, each against a
    fresh service on 127.0.0.1; rows of the table/chart (with the server's mean batch)."""
    rows = []
    for max_batch, max_wait_ms in settings:
        with predict_app.start(artifacts_dir, max_batch, max_wait_ms / 1000) as running:
            for users in users_levels:
                calls0, rows0 = running.engine.model_calls, running.engine.rows
                spec = load.LoadSpec(users, 1000, run_time_s, seed=seed)  # all users at once
                result = load.run_load(running.url, spec)
                calls = running.engine.model_calls - calls0
                served = running.engine.rows - rows0
                rows.append(
                    {
                        "setting": setting_name(max_batch, max_wait_ms),
                        "max_batch": max_batch,
                        "max_wait_ms": max_wait_ms,
                        "users": users,
                        "requests": result.requests,
                        "failures": result.failures,
                        "errors_5xx": result.errors_5xx,
                        "throughput_rps": result.throughput_rps,
                        "p50_ms": result.p50_ms,
                        "p95_ms": result.p95_ms,
                        "p99_ms": result.p99_ms,
                        "mean_batch": served / calls if calls else 0.0,
                        "locust_cpu": result.client_cpu_s / result.duration_s,
                        "result": result,
                    }
                )
    return rows


# The replay's budget when no load run met the SLO: the lowest-p95 run's p95 times this, so
# that the p95 policy (which scales down only under half its budget) can act at all.
RELAXED_HEADROOM = 3.0


@dataclasses.dataclass(frozen=True)
class Sizing:
    """One replica's capacity from the load runs, and the p95 budget the replay judges by.

    ``met``: some run without failures met the learner's budget; then the capacity is the
    highest throughput among those (capacity.capacity_from_runs) and the replay judges by
    that budget. Otherwise (a latency measured on a shared CPU, not a bad control) the
    lowest-p95 run stands in and the replay's budget is RELAXED_HEADROOM x its p95: a
    finding the learner sees (``rows``), and words the check carries (``check_words``)."""

    budget_ms: float
    met: bool
    capacity_rps: float
    p95_at_capacity_ms: float
    replay_budget_ms: float
    why_not: str  # capacity_from_runs's reason when the budget was not met, else ""

    @property
    def check_words(self) -> str:
        if self.met:
            return f"at your p95 budget of {self.budget_ms:g} ms"
        return (
            f"at a relaxed p95 budget of {self.replay_budget_ms:.4g} ms "
            f"({RELAXED_HEADROOM:g}x the best measured p95): your {self.budget_ms:g} ms "
            "budget was not met on this machine"
        )

    def rows(self) -> list[dict]:
        return [
            {"measured": "your p95 budget", "value": f"{self.budget_ms:g} ms"},
            {"measured": "p95 at the capacity used", "value": f"{self.p95_at_capacity_ms:.3g} ms"},
            {"measured": "p95 budget met", "value": "yes" if self.met else "no"},
            {"measured": "capacity per replica", "value": f"{self.capacity_rps:.4g} requests/s"},
            {
                "measured": "the replay's p95 budget",
                "value": f"{self.replay_budget_ms:.4g} ms"
                + ("" if self.met else f" (relaxed: {RELAXED_HEADROOM:g}x the best p95)"),
            },
        ]


def size_replica(results, budget_ms: float) -> Sizing:
    """The Sizing of ``results`` (load.LoadResult) for a p95 budget (see Sizing)."""
    clean = [r for r in results if r.failures == 0]
    if not clean:
        raise ValueError("no load run without failures: a replica's capacity is unknown")
    try:
        capacity_rps = capacity.capacity_from_runs(results, budget_ms)
        met, why_not = True, ""
    except ValueError as error:
        capacity_rps = min(clean, key=lambda r: r.p95_ms).throughput_rps
        met, why_not = False, str(error)
    p95 = min(r.p95_ms for r in clean if r.throughput_rps == capacity_rps)
    replay_budget = budget_ms if met else RELAXED_HEADROOM * p95
    return Sizing(float(budget_ms), met, float(capacity_rps), float(p95), replay_budget, why_not)


def setting_name(max_batch: int, max_wait_ms: float) -> str:
    if max_batch == 1 or max_wait_ms == 0:
        return "unbatched"
    return f"batch {max_batch}, wait {max_wait_ms:g} ms"


def lesson_trace(peak_replicas: float, burst_factor: float, seed: int, capacity_rps: float):
    """(trace in requests/s, the constant part's slice): CONSTANT_STEPS at the day's mean,
    then a day whose diurnal peak needs ``peak_replicas`` replicas' worth, with a burst."""
    if not 0.1 <= peak_replicas <= 1000:
        raise ValueError(f"peak_replicas must be in [0.1, 1000], got {peak_replicas}")
    amplitude = 0.6
    base = peak_replicas * capacity_rps / (1 + amplitude)
    day = capacity.traffic_trace(
        DAY_STEPS, base, amplitude, DAY_STEPS, BURST_START - CONSTANT_STEPS, BURST_STEPS,
        burst_factor, noise=0.05, seed=seed,
    )  # fmt: skip
    return np.concatenate([np.full(CONSTANT_STEPS, base), day]), slice(0, CONSTANT_STEPS)


def gate_rollouts(versions: Versions, gates: capacity.Gates, seed: int) -> dict:
    """name -> capacity.Rollout of each candidate against the champion, in process."""
    champion = export.load_artifacts(versions.champion)
    x = held_out(seed, GATE_ROWS)
    out = {}
    for name, directory in versions.candidates.items():
        candidate = export.load_artifacts(directory)
        observe = capacity.observe_in_process(
            lambda row, a=champion: a.run(row)[0],
            lambda row, a=candidate: a.run(row)[0],
            x,
            seed=seed,
        )
        out[name] = capacity.rollout(observe, gates, CANARY_STAGES)
    return out


def load_chart(load_rows: list[dict]):
    """The load runs as a chart: throughput vs latency per window setting when a setting ran
    at two or more users levels (the curve), else each percentile's latency as a bar (one
    run per setting is one point: a line chart of it would draw nothing)."""
    import altair as alt
    import pandas as pd

    rows = pd.DataFrame(
        [
            {"setting": r["setting"], "users": r["users"],
             "throughput (req/s)": round(float(r["throughput_rps"]), 1),
             "percentile": name, "latency (ms)": r[key]}
            for r in load_rows
            for name, key in (("p50", "p50_ms"), ("p95", "p95_ms"), ("p99", "p99_ms"))
        ]
    )  # fmt: skip
    tooltip = ["setting", "users", "percentile", "throughput (req/s)", "latency (ms)"]
    latency = alt.Y("latency (ms):Q", scale=alt.Scale(type="log"))
    if rows.groupby("setting")["users"].nunique().max() >= 2:
        return (
            alt.Chart(rows, title="Throughput vs latency per window setting")
            .mark_line(point=True)
            .encode(
                x=alt.X("throughput (req/s):Q", axis=alt.Axis(format=",.0f")),
                y=latency,
                color="setting:N",
                strokeDash="percentile:N",
                tooltip=tooltip,
            )
        )
    runs = ", ".join(
        f"{r['setting']}: {r['users']} users, {r['throughput_rps']:,.0f} req/s" for r in load_rows
    )
    return (
        alt.Chart(rows, title=f"Latency per percentile ({runs})")
        .mark_bar()
        .encode(
            x=alt.X("percentile:N", title=None),
            xOffset="setting:N",
            y=alt.Y("latency (ms):Q"),
            color="setting:N",
            tooltip=tooltip,
        )
        .properties(width=240)
    )
