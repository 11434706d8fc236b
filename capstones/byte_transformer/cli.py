"""The capstone's command line: ``python -m capstones.byte_transformer COMMAND [key=value ...]``.

Each command lives in its own module, which declares ``COMMANDS = {name: args.Command}``;
modules are imported only when their command runs (torch, the HTTP server and the TPU
compiler are not loaded to train).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from capstones.byte_transformer import args

# command -> (module, one-line summary)
REGISTRY = {
    "train": (
        "training",
        "train (or resume) on the standard library; metrics, checkpoints, MLflow",
    ),
    "eval": ("training", "held-out loss and bits per byte on files never trained on"),
    "generate": (
        "kv_cache",
        "generate bytes from a trained run with an fp32, bf16 or int8 KV cache",
    ),
    "cache-report": ("kv_cache", "fp32/bf16/int8 KV cache: bytes, logit error, greedy agreement"),
    "export": ("export", "serialize prefill + decode for each cache precision (jax.export)"),
    "serve": ("serve", "serve exported artifacts over HTTP on 127.0.0.1"),
    "profile": ("bench", "a warmed profiler trace of the train step and its top ops"),
    "bench": ("bench", "tokens/s vs a PyTorch twin, MFU, KV-cache decode speed-up, compile time"),
    "plan": ("plan", "TPU generation/topology, precision policy, memory budget vs TPU compiler"),
    "run-manifest": ("run_manifest", "the manifest of a run: identity, environment, events"),
    "report": ("report", "everything above gathered into one Markdown + JSON report"),
}


def usage() -> str:
    lines = ["usage: python -m capstones.byte_transformer COMMAND [key=value ...]", "", "commands:"]
    lines += [f"  {name:<13} {summary}" for name, (_, summary) in REGISTRY.items()]
    lines += ["", "python -m capstones.byte_transformer COMMAND --help: the command's options"]
    return "\n".join(lines)


def command(name: str) -> args.Command:
    module_name, _ = REGISTRY[name]
    module = importlib.import_module(f"capstones.byte_transformer.{module_name}")
    return module.COMMANDS[name]


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in REGISTRY:
        print(f"unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    spec = command(name)
    if any(item in ("-h", "--help") for item in rest):
        print(args.help_text(name, spec.summary, spec.options, spec.config_overrides))
        return 0
    try:
        parsed = args.parse(rest, spec.options, spec.config_overrides)
        return int(spec.run(parsed) or 0)
    except args.UsageError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
