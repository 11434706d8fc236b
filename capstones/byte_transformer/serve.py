"""Serve exported prefill/decode endpoints over HTTP on 127.0.0.1: the capstone's wiring of
the course's model service (core.serving.byte_lm) to its exported artifacts and to its command line.

    python -m capstones.byte_transformer serve artifacts=ART [port=8000 host=127.0.0.1]

The artifacts (export.py writes them, artifact_files.py reads them back) are verified
(sha256, schema, platform, signatures) by this module's Engine before they are served; the
endpoints, their validation and the server's behaviour are described in
core/serving/byte_lm/__init__.py (the course's model service).
"""

import socket
import sys

from capstones.byte_transformer import args, artifact_files
from core.serving.byte_lm import app as service_app
from core.serving.byte_lm import engine as service_engine
from core.serving.byte_lm.app import LOCAL_HOSTS, Server, check_host
from core.serving.byte_lm.engine import MAX_SESSIONS

TITLE = "byte_transformer serve"
DESCRIPTION = "Exported prefill/decode endpoints of the byte-level Transformer capstone."


class Engine(service_engine.Engine):
    """The service's engine over the artifacts in ``artifacts_dir`` (artifact_files.py).

    ``contract``: the manifest's shapes read (and hash-checked) at construction, which bound
    the request models; None when the manifest cannot be read yet (load() then says why)."""

    def __init__(self, artifacts_dir, max_sessions: int = MAX_SESSIONS):
        super().__init__(max_sessions)
        self.artifacts_dir = artifacts_dir
        try:
            self.contract = artifact_files.read_manifest(artifacts_dir)["shapes"]
        except (artifact_files.ArtifactError, OSError):
            self.contract = None

    def open(self) -> artifact_files.Artifacts:
        """The verified artifacts (an ArtifactError names the problem), exported with batch=1
        and with the shapes the request models were built for."""
        artifacts = artifact_files.load_artifacts(self.artifacts_dir)
        if artifacts.shapes["batch"] != 1:
            raise artifact_files.ArtifactError(
                "serve needs artifacts exported with batch=1, got "
                f"batch={artifacts.shapes['batch']}"
            )
        if self.contract is not None and artifacts.shapes != self.contract:
            raise artifact_files.ArtifactError(
                f"the artifacts changed since the server started: shapes {artifacts.shapes}, "
                f"its request models were built for {self.contract}; restart the server"
            )
        return artifacts


def make_app(engine: service_engine.Engine, log=None):
    """The capstone's ASGI app serving ``engine`` (load it separately); ``log`` takes each
    log line (default: stderr)."""
    return service_app.make_app(engine, log, title=TITLE, description=DESCRIPTION)


def make_server(
    artifacts_dir,
    host: str = "127.0.0.1",
    port: int = 8000,
    allow_remote: bool = False,
    max_sessions: int = MAX_SESSIONS,
    log=None,
) -> Server:
    """A bound (not yet serving, not yet loaded) server; call server.engine.load()."""
    check_host(host, allow_remote)
    log = log or service_app.stderr_log
    engine = Engine(artifacts_dir, max_sessions)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    return Server(make_app(engine, log), engine, sock, log)


def run_serve(parsed: args.Parsed) -> int:
    host, port = parsed["host"], parsed["port"]
    try:
        check_host(host, parsed["allow_remote"])
    except ValueError as exc:
        raise args.UsageError(str(exc)) from None
    if not 0 <= port < 65536 or parsed["max_sessions"] < 1:
        raise args.UsageError(
            f"need 0 <= port < 65536 and max_sessions >= 1, got {port}, {parsed['max_sessions']}"
        )
    if host not in LOCAL_HOSTS:
        print(
            f"WARNING: serving on {host}, reachable from other machines: no authentication, no TLS",
            file=sys.stderr,
        )
    try:
        server = make_server(
            parsed["artifacts"], host, port, parsed["allow_remote"], parsed["max_sessions"]
        )
    except OSError as exc:
        raise args.UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound_host, bound_port = server.server_address[:2]
    print(
        f"serving on http://{bound_host}:{bound_port} (artifacts {parsed['artifacts']}); "
        "docs on /docs, Ctrl-C stops",
        flush=True,
    )
    return server.run(lambda artifacts: f"ready: {artifacts.precisions} (verified, loaded, warmed)")


COMMANDS = {
    "serve": args.Command(
        "serve exported artifacts over HTTP on 127.0.0.1",
        {
            "artifacts": args.Option(str, args.REQUIRED, "the directory `export` wrote"),
            "host": args.Option(str, "127.0.0.1", "address to bind (loopback unless allow_remote)"),
            "port": args.Option(int, 8000, "TCP port (0: any free port)"),
            "allow_remote": args.Option(bool, False, "allow a non-loopback host (no auth, no TLS)"),
            "max_sessions": args.Option(
                int, MAX_SESSIONS, "sessions kept (least recently used dropped)"
            ),
        },
        run_serve,
        config_overrides=False,
    ),
}
