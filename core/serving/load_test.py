"""The locust driver: loopback targets only, spec validation, nearest-rank percentiles against a
hand-computed reference, the summary/record cross-checks, and two short real runs against the
predict service (one serving: the server's own row count equals locust's; one whose batcher is
closed: every request a 503, counted as failures and 5xx)."""

import json
import math

import numpy as np
import pytest

from core.serving import load
from core.serving.predict import app as predict_app
from core.serving.predict import export


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1:8100",
        "http://example.com:8100",
        "http://0.0.0.0:8100",
        "https://127.0.0.1:8100",
        "http://127.0.0.1",
        "http://127.0.0.1:8100/predict",
        "http://127.0.0.1:99999",
        "127.0.0.1:8100",
    ],
)
def test_non_loopback_or_malformed_targets_are_refused(url):
    with pytest.raises(ValueError, match="target|refusing"):
        load.check_url(url)
    with pytest.raises(ValueError):
        load.locust_command(url, load.LoadSpec(1, 1, 1))


def test_loopback_targets_are_accepted():
    for url in ("http://127.0.0.1:8100", "http://localhost:1/", "http://[::1]:8100"):
        assert load.check_url(url) == url.rstrip("/")
    command = load.locust_command("http://127.0.0.1:8100", load.LoadSpec(32, 8, 5))
    assert command[command.index("-u") + 1] == "32" and "--headless" in command
    assert command[command.index("--run-time") + 1] == "5s"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"users": 0},
        {"users": 2.0},
        {"spawn_rate": 0},
        {"run_time_s": 0.5},
        {"run_time_s": 2.5},
        {"run_time_s": 7200},
        {"rows": 65},
        {"seed": -1},
    ],
)
def test_bad_specs_are_refused(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        load.LoadSpec(**({"users": 4, "spawn_rate": 4, "run_time_s": 2} | kwargs))


def nearest_rank(values, q):
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)) - 1, 0)]


@pytest.mark.parametrize("n", [1, 7, 100, 1001])
def test_percentiles_are_nearest_rank(n):
    times = list(np.random.default_rng(n).lognormal(1, 1, n))
    assert load.percentiles(times) == [nearest_rank(times, q) for q in (50, 95, 99)]
    with pytest.raises(ValueError, match="no requests"):
        load.percentiles([])


def summary(requests, failures, start=100.0, end=104.0):
    return json.dumps(
        [
            {
                "name": "/predict",
                "num_requests": requests,
                "num_failures": failures,
                "start_time": start,
                "last_request_timestamp": end,
            }
        ]
    )


def test_parse_counts_statuses_and_throughput():
    record = {"times_ms": [1.0, 2.0, 3.0, 4.0, 50.0], "statuses": [200, 200, 503, 0, 200]}
    result = load.parse(summary(5, 2), record, load.LoadSpec(2, 2, 4))
    assert result.statuses == {0: 1, 200: 3, 503: 1} and result.errors_5xx == 1
    assert result.throughput_rps == 5 / 4 and result.error_rate == 2 / 5
    assert (result.p50_ms, result.max_ms, result.mean_ms) == (3.0, 50.0, 12.0)


@pytest.mark.parametrize(
    "text,record,match",
    [
        (summary(6, 0), {"times_ms": [1.0] * 5, "statuses": [200] * 5}, "counted 6"),
        (summary(5, 0), {"times_ms": [1.0] * 5, "statuses": [200] * 4 + [500]}, "not 200"),
        (summary(5, 0), {"times_ms": [1.0] * 5}, "statuses"),
        ("[]", {"times_ms": [], "statuses": []}, "no endpoint"),
        ("Traceback", {"times_ms": [], "statuses": []}, "not JSON"),
    ],
)
def test_parse_refuses_inconsistent_output(text, record, match):
    with pytest.raises(ValueError, match=match):
        load.parse(text, record, load.LoadSpec(2, 2, 4))


@pytest.fixture(scope="module")
def artifact_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("load-artifact")
    export.write_artifacts(export.train(seed=0, steps=50), out, max_batch=8)
    return out


def test_a_short_real_run_against_the_predict_service(artifact_dir):
    with predict_app.start(artifact_dir, max_batch=8, max_wait_s=0.002) as running:
        result = load.run_load(running.url, load.LoadSpec(users=4, spawn_rate=4, run_time_s=2))
        served = running.engine.rows  # the server's own count of rows it predicted
        assert result.requests > 0 and result.failures == 0
        assert result.statuses == {200: result.requests}
        assert served == result.requests
        assert 0 < result.p50_ms <= result.p95_ms <= result.p99_ms <= result.max_ms
        assert 0 < result.client_cpu_s
        running.engine.close()  # the batcher is closed: every /predict is now a 503
        refused = load.run_load(running.url, load.LoadSpec(users=2, spawn_rate=2, run_time_s=1))
    assert refused.requests > 0 and refused.failures == refused.requests
    assert refused.errors_5xx == refused.requests and refused.statuses == {503: refused.requests}
