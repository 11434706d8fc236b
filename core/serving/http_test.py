"""The service kit on its own: the loopback rule, the validation-error wording, the engine's
ready/error states, and a minimal model kind served for real on 127.0.0.1 (the byte LM's
boundary tests are capstones/byte_transformer/serve_test.py)."""

import json
import threading
import urllib.error
import urllib.request
from typing import Annotated

import pydantic
import pytest

from core.serving import http


def test_only_loopback_hosts_bind_without_allow_remote():
    for host in http.LOCAL_HOSTS:
        assert http.check_host(host) == host
    for host in ("0.0.0.0", "192.168.1.2", "example.com", ""):
        with pytest.raises(ValueError, match="allow_remote"):
            http.check_host(host)
        with pytest.raises(ValueError):
            http.bind(host, 0)
    assert http.check_host("0.0.0.0", allow_remote=True) == "0.0.0.0"


class Echo(http.Strict):
    value: Annotated[int, pydantic.Field(ge=0, le=9, description="an integer in [0, 9]")]


def _errors(body) -> str:
    try:
        Echo.model_validate_json(json.dumps(body))
    except pydantic.ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        return http.describe_errors(errors, Echo)
    raise AssertionError(f"{body!r} was accepted")


def test_validation_errors_are_one_message_in_the_fields_words():
    assert _errors({"value": 12}) == "value must be an integer in [0, 9], got 12"
    assert _errors({"value": False}) == "value must be an integer in [0, 9], got False"
    assert _errors({"value": "4"}) == "value must be an integer in [0, 9], got '4'"
    assert _errors({"value": 1, "x": 2}) == "unknown keys ['x']; allowed: ['value']"
    assert _errors({}) == "missing keys ['value']"
    assert _errors([1]) == "body must be a JSON object, got array"


def test_a_kinds_own_wording_comes_first():
    def special(kind, loc, value, error):
        return "nine at most" if loc == ["value"] and kind == "less_than_equal" else None

    errors = [
        {"type": "less_than_equal", "loc": ("body", "value"), "input": 12, "msg": "..."},
        {"type": "extra_forbidden", "loc": ("body", "x"), "input": 2, "msg": "..."},
    ]
    assert (
        http.describe_errors(errors, Echo, special)
        == "unknown keys ['x']; allowed: ['value']; nine at most"
    )


class Doubler(http.ServiceEngine):
    def __init__(self, fail: str | None = None):
        super().__init__()
        self.fail = fail

    def open(self):
        if self.fail:
            raise ValueError(self.fail)
        return {"factor": 2}


def test_an_engine_is_ready_only_after_open_and_warm_succeed():
    engine = Doubler()
    with pytest.raises(http.RequestError, match="still loading") as refused:
        engine.require_ready()
    assert refused.value.status == 503
    engine.load()
    assert engine.readiness() == {"status": "ready"} and engine.artifacts == {"factor": 2}
    broken = Doubler(fail="checksum of weights.npz does not match")
    with pytest.raises(ValueError):
        broken.load()
    with pytest.raises(http.RequestError, match="ValueError: checksum") as refused:
        broken.require_ready()
    assert refused.value.status == 503 and not broken.ready.is_set()


def _serve(engine: Doubler, log: list):
    def add_routes(app):
        @app.post("/double", responses=http.BODY_ERRORS)
        def double(body: Echo):
            return {"doubled": engine.require_ready()["factor"] * body.value}

    app = http.service_app(
        engine,
        log.append,
        title="doubler",
        description="a model kind of one route",
        routes={**http.HEALTH_ROUTES, "/double": "POST"},
        ready_model=pydantic.create_model("Ready", status=(str, ...)),
        request_models={"/double": Echo},
        add_routes=add_routes,
    )
    server = http.Server(app, engine, http.bind("127.0.0.1", 0), log.append)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _call(port: int, path: str, body: bytes | None = None, headers: dict | None = None):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, headers=headers or {}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers


def test_a_model_kind_on_the_kit_answers_its_boundary_over_real_http():
    engine, log = Doubler(), []
    server = _serve(engine, log)
    port = server.server_address[1]
    json_type = {"Content-Type": "application/json"}
    try:
        assert _call(port, "/healthz")[:2] == (200, {"status": "alive"})
        status, body, _ = _call(port, "/double", b'{"value": 3}', json_type)
        assert status == 503 and "still loading" in body["error"]
        engine.load()
        assert _call(port, "/readyz")[:2] == (200, {"status": "ready"})
        status, body, headers = _call(
            port, "/double", b'{"value": 3}', {**json_type, "X-Request-ID": "abc-1"}
        )
        assert (status, body, headers["X-Request-ID"]) == (200, {"doubled": 6}, "abc-1")
        assert _call(port, "/double", b'{"value": 30}', json_type)[:2] == (
            400,
            {"error": "value must be an integer in [0, 9], got 30"},
        )
        assert _call(port, "/double", b'{"value": 3}', {"Content-Type": "text/plain"})[0] == 415
        assert _call(port, "/double")[0] == 405
        status, body, _ = _call(port, "/nowhere")
        assert status == 404 and "/double" in body["error"]
        big = b'{"value": 3' + b" " * http.MAX_BODY_BYTES + b"}"
        status, body, _ = _call(port, "/double", big, json_type)
        assert status == 400 and "the limit is" in body["error"]
    finally:
        server.shutdown()
        server.server_close()
    assert any(line.endswith("id=abc-1") and " 200 " in line for line in log)
    assert not any(" 500 " in line for line in log)
