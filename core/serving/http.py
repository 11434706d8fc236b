"""The service kit every model service of the course is built from: the request refusal
(RequestError), the strict request-model base, the one-message description of validation
errors, the ASGI middleware (request ids, body limits, the access log), the JSON error shape,
the OpenAPI tidy-up, the engine base (verify + warm in the background, then ready) and the
uvicorn Server on a bound loopback socket.

A model kind (core.serving.byte_lm, core.serving.predict) adds its request models, its engine
(a ServiceEngine subclass) and its routes through ``service_app(..., add_routes=...)``."""

from __future__ import annotations

import json
import logging
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Annotated, Literal

import fastapi
import h11
import pydantic
import uvicorn
from fastapi import exceptions as fastapi_exceptions
from fastapi import responses
from starlette import exceptions as starlette_exceptions
from uvicorn.protocols.http import h11_impl

LOGGER = logging.getLogger(__name__)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_BODY_BYTES = 64 * 1024
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
HEALTH_ROUTES = {"/healthz": "GET", "/readyz": "GET"}


class RequestError(Exception):
    """A request the server refuses: HTTP ``status`` and a message for the client."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def check_host(host: str, allow_remote: bool = False) -> str:
    """``host`` if it is a loopback name; ValueError otherwise unless allow_remote."""
    if host not in LOCAL_HOSTS and not allow_remote:
        raise ValueError(
            f"host {host!r} would expose the server beyond this machine; bind one of "
            f"{', '.join(LOCAL_HOSTS)} or pass allow_remote=true (no authentication, no TLS)"
        )
    return host


def bind(host: str, port: int, allow_remote: bool = False) -> socket.socket:
    """A listening socket on ``host``:``port`` (0: any free port), after check_host."""
    check_host(host, allow_remote)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def printable(text: str, limit: int = 200) -> str:
    """``text`` for one log line: no whitespace or control characters, at most ``limit``."""
    text = "".join(c if c.isprintable() and not c.isspace() else f"%{ord(c):02X}" for c in text)
    return text if len(text) <= limit else f"{text[:limit]}..."


# --- request and response models ------------------------------------------------------------


class Strict(pydantic.BaseModel):
    """No coercion (``false`` is not a number, ``"4"`` not an integer); unknown keys refused."""

    model_config = pydantic.ConfigDict(strict=True, extra="forbid")


class Health(pydantic.BaseModel):
    status: Literal["alive"]


class ErrorBody(pydantic.BaseModel):
    error: str


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer"}


def json_type(value) -> str:
    return _JSON_TYPES.get(type(value), "number" if isinstance(value, float) else "null")


def short(value) -> str:
    """``repr(value)``, cut to 60 characters for a message."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


# A model kind's own wording for an error: (kind, loc, value, error) -> message, or None.
SpecialWording = Callable[[str, list[str], object, dict], str | None]


def describe_errors(
    errors, model: type[pydantic.BaseModel] | None, special: SpecialWording | None = None
) -> str:
    """One message for a request's validation errors (FastAPI's list), in the words of the
    fields' descriptions: unknown keys, missing keys, then each wrong value (``special`` words
    the errors a model kind knows better first)."""
    unknown, missing, wrong = [], [], []
    fields = model.model_fields if model is not None else {}
    for error in errors:
        kind, loc, value = error["type"], [str(x) for x in error["loc"][1:]], error.get("input")
        worded = special(kind, loc, value, error) if special is not None else None
        if worded is not None:
            wrong.append(worded)
        elif kind == "json_invalid":
            wrong.append(f"body is not valid JSON: {error['ctx']['error']} (at character {loc[0]})")
        elif kind == "extra_forbidden":
            unknown.append(loc[-1])
        elif kind == "missing" and loc:
            missing.append(loc[-1])
        elif not loc:  # the body as a whole
            if kind == "missing":
                wrong.append("body must be a JSON object, got an empty body")
            else:
                wrong.append(f"body must be a JSON object, got {json_type(value)}")
        elif kind == "string_unicode":  # JSON allows lone surrogates ("\ud800")
            wrong.append(
                f"{loc[0]} must be valid Unicode text (a lone surrogate has no UTF-8 bytes), "
                f"got {short(value)}"
            )
        elif loc[0] in fields and fields[loc[0]].description:
            wrong.append(f"{loc[0]} must be {fields[loc[0]].description}, got {short(value)}")
        else:
            wrong.append(f"{'.'.join(loc)}: {error['msg']}, got {short(value)}")
    parts = []
    if unknown:
        parts.append(f"unknown keys {sorted(unknown)}; allowed: {sorted(fields)}")
    if missing:
        parts.append(f"missing keys {sorted(missing)}")
    return "; ".join(parts + wrong) or "invalid request"


# --- the engine base ------------------------------------------------------------------------


class ServiceEngine:
    """What a service serves, loaded once: ``open()`` (a subclass) returns the verified
    artifacts, ``warm(artifacts)`` runs each endpoint once (compiles it); ``load()`` does both
    and sets ``ready``, or records why not in ``error``. ``contract``: what is known before
    loading that bounds the request models (None: not known yet). One lock: the model runs one
    request at a time unless a subclass says otherwise."""

    def __init__(self):
        self.contract: dict | None = None
        self.artifacts = None
        self.error: str | None = None
        self.ready = threading.Event()
        self.lock = threading.Lock()

    def open(self):
        raise NotImplementedError

    def warm(self, artifacts) -> None:
        """Run each endpoint once on dummy inputs (compiles it); nothing by default."""

    def load(self) -> None:
        """Open (verify, deserialize) and warm every endpoint; sets ``ready``. On a failure
        (the exception names the problem) records it in ``error`` and raises."""
        try:
            artifacts = self.open()
            self.warm(artifacts)
        except Exception as exc:  # an artifact error, or a failure while warming up
            self.error = f"{type(exc).__name__}: {exc}"
            raise
        self.artifacts = artifacts
        self.ready.set()

    def require_ready(self):
        """The loaded artifacts; RequestError 503 (saying why) before they are."""
        if not self.ready.is_set():
            raise RequestError(self.error or "not ready: artifacts are still loading", 503)
        return self.artifacts

    def readiness(self) -> dict:
        """/readyz's body once ready (a subclass adds what a client needs to know)."""
        self.require_ready()
        return {"status": "ready"}

    def close(self) -> None:
        """Release what load() started (a batcher's thread); nothing by default."""


# --- HTTP -----------------------------------------------------------------------------------


def _refusal(scope, headers: dict, body_routes) -> tuple[int, str] | None:
    """(status, message) for a request refused before the app reads it, else None."""
    length = headers.get("content-length")
    if "transfer-encoding" in headers:
        return 400, "Transfer-Encoding is not accepted: send the body with a Content-Length"
    if length is not None:
        if not re.fullmatch(r"[0-9]{1,20}", length):
            return 400, f"bad Content-Length {short(length)}"
        if int(length) > MAX_BODY_BYTES:
            return 400, f"body of {int(length)} bytes; the limit is {MAX_BODY_BYTES}"
    if scope["method"] == "POST" and scope["path"] in body_routes:
        if length is None:
            return 400, "Content-Length header required (a JSON object body)"
        declared = headers.get("content-type")
        if (declared or "").split(";")[0].strip().lower() != "application/json":
            return 415, f"Content-Type must be application/json, got {short(declared)}"
    return None


class RequestContext:
    """ASGI middleware around the app: the request id, the body limits and the request's one
    access-log line, written when the response starts (before the client can see it)."""

    def __init__(self, app, log, body_routes=()):
        self.app, self.log, self.body_routes = app, log, tuple(body_routes)

    def _line(self, scope, status: int, start: float, request_id: str) -> None:
        client = scope.get("client")
        path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        millis = (time.perf_counter() - start) * 1000
        self.log(
            f"{client[0] if client else '-'} {printable(scope['method'], 20)} "
            f"{printable(path)} {status} {millis:.1f}ms id={request_id}"
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
        scope.setdefault("state", {})["request_id"] = request_id
        status = None

        async def send_with_id(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                extra = [(b"x-request-id", request_id.encode())]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
                self._line(scope, status, start, request_id)
            await send(message)

        refusal = _refusal(scope, headers, self.body_routes)
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


BAD_REQUEST = {
    400: {"model": ErrorBody, "description": "an invalid request (the message says why)"}
}
NOT_READY = {503: {"model": ErrorBody, "description": "artifacts not loaded yet, or refused"}}
BODY_ERRORS = {
    **BAD_REQUEST,
    415: {"model": ErrorBody, "description": "the body is not declared application/json"},
    **NOT_READY,
}


def service_app(
    engine: ServiceEngine,
    log=None,
    *,
    title: str,
    description: str,
    routes: dict[str, str],
    ready_model: type[pydantic.BaseModel],
    request_models: dict[str, type[pydantic.BaseModel]],
    add_routes: Callable[[fastapi.FastAPI], None],
    special_wording: SpecialWording | None = None,
) -> fastapi.FastAPI:
    """The ASGI app serving ``engine`` (load it separately): /healthz, /readyz (answered with
    ``ready_model``), the routes ``add_routes(app)`` declares (``routes``: {path: method}, all of
    them, the two above included; ``request_models``: {path: the POST body's model}), request ids,
    body limits, the access log (each line to ``log``, default stderr) and JSON errors."""
    log = log or stderr_log
    app = fastapi.FastAPI(
        title=title,
        version="1",
        description=description,
        redirect_slashes=False,
        dependencies=[fastapi.Depends(_request_id_header)],
    )
    app.state.engine = engine

    @app.get("/healthz", response_model=Health, responses=BAD_REQUEST)
    def healthz():
        return {"status": "alive"}

    @app.get("/readyz", response_model=ready_model, responses={**BAD_REQUEST, **NOT_READY})
    def readyz():
        return engine.readiness()

    add_routes(app)

    def refused(request, exc: RequestError):
        return responses.JSONResponse({"error": str(exc)}, exc.status)

    def invalid(request, exc: fastapi_exceptions.RequestValidationError):
        model = request_models.get(request.url.path)
        message = describe_errors(exc.errors(), model, special_wording)
        return responses.JSONResponse({"error": message}, 400)

    def http_error(request, exc: starlette_exceptions.HTTPException):
        path = printable(request.url.path)
        if exc.status_code == 404:
            message = f"no such path {path}; have {sorted(routes)}"
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
    body_routes = [path for path, method in routes.items() if method == "POST"]
    app.add_middleware(RequestContext, log=log, body_routes=body_routes)
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
    """uvicorn serving ``app`` on a socket bound (and listening) at construction, so
    ``server_address`` is known at once (port 0: any free port). serve_forever() blocks (in the
    main thread Ctrl-C / SIGTERM stop it gracefully); shutdown() stops it."""

    def __init__(self, app, engine: ServiceEngine, sock: socket.socket, log):
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

    def run(
        self, ready_line: Callable[[object], str], what: str = "artifacts", max_seconds: float = 0
    ) -> int:
        """A command's whole serve: load the engine in a background thread (the server already
        answers /healthz; a failed verification or warm-up is logged and stops the server),
        stop after ``max_seconds`` if > 0, serve until stopped (Ctrl-C, SIGTERM), then close
        the socket and the engine. ``ready_line(artifacts)`` is the log line once ready.
        Returns the exit status: 1 if the load failed, else 0."""
        failed = []

        def load():
            try:
                self.engine.load()
                self.log(ready_line(self.engine.artifacts))
            except Exception as exc:  # verification or warm-up failed: stop serving
                failed.append(exc)
                self.log(f"refusing the {what}: {type(exc).__name__}: {exc}")
                self.shutdown(wait=False)

        threading.Thread(target=load, daemon=True).start()
        if max_seconds:
            timer = threading.Timer(max_seconds, self.shutdown, kwargs={"wait": False})
            timer.daemon = True
            timer.start()
        try:
            self.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self.server_close()
            self.engine.close()
        return 1 if failed else 0
