"""The capstone's command line: ``python -m capstones.pallas_kernel COMMAND [key=value ...]``.

The byte Transformer capstone's pattern (capstones/byte_transformer/args.py, reused): each
command module declares ``COMMANDS = {name: args.Command}``; options are ``key=value``,
validated before anything is computed or written; a bad command line exits with status 2.
``profile`` and ``objective`` also take byte Transformer Config overrides (``d_model=64``).

The process asks JAX for 8 virtual CPU devices before anything starts its backend (the
``partition`` command's mesh); on a TPU VM the TPU stays the backend.
"""

from __future__ import annotations

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


OVERRIDES_NOTE = (
    "\n\n(config overrides are the byte Transformer's: capstones/byte_transformer/config.py)"
)


def usage() -> str:
    return args.usage(PROG, REGISTRY)


def command(name: str) -> args.Command:
    return args.load_command("capstones.pallas_kernel", REGISTRY, name)


def make_config(parsed: args.Parsed, base: config_lib.Config) -> config_lib.Config:
    """``base`` with the command line's Config overrides (a UsageError if invalid)."""
    return args.make_config(base, parsed.overrides)


def _eight_cpu_devices() -> None:
    from core import runtime

    runtime.use_cpu_devices(8)  # before any command module starts JAX's backend


def main(argv: Sequence[str]) -> int:
    return args.dispatch(
        argv,
        prog=PROG,
        package="capstones.pallas_kernel",
        registry=REGISTRY,
        prepare=_eight_cpu_devices,
        overrides_note=OVERRIDES_NOTE,
    )
