"""The capstone's command line: ``python -m capstones.byte_transformer COMMAND [key=value ...]``.

Each command lives in its own module, which declares ``COMMANDS = {name: args.Command}``;
modules are imported only when their command runs (torch, the HTTP server and the TPU
compiler are not loaded to train).
"""

from __future__ import annotations

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
    "cache-report": (
        "cache_report",
        "fp32/bf16/int8 KV cache: bytes, logit error, greedy agreement",
    ),
    "export": ("export", "serialize prefill + decode for each cache precision (jax.export)"),
    "serve": ("serve", "serve exported artifacts over HTTP on 127.0.0.1"),
    "profile": ("bench", "a warmed profiler trace of the train step and its top ops"),
    "bench": ("bench", "tokens/s vs a PyTorch twin, MFU, KV-cache decode speed-up, compile time"),
    "plan": ("plan", "TPU generation/topology, precision policy, memory budget vs TPU compiler"),
    "run-manifest": ("run_manifest", "the manifest of a run: identity, environment, events"),
    "report": ("report", "everything above gathered into one Markdown + JSON report"),
}


def usage() -> str:
    return args.usage(args.PROG, REGISTRY)


def command(name: str) -> args.Command:
    return args.load_command("capstones.byte_transformer", REGISTRY, name)


def main(argv: Sequence[str]) -> int:
    return args.dispatch(
        argv, prog=args.PROG, package="capstones.byte_transformer", registry=REGISTRY
    )
