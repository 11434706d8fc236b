"""The capstone's command line: ``python -m capstones.pallas_kernel COMMAND [key=value ...]``.

The byte Transformer capstone's pattern (capstones/byte_transformer/args.py, reused): each
command module declares ``COMMANDS = {name: args.Command}``; options are ``key=value``,
validated before anything is computed or written; a bad command line exits with status 2.
``profile`` and ``objective`` also take byte Transformer Config overrides (``d_model=64``).

The process asks JAX for 8 virtual CPU devices before anything starts its backend (the
``partition`` command's mesh); on a TPU VM the TPU stays the backend.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from capstones.byte_transformer import args
from capstones.byte_transformer import config as config_lib

PROG = "python -m capstones.pallas_kernel"
REGISTRY = {  # command -> (module, one-line summary)
    "agreement": ("agreement", "kernel vs NumPy float64: shapes x blocks x dtypes x causal"),
    "profile": ("profile", "the byte Transformer's train step: time, trace, memory, Amdahl bound"),
    "partition": ("partition", "the kernel in shard_map on 8 devices, collectives, TPU memory"),
    "objective": ("objective", "model loss and gradients: kernel core vs reference core"),
    "report": ("report", "every section above in one Markdown + JSON report"),
}


def usage() -> str:
    lines = [f"usage: {PROG} COMMAND [key=value ...]", "", "commands:"]
    lines += [f"  {name:<10} {summary}" for name, (_, summary) in REGISTRY.items()]
    lines += ["", f"{PROG} COMMAND --help: the command's options"]
    return "\n".join(lines)


def help_text(name: str, spec: args.Command) -> str:
    text = args.help_text(name, spec.summary, spec.options, spec.config_overrides)
    return text.replace("python -m capstones.byte_transformer", PROG, 1) + (
        "\n\n(config overrides are the byte Transformer's: capstones/byte_transformer/config.py)"
        if spec.config_overrides
        else ""
    )


def command(name: str) -> args.Command:
    module_name, _ = REGISTRY[name]
    module = importlib.import_module(f"capstones.pallas_kernel.{module_name}")
    return module.COMMANDS[name]


def make_config(parsed: args.Parsed, base: config_lib.Config) -> config_lib.Config:
    """``base`` with the command line's Config overrides (a UsageError if invalid)."""
    return args.make_config(base, parsed.overrides)


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in REGISTRY:
        print(f"unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    from core import runtime

    runtime.use_cpu_devices(8)  # before any module below starts JAX's backend
    spec = command(name)
    if any(item in ("-h", "--help") for item in rest):
        print(help_text(name, spec))
        return 0
    try:
        parsed = args.parse(rest, spec.options, spec.config_overrides)
        return int(spec.run(parsed) or 0)
    except args.UsageError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
