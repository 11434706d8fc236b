"""The predict service through a real HTTP server (uvicorn on 127.0.0.1, an ephemeral port):
its answers equal the artifact driven directly; its boundary (400/404/405/415/503, the body
limit, request ids, the access log, no 5xx on hostile input); micro-batching of concurrent
requests; the command line's refusals (exit 2); schemathesis fuzzing /predict and the health
routes against the service's own OpenAPI document."""

import concurrent.futures
import http.client
import json
import subprocess
import sys

import hypothesis
import numpy as np
import pytest
import schemathesis
from schemathesis import checks as schemathesis_checks
from schemathesis.generation import feedback
from schemathesis.specs.openapi import checks as openapi_checks

from core.serving import http as kit
from core.serving.predict import __main__ as predict_cli
from core.serving.predict import app, export


@pytest.fixture(scope="module")
def server(artifact_dir):
    lines = []
    with app.start(artifact_dir, log=lines.append) as running:
        running.lines = lines
        yield running


def call(running, method, path, body=None, data=None, headers=None):
    """(status, response, parsed JSON) of one request on a fresh connection."""
    host, port = running.server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    if body is not None:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
    connection.request(method, path, body=data, headers=headers or {})
    response = connection.getresponse()
    payload = json.loads(response.read() or b"null")
    connection.close()
    return response.status, response, payload


def test_health_readiness_and_predictions_equal_the_artifact(server):
    assert call(server, "GET", "/healthz")[2] == {"status": "alive"}
    status, _, ready = call(server, "GET", "/readyz")
    manifest = export.read_manifest(server.engine.artifacts_dir)
    assert status == 200 and ready["model_version"] == manifest["model_version"]
    assert ready["max_batch"] == 16 and ready["features"] == 64 and ready["buckets"][-1] == 16
    x, _ = export.test_inputs(0, 5)
    status, _, got = call(server, "POST", "/predict", {"inputs": x.tolist()})
    assert status == 200 and got["model_version"] == manifest["model_version"]
    labels, probs = export.load_artifacts(server.engine.artifacts_dir).predict(x)
    assert got["labels"] == labels.tolist()
    # JSON carries float32 values exactly (float64 repr of each float32)
    assert np.asarray(got["probabilities"], np.float32).tobytes() == probs.tobytes()


def test_integers_are_numbers_and_the_range_is_inclusive(server):
    rows = [[0] * 64, [16] * 64, [7.5] * 64]
    status, _, got = call(server, "POST", "/predict", {"inputs": rows})
    assert status == 200 and len(got["labels"]) == 3


BAD = [
    ({"inputs": [[1.0] * 63]}, "inputs[0] must hold 64 numbers (the features), got 63"),
    ({"inputs": [[1.0] * 64, [1.0] * 65]}, "inputs[1] must hold 64 numbers (the features), got 65"),
    ({"inputs": [[17.0] * 64]}, "inputs[0][0] must be a number in [0, 16] (a pixel intensity), "
     "got 17 (64 values outside the range)"),
    ({"inputs": [[0.0] * 63 + [-0.25]]}, "inputs[0][63] must be a number in [0, 16]"),
    ({"inputs": []}, "inputs must hold at least 1 row (the batch), got 0"),
    ({"inputs": [[0.0] * 64] * 17}, "inputs must hold 1 to 16 rows (the batch), got 17"),
    ({"inputs": [[True] + [0.0] * 63]}, "inputs[0][0] must be a number, got True"),
    ({"inputs": [["1"] + [0.0] * 63]}, "inputs[0][0] must be a number, got '1'"),
    ({"inputs": [0.0] * 64}, "inputs[0] must be a list of numbers, got 0.0"),
    ({"inputs": [[0.0] * 64], "extra": 1}, "unknown keys ['extra']; allowed: ['inputs']"),
    ({}, "missing keys ['inputs']"),
]  # fmt: skip


@pytest.mark.parametrize("body,message", BAD)
def test_violating_requests_are_400_naming_the_problem(server, body, message):
    status, _, payload = call(server, "POST", "/predict", body)
    assert status == 400 and message in payload["error"], payload


@pytest.mark.parametrize(
    "data,message",
    [
        (
            b'{"inputs": [[NaN' + b", 0" * 63 + b"]]}",
            "inputs[0][0] must be a finite number, got nan",
        ),
        (b'{"inputs": [[1e400' + b", 0" * 63 + b"]]}", "must be a finite number, got inf"),
        (b'{"inputs": [[0' + b", 0" * 62 + b", -Infinity]]}", "inputs[0][63] must be a finite"),
    ],
)
def test_non_finite_json_numbers_are_refused(server, data, message):
    status, _, payload = call(
        server, "POST", "/predict", data=data, headers={"Content-Type": "application/json"}
    )
    assert status == 400 and message in payload["error"], payload


def test_paths_methods_content_types_and_the_body_limit(server):
    status, _, payload = call(server, "GET", "/nope")
    assert status == 404 and "no such path /nope" in payload["error"]
    status, response, payload = call(server, "GET", "/predict")
    assert status == 405 and response.getheader("Allow") == "POST"
    body = json.dumps({"inputs": [[0.0] * 64]}).encode()
    status, _, payload = call(
        server, "POST", "/predict", data=body, headers={"Content-Type": "text/plain"}
    )
    assert status == 415 and "Content-Type must be application/json" in payload["error"]
    big = json.dumps({"inputs": [[1.0] * 64] * 16, "pad": "x" * kit.MAX_BODY_BYTES}).encode()
    status, _, payload = call(
        server, "POST", "/predict", data=big, headers={"Content-Type": "application/json"}
    )
    assert status == 400 and f"the limit is {kit.MAX_BODY_BYTES}" in payload["error"]
    status, _, payload = call(
        server, "POST", "/predict", data=b"{", headers={"Content-Type": "application/json"}
    )
    assert status == 400 and "not valid JSON" in payload["error"]


NASTY = [
    b"null", b"[]", b'"x"', b"12", b"", b"[" * 30000 + b"]" * 30000,
    b'{"inputs": [[' + b"9" * 5000 + b"]]}", b'{"inputs": "\xff\xfe"}',
    b'{"inputs": [[0.0]], "inputs": 3}', b'{"inputs": [[{}]]}', b'{"inputs": null}',
]  # fmt: skip


def test_no_hostile_body_is_a_server_error(server):
    for data in NASTY:
        status, _, payload = call(
            server, "POST", "/predict", data=data, headers={"Content-Type": "application/json"}
        )
        assert 400 <= status < 500 and payload["error"], (data[:60], payload)


def test_request_ids_and_one_log_line_per_request(server):
    status, response, _ = call(server, "GET", "/healthz", headers={"X-Request-ID": "mine-1"})
    assert response.getheader("X-Request-ID") == "mine-1"
    assert sum(line.endswith(" id=mine-1") for line in server.lines) == 1
    _, response, _ = call(server, "GET", "/healthz", headers={"X-Request-ID": "bad id"})
    fresh = response.getheader("X-Request-ID")
    assert fresh != "bad id" and kit.REQUEST_ID.fullmatch(fresh)
    call(server, "POST", "/predict", {"inputs": [[0.0] * 63]}, headers={"X-Request-ID": "b-2"})
    assert [line for line in server.lines if line.endswith("id=b-2")][0].count("POST /predict 400")


def test_not_ready_is_503_and_a_tampered_artifact_stays_503(fresh_copy):
    data = bytearray((fresh_copy / export.EXPORTED).read_bytes())
    data[len(data) // 2] ^= 1
    (fresh_copy / export.EXPORTED).write_bytes(bytes(data))
    with app.start(fresh_copy, load=False) as running:
        status, _, payload = call(running, "GET", "/readyz")
        assert status == 503 and "still loading" in payload["error"]
        status, _, payload = call(running, "POST", "/predict", {"inputs": [[0.0] * 64]})
        assert status == 503
        with pytest.raises(export.ArtifactError, match="sha256 of predict.jax_exported"):
            running.engine.load()
        status, _, payload = call(running, "GET", "/readyz")
        assert status == 503 and "ChecksumError" in payload["error"]
        assert call(running, "GET", "/healthz")[0] == 200


def test_concurrent_requests_are_micro_batched_with_the_same_answers(artifact_dir):
    x, _ = export.test_inputs(2, 48)
    direct_labels, direct_probs = export.load_artifacts(artifact_dir).predict(x[:16])
    with app.start(artifact_dir, max_batch=8, max_wait_s=0.05) as running:
        assert running.engine.batcher is not None

        def one(i):
            return call(running, "POST", "/predict", {"inputs": [x[i].tolist()]})[2]

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(one, range(48)))
        ready = call(running, "GET", "/readyz")[2]["batching"]
    assert ready["rows"] == 48 and ready["batches"] < 48  # rows shared model calls
    assert ready["max_batch"] == 8 and ready["max_wait_ms"] == 50
    labels = [a["labels"][0] for a in answers]
    probs = np.asarray([a["probabilities"][0] for a in answers])
    assert labels[:16] == direct_labels.tolist()
    np.testing.assert_allclose(probs[:16], direct_probs, rtol=1e-5, atol=1e-6)


def test_serving_max_batch_above_the_artifacts_is_refused(artifact_dir):
    with pytest.raises(ValueError, match="exceeds the artifact's max_batch 16"):
        app.make_server(artifact_dir, port=0, max_batch=32)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["serve", "--artifacts", "A", "--host", "0.0.0.0"], "would expose the server"),
        (["serve", "--artifacts", "A", "--max-batch", "0"], "must be >= 1"),
        (["serve", "--artifacts", "A", "--port", "70000"], "0 <= --port < 65536"),
        (["export", "--out", "A", "--steps", "x"], "invalid _positive value"),
        (["export", "--out", "A", "--platforms", "gpu"], "unknown platform 'gpu'"),
        (["launch"], "invalid choice: 'launch'"),
    ],
)
def test_bad_flags_are_a_usage_message_and_exit_2(argv, message, capsys, tmp_path):
    # In this process (the command line itself is the subprocess test below): nothing written
    try:  # argparse exits 2 itself; the checks after parsing return 2
        status = predict_cli.main([str(tmp_path / "A") if a == "A" else a for a in argv])
    except SystemExit as stopped:
        status = stopped.code
    assert status == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "A").exists()


def test_the_command_line_refuses_a_missing_flag_with_exit_2():
    done = subprocess.run(
        [sys.executable, "-m", "core.serving.predict", "serve"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "the following arguments are required: --artifacts" in done.stderr


def test_serving_a_bigger_batch_than_exported_exits_2(artifact_dir):
    done = subprocess.run(
        [sys.executable, "-m", "core.serving.predict", "serve", "--artifacts", str(artifact_dir),
         "--port", "0", "--max-batch", "64", "--max-seconds", "5"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "exceeds the artifact's max_batch 16" in done.stderr


def test_openapi_document_states_the_contract(server):
    status, _, document = call(server, "GET", "/openapi.json")
    assert status == 200 and set(document["paths"]) == set(app.ROUTES)
    inputs = document["components"]["schemas"]["PredictRequest"]["properties"]["inputs"]
    assert (inputs["minItems"], inputs["maxItems"]) == (1, 16)
    assert (inputs["items"]["minItems"], inputs["items"]["maxItems"]) == (64, 64)
    assert (inputs["items"]["items"]["minimum"], inputs["items"]["items"]["maximum"]) == (0, 16)
    assert "422" not in document["paths"]["/predict"]["post"]["responses"]


# --- schemathesis -------------------------------------------------------------------------------

FUZZ_EXAMPLES = 15
FUZZ_SETTINGS = hypothesis.settings(
    max_examples=FUZZ_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)
POSITIVE_CHECKS = [
    schemathesis_checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
    openapi_checks.response_headers_conformance,
]
FUZZ_RUNS = [(path, "positive") for path in app.ROUTES] + [("/predict", "negative")]


@pytest.fixture(scope="module")
def api_schema(server):
    """The document, loaded in-process from a second app over the server's loaded engine."""
    return schemathesis.openapi.from_asgi("/openapi.json", app.make_app(server.engine, None))


@pytest.mark.parametrize("path,mode", FUZZ_RUNS)
def test_fuzz_every_operation(server, api_schema, path, mode):
    """Schema-valid requests get a documented status and a conforming response, never a 5xx;
    schema-invalid ones are refused with a 4xx."""
    operation = api_schema[path][app.ROUTES[path]]
    negative = [openapi_checks.negative_data_rejection] if mode == "negative" else []
    statuses = []

    @FUZZ_SETTINGS
    @hypothesis.given(
        case=operation.as_strategy(
            schemathesis.GenerationMode(mode), feedback=feedback.FeedbackSources()
        )
    )
    def run(case):
        statuses.append(case.call_and_validate(checks=POSITIVE_CHECKS + negative).status_code)

    run()
    assert len(statuses) >= FUZZ_EXAMPLES // 2 and max(statuses) < 500
    if mode == "positive":
        assert 200 in statuses  # the fuzz reached the model
    else:
        assert all(400 <= s < 500 for s in statuses)
