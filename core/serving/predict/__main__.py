"""python -m core.serving.predict {export, serve, predict}: see core/serving/predict/__init__.py.

A bad flag or value prints a one-line usage message and exits with status 2; an artifact that
fails verification exits with status 1 and names the problem."""

from __future__ import annotations

import argparse
import sys

from core.serving.http import LOCAL_HOSTS


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own exit 2, with our wording
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    from core.serving.predict import export

    p = _Parser(prog="python -m core.serving.predict", description=__doc__.splitlines()[0])
    commands = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    e = commands.add_parser("export", help="train the digits MLP and write the artifact dir")
    e.add_argument("--out", required=True, help="directory for the artifact")
    e.add_argument("--seed", type=int, default=export.DEFAULTS["seed"], help="split + init seed")
    e.add_argument(
        "--steps", type=_positive, default=export.DEFAULTS["steps"], help="full-batch steps"
    )
    e.add_argument("--learning-rate", type=float, default=export.DEFAULTS["learning_rate"])
    e.add_argument(
        "--max-batch",
        type=_positive,
        default=export.DEFAULTS["max_batch"],
        help="the largest batch the contract accepts",
    )
    e.add_argument("--model-version", default=None, help="default: digits-mlp-<weights sha>")
    e.add_argument("--platforms", default="", help="comma-separated (cpu,tpu); default: this one")
    s = commands.add_parser("serve", help="serve an artifact dir over HTTP (127.0.0.1)")
    s.add_argument("--artifacts", required=True, help="the directory `export` wrote")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default)")
    s.add_argument("--port", type=int, default=8100, help="TCP port (0: any free port)")
    s.add_argument("--max-batch", type=_positive, default=32, help="rows per model call")
    s.add_argument(
        "--max-wait-ms", type=float, default=2.0, help="batching window (0: no batching)"
    )
    s.add_argument("--allow-remote", action="store_true", help="bind a non-loopback host")
    s.add_argument(
        "--max-seconds", type=float, default=0.0, help="stop after this long (0: until stopped)"
    )
    r = commands.add_parser("predict", help="predict the rows of a .npy file (no server)")
    r.add_argument("--artifacts", required=True)
    r.add_argument("--inputs", required=True, help="a float32 (b, 64) .npy file")
    r.add_argument("--out", required=True, help="an .npz file: labels, probabilities")
    return p


def run_export(a) -> int:
    from core.serving.predict import export

    platforms = tuple(x for x in a.platforms.split(",") if x)
    for x in platforms:
        if x not in ("cpu", "tpu", "cuda", "rocm"):
            raise SystemExit(_usage(f"--platforms: unknown platform {x!r}"))
    try:
        trained = export.train(a.seed, a.steps, a.learning_rate)
        manifest = export.write_artifacts(
            trained, a.out, a.max_batch, a.model_version, platforms or None
        )
    except ValueError as exc:
        raise SystemExit(_usage(str(exc))) from None
    info = manifest["model"]
    print(
        f"{manifest['model_version']}: train accuracy {info['train_accuracy']:.3f}, test "
        f"accuracy {info['test_accuracy']:.3f} ({info['steps']} steps, seed {info['seed']})"
    )
    x = manifest["exported"]
    print(
        f"{x['file']} {x['bytes']} bytes for {x['platforms']}, inputs "
        f"{[(i['name'], i['shape']) for i in x['inputs'] if i['name'] == 'x_BF']}, "
        f"calling convention {x['calling_convention_version']}"
    )
    print(f"wrote {a.out}/manifest.json")
    return 0


def _usage(message: str) -> int:
    print(f"python -m core.serving.predict: error: {message}", file=sys.stderr)
    return 2


def run_serve(a) -> int:
    from core.serving.predict import app

    if a.host not in LOCAL_HOSTS and not a.allow_remote:
        return _usage(
            f"--host {a.host!r} would expose the server beyond this machine; bind one of "
            f"{', '.join(LOCAL_HOSTS)} or pass --allow-remote (no authentication, no TLS)"
        )
    if not 0 <= a.port < 65536 or not 0 <= a.max_wait_ms <= 1000 or a.max_seconds < 0:
        return _usage("need 0 <= --port < 65536, 0 <= --max-wait-ms <= 1000, --max-seconds >= 0")
    if a.host not in LOCAL_HOSTS:
        print(f"WARNING: serving on {a.host}: no authentication, no TLS", file=sys.stderr)
    try:
        server = app.make_server(
            a.artifacts, a.host, a.port, a.max_batch, a.max_wait_ms / 1000, a.allow_remote
        )
    except OSError as exc:
        return _usage(f"cannot listen on {a.host}:{a.port}: {exc.strerror or exc}")
    except ValueError as exc:
        return _usage(str(exc))
    host, port = server.server_address[:2]
    print(f"serving on http://{host}:{port} (artifacts {a.artifacts}); Ctrl-C stops", flush=True)
    return server.run(
        lambda artifacts: f"ready: {artifacts.model_version} (verified, warmed)",
        what="artifact",
        max_seconds=a.max_seconds,
    )


def run_predict(a) -> int:
    from core.serving.artifacts import ArtifactError
    from core.serving.predict import export

    try:
        export.replay(a.artifacts, a.inputs, a.out)
    except ArtifactError as exc:
        print(f"refused: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        return _usage(str(exc))
    return 0


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    return {"export": run_export, "serve": run_serve, "predict": run_predict}[a.command](a)


if __name__ == "__main__":
    from core import runtime

    runtime.use_cpu_without_tpu()  # a host without a TPU: the CPU backend, libtpu quiet
    sys.exit(main())
