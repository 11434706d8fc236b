"""serve: a real HTTP server on an ephemeral loopback port over tiny exported artifacts;
its tokens against the artifacts driven directly and against kv_cache.generate."""

import http.client
import json
import threading
import time

import jax
import numpy as np
import pytest

from capstones.byte_transformer import cli, export, kv_cache, serve
from capstones.byte_transformer import config as config_lib
from core import tokenizer, transformer

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
    """(status, parsed JSON) of one request on a fresh connection."""
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
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
        with pytest.raises(export.MissingArtifactError):
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
    assert first["length"] == 4 and len(first["next_token_logits_top"]) == serve.TOP_K
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
        ({"Content-Length": str(serve.MAX_BODY_BYTES + 1)}, "the limit is 65536"),  # not sent
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


def test_one_log_line_per_request(server):
    before = len(server.lines)
    request(server, "GET", "/healthz")
    request(server, "GET", "/missing")
    # the handler logs after it has sent the response: give its thread a moment
    deadline = time.monotonic() + 10
    while len(server.lines) < before + 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    new = server.lines[before:]
    assert len(new) == 2
    assert "GET /healthz 200" in new[0] and "GET /missing 404" in new[1]


def test_remote_hosts_refused(artifact_dir, capsys):
    with pytest.raises(ValueError, match="allow_remote=true"):
        serve.make_server(artifact_dir, "0.0.0.0", 0)
    assert serve.check_host("0.0.0.0", allow_remote=True) == "0.0.0.0"
    for host in serve.LOCAL_HOSTS:
        assert serve.check_host(host) == host
    assert cli.main(["serve", f"artifacts={artifact_dir}", "host=0.0.0.0", "port=0"]) == 2
    assert "allow_remote=true" in capsys.readouterr().err
