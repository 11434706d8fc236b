"""``python -m tpu_scripts launch {create,stage,run,fetch,delete}``: gcloud, shown or run.

Every command line comes from core/tpu/cloud_tpu.py (the builders the lessons show), so what a
learner reads is what runs. With ``--dry-run`` (the default when ``gcloud`` is not on PATH)
the commands are only printed; otherwise they run one after another and the first failure
stops the sequence with its output. ``delete`` needs the VM name spelled out and then checks
that ``describe`` fails (the slice is gone, billing stopped). Bad input (unknown accelerator
type, a zone without that generation, a missing script) exits 2 before anything runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import shutil
import subprocess
import sys

from core.tpu import cloud_tpu
from tpu_scripts.wheelhouse import remote as offline

VERBS = ("create", "stage", "run", "fetch", "delete")
FRAMEWORK_CHOICES = ("jax", "torch-xla", "tensorflow")  # tpu_scripts/frameworks/environments.py
_REPO = pathlib.Path(__file__).resolve().parent.parent


@dataclasses.dataclass(frozen=True)
class Step:
    """One gcloud call: what it does, its argv, and whether success means failure (describe)."""

    what: str
    argv: tuple[str, ...]
    must_fail: bool = False

    @property
    def line(self) -> str:
        return cloud_tpu.shell_join(self.argv)


def fetch_command(
    vm: cloud_tpu.TpuVm, remote_path: str, local_dir: str, worker: str = "0"
) -> list[str]:
    """argv that copies ``~/jax-tpu-lab/remote_path`` from one worker back to ``local_dir``.

    core/tpu/cloud_tpu.py builds the upload direction only; this is the same gcloud scp with the
    source and target swapped, on one worker (a result file is the same on every worker).
    """
    if not remote_path.strip():
        raise ValueError("fetch needs a remote path (relative to ~/jax-tpu-lab/)")
    if cloud_tpu._worker_indices(str(worker)) is None or any(
        i >= vm.accelerator.hosts for i in cloud_tpu._worker_indices(str(worker))
    ):
        raise ValueError(
            f"worker {worker!r} does not exist: {vm.accelerator_type} has "
            f"{vm.accelerator.hosts} worker(s); fetch from one index, e.g. 0"
        )
    source = f"{vm.name}:{cloud_tpu.REMOTE_DIR}/{remote_path.lstrip('/')}"
    return [
        "gcloud",
        "compute",
        "tpus",
        "tpu-vm",
        "scp",
        source,
        local_dir,
        *vm._common(),
        f"--worker={worker}",
        "--recurse",
    ]


def plan(args: argparse.Namespace) -> list[Step]:
    """The gcloud steps for the parsed arguments (ValueError on bad input, nothing run)."""
    vm = cloud_tpu.TpuVm(
        name=args.name,
        accelerator_type=args.accelerator_type,
        zone=args.zone,
        spot=getattr(args, "spot", False),
        project=args.project,
        labels=cloud_tpu.parse_labels(getattr(args, "label", None) or []),
    )
    if args.verb == "create":
        return [Step("create the TPU VM", tuple(cloud_tpu.create_command(vm)))]
    if args.verb == "stage":
        paths = [args.script, *args.extra]
        for path in paths:
            if not pathlib.Path(path).exists():
                raise ValueError(f"no such file to stage: {path}")
        folders = f"mkdir -p ~/{cloud_tpu.REMOTE_DIR}"
        wheelhouses = getattr(args, "wheelhouse", None) or []
        found = [part for folder in wheelhouses for part in offline.parts(folder)]
        if found:
            wheel = offline.project_wheel(paths)
            folders += f" && {offline.mkdir_line()}"
        steps = [
            Step("make the folder on every worker", tuple(cloud_tpu.ssh_command(vm, folders))),
            Step("copy files to every worker", tuple(cloud_tpu.scp_command(vm, paths))),
        ]
        if found:  # the course from the wheelhouse, not the network (wheelhouse/remote.py)
            install = cloud_tpu.ssh_command(vm, offline.install_line(wheel))
            steps += [
                Step("copy the wheelhouse to every worker", tuple(offline.copy_argv(vm, found))),
                Step("install the wheelhouse and the wheel on every worker (offline)",
                     tuple(install)),
            ]  # fmt: skip
        return steps
    if args.verb == "run":
        if not pathlib.Path(args.script).is_file():
            raise ValueError(f"no such script: {args.script} (stage it first, from this path)")
        name = getattr(args, "framework", "jax")
        if getattr(args, "offline", False):
            if name != "jax":
                raise ValueError(f"--offline runs JAX scripts; {name} needs its own venv")
            script = pathlib.PurePath(args.script).name
            flags = cloud_tpu.shell_join(args.script_args) if args.script_args else ""
            remote_line = f"cd ~/{cloud_tpu.REMOTE_DIR} && {offline.python()} {script} {flags}"
            return [
                Step(
                    f"run on worker(s) {args.worker} (offline: the staged wheelhouse)",
                    tuple(cloud_tpu.ssh_command(vm, remote_line.rstrip(), args.worker)),
                )
            ]
        if name == "jax":
            remote = cloud_tpu.bootstrap_remote_command(
                args.script, args.wheel, " ".join(args.script_args)
            )
        else:  # its own venv on the VM; the script comes with the staged wheel
            from tpu_scripts.frameworks import environments

            fw = environments.framework(name)
            if pathlib.Path(args.script).resolve() != (_REPO / fw.script).resolve():
                raise ValueError(
                    f"--framework {name} runs {fw.script} (from the staged wheel), "
                    f"not {args.script}"
                )
            remote = environments.remote_command(fw, vm, args.wheel, args.script_args)
        return [
            Step(
                f"run on worker(s) {args.worker}",
                tuple(cloud_tpu.ssh_command(vm, remote, args.worker)),
            )
        ]
    if args.verb == "fetch":
        return [
            Step(
                "fetch results",
                tuple(fetch_command(vm, args.remote_path, args.local_dir, args.worker)),
            )
        ]
    if args.verb == "delete":
        return [
            Step("delete the TPU VM (billing stops here)", tuple(cloud_tpu.delete_command(vm))),
            Step(
                "verify it is gone (describe must fail)",
                tuple(cloud_tpu.describe_command(vm)),
                must_fail=True,
            ),
        ]
    raise ValueError(f"unknown launch verb {args.verb!r}; choose one of {', '.join(VERBS)}")


def add_parser(commands) -> argparse.ArgumentParser:
    """Add ``launch`` and its verbs to the top-level subparsers."""
    launch = commands.add_parser(
        "launch",
        help="create / stage / run / fetch / delete on a Cloud TPU VM (gcloud; --dry-run prints)",
        description=__doc__.split("\n\n")[0],
    )
    verbs = launch.add_subparsers(dest="verb", required=True, metavar="VERB")

    def common(sub, name_required=False):
        if name_required:
            sub.add_argument("--name", required=True, help="the TPU VM to act on (no default)")
        else:
            sub.add_argument("--name", default=cloud_tpu.TpuVm.name, help="TPU VM name")
        sub.add_argument("--zone", default=cloud_tpu.TpuVm.zone, help="zone, e.g. us-west4-a")
        sub.add_argument(
            "--accelerator-type",
            default=cloud_tpu.TpuVm.accelerator_type,
            help="e.g. v5litepod-8, v6e-16, v5p-8",
        )
        sub.add_argument("--project", default="", help="project id (default: gcloud's)")
        sub.add_argument(
            "--dry-run",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="print the commands only (default when gcloud is not on PATH)",
        )
        return sub

    create = common(verbs.add_parser("create", help="create the TPU VM"))
    create.add_argument("--spot", action="store_true", help="preemptible, cheaper")
    create.add_argument(
        "--label",
        action="append",
        metavar="KEY=VALUE",
        help="cost-attribution label (repeat, or k=v,k2=v2): team=ml, job=sweep, "
        "cost-center=research; lowercase keys, <= 63 characters, [a-z0-9_-], at most 64",
    )
    stage = common(verbs.add_parser("stage", help="copy a script (and files) to every worker"))
    stage.add_argument("script", help="the exported script")
    stage.add_argument("extra", nargs="*", help="more files to copy, e.g. the project wheel")
    stage.add_argument(
        "--wheelhouse",
        action="append",
        default=[],
        metavar="DIR",
        help="copy this wheelhouse (python -m tpu_scripts wheelhouse) too and install it and "
        "the staged project wheel on every worker, offline; then `run --offline`",
    )
    run = common(verbs.add_parser("run", help="run a staged script on the workers"))
    run.add_argument("script", help="the script (its local path; the file name is used remotely)")
    run.add_argument("--worker", default="all", help="all (every host), N, a,b or a-b")
    run.add_argument("--wheel", default=cloud_tpu.WHEEL, help="the staged project wheel")
    run.add_argument(
        "--framework",
        choices=FRAMEWORK_CHOICES,
        default="jax",
        help="jax: ~/jax-tpu-lab/.venv; torch-xla / tensorflow: their own venv and pins "
        "(tpu_scripts/frameworks/torch_xla_train.py, tf_train.py; stage the wheel first)",
    )
    run.add_argument(
        "--offline",
        action="store_true",
        help="run with the VM's python3 and what `stage --wheelhouse` installed, not the .venv "
        "made from the network",
    )
    run.add_argument("script_args", nargs="*", help="after --: the script's flags")
    fetch = common(verbs.add_parser("fetch", help="copy results back from one worker"))
    fetch.add_argument("remote_path", help="path under ~/jax-tpu-lab/ on the worker")
    fetch.add_argument("local_dir", help="local folder to copy into")
    fetch.add_argument("--worker", default="0", help="which worker (default 0)")
    common(verbs.add_parser("delete", help="delete the TPU VM and verify it is gone"), True)
    return launch


def execute(steps: list[Step], dry_run: bool | None, out=sys.stdout) -> int:
    """Print (dry run) or run the steps in order; stop at the first failure. Exit code."""
    if dry_run is None:
        dry_run = shutil.which("gcloud") is None
        if dry_run:
            print("# gcloud is not on PATH: dry run (commands printed, nothing run)", file=out)
    for step in steps:
        print(f"# {step.what}", file=out)
        print(step.line, file=out)
        if dry_run:
            continue
        result = subprocess.run(list(step.argv), capture_output=True, text=True)
        if result.stdout:
            print(result.stdout.rstrip(), file=out)
        if step.must_fail:
            if result.returncode == 0:
                print(f"error: the TPU VM still exists ({step.line} succeeded)", file=sys.stderr)
                return 1
            print("# verified: describe fails, the TPU VM is gone", file=out)
            continue
        if result.returncode != 0:
            print(
                f"error: step failed with exit code {result.returncode}: {step.line}\n"
                f"{result.stderr.rstrip()}",
                file=sys.stderr,
            )
            return 1
    return 0


def main(args: argparse.Namespace) -> int:
    try:
        steps = plan(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return execute(steps, args.dry_run)


# ----------------------------------------------------------------------------------------
# A preempted job, locally: kill a checkpointed run mid-way and start it again.


@dataclasses.dataclass(frozen=True)
class InterruptedRun:
    """The killed run's output, the restarted run's output and result, and a clean run's."""

    killed_stdout: str
    killed_returncode: int | None
    resumed_stdout: str
    resumed_result: dict | None
    uninterrupted_result: dict | None
    resumed_from_step: int | None


def _run_result(argv, cwd, timeout_s):
    from tpu_scripts import rehearse

    result = subprocess.run(
        argv, capture_output=True, text=True, cwd=cwd, timeout=timeout_s, env=_child_env()
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(argv)}` exited {result.returncode}:\n{result.stderr[-2000:]}"
        )
    return result.stdout, rehearse.parse_result(result.stdout)


def _child_env():
    from core import runtime

    return runtime.child_env()


def interrupted_and_resumed(
    script: str | pathlib.Path,
    checkpoint_dir: str | pathlib.Path,
    steps: int = 6,
    kill_after_step: int = 3,
    script_args: tuple[str, ...] = (),
    timeout_s: float = 120,
) -> InterruptedRun:
    """Run ``script --steps N --checkpoint-dir D``, SIGKILL it once it reports step
    ``kill_after_step`` saved, run it again (it must resume), and run it once more without
    checkpoints as the uninterrupted reference.
    """
    import re
    import time

    from core import curriculum

    if not 1 <= kill_after_step < steps:
        raise ValueError(f"kill after step must be in 1..{steps - 1}, got {kill_after_step}")
    base = [sys.executable, str(script), "--steps", str(steps), *script_args]
    argv = [*base, "--checkpoint-dir", str(checkpoint_dir)]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=_child_env(),
    )
    lines, deadline = [], time.monotonic() + timeout_s
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(f"step {kill_after_step} ") or time.monotonic() > deadline:
                break
    finally:
        proc.kill()  # SIGKILL: no chance to clean up, like a preempted VM
        proc.wait()
    resumed_stdout, resumed = _run_result(argv, curriculum.REPO_ROOT, timeout_s)
    _, reference = _run_result(base, curriculum.REPO_ROOT, timeout_s)
    match = re.search(r"resumed from checkpoint step (\d+)", resumed_stdout)
    return InterruptedRun(
        "".join(lines),
        proc.returncode,
        resumed_stdout,
        resumed,
        reference,
        int(match[1]) if match else None,
    )
