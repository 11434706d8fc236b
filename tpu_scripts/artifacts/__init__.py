"""``python -m tpu_scripts artifact NAME``: the learning paths' first artifacts, as files.

    python -m tpu_scripts artifact runtime-receipt  [--out DIR] [--accelerator-type TYPE]
    python -m tpu_scripts artifact experiment-log   [--out DIR] [--steps N] [--checkpoint-every K]
    python -m tpu_scripts artifact decision-dossier [--out DIR] [--topology v5e:2x2]
    python -m tpu_scripts artifact timing-placement [--out DIR] [--size N]
    python -m tpu_scripts artifact verify PATH.json

Each writes NAME.json (validated, atomic), NAME.json.sha256 and NAME.md into DIR (default
runs/artifacts/NAME/<UTC time>/), headed "TPU RESULT" only when JAX's backend is the TPU and
"CPU REHEARSAL (not a TPU result)" otherwise. Bad arguments: a message and exit 2, nothing
written. ``verify`` exits 0 for an intact file and 1 for a changed or malformed one.
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import sys

from core.state import artifacts

# artifact name -> module of this package (imported only when its command runs)
MODULES = {
    "runtime-receipt": "runtime_receipt",
    "experiment-log": "experiment_log",
    "decision-dossier": "decision_dossier",
    "timing-placement": "timing_placement",
}
PROG = "python -m tpu_scripts artifact"


def module(name: str):
    return importlib.import_module(f"tpu_scripts.artifacts.{MODULES[name]}")


def add_parser(commands) -> argparse.ArgumentParser:
    """Add the ``artifact`` command (one sub-command per artifact, and ``verify``) to
    ``commands`` (the subparsers of ``python -m tpu_scripts``); each sets ``handler``."""
    parser = commands.add_parser(
        "artifact",
        help="write a learning path's first artifact (JSON + sha256 + Markdown) or verify one",
        description="Write a learning path's first artifact, or verify a saved one.",
    )
    kinds = parser.add_subparsers(dest="artifact", required=True, metavar="ARTIFACT")
    for name in MODULES:
        entry = artifacts.get(name)
        sub = kinds.add_parser(name, help=entry.title, description=f"{entry.title}: {entry.what}.")
        sub.add_argument(
            "--out",
            default=None,
            help=f"directory to write into (default runs/artifacts/{name}/<UTC time>/)",
        )
        module(name).add_arguments(sub)
        sub.set_defaults(handler=handle)
    verify = kinds.add_parser(
        "verify",
        help="reload an artifact file and check its sha256 and schema",
        description="Reload an artifact's JSON and refuse it if changed or malformed.",
    )
    verify.add_argument("path", help="an artifact's .json (or the directory holding it)")
    verify.set_defaults(handler=handle_verify)
    return parser


def handle(args) -> int:
    """Run one artifact's command: validate the arguments, then build and write the files."""
    name = args.artifact
    mod = module(name)
    if (problem := mod.problem(args)) is not None:
        return _refuse(f"{PROG} {name}", problem)
    out_dir = pathlib.Path(args.out) if args.out else artifacts.default_dir(name)
    if out_dir.exists() and not out_dir.is_dir():
        return _refuse(f"{PROG} {name}", f"--out {out_dir} exists and is not a directory")
    from tpu_scripts.artifacts import common

    document, paths = mod.produce(args, out_dir)
    common.print_written(document, paths)
    return 0 if all(c["passed"] for c in document["checks"]) else 1


def handle_verify(args) -> int:
    from tpu_scripts.artifacts import common

    path = pathlib.Path(args.path)
    if path.is_dir():
        found = sorted(p for p in path.glob("*.json") if p.stem in MODULES)
        if len(found) != 1:
            print(f"error: {path} holds {len(found)} artifact files; name one", file=sys.stderr)
            return 1
        path = found[0]
    models = {name: module(name).Document for name in MODULES}
    try:
        document = common.verify(path, models)
    except ValueError as exc:
        print(f"REFUSED: {exc}", file=sys.stderr)
        return 1
    file_problem = getattr(module(document["artifact"]), "file_problem", None)
    if file_problem is not None and (problem := file_problem(path, document)) is not None:
        print(f"REFUSED: {path}: {problem}", file=sys.stderr)
        return 1
    print(
        f"VERIFIED: {path} ({document['artifact']}, {document['label']}, created "
        f"{document['created_utc']}; sha256 and schema match)"
    )
    return 0


def _refuse(prog: str, problem: str) -> int:
    print(f"usage: {prog} ...\n{prog}: error: {problem}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """The package's own entry (``python -m tpu_scripts.artifacts NAME ...``)."""
    parser = argparse.ArgumentParser(prog="python -m tpu_scripts")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["artifact", *(sys.argv[1:] if argv is None else argv)])
    return args.handler(args)
