"""python -m tpu_scripts COMMAND ...: the tools that take a lesson to a TPU VM.

    python -m tpu_scripts export apps/NAME.py -o OUT.py
"""

from __future__ import annotations

import argparse
import sys

from tpu_scripts import export


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tpu_scripts",
        description="Take lesson apps to Cloud TPU VMs.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    export_cmd = commands.add_parser(
        "export",
        help="write a headless script of an app, with flags that mirror its controls",
        description="Write a headless script of a marimo app (run it with plain `python`).",
    )
    export_cmd.add_argument("app", help="the app to export, e.g. apps/virtual_devices.py")
    export_cmd.add_argument("-o", "--output", required=True, help="the script to write")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # bad arguments: usage and exit 2
    if args.command == "export":
        try:
            path = export.export_app(args.app, args.output)
        except (export.NotAMarimoApp, FileNotFoundError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
