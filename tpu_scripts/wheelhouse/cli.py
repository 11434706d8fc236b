"""``python -m tpu_scripts wheelhouse``: build here, install and take inventory on the host.

    python -m tpu_scripts wheelhouse [--profile core,torch] [--host-inventory host.json] \\
        [--out .wheelhouse] [--part-mb 55]
    python -m tpu_scripts wheelhouse install DIR... --target SITE     (on the TPU host)
    python -m tpu_scripts wheelhouse inventory -o host.json [--index URL] [--find-links DIR]
    python -m tpu_scripts wheelhouse profiles [--host-inventory host.json]

``tpu_scripts/__main__.py`` hands ``wheelhouse`` here before it imports anything else, and
``install`` and ``inventory`` import only the standard library: they run on a host where
nothing of the course is installed yet.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / ".wheelhouse"
HELP = "build a folder of the lock's wheels for an offline TPU host; install it there"


def build_parser(prog: str = "python -m tpu_scripts wheelhouse") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Without an action: build the wheelhouse here (network: the registry) "
        "from requirements.lock, for CPython 3.11 on manylinux x86-64, in numbered parts.",
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the wheelhouse folder")
    parser.add_argument(
        "--profile",
        default="core",
        help="comma-separated: core, torch, rl, frameworks, operations, tests, or all "
        "(`wheelhouse profiles` lists what each brings and which lessons it covers)",
    )
    parser.add_argument(
        "--host-inventory",
        help="a host's `wheelhouse inventory` JSON: leave out what it imports first and every "
        "wheel its own index or wheel folders hold as the very file the lock names",
    )
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="NAME",
        help="carry NAME even though the host has it (e.g. jax, jaxlib, libtpu for a VM without)",
    )
    parser.add_argument("--part-mb", type=float, default=55.0, help="most MB (10^6) a part")
    parser.add_argument("--lock", default=str(ROOT / "requirements.lock"), help=argparse.SUPPRESS)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    install = actions.add_parser("install", help="on the TPU host: verify, then install parts")
    install.add_argument("dirs", nargs="+", help="part folders (or the folder that holds them)")
    install.add_argument("--target", required=True, help="the folder to install into (SITE)")
    install.add_argument("--host-index", help="the host's package index (default: the manifest's)")
    install.add_argument("--find-links", action="append", default=[], help="the host's wheels")
    inventory = actions.add_parser("inventory", help="on the TPU host: what it already has")
    inventory.add_argument("-o", "--output", help="write the JSON here (default: print)")
    inventory.add_argument("--index", help="the host's package index, e.g. file:///opt/pypi/simple")
    inventory.add_argument("--find-links", action="append", default=[], help="a wheel folder")
    shown = actions.add_parser("profiles", help="each profile's distributions, the apps' needs")
    shown.add_argument("--host-inventory", default=argparse.SUPPRESS, help="also count these")
    return parser


def add_parser(commands) -> None:
    """Listed in ``python -m tpu_scripts --help``; __main__ hands the arguments to ``main``."""
    commands.add_parser("wheelhouse", help=HELP, add_help=False)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.action == "install":
        from tpu_scripts.wheelhouse import install

        try:
            install.install(
                [pathlib.Path(d) for d in args.dirs],
                pathlib.Path(args.target),
                host_index=args.host_index,
                find_links=args.find_links,
            )
        except install.Refused as exc:
            print(str(exc), file=sys.stderr)
            return 1
        return 0
    if args.action == "inventory":
        from tpu_scripts.wheelhouse import inventory

        doc = inventory.inventory(args.index, args.find_links)
        text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
        if args.output:
            pathlib.Path(args.output).write_text(text, encoding="utf-8")
            held = sum(len(v) for v in doc["index_files"].values())
            print(f"wrote {args.output}: {len(doc['installed'])} installed, {held} index wheels")
        else:
            sys.stdout.write(text)
        return 0
    from tpu_scripts.wheelhouse import build

    if args.action == "profiles":
        return build.show_profiles(args.host_inventory)
    return build.main(args)
