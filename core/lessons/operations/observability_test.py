"""The observability lesson on real jobs: two job processes (one hung, one healthy), each
watched live; the rest on recorded events (no process)."""

import json
import pathlib

import jax
import pytest

from core.lessons.operations import observability as lesson
from core.state import recovery_demo
from core.workload import health, job, runner

CONFIG = recovery_demo.TrainConfig()
STALL_S = 1.5  # the lesson's default threshold: 25x a healthy 0.05 s step


def _assert_terms_pass(w, hang_at):
    flops = lesson.model_flops(CONFIG.batch_size, CONFIG.features, CONFIG.hidden, CONFIG.classes)
    closed = flops["matmuls (closed form, forward + backward)"]
    rate = health.throughput(w.events, closed, 1e12, "test peak")
    errors, tol, facts = lesson.check_terms(
        w, hang_at, rate.tokens_per_s, closed, CONFIG.batch_size
    )
    assert all(errors[k] <= tol[k] for k in errors), errors
    assert all(facts.values()), facts


@pytest.mark.parametrize(("hang_at", "seed"), [(6, 0), (0, 1)], ids=["hung", "healthy"])
def test_a_real_job_watched_live(tmp_path, hang_at, seed):
    """One trial each: the hung job (step 6 blocks, heartbeat goes on) gives exactly one alert
    at step 5 and is killed; the healthy one gives none and succeeds. In both the settled scrape
    equals the raw log's sums exactly."""
    w = lesson.watch_job(tmp_path, 8, hang_at, 0.05, 0.25, STALL_S, seed)
    assert w.metrics_url and w.metrics_url.startswith("http://127.0.0.1:")
    assert w.settled is not None and len(w.scrapes) >= 1
    _assert_terms_pass(w, hang_at)
    k = int(health.sample(w.settled, "job_step", lesson.JOB_ID))
    if hang_at:
        assert [a.last_step for a in w.alerts] == [5] and k == 5
        assert "a step is hung" in w.alerts[0].message
        assert lesson.heartbeats_during_hang(w) >= 2
        assert w.end.state == "failed" and w.end.signal == "SIGKILL"
        assert health.sample(w.settled, "job_tokens_total", lesson.JOB_ID) == 5 * CONFIG.batch_size
    else:
        assert w.alerts == [] and w.end.state == "succeeded"
        assert [e["step"] for e in w.steps] == list(range(1, 9))
    with pytest.raises(OSError):  # nothing listens once the job is gone
        health.scrape(w.metrics_url, timeout_s=1)


def _recorded(tmp_path, evts, stall_after_s=1.0, killed_at=None, settled=None):
    path = job.events_path(tmp_path)
    path.write_text("".join(json.dumps(e) + "\n" for e in evts), encoding="utf-8")
    end = runner.Transition("failed", 0.0, "killed", signal="SIGKILL")
    return lesson.Watched(
        argv=[], run_dir=pathlib.Path(tmp_path), stall_after_s=stall_after_s, events=evts,
        raw_lines=path.read_text().splitlines(), scrapes=[], settled=settled, settled_ts=None,
        alerts=[], end=end, metrics_url=None, killed_at=killed_at,
    )  # fmt: skip


def ev(kind, ts, **fields):
    return {"ts": ts, "job": lesson.JOB_ID, "event": kind, **fields}


def test_the_stall_reference_counts_silences_from_the_log(tmp_path):
    evts = [ev("running", 0.0, flops_per_step=1.0), ev("step", 5.0, step=1, step_time_s=5.0,
            tokens=8, loss=1.0), ev("step", 5.2, step=2, step_time_s=0.2, tokens=8, loss=0.9),
            ev("step", 7.0, step=3, step_time_s=1.8, tokens=8, loss=0.8)]  # fmt: skip
    ref = lesson.stall_reference(_recorded(tmp_path, evts, 1.0, killed_at=7.5))
    # first gap 5 s < the startup limit; 1.8 s is a stall; the final 0.5 s silence is not
    assert ref.definite == ref.possible == 1 and ref.max_healthy_gap_s == pytest.approx(1.8)
    ref = lesson.stall_reference(_recorded(tmp_path, evts, 1.75))  # 1.8 within 2 polls: maybe
    assert ref.definite == 0 and ref.possible == 1 and ref.final_silence_s is None


def test_agreement_sees_a_scrape_that_disagrees_with_the_log(tmp_path):
    evts = [ev("running", 0.0, flops_per_step=100.0),
            ev("step", 1.0, step=1, step_time_s=0.5, tokens=8, loss=1.25),
            ev("step", 1.1, step=2, step_time_s=0.05, tokens=8, loss=1.0)]  # fmt: skip
    metrics = health.JobMetrics(lesson.JOB_ID)
    metrics.started(0, 100.0)
    metrics.stepped(1, 1.25, 0.5, 8)
    metrics.stepped(2, 1.0, 0.05, 8)
    with health.MetricsServer(metrics.registry) as server:
        settled = lesson.settled_scrape(server.url)
        metrics.tokens.inc(1)  # a token the log never saw
        off = health.scrape(server.url)
    assert max(lesson.agreement(_recorded(tmp_path, evts, settled=settled)).values()) == 0
    errors = lesson.agreement(_recorded(tmp_path, evts, settled=off))
    assert errors["tokens (job_tokens_total vs sum of logged tokens)"] == 1
    assert errors["steps <= 0.1 s (bucket vs np.count_nonzero)"] == 0


def test_refusals_say_why():
    assert lesson.problem(8, 6, 0.05, 0.25, 1.5) is None
    assert "shorter than the heartbeat" in lesson.problem(8, 6, 0.05, 2.0, 1.0)
    assert "every step would page" in lesson.problem(8, 6, 1.0, 0.25, 1.0)
    assert "never happens" in lesson.problem(8, 9, 0.05, 0.25, 1.5)
    assert "no steady step" in lesson.problem(8, 2, 0.05, 0.25, 1.5)
    with pytest.raises(ValueError, match="heartbeat"):
        lesson.watch_job("/nonexistent", 8, 6, 0.05, 2.0, 1.0)


def test_a_job_longer_than_its_lifetime_is_refused():
    """Issue 36: 400 steps of 2 s (the controls' ends) outlive the runner's JOB_TIMEOUT_S, so
    the job was killed before its hang and the one-alert check failed. The hang at step K and
    the threshold after it (or every step, without a hang) must fit in the lifetime."""
    refused = lesson.problem(400, 400, 2.0, 5.0, 30.0)
    assert refused is not None and "830 s" in refused and f"{lesson.JOB_TIMEOUT_S:g} s" in refused
    assert "s of steps" in lesson.problem(400, 0, 2.0, 5.0, 30.0)
    assert lesson.problem(400, 400, 0.05, 5.0, 30.0) is None  # 50 s: fits
    budget = lesson.JOB_TIMEOUT_S - lesson.STARTUP_S
    assert lesson.problem(100, 0, budget / 100, 0.25, budget) is None  # exactly at the limit


def test_matmul_closed_form_is_below_xlas_count_of_the_jobs_step():
    """MFU's numerator (the matmuls) is part of what XLA counts for the whole Adam step."""
    state, batch = recovery_demo.init_state(CONFIG), recovery_demo.pipeline(CONFIG)[0]
    xla = job.flops_per_step(recovery_demo.train_step_fn(CONFIG), state, batch)
    flops = lesson.model_flops(CONFIG.batch_size, CONFIG.features, CONFIG.hidden, CONFIG.classes)
    assert flops["matmuls (closed form, forward + backward)"] < xla
    assert flops["6 N per token (N = parameters)"] == 6 * (8 * 16 + 16 + 16 * 4 + 4) * 8
    assert jax.default_backend() == "cpu"
