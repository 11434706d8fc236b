"""``python -m tpu_scripts course-run``'s command line: its flags, validated into
``course_run.Options`` before anything runs (course_run.py runs them)."""

from __future__ import annotations

import argparse
import datetime
import pathlib
import shutil
import sys

from core import curriculum
from core.tpu import cloud_tpu
from tpu_scripts.course_run import RUN_TIMEOUT_S, Options, course_run
from tpu_scripts.lesson_choice import UsageError, require_apps, resolve_lessons, resolve_phases
from tpu_scripts.wheelhouse import remote


def add_parser(commands) -> None:
    sub = commands.add_parser(
        "course-run",
        help="run chosen lessons on a TPU VM (every worker) and fetch their results",
        description="Export the chosen lessons, stage them and the project wheel on every "
        "worker of a TPU VM, run them (--worker=all), fetch every worker's results into "
        "runs/tpu/VM/DATE/ and record the run in run.json. Stops at the first failure (or, with "
        "--keep-going, reports them all at the end); the same command resumes; never deletes "
        "the VM (launch delete does, explicitly).",
    )
    sub.add_argument(
        "--lessons",
        default="",
        help="phase titles, learning-path titles, phase packages, lesson slugs, or the other "
        "apps by kind (capstones, assessments, keras) or slug; comma-separated",
    )
    sub.add_argument(
        "--phases",
        default="",
        help="the course map's phase numbers, ranges or packages (1-4,7; setup; all): a whole "
        "course split across calls, e.g. --phases 1-9 then --phases 10-19",
    )
    sub.add_argument(
        "--keep-going",
        action="store_true",
        help="run every chosen lesson, report all failures at the end (exit 1 if any)",
    )
    sub.add_argument(
        "--wheelhouse",
        action="append",
        default=[],
        metavar="DIR",
        help="install the course from this wheelhouse (python -m tpu_scripts wheelhouse), not "
        "the network: on every worker, or here with --local (into --site)",
    )
    sub.add_argument("--site", help="--local --wheelhouse: install into (default: RUNS_ROOT/site)")
    sub.add_argument(
        "--record",
        action="store_true",
        help="at the end, write the run folder as benchmarks/records/tpu_course/DATE_MACHINE"
        ".json (course-record; refused unless every bundle is a TPU's)",
    )
    sub.add_argument(
        "--frameworks",
        default="",
        help="also run these framework scripts, each in its own venv on the VM: torch-xla, "
        "tensorflow (comma-separated; tpu_scripts/frameworks/)",
    )
    sub.add_argument("--name", help="the TPU VM (it must exist: launch create)")
    sub.add_argument("--zone", default=cloud_tpu.TpuVm.zone, help="zone, e.g. us-west4-a")
    sub.add_argument("--accelerator-type", help="e.g. v5litepod-8, v6e-16, v5p-16")
    sub.add_argument("--project", default="", help="project id (default: gcloud's)")
    sub.add_argument("--local", action="store_true", help="run here instead (runs/local/DATE)")
    sub.add_argument(
        "--one-process",
        action="store_true",
        help="--local: run every lesson in this one process (a process that opens a TPU pays a "
        "start-up cost; each lesson's state is put back after it); rerun failures without it",
    )
    sub.add_argument(
        "--runs-root",
        default=str(curriculum.REPO_ROOT / "runs"),
        help="where runs/tpu/VM/DATE and runs/local/DATE go (default: the checkout's runs/)",
    )
    sub.add_argument("--date", help="the run folder's date, YYYY-MM-DD (default: today, UTC)")
    sub.add_argument("--force", action="store_true", help="rerun lessons already back")
    sub.add_argument("--apps-dir", default=str(curriculum.APPS_DIR), help=argparse.SUPPRESS)
    sub.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds per lesson")
    sub.add_argument("--wheel", help="stage this built wheel instead of building one")
    sub.add_argument(
        "--dry-run",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="print the steps only (default when gcloud is not on PATH)",
    )


def options_from_args(args: argparse.Namespace, argv=()) -> Options:
    """Validated options (UsageError naming the problem; nothing has run)."""
    apps_dir = pathlib.Path(args.apps_dir)
    frameworks = tuple(dict.fromkeys(n.strip() for n in args.frameworks.split(",") if n.strip()))
    if not args.lessons.strip() and not args.phases.strip() and not frameworks:
        raise UsageError(
            "name --lessons, --frameworks (torch-xla, tensorflow) or both; or --phases"
        )
    slugs = resolve_phases(args.phases) if args.phases.strip() else []
    slugs += resolve_lessons(args.lessons, apps_dir) if args.lessons.strip() else []
    slugs = require_apps(list(dict.fromkeys(slugs)), apps_dir)
    vm = None
    if not args.local:
        if not args.name or not args.accelerator_type:
            raise UsageError("a TPU run needs --name and --accelerator-type (or pass --local)")
        try:
            vm = cloud_tpu.TpuVm(
                name=args.name,
                accelerator_type=args.accelerator_type,
                zone=args.zone,
                project=args.project,
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if frameworks:
        from tpu_scripts.frameworks import environments

        if vm is None:
            raise UsageError("--frameworks runs on a TPU VM (--name, --accelerator-type)")
        for name in frameworks:
            try:
                problem = environments.vm_problem(environments.framework(name), vm)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            if problem:
                raise UsageError(problem)
    date = args.date or datetime.datetime.now(datetime.UTC).date().isoformat()
    try:
        datetime.date.fromisoformat(date)
    except ValueError:
        raise UsageError(f"--date {date!r} is not YYYY-MM-DD") from None
    if args.one_process and not args.local:
        raise UsageError("--one-process runs lessons here: add --local")
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {args.timeout}")
    wheel = pathlib.Path(args.wheel) if args.wheel else None
    if wheel is not None and (not wheel.is_file() or wheel.suffix != ".whl"):
        raise UsageError(f"--wheel {wheel}: not a wheel file")
    wheelhouse = []
    for folder in args.wheelhouse:
        try:
            wheelhouse += remote.parts(folder)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    dry = args.dry_run
    if dry is None:
        dry = not args.local and shutil.which("gcloud") is None
        if dry:
            print("# gcloud is not on PATH: dry run (steps printed, nothing run)")
    return Options(
        lessons=tuple(slugs),
        vm=vm,
        runs_root=pathlib.Path(args.runs_root),
        date=date,
        force=args.force,
        apps_dir=apps_dir,
        timeout_s=args.timeout,
        wheel=wheel,
        dry_run=dry,
        argv=tuple(argv),
        frameworks=frameworks,
        keep_going=args.keep_going,
        record=args.record,
        wheelhouse=tuple(dict.fromkeys(wheelhouse)),
        one_process=args.one_process,
    )


def main(args: argparse.Namespace, argv=()) -> int:
    try:
        options = options_from_args(args, argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return course_run(options)
    except ValueError as exc:  # an invalid run.json
        print(f"error: {exc} (move it away to start this run afresh)", file=sys.stderr)
        return 2
