"""The byte LM service over HTTP: its routes (prefill, decode, generate) on the course's service
kit (core.serving.http: request ids, body limits, the access log, JSON errors, the Server)."""

from core.serving.byte_lm.engine import Engine
from core.serving.byte_lm.models import Generated, Ready, SessionState, lm_wording, request_models
from core.serving.http import (  # noqa: F401 (the service's names, re-exported)
    BODY_ERRORS,
    LOCAL_HOSTS,
    MAX_BODY_BYTES,
    REQUEST_ID,
    Server,
    check_host,
    service_app,
    stderr_log,
)

ROUTES = {
    "/healthz": "GET",
    "/readyz": "GET",
    "/prefill": "POST",
    "/decode": "POST",
    "/generate": "POST",
}
BODY_ROUTES = tuple(path for path, method in ROUTES.items() if method == "POST")


def make_app(engine: Engine, log=None, *, title: str, description: str):
    """The ASGI app serving ``engine`` (load it separately); ``log`` takes each log line;
    ``title`` and ``description`` head the OpenAPI document."""
    contract = engine.contract or {}
    models = request_models(contract.get("prefill_len"), contract.get("capacity"))
    PrefillRequest = models["/prefill"]  # noqa: N806 (classes)
    DecodeRequest = models["/decode"]  # noqa: N806
    GenerateRequest = models["/generate"]  # noqa: N806

    def add_routes(app) -> None:
        @app.post("/prefill", response_model=SessionState, responses=BODY_ERRORS)
        def prefill(body: PrefillRequest):
            return engine.prefill(body)

        @app.post("/decode", response_model=SessionState, responses=BODY_ERRORS)
        def decode(body: DecodeRequest):
            return engine.decode(body)

        @app.post("/generate", response_model=Generated, responses=BODY_ERRORS)
        def generate(body: GenerateRequest):
            return engine.generate(body)

    return service_app(
        engine,
        log,
        title=title,
        description=description,
        routes=ROUTES,
        ready_model=Ready,
        request_models=models,
        add_routes=add_routes,
        special_wording=lm_wording,
    )
