"""python -m tpu_scripts COMMAND ...: the tools that take a lesson to a TPU VM.

python -m tpu_scripts export apps/NAME.py -o OUT.py
python -m tpu_scripts receipt [--json PATH]
python -m tpu_scripts rehearse --processes 2 --devices-per-process 4 SCRIPT [-- ARGS]
python -m tpu_scripts launch {create,stage,run,fetch,delete} ... [--dry-run]
python -m tpu_scripts course-run --name VM --zone Z --accelerator-type T --lessons NAME,...
python -m tpu_scripts compare runs/tpu/VM/DATE [--local DIR] [--markdown PATH]
python -m tpu_scripts course-record RUN_DIR [RUN_DIR ...] [--pytest-summary FILE ...]
python -m tpu_scripts wheelhouse [install DIR... --target SITE | inventory | profiles]
python -m tpu_scripts artifact {runtime-receipt,experiment-log,decision-dossier,
                                timing-placement,verify} ...
"""

from __future__ import annotations

import argparse
import sys

from tpu_scripts.wheelhouse import cli as wheelhouse_cli  # standard library only
from tpu_scripts.wheelhouse import local as wheelhouse_local  # standard library only


def build_parser() -> argparse.ArgumentParser:
    from tpu_scripts import artifacts, compare, course_record, course_run_cli, launch

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
    receipt_cmd = commands.add_parser(
        "receipt",
        help="the runtime receipt: devices, topology, versions and a timed psum check",
        description="Print (and with --json save) what JAX sees here, with a collective check.",
    )
    receipt_cmd.add_argument("--json", dest="json_path", help="write the receipt here (atomic)")
    receipt_cmd.add_argument("--repeats", type=int, default=5, help="timed psum calls (median)")
    receipt_cmd.add_argument(
        "--distributed",
        action="store_true",
        help="join a multi-host job first (jax.distributed.initialize); run on every worker",
    )
    rehearse_cmd = commands.add_parser(
        "rehearse",
        help="run a script as N local JAX processes (a multi-host rehearsal on one CPU host)",
        description="Run SCRIPT as N JAX processes on this host; compare with one process.",
    )
    rehearse_cmd.add_argument("--processes", type=int, default=2)
    rehearse_cmd.add_argument("--devices-per-process", type=int, default=4)
    rehearse_cmd.add_argument("--timeout", type=float, default=180, help="seconds for each run")
    rehearse_cmd.add_argument(
        "--compare",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run 1 process with all the devices and compare the results",
    )
    rehearse_cmd.add_argument("script", help="e.g. tpu_scripts/examples/sharded_step.py")
    rehearse_cmd.add_argument("script_args", nargs="*", help="after --: its args")
    launch.add_parser(commands)
    # A subcommand module gives add_parser(commands) and main(args); it is wired in twice here.
    course_run_cli.add_parser(commands)
    course_record.add_parser(commands)
    compare.add_parser(commands)
    artifacts.add_parser(commands)  # each artifact's subparser sets its handler
    wheelhouse_cli.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["wheelhouse"]:  # before anything but the standard library is imported
        return wheelhouse_cli.main(argv[1:])
    if wheelhouse_local.wants(argv) and wheelhouse_local.prepare(argv) != 0:
        return 1  # course-run --local --wheelhouse: installed first, on a bare host too
    from core import runtime

    runtime.use_cpu_without_tpu()  # a host without a TPU: the CPU backend, libtpu quiet
    from tpu_scripts import compare, course_record, course_run_cli, export, launch

    parser = build_parser()
    # Everything after the first "--" belongs to the script (rehearse, launch run), untouched.
    passthrough = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    args = parser.parse_args(argv)  # bad arguments: usage and exit 2
    if hasattr(args, "script_args"):
        args.script_args = [*args.script_args, *passthrough]
    if args.command == "export":
        try:
            path = export.export_app(args.app, args.output)
        except (export.NotAMarimoApp, FileNotFoundError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(path)
    elif args.command == "receipt":
        from tpu_scripts import receipt

        return receipt.main(args.json_path, args.repeats, args.distributed)
    elif args.command == "rehearse":
        from tpu_scripts import rehearse

        return rehearse.main(
            args.script,
            args.processes,
            args.devices_per_process,
            args.script_args,
            args.timeout,
            args.compare,
        )
    elif args.command == "launch":
        return launch.main(args)
    elif args.command == "course-run":
        return course_run_cli.main(args, ["python", "-m", "tpu_scripts", *argv])
    elif args.command == "course-record":
        return course_record.main(args)
    elif args.command == "compare":
        return compare.main(args.tpu_dir, args.local_dir, args.markdown_path)
    elif args.command == "artifact":
        return args.handler(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
