"""The predict service over HTTP: /predict on the course's service kit (core.serving.http:
/healthz, /readyz, request ids, body limits, the access log, JSON errors, the Server), and
``start``: a server on a free loopback port in a background thread, for tests and lessons."""

import dataclasses
import threading
import time

from core.serving.http import BODY_ERRORS, Server, bind, service_app, stderr_log
from core.serving.predict.engine import PredictEngine
from core.serving.predict.models import Prediction, Ready, predict_wording, request_model

TITLE = "jax-tpu-lab predict"
DESCRIPTION = (
    "A digits classifier exported with jax.export (a symbolic batch dimension), verified by "
    'sha256 and schema before it is loaded. POST /predict {"inputs": rows of 64 pixel '
    "intensities in [0, 16]} -> labels, probabilities, model_version."
)
ROUTES = {"/healthz": "GET", "/readyz": "GET", "/predict": "POST"}


def make_app(engine: PredictEngine, log=None):
    """The ASGI app serving ``engine`` (load it separately); ``log`` takes each log line."""
    PredictRequest = request_model(engine.contract)  # noqa: N806 (a class)

    def add_routes(app) -> None:
        @app.post("/predict", response_model=Prediction, responses=BODY_ERRORS)
        def predict(body: PredictRequest):
            return engine.predict(body)

    return service_app(
        engine,
        log,
        title=TITLE,
        description=DESCRIPTION,
        routes=ROUTES,
        ready_model=Ready,
        request_models={"/predict": PredictRequest},
        add_routes=add_routes,
        special_wording=predict_wording,
    )


def make_server(
    artifacts_dir,
    host: str = "127.0.0.1",
    port: int = 8100,
    max_batch: int = 1,
    max_wait_s: float = 0.0,
    allow_remote: bool = False,
    log=None,
) -> Server:
    """A bound (not yet serving, not yet loaded) server; call server.engine.load()."""
    sock = bind(host, port, allow_remote)
    try:
        engine = PredictEngine(artifacts_dir, max_batch, max_wait_s)
    except Exception:
        sock.close()
        raise
    log = log or stderr_log
    return Server(make_app(engine, log), engine, sock, log)


@dataclasses.dataclass
class Running:
    """A server serving in a background thread: ``url`` ("http://127.0.0.1:PORT"); stop()
    (or leaving a ``with`` block) shuts it down, closes its socket and its batcher."""

    server: Server
    thread: threading.Thread
    url: str

    @property
    def engine(self) -> PredictEngine:
        return self.server.engine

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(timeout=15)
        self.server.server_close()
        self.server.engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start(
    artifacts_dir,
    max_batch: int = 1,
    max_wait_s: float = 0.0,
    log=None,
    load: bool = True,
    timeout_s: float = 60.0,
) -> Running:
    """A server on 127.0.0.1, a free port, serving in a daemon thread; with ``load`` the
    artifact is verified and warmed first (its ArtifactError raised here). ``log``: each
    log line (default: dropped)."""
    server = make_server(
        artifacts_dir, "127.0.0.1", 0, max_batch, max_wait_s, log=log or (lambda line: None)
    )
    if load:
        try:
            server.engine.load()
        except Exception:
            server.server_close()
            raise
    thread = threading.Thread(target=server.serve_forever, name="predict-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.uvicorn.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    if not server.uvicorn.started:
        server.shutdown(wait=False)
        server.server_close()
        raise RuntimeError("the predict server did not start")
    host, port = server.server_address[:2]
    return Running(server, thread, f"http://{host}:{port}")
