import os
import time

import jax
import jax.numpy as jnp
import pytest

from core.workload import events, health, job, runner

STALL_AFTER_S = 1.5  # the hung job below sleeps 60 s in its step: far past this threshold


def ev(kind, ts, **fields):
    return {"ts": ts, "job": "j", "event": kind, **fields}


def test_the_endpoint_serves_what_the_job_set_and_the_parser_reads_it():
    metrics = health.JobMetrics("j1")
    metrics.started(4, 1234.0)
    metrics.stepped(5, 0.75, 0.02, 8)
    metrics.stepped(6, 0.5, 0.04, 8)
    with health.MetricsServer(metrics.registry, port=0) as server:
        assert server.url.startswith("http://127.0.0.1:")
        samples = health.scrape(server.url)
    get = lambda name: health.sample(samples, name, "j1")  # noqa: E731
    assert get("job_step") == 6 and get("job_loss") == 0.5 and get("job_start_step") == 4
    assert get("job_tokens_total") == 16 and get("job_steps_total") == 2
    assert get("job_step_duration_seconds_count") == 2
    assert get("job_step_duration_seconds_sum") == pytest.approx(0.06)
    assert get("job_flops_per_step") == 1234.0
    with pytest.raises(OSError):  # stopped with the job: nothing listens any more
        health.scrape(server.url, timeout_s=1)


def test_scrape_refuses_anything_but_loopback():
    with pytest.raises(ValueError, match="loopback"):
        health.scrape("http://example.com/metrics")


def test_stall_alerts_once_per_silence_and_names_the_kind():
    d = health.StallDetector(2.0)
    d.observe([ev("running", 0.0, start_step=0), ev("step", 1.0, step=1)])
    assert d.check(now=2.5) is None
    d.observe([ev("heartbeat", 3.0, step=1)])
    alert = d.check(now=3.5)
    assert alert.last_step == 1 and alert.silent_s == 2.5 and "a step is hung" in alert.message
    assert d.check(now=9.0) is None  # one alert per silence
    d.observe([ev("step", 10.0, step=2)])
    alert = d.check(now=13.0)
    assert alert is not None and "no heartbeat either" in alert.message
    d.observe([ev("succeeded", 13.5, step=2)])
    assert d.check(now=99.0) is None and len(d.alerts) == 2
    with pytest.raises(ValueError):
        health.StallDetector(0)


def test_a_real_hung_job_is_detected_while_its_heartbeat_continues(tmp_path):
    """One real job whose first step takes 60 s (a hung step): the alert fires, then the runner
    kills it. Until core.workload.faults' hang lands, a long --step-seconds is the hang."""
    argv = job.command(tmp_path, "hung", 3, "--step-seconds", "60", "--heartbeat-s", "0.2")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with runner.JobRunner(argv, job.events_path(tmp_path), timeout_s=120, env=env) as r:
        r.start()
        detector = health.StallDetector(STALL_AFTER_S)
        deadline = time.monotonic() + 120
        fed = 0
        while not detector.alerts and time.monotonic() < deadline and not r.done:
            r.poll()
            detector.observe(r.events[fed:])
            fed = len(r.events)
            detector.check()
            time.sleep(0.05)
        assert detector.alerts, r.stderr_tail
        r.kill()
        end = r.wait()
    alert = detector.alerts[0]
    assert alert.last_step == 0 and alert.silent_s >= STALL_AFTER_S
    assert "a step is hung" in alert.message  # heartbeats kept coming
    assert end.state == "failed" and end.signal == "SIGKILL"


def test_throughput_and_mfu_arithmetic():
    steps = [ev("step", i, step=i, step_time_s=t, tokens=8) for i, t in enumerate([9, 1, 2, 1])]
    t = health.throughput(steps, flops_per_step=100.0, peak_flop_per_s=1000.0, peak_label="x")
    assert t.steps == 3 and t.tokens == 24 and t.median_step_s == 1
    assert t.tokens_per_s == 24 / 4 and t.achieved_flop_per_s == 300 / 4
    assert t.mfu == pytest.approx(0.075)
    with pytest.raises(ValueError):
        health.throughput([], 1.0, 1.0, "x")


@pytest.mark.parametrize("b,f,h,c", [(8, 8, 16, 4), (4, 32, 64, 10), (16, 64, 128, 8)])
def test_the_closed_form_counts_the_dots_xla_counts(b, f, h, c):
    """The MLP's forward and backward matmuls as XLA counts them (HLO cost analysis)."""

    def step(x, w1, w2, g_BC):
        logits, vjp = jax.vjp(lambda w1, w2: jax.nn.relu(x @ w1) @ w2, w1, w2)
        return logits, vjp(g_BC)

    args = (jnp.ones((b, f)), jnp.ones((f, h)), jnp.ones((h, c)), jnp.ones((b, c)))
    flops = jax.jit(step).lower(*args).cost_analysis()["flops"]
    elementwise = 3 * b * h  # relu's max, its gradient's compare and select: one each per unit
    assert flops == health.mlp_train_flops(b, f, h, c) + elementwise


def test_gaps():
    evts = [ev("heartbeat", 1.0), ev("step", 1.5), ev("heartbeat", 2.0), ev("heartbeat", 4.0)]
    assert health.gaps(evts, "heartbeat") == [(2.0, 1.0), (4.0, 2.0)]
    assert events.REQUIRED == ("ts", "job", "event")


def test_startup_limit_covers_the_first_step_only():
    """The first step compiles: with ``startup_s`` its silence is held to that limit, and every
    later silence to ``stall_after_s`` again."""
    d = health.StallDetector(1.0, startup_s=10.0)
    d.observe([ev("running", 0.0, start_step=0), ev("heartbeat", 0.5, step=0)])
    assert d.check(now=5.0) is None  # compiling: 5 s < the startup limit
    alert = d.check(now=10.5)
    assert alert is not None and "no first step" in alert.message and alert.last_step == 0
    d.observe([ev("step", 11.0, step=1)])
    assert d.check(now=11.9) is None
    assert d.check(now=12.1).silent_s == pytest.approx(1.1)  # back to the 1 s threshold
    plain = health.StallDetector(1.0)
    plain.observe([ev("running", 0.0, start_step=0)])
    assert plain.check(now=1.5) is not None  # no startup limit: the threshold from the start
    with pytest.raises(ValueError, match="startup_s"):
        health.StallDetector(2.0, startup_s=1.0)
