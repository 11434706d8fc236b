"""The service over HTTP: the ASGI app factory (routes, request ids, body limits, the access
log, the OpenAPI document, JSON errors) and the uvicorn Server on a bound socket."""

import json
import logging
import re
import secrets
import socket
import sys
import threading
import time
from typing import Annotated

import fastapi
import h11
import uvicorn
from fastapi import exceptions as fastapi_exceptions
from fastapi import responses
from starlette import exceptions as starlette_exceptions
from uvicorn.protocols.http import h11_impl

from capstones.byte_transformer.service.engine import Engine, RequestError
from capstones.byte_transformer.service.models import (
    ErrorBody,
    Generated,
    Health,
    Ready,
    SessionState,
    describe_errors,
    request_models,
    short,
)

LOGGER = logging.getLogger(__name__)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_BODY_BYTES = 64 * 1024
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
ROUTES = {
    "/healthz": "GET",
    "/readyz": "GET",
    "/prefill": "POST",
    "/decode": "POST",
    "/generate": "POST",
}
BODY_ROUTES = tuple(path for path, method in ROUTES.items() if method == "POST")


def check_host(host: str, allow_remote: bool = False) -> str:
    """``host`` if it is a loopback name; ValueError otherwise unless allow_remote."""
    if host not in LOCAL_HOSTS and not allow_remote:
        raise ValueError(
            f"host {host!r} would expose the server beyond this machine; bind one of "
            f"{', '.join(LOCAL_HOSTS)} or pass allow_remote=true (no authentication, no TLS)"
        )
    return host


# --- HTTP -----------------------------------------------------------------------------------


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _printable(text: str, limit: int = 200) -> str:
    """``text`` for one log line: no whitespace or control characters, at most ``limit``."""
    text = "".join(c if c.isprintable() and not c.isspace() else f"%{ord(c):02X}" for c in text)
    return text if len(text) <= limit else f"{text[:limit]}..."


def _refusal(scope, headers: dict) -> tuple[int, str] | None:
    """(status, message) for a request refused before the app reads it, else None."""
    length = headers.get("content-length")
    if "transfer-encoding" in headers:
        return 400, "Transfer-Encoding is not accepted: send the body with a Content-Length"
    if length is not None:
        if not re.fullmatch(r"[0-9]{1,20}", length):
            return 400, f"bad Content-Length {short(length)}"
        if int(length) > MAX_BODY_BYTES:
            return 400, f"body of {int(length)} bytes; the limit is {MAX_BODY_BYTES}"
    if scope["method"] == "POST" and scope["path"] in BODY_ROUTES:
        if length is None:
            return 400, "Content-Length header required (a JSON object body)"
        declared = headers.get("content-type")
        if (declared or "").split(";")[0].strip().lower() != "application/json":
            return 415, f"Content-Type must be application/json, got {short(declared)}"
    return None


class RequestContext:
    """ASGI middleware around the app: the request id, the body limits and the request's one
    access-log line, written when the response starts (before the client can see it)."""

    def __init__(self, app, log):
        self.app, self.log = app, log

    def _line(self, scope, status: int, start: float, request_id: str) -> None:
        client = scope.get("client")
        path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        millis = (time.perf_counter() - start) * 1000
        self.log(
            f"{client[0] if client else '-'} {_printable(scope['method'], 20)} "
            f"{_printable(path)} {status} {millis:.1f}ms id={request_id}"
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        headers: dict[str, str] = {}
        for key, value in scope["headers"]:
            headers.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
        given = headers.get("x-request-id", "")
        request_id = given if REQUEST_ID.fullmatch(given) else secrets.token_hex(8)
        status = None

        async def send_with_id(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                extra = [(b"x-request-id", request_id.encode())]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
                self._line(scope, status, start, request_id)
            await send(message)

        refusal = _refusal(scope, headers)
        try:
            if refusal is None:
                await self.app(scope, receive, send_with_id)
            else:  # the body is never read: close the connection after answering
                response = responses.JSONResponse(
                    {"error": refusal[1]}, refusal[0], headers={"connection": "close"}
                )
                await response(scope, receive, send_with_id)
        except Exception as exc:  # a bug: validation should make every failure a 4xx
            LOGGER.exception("internal error in request %s", request_id)
            self.log(f"internal error in request {request_id}: {type(exc).__name__}: {exc}")
            if status is not None:  # the response has started: nothing more to send
                raise
            response = responses.JSONResponse({"error": "internal error"}, 500)
            await response(scope, receive, send_with_id)


def _request_id_header(
    x_request_id: Annotated[
        str,
        fastapi.Header(
            alias="X-Request-ID",
            description="your id for this request (1 to 64 of A-Z a-z 0-9 . _ -), echoed in "
            "the response and the access log; anything else is replaced by a fresh id",
        ),
    ] = None,
) -> None:
    """Documents the header on every operation; RequestContext reads it."""


def _tidy_openapi(app: fastapi.FastAPI):
    """app.openapi without FastAPI's 422 (validation errors are 400 here) and with the
    X-Request-ID header on every response."""
    generate = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            document = generate()  # cached in app.openapi_schema, tidied in place
            for item in document["paths"].values():
                for operation in item.values():
                    operation["responses"].pop("422", None)
                    for response in operation["responses"].values():
                        response.setdefault("headers", {})["X-Request-ID"] = {
                            "description": "the request's id (yours if well formed)",
                            "required": True,
                            "schema": {"type": "string", "pattern": f"^{REQUEST_ID.pattern}$"},
                        }
            for name in ("HTTPValidationError", "ValidationError"):
                document.get("components", {}).get("schemas", {}).pop(name, None)
        return app.openapi_schema

    return openapi


def make_app(engine: Engine, log=None, *, title: str, description: str) -> fastapi.FastAPI:
    """The ASGI app serving ``engine`` (load it separately); ``log`` takes each log line;
    ``title`` and ``description`` head the OpenAPI document."""
    log = log or _stderr
    contract = engine.contract or {}
    models = request_models(contract.get("prefill_len"), contract.get("capacity"))
    app = fastapi.FastAPI(
        title=title,
        version="1",
        description=description,
        redirect_slashes=False,
        dependencies=[fastapi.Depends(_request_id_header)],
    )
    app.state.engine = engine
    bad = {400: {"model": ErrorBody, "description": "an invalid request (the message says why)"}}
    not_ready = {503: {"model": ErrorBody, "description": "artifacts not loaded yet, or refused"}}
    body_errors = {
        **bad,
        415: {"model": ErrorBody, "description": "the body is not declared application/json"},
        **not_ready,
    }
    PrefillRequest = models["/prefill"]  # noqa: N806 (classes)
    DecodeRequest = models["/decode"]  # noqa: N806
    GenerateRequest = models["/generate"]  # noqa: N806

    @app.get("/healthz", response_model=Health, responses=bad)
    def healthz():
        return {"status": "alive"}

    @app.get("/readyz", response_model=Ready, responses={**bad, **not_ready})
    def readyz():
        return engine.readiness()

    @app.post("/prefill", response_model=SessionState, responses=body_errors)
    def prefill(body: PrefillRequest):
        return engine.prefill(body)

    @app.post("/decode", response_model=SessionState, responses=body_errors)
    def decode(body: DecodeRequest):
        return engine.decode(body)

    @app.post("/generate", response_model=Generated, responses=body_errors)
    def generate(body: GenerateRequest):
        return engine.generate(body)

    def refused(request, exc: RequestError):
        return responses.JSONResponse({"error": str(exc)}, exc.status)

    def invalid(request, exc: fastapi_exceptions.RequestValidationError):
        message = describe_errors(exc.errors(), models.get(request.url.path))
        return responses.JSONResponse({"error": message}, 400)

    def http_error(request, exc: starlette_exceptions.HTTPException):
        path = _printable(request.url.path)
        if exc.status_code == 404:
            message = f"no such path {path}; have {sorted(ROUTES)}"
        elif exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "?")
            message = f"{path} takes {allowed}, not {request.method}"
        elif exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI's body parsing
            message = f"body is not valid JSON: {str(exc.__cause__)[:200]}"
        else:
            message = str(exc.detail)
        return responses.JSONResponse({"error": message}, exc.status_code, headers=exc.headers)

    app.add_exception_handler(RequestError, refused)
    app.add_exception_handler(fastapi_exceptions.RequestValidationError, invalid)
    app.add_exception_handler(starlette_exceptions.HTTPException, http_error)
    app.add_middleware(RequestContext, log=log)
    app.openapi = _tidy_openapi(app)
    return app


class JsonErrorH11Protocol(h11_impl.H11Protocol):
    """uvicorn's h11 protocol, but a request h11 cannot parse (a bad Content-Length, a
    malformed header) is answered in the JSON error shape too, with h11's reason."""

    def send_400_response(self, msg: str) -> None:
        reason = sys.exc_info()[1]  # called inside handle_events' except RemoteProtocolError
        error = f"malformed HTTP request: {reason}" if reason is not None else msg
        data = json.dumps({"error": error}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=data),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.transport.close()


class Server:
    """uvicorn serving make_app(engine) on a socket bound (and listening) at construction,
    so ``server_address`` is known at once (port 0: any free port). serve_forever() blocks
    (in the main thread Ctrl-C / SIGTERM stop it gracefully); shutdown() stops it."""

    def __init__(self, app, engine: Engine, sock: socket.socket, log):
        self.app, self.engine, self.socket, self.log = app, engine, sock, log
        self.server_address = sock.getsockname()
        self.uvicorn = uvicorn.Server(
            uvicorn.Config(
                app,
                http=JsonErrorH11Protocol,
                lifespan="off",
                access_log=False,  # RequestContext writes the one line per request
                log_config=None,
                log_level="warning",
                timeout_graceful_shutdown=10,
            )
        )
        self._serving = threading.Event()
        self._stopped = threading.Event()

    def serve_forever(self) -> None:
        self._serving.set()
        try:
            self.uvicorn.run(sockets=[self.socket])
        finally:
            self._stopped.set()

    def shutdown(self, wait: bool = True) -> None:
        self.uvicorn.should_exit = True
        if wait and self._serving.is_set():
            self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()
