"""The capacity lesson's pieces: batched == alone bit for bit at one compiled shape (a row
mix-up is caught), both equal a NumPy float64 forward within float32 tolerance, the bfloat16
copy is promoted and the noisy one rolled back over three seeds, the constant part of the
trace meets the closed form, and one tiny load run has zero errors."""

import math

import numpy as np
import pytest

from core import numerics
from core.lessons.deployment import inference_capacity as lesson
from core.serving import capacity, load
from core.serving.predict import export

GATES = capacity.Gates(max_p95_ms=50.0, max_error_rate=0.0, min_agreement=0.97, min_requests=10)


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    return lesson.build_versions(tmp_path_factory.mktemp("versions"), 0, 60, 16, noise=1.0)


def test_batched_rows_equal_rows_alone_bitwise(versions):
    artifacts = export.load_artifacts(versions.champion)
    x = lesson.held_out(0, 96)
    out = lesson.batched_vs_unbatched(artifacts, x, 16, 0.005)
    assert out["stats"].largest_batch > 1 and out["stats"].requests == 96
    assert lesson.bitwise_equal(out["batched"], out["alone"])
    _, want = export.reference_forward(export.load_artifacts(versions.champion).weights, x)
    error = numerics.scaled_max_error(out["batched"], want)
    assert error <= numerics.tolerance("float32")
    assert numerics.scaled_max_error(out["bucket1"], want) <= numerics.tolerance("float32")


def test_a_row_mixup_is_not_bitwise_equal(versions):
    artifacts = export.load_artifacts(versions.champion)
    run = lesson.padded_run(artifacts, 16)
    x = lesson.held_out(0, 64)
    mixed, _ = lesson.through_batcher(lambda xb: run(xb)[::-1], x, 16, 0.005)
    alone = np.stack([run(row[None])[0] for row in x])
    assert not lesson.bitwise_equal(mixed, alone)
    assert not lesson.bitwise_equal(alone.astype(np.float64), alone)  # dtype counts too


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_rounded_copy_is_promoted_and_the_noisy_one_rolled_back(seed, tmp_path):
    v = lesson.build_versions(tmp_path, seed, 60, 16, noise=1.0)
    rollouts = lesson.gate_rollouts(v, GATES, seed)
    good, bad = (rollouts[name] for name in v.candidates)
    assert good.decision == "promoted"
    agreement = [c.value for c in good.checks if c.gate == "agreement"]
    assert min(agreement) >= 0.99  # margin over the 0.97 gate
    assert bad.decision == "rolled back" and bad.failed.gate == "agreement"
    assert bad.failed.stage == "shadow" and bad.failed.value <= 0.9


@pytest.mark.parametrize(
    "peak,u,kind", [(6.0, 0.7, "queue"), (2.5, 1.0, "queue"), (9, 0.5, "queue")]
)
def test_the_constant_part_meets_the_closed_form(peak, u, kind):
    cap = 120.0
    trace, constant = lesson.lesson_trace(peak, 3.0, 0, cap)
    out = capacity.replay(trace, capacity.Policy(kind, u, startup_steps=1), cap, 10.0, 50.0)
    settled = slice(constant.stop // 2, constant.stop)
    want = math.ceil(trace[0] / (u * cap))
    assert (out.ready[settled] == want).all() and not out.violation[settled].any()
    assert trace[lesson.BURST_START] > 2 * trace[lesson.BURST_START - 1]


def test_a_tiny_load_run_has_no_errors(versions):
    rows = lesson.load_runs(versions.champion, [(8, 2.0)], [4], run_time_s=1)
    (row,) = rows
    assert row["requests"] > 0 and row["failures"] == 0 and row["errors_5xx"] == 0
    assert row["setting"] == "batch 8, wait 2 ms" and row["mean_batch"] >= 1.0


def test_bad_settings_are_refused(tmp_path):
    with pytest.raises(ValueError, match="noise"):
        lesson.build_versions(tmp_path, 0, 5, 16, noise=-1)
    with pytest.raises(ValueError, match="peak_replicas"):
        lesson.lesson_trace(0.0, 3.0, 0, 100.0)


def _run(p95_ms, throughput_rps, failures=0):
    statuses = {200: 100 - failures} | ({0: failures} if failures else {})
    return load.LoadResult(
        users=4, rows=1, requests=100, failures=failures, statuses=statuses,
        p50_ms=p95_ms / 2, p95_ms=p95_ms, p99_ms=p95_ms * 1.5, mean_ms=p95_ms / 2,
        max_ms=p95_ms * 2, duration_s=1.0, throughput_rps=throughput_rps,
    )  # fmt: skip


def test_a_missed_budget_is_a_finding_and_the_check_says_it_was_relaxed():
    """Issue 36: a missed p95 budget was replaced by 3x the measured p95 and nothing that the
    check said changed. The sizing now says which budget the replay judged and that the
    learner's was not met; met budgets are the learner's own."""
    runs = [_run(120.0, 300.0), _run(90.0, 200.0), _run(40.0, 500.0, failures=3)]
    missed = lesson.size_replica(runs, 60.0)
    assert (missed.met, missed.capacity_rps, missed.p95_at_capacity_ms) == (False, 200.0, 90.0)
    assert missed.replay_budget_ms == lesson.RELAXED_HEADROOM * 90.0
    assert {"measured": "p95 budget met", "value": "no"} in missed.rows()
    assert "not met" in missed.check_words and "relaxed" in missed.check_words
    assert "60 ms" in missed.check_words and "270 ms" in missed.check_words
    met = lesson.size_replica(runs, 100.0)
    assert (met.met, met.capacity_rps, met.replay_budget_ms) == (True, 200.0, 100.0)
    assert {"measured": "p95 budget met", "value": "yes"} in met.rows()
    assert met.check_words == "at your p95 budget of 100 ms"
    assert lesson.size_replica(runs, 130.0).capacity_rps == 300.0
    with pytest.raises(ValueError, match="no load run without failures"):
        lesson.size_replica([_run(40.0, 500.0, failures=3)], 60.0)


@pytest.mark.parametrize("kind", capacity.POLICIES)
@pytest.mark.parametrize("peak", [1.0, 6.0, 40.0])
@pytest.mark.parametrize("startup", [0, 6])
def test_the_apps_closed_form_holds_over_its_controls(kind, peak, startup):
    """The app's check at the ends of its controls (peak replicas 1-40, utilisation 0.1-1,
    cold start 0-6 steps, the p95 at capacity far under or just under its budget): the queue
    policy settles at ceil(load / (u x capacity)), the fixed one stays put, and the p95 policy,
    started at the fewest replicas that keep up (as the app starts it), stays in its band."""
    cap, budget = 120.0, 50.0
    trace, constant = lesson.lesson_trace(peak, 3.0, 0, cap)
    settled = slice(constant.stop // 2, constant.stop)
    load_rps = trace[constant.start]
    low = math.ceil(load_rps / cap)
    for u in (0.1, 1.0):
        high = math.ceil(load_rps / (u * cap))
        for p95_at_capacity in (10.0, 45.0):
            policy = capacity.Policy(
                kind, u, max_replicas=1000, startup_steps=startup,
                min_replicas=math.ceil(peak) if kind == "fixed" else 1,
            )  # fmt: skip
            out = capacity.replay(
                trace, policy, cap, p95_at_capacity, budget, lesson.STEP_S,
                initial_replicas=low if kind == "p95" else None,
            )  # fmt: skip
            ready = out.ready[settled]
            want = {"queue": (high, high), "fixed": (math.ceil(peak),) * 2, "p95": (low, high)}
            assert ((ready >= want[kind][0]) & (ready <= want[kind][1])).all(), (u, ready)


def _load_row(setting, users, rps):
    return {"setting": setting, "users": users, "throughput_rps": rps,
            "p50_ms": 3.0 * users, "p95_ms": 5.0 * users, "p99_ms": 9.0 * users}  # fmt: skip


def test_load_chart_draws_no_line_of_one_point_and_no_raw_float_tick():
    from core.lab import charts

    one_run = [_load_row("16 rows / 2 ms", 4, 258.865414)]  # the headless default
    spec = lesson.load_chart(one_run).to_dict()
    assert spec["mark"]["type"] == "bar" and charts.spec_problems(spec) == []
    assert "259 req/s" in spec["title"]
    sweep = [_load_row(s, u, 50.0 * u) for s in ("1 row / 0 ms", "16 rows / 2 ms") for u in (1, 4)]
    spec = lesson.load_chart(sweep).to_dict()
    assert spec["mark"]["type"] == "line" and charts.spec_problems(spec) == []
