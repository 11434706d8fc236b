"""serve: a real HTTP server (uvicorn) on an ephemeral loopback port over tiny exported
artifacts; its tokens against the artifacts driven directly and against kv_cache.generate;
schemathesis fuzzing every operation of its OpenAPI document in-process."""

import http.client
import json
import socket
import threading

import hypothesis
import jax
import numpy as np
import pytest
import schemathesis
from hypothesis import strategies
from schemathesis import checks as schemathesis_checks
from schemathesis.generation import feedback
from schemathesis.specs.openapi import checks as openapi_checks

from capstones.byte_transformer import artifact_files, cli, export, kv_cache, serve
from capstones.byte_transformer import config as config_lib
from core.lm import tokenizer, transformer
from core.serving.byte_lm import app as service_app
from core.serving.byte_lm import models as service_models

TINY = config_lib.Config(
    d_model=32, num_heads=4, num_layers=2, max_len=64, seq_len=32, batch_size=2,
    max_files=4, max_bytes=2048,
)  # fmt: skip
PREFILL_LEN, CAPACITY = 8, 24


@pytest.fixture(scope="module")
def model():
    return transformer.TinyLM(TINY.model_config(), jax.random.key(TINY.seed))


@pytest.fixture(scope="module")
def artifact_dir(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("artifacts")
    export.export_artifacts(model, TINY.to_dict(), out, PREFILL_LEN, CAPACITY, batch=1)
    return out


@pytest.fixture(scope="module")
def server(artifact_dir):
    """A loaded, warmed server on 127.0.0.1:<ephemeral>; its log lines in server.lines."""
    lines = []
    srv = serve.make_server(artifact_dir, "127.0.0.1", 0, log=lines.append)
    srv.lines = lines
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    srv.engine.load()
    yield srv
    srv.shutdown()
    srv.server_close()


def request(server, method, path, body=None, raw=None, headers=None):
    """(status, parsed JSON) of one request on a fresh connection (a body goes as JSON)."""
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    if data is not None:
        headers = {"Content-Type": "application/json", **(headers or {})}
    connection.request(method, path, body=data, headers=headers or {})
    response = connection.getresponse()
    payload = json.loads(response.read() or b"null")
    connection.close()
    return response.status, payload


def test_health_and_readiness(server):
    assert request(server, "GET", "/healthz") == (200, {"status": "alive"})
    status, ready = request(server, "GET", "/readyz")
    assert status == 200 and ready["status"] == "ready"
    assert ready["precisions"] == list(kv_cache.PRECISIONS)
    assert (ready["prefill_len"], ready["capacity"]) == (PREFILL_LEN, CAPACITY)


def test_not_ready_until_loaded_and_refused_artifacts(artifact_dir, tmp_path):
    pending = serve.make_server(artifact_dir, "127.0.0.1", 0, log=lambda line: None)
    broken_dir = tmp_path / "broken"
    broken_dir.mkdir()
    broken = serve.make_server(broken_dir, "127.0.0.1", 0, log=lambda line: None)
    for srv in (pending, broken):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(artifact_files.MissingArtifactError):
            broken.engine.load()
        assert request(pending, "GET", "/healthz")[0] == 200
        status, payload = request(pending, "GET", "/readyz")
        assert status == 503 and "still loading" in payload["error"]
        status, payload = request(
            pending, "POST", "/generate", {"prompt": "a", "max_new_tokens": 1}
        )
        assert status == 503
        status, payload = request(broken, "GET", "/readyz")
        assert status == 503 and "MissingArtifactError" in payload["error"]
    finally:
        for srv in (pending, broken):
            srv.shutdown()
            srv.server_close()


def _greedy_through_artifacts(artifacts, prompt: str, count: int, precision: str) -> list[int]:
    """Greedy decoding written out here, straight on the artifacts' endpoints."""
    tokens = tokenizer.encode(prompt)
    padded = np.zeros((1, PREFILL_LEN), np.int32)
    padded[0, : tokens.size] = tokens
    logits, cache = artifacts.prefill(precision, padded, np.array([tokens.size], np.int32))
    out = []
    for _ in range(count):
        out.append(int(np.argmax(np.asarray(logits)[0])))
        logits, cache = artifacts.decode(precision, np.array([out[-1]], np.int32), cache)
    return out


def test_generate_matches_artifacts_and_kv_cache(server, model):
    status, result = request(
        server, "POST", "/generate", {"prompt": "def ", "max_new_tokens": 12, "cache": "fp32"}
    )
    assert status == 200, result
    direct = _greedy_through_artifacts(server.engine.artifacts, "def ", 12, "fp32")
    assert result["tokens"] == direct
    in_process = kv_cache.generate(model, "def ", 12, "fp32")
    assert result["tokens"] == in_process.new_tokens_BN[0].tolist()
    assert result["text"] == tokenizer.decode(result["tokens"], errors="replace")
    assert result["prompt_length"] == 4 and result["cache"] == "fp32"


def test_prefill_decode_session_follows_generate(server):
    status, first = request(
        server, "POST", "/prefill", {"tokens": [100, 101, 102, 32], "cache": "int8"}
    )
    assert status == 200, first
    assert first["length"] == 4 and len(first["next_token_logits_top"]) == service_models.TOP_K
    top = first["next_token_logits_top"]
    assert top[0]["token"] == first["next_token"]
    assert all(a["logit"] >= b["logit"] for a, b in zip(top, top[1:], strict=False))
    chosen = [first["next_token"]]
    for step in range(3):
        status, nxt = request(
            server, "POST", "/decode", {"session": first["session"], "token": chosen[-1]}
        )
        assert status == 200, nxt
        assert nxt["length"] == 5 + step and nxt["session"] == first["session"]
        chosen.append(nxt["next_token"])
    status, generated = request(
        server, "POST", "/generate", {"prompt": "def ", "max_new_tokens": 4, "cache": "int8"}
    )
    assert generated["tokens"] == chosen  # "def " is bytes 100, 101, 102, 32


def test_sampling_is_seeded(server):
    body = {"prompt": "x", "max_new_tokens": 6, "temperature": 1.5, "seed": 3, "cache": "bf16"}
    first, second = (
        request(server, "POST", "/generate", body),
        request(server, "POST", "/generate", body),
    )
    assert first[0] == 200 and first == second
    assert all(0 <= t < 256 for t in first[1]["tokens"])


def test_sessions_are_bounded(server):
    server.engine.max_sessions = 2
    try:
        ids = [request(server, "POST", "/prefill", {"prompt": p})[1]["session"] for p in "abc"]
        assert request(server, "POST", "/decode", {"session": ids[0], "token": 1})[0] == 400
        assert request(server, "POST", "/decode", {"session": ids[2], "token": 1})[0] == 200
        assert len(server.engine.sessions) == 2
    finally:
        server.engine.max_sessions = serve.MAX_SESSIONS


BAD_REQUESTS = [
    ("/generate", b"{not json", "not valid JSON"),
    ("/generate", b"[1, 2]", "must be a JSON object"),
    ("/generate", {"prompt": "a", "max_new_tokens": 2, "colour": 1}, "unknown keys ['colour']"),
    ("/generate", {"prompt": "a"}, "missing keys ['max_new_tokens']"),
    ("/generate", {"max_new_tokens": 2}, "exactly one of"),
    ("/generate", {"prompt": "a", "tokens": [1], "max_new_tokens": 2}, "exactly one of"),
    ("/generate", {"prompt": "", "max_new_tokens": 2}, "at least one byte"),
    ("/generate", {"prompt": 5, "max_new_tokens": 2}, "prompt must be a string"),
    ("/generate", {"prompt": "123456789", "max_new_tokens": 2}, "at most prefill_len=8"),
    ("/generate", {"tokens": [1, 256], "max_new_tokens": 2}, "in [0, 255]"),
    ("/generate", {"tokens": [1, -1], "max_new_tokens": 2}, "in [0, 255]"),
    ("/generate", {"tokens": [1, 2.0], "max_new_tokens": 2}, "in [0, 255]"),
    ("/generate", {"tokens": [True], "max_new_tokens": 2}, "in [0, 255]"),
    ("/generate", {"tokens": "abc", "max_new_tokens": 2}, "list of integers"),
    ("/generate", {"prompt": "a", "max_new_tokens": 0}, "max_new_tokens must be"),
    ("/generate", {"prompt": "ab", "max_new_tokens": 23}, "in [1, 22]"),
    ("/generate", {"prompt": "a", "max_new_tokens": "4"}, "max_new_tokens must be"),
    ("/generate", {"prompt": "a", "max_new_tokens": 2, "cache": "fp16"}, "cache must be one of"),
    ("/generate", {"prompt": "a", "max_new_tokens": 2, "temperature": -1}, "temperature"),
    ("/generate", {"prompt": "a", "max_new_tokens": 2, "temperature": "hot"}, "temperature"),
    ("/generate", {"prompt": "a", "max_new_tokens": 2, "seed": -3}, "seed"),
    ("/prefill", {"prompt": "a", "cache": "int4"}, "cache must be one of"),
    ("/decode", {"session": "nope", "token": 3}, "unknown session"),
    ("/decode", {"session": 7, "token": 3}, "session must be a string"),
    ("/decode", {"session": "nope"}, "missing keys ['token']"),
]


@pytest.mark.parametrize("path,body,message", BAD_REQUESTS)
def test_validation_errors_are_400_with_a_message(server, path, body, message):
    raw = body if isinstance(body, bytes) else None
    status, payload = request(server, "POST", path, None if raw else body, raw=raw)
    assert status == 400
    assert message in payload["error"]


def test_body_limits_and_token_range_in_decode(server):
    for headers, message in (
        ({"Content-Length": str(service_app.MAX_BODY_BYTES + 1)}, "the limit is 65536"),  # not sent
        ({"Content-Length": "many"}, "bad Content-Length"),
        ({}, "Content-Length header required"),
    ):
        connection = http.client.HTTPConnection(*server.server_address[:2], timeout=30)
        connection.putrequest("POST", "/generate")
        for key, value in headers.items():
            connection.putheader(key, value)
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 400 and message in json.loads(response.read())["error"]
        connection.close()
    session = request(server, "POST", "/prefill", {"prompt": "a"})[1]["session"]
    status, payload = request(server, "POST", "/decode", {"session": session, "token": 300})
    assert status == 400 and "token must be an integer in [0, 255]" in payload["error"]


def test_full_session_is_refused(server):
    session = request(server, "POST", "/prefill", {"prompt": "abcdefgh"})[1]["session"]
    for _ in range(CAPACITY - 8):
        assert request(server, "POST", "/decode", {"session": session, "token": 1})[0] == 200
    status, payload = request(server, "POST", "/decode", {"session": session, "token": 1})
    assert status == 400 and "full" in payload["error"]


def test_unknown_path_and_wrong_method(server):
    assert request(server, "GET", "/nope")[0] == 404
    assert request(server, "POST", "/admin", {"x": 1})[0] == 404
    for method, path in (("GET", "/generate"), ("POST", "/healthz"), ("DELETE", "/prefill")):
        status, payload = request(server, method, path)
        assert status == 405 and "takes" in payload["error"]


def test_remote_hosts_refused(artifact_dir, capsys):
    with pytest.raises(ValueError, match="allow_remote=true"):
        serve.make_server(artifact_dir, "0.0.0.0", 0)
    assert serve.check_host("0.0.0.0", allow_remote=True) == "0.0.0.0"
    for host in serve.LOCAL_HOSTS:
        assert serve.check_host(host) == host
    assert cli.main(["serve", f"artifacts={artifact_dir}", "host=0.0.0.0", "port=0"]) == 2
    assert "allow_remote=true" in capsys.readouterr().err


def test_a_port_in_use_is_a_usage_error(artifact_dir, capsys):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert cli.main(["serve", f"artifacts={artifact_dir}", f"port={port}"]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


# --- reproductions (issue 12) -----------------------------------------------------------------


def test_tiny_temperature_samples_like_greedy_not_a_server_error(server):
    """temperature 1e-310 once overflowed logits / T into NaN probabilities (HTTP 500); its
    limit is greedy decoding, which is what it must give."""
    body = {"prompt": "def ", "max_new_tokens": 6, "cache": "fp32"}
    status, greedy = request(server, "POST", "/generate", body)
    assert status == 200, greedy
    for temperature in (1e-310, 5e-324, 1e-30):
        status, tiny = request(server, "POST", "/generate", {**body, "temperature": temperature})
        assert status == 200, (temperature, tiny)
        assert tiny["tokens"] == greedy["tokens"]


def test_one_log_line_per_request_matched_by_id(server):
    """Each request carries its own X-Request-ID; the response echoes it and exactly one log
    line holds it, whatever other requests run at the same time."""
    calls = [("GET", "/healthz", 200), ("GET", "/missing", 404), ("DELETE", "/prefill", 405)]
    calls = [(method, path, status, f"log-test-{i}") for i, (method, path, status) in
             enumerate(calls * 4)]  # fmt: skip
    echoed = {}

    def send(method, path, rid):
        connection = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
        connection.request(method, path, headers={"X-Request-ID": rid})
        response = connection.getresponse()
        response.read()
        echoed[rid] = (response.status, response.getheader("X-Request-ID"))
        connection.close()

    threads = [threading.Thread(target=send, args=(m, p, rid)) for m, p, _, rid in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for method, path, status, rid in calls:
        assert echoed[rid] == (status, rid)
        mine = [line for line in server.lines if f"id={rid} " in f"{line} "]
        assert len(mine) == 1, (rid, mine)
        assert f"{method} {path} {status}" in mine[0]


def test_unencodable_prompt_is_a_400(server):
    """JSON allows a lone surrogate escape, which has no UTF-8 bytes: a client error, not a
    500 from the tokenizer."""
    raw = b'{"prompt": "a\\ud800", "max_new_tokens": 1}'
    for path in ("/generate", "/prefill"):
        body = raw if path == "/generate" else b'{"prompt": "\\udfff"}'
        status, payload = request(server, "POST", path, raw=body)
        assert status == 400, payload
        assert "prompt must be valid Unicode text" in payload["error"]


def test_top_k_one_samples_like_greedy(server):
    body = {"prompt": "def ", "max_new_tokens": 6, "cache": "bf16"}
    greedy = request(server, "POST", "/generate", body)
    sampled = request(
        server, "POST", "/generate", {**body, "temperature": 1.5, "top_k": 1, "seed": 11}
    )
    assert greedy[0] == sampled[0] == 200
    assert sampled[1]["tokens"] == greedy[1]["tokens"]


# --- HTTP details ---------------------------------------------------------------------------------


def _raw(server, method, path, data=None, headers=None, **kwargs):
    """(status, headers, parsed JSON) of one request sent exactly as given."""
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    connection.request(method, path, body=data, headers=headers or {}, **kwargs)
    response = connection.getresponse()
    payload = json.loads(response.read() or b"null")
    connection.close()
    return response.status, response, payload


def test_request_ids_kept_when_well_formed_else_replaced(server):
    for given in ("bad id", "x" * 65, "semi;colon", "", "é"):
        status, response, _ = _raw(server, "GET", "/healthz", headers={"X-Request-ID": given})
        echoed = response.getheader("X-Request-ID")
        assert status == 200 and echoed != given and service_app.REQUEST_ID.fullmatch(echoed)
        assert sum(f"id={echoed} " in f"{line} " for line in server.lines) == 1
    kept = "A-z_0.9" + "x" * 57  # 64 characters of the allowed set
    assert (
        _raw(server, "GET", "/readyz", headers={"X-Request-ID": kept})[1].getheader("X-Request-ID")
        == kept
    )
    fresh = {_raw(server, "GET", "/healthz")[1].getheader("X-Request-ID") for _ in range(3)}
    assert len(fresh) == 3


def test_body_must_be_declared_json_and_sized(server):
    body = json.dumps({"prompt": "a", "max_new_tokens": 1}).encode()
    for content_type in (None, "text/plain", "application/x-www-form-urlencoded"):
        headers = {} if content_type is None else {"Content-Type": content_type}
        status, _, payload = _raw(server, "POST", "/generate", body, headers)
        assert status == 415 and "Content-Type must be application/json" in payload["error"]
    ok = {"Content-Type": "application/json; charset=utf-8"}
    assert _raw(server, "POST", "/generate", body, ok)[0] == 200
    # The chunked body is framed here and sent with the headers in one write: sent after the
    # headers (encode_chunked=True), it raced the server's early 400 and close (BrokenPipe).
    chunked = b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    status, _, payload = _raw(
        server, "POST", "/generate", chunked, {**ok, "Transfer-Encoding": "chunked"}
    )
    assert status == 400 and "Transfer-Encoding is not accepted" in payload["error"]


NASTY_BODIES = [
    b'{"prompt": "a", "max_new_tokens": 2, "temperature": NaN}',
    b'{"prompt": "a", "max_new_tokens": 2, "temperature": Infinity}',
    b'{"prompt": "a", "max_new_tokens": 2, "temperature": -Infinity}',
    b'{"prompt": "a", "max_new_tokens": 2, "temperature": 1e400}',
    b'{"prompt": "a", "max_new_tokens": 1e400}',
    b'{"prompt": "a", "max_new_tokens": 2, "seed": 100000000000000000000000000000}',
    b'{"prompt": "a", "max_new_tokens": 2, "top_k": 0}',
    b'{"prompt": "a", "max_new_tokens": 2, "temperature": true}',
    b'{"prompt": "a", "max_new_tokens": 2, "cache": true}',
    b'{"tokens": [' + b"9" * 5000 + b'], "max_new_tokens": 1}',  # over int()'s digit limit
    b"[" * 30000 + b"]" * 30000,  # deeper than the JSON decoder recurses
    b'{"prompt": "\xff\xfe", "max_new_tokens": 1}',  # not UTF-8
    b'\xef\xbb\xbf{"prompt": "a", "max_new_tokens": 1}',  # a UTF-8 byte order mark
    b'{"prompt": "\\ud800\\udc00x", "max_new_tokens": 1}',  # a valid surrogate pair
    b"null",
    b'"text"',
    b"12",
    b"",
    b'{"prompt": "a", "prompt": 3, "max_new_tokens": 1}',
]


@pytest.mark.parametrize("path", service_app.BODY_ROUTES)
def test_no_request_is_a_server_error(server, path):
    """Hostile bodies through the real HTTP stack: each a 2xx or a 4xx with a message."""
    for data in NASTY_BODIES:
        status, _, payload = _raw(server, "POST", path, data, {"Content-Type": "application/json"})
        assert status < 500, (data[:80], payload)
        if status >= 400:
            assert isinstance(payload["error"], str) and payload["error"], data[:80]
    status, _, payload = _raw(
        server,
        "GET",
        "/healthz",
        headers={"X-Request-ID": "x" * 20000},  # over h11's limit
    )
    assert status < 500


def test_an_internal_error_is_json_logged_once_with_its_id(server, monkeypatch):
    def broken():
        raise RuntimeError("boom")

    monkeypatch.setattr(server.engine, "readiness", broken)
    status, response, payload = _raw(server, "GET", "/readyz", headers={"X-Request-ID": "oops-1"})
    assert (status, payload) == (500, {"error": "internal error"})
    assert response.getheader("X-Request-ID") == "oops-1"
    access = [line for line in server.lines if line.endswith(" id=oops-1")]
    assert len(access) == 1 and "GET /readyz 500" in access[0]
    errors = [line for line in server.lines if "internal error in request oops-1" in line]
    assert errors == ["internal error in request oops-1: RuntimeError: boom"]


def test_openapi_document_states_the_contract(server):
    status, _, document = _raw(server, "GET", "/openapi.json")
    assert status == 200
    assert {path: list(item) for path, item in document["paths"].items()} == {
        path: [method.lower()] for path, method in service_app.ROUTES.items()
    }
    schemas = document["components"]["schemas"]
    prompt = schemas["GenerateRequest"]["properties"]
    assert prompt["tokens"]["maxItems"] == PREFILL_LEN and prompt["prompt"]["maxLength"] == 8
    assert prompt["max_new_tokens"]["maximum"] == CAPACITY - 1
    assert prompt["temperature"]["minimum"] == 0 and prompt["temperature"]["maximum"] == 100
    assert schemas["DecodeRequest"]["properties"]["session"]["pattern"] == service_models.SESSION_ID
    assert schemas["GenerateRequest"]["additionalProperties"] is False
    for item in document["paths"].values():
        for operation in item.values():
            assert "422" not in operation["responses"]  # validation errors are 400 here
            assert "400" in operation["responses"]
    assert "HTTPValidationError" not in schemas
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    connection.request("GET", "/docs")
    response = connection.getresponse()
    assert response.status == 200 and b"openapi.json" in response.read()
    connection.close()


# --- schemathesis ---------------------------------------------------------------------------------

FUZZ_EXAMPLES = 25
FUZZ_SETTINGS = hypothesis.settings(
    max_examples=FUZZ_EXAMPLES,
    derandomize=True,  # the same examples every run
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
FUZZ_RUNS = [(path, "positive") for path in service_app.ROUTES]
FUZZ_RUNS += [(path, "negative") for path in service_app.BODY_ROUTES]  # GETs have no invalid input


@pytest.fixture(scope="module")
def api_schema(server):
    """The OpenAPI document, loaded in-process from a second app over the server's loaded
    engine (schemathesis.pytest.from_fixture needs pytest < 9: it sets Item._nodeid)."""
    return schemathesis.openapi.from_asgi("/openapi.json", serve.make_app(server.engine, None))


@pytest.mark.parametrize("path,mode", FUZZ_RUNS)
def test_fuzz_every_operation(server, api_schema, path, mode):
    """Schema-valid requests (positive) get a documented status and a response matching the
    document, never a 5xx; schema-invalid ones (negative) are refused with a 4xx."""
    operation = api_schema[path][service_app.ROUTES[path]]
    negative = [openapi_checks.negative_data_rejection] if mode == "negative" else []
    checks = POSITIVE_CHECKS + negative
    live = request(server, "POST", "/prefill", {"prompt": "ab"})[1]["session"]
    statuses = []

    @FUZZ_SETTINGS
    @hypothesis.given(
        case=operation.as_strategy(
            schemathesis.GenerationMode(mode),
            feedback=feedback.FeedbackSources(),  # no constants mined from loaded modules
        ),
        use_live_session=strategies.booleans(),
    )
    def run(case, use_live_session):
        if path == "/decode" and mode == "positive" and use_live_session:
            case.body = {**case.body, "session": live}  # reach the model, not only "unknown"
        statuses.append(case.call_and_validate(checks=checks).status_code)

    run()
    assert len(statuses) >= FUZZ_EXAMPLES // 2
    assert max(statuses) < 500
    if mode == "positive":
        assert 200 in statuses  # the fuzz reached the model, not only the validation
    else:
        assert all(400 <= s < 500 for s in statuses)


def test_the_service_offers_the_caches_kv_cache_makes():
    assert service_models.PRECISIONS == kv_cache.PRECISIONS
