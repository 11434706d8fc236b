"""``python -m tpu_scripts course-run``: run chosen lessons on a TPU VM and bring them home.

    python -m tpu_scripts course-run --name VM --zone Z --accelerator-type T \\
        --lessons "Setup & first steps,vmap"
    python -m tpu_scripts course-run --local --lessons "Setup & first steps,vmap"

``--lessons`` takes phase titles, learning-path titles, phase packages (``setup``) and lesson
slugs, separated by commas (a title that holds a comma is still one name); ``--phases`` the
course map's phase numbers and ranges (``1-9``, ``all``), so a whole course splits across calls
(lesson_choice.py). An unknown name or a lesson without its app is refused with the valid
names, exit 2, before anything runs.

On a TPU VM (which must exist: ``launch create``): ``describe`` records the VM (its
accelerator type must be the one given; runtime version, state); each lesson is exported
(``export.py``) into ``<run>/staged/``; the project wheel is built here offline; both are
copied to every worker with ``gcloud compute tpus tpu-vm scp --worker=all``; the wheel is
installed once per call; then, lesson by lesson, ``ssh --worker=all`` runs the script with
``--out results/<slug>`` on every worker (a multi-host slice joins one JAX job: each worker
writes its own bundle) and every worker's bundle is fetched back: worker 0's (process 0) is
the lesson's, ``<run>/<slug>/``; worker i's goes to ``<run>/<slug>/workers/<i>/``, so a
failure on one worker only is visible. ``<run>`` is ``runs/tpu/<vm>/<YYYY-MM-DD>/``.

``run.json`` there records the run (VM identity, accelerator type, runtime version, the
versions the lessons resolved, per-lesson status with exit code, seconds and output tail),
validated (``RunRecord``, run_record.py) and written atomically after every lesson. The first
lesson that fails stops the run: its output is printed, the record says "failed", exit 1; with
``--keep-going`` every lesson runs and the failures are reported at the end (exit 1 if any).
Either way a table ends the run: lesson, status, seconds, check line or first error line. The
command never deletes the VM: it prints ``launch delete`` (which checks that ``describe`` then
fails) as the explicit next step. Running the same command again resumes: a lesson whose bundle
came back and verifies (``results.load``) is not rerun; a failed one is; ``--force`` reruns all.
``--local`` runs the same exported scripts here (``runs/local/<date>/``), the CPU side of
``python -m tpu_scripts compare``; ``--local --one-process`` runs them all in this one process
(one_process.py: a program that opens a TPU pays a start-up cost each time), each lesson's state
put back after it, and the record says which process gave each result. Without gcloud on PATH
(or with ``--dry-run``) the steps are printed and nothing runs. ``--wheelhouse DIR`` installs
the course from a wheelhouse (``python -m tpu_scripts wheelhouse``) instead of the network:
copied to every worker and installed there (wheelhouse/remote.py), or, with ``--local``, here
into ``--site`` before the run starts (wheelhouse/local.py: on a host with nothing of the course
installed yet). ``--record`` ends the run by writing it as the tpu_course record
(course_record.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import time

from core import curriculum, runtime
from core.lab import results
from core.perf import records
from core.tpu import cloud_tpu
from tpu_scripts import export, launch, one_process
from tpu_scripts.project_wheel import build_wheel
from tpu_scripts.run_record import (
    DONE,
    RECORD,
    first_problem,
    lesson_outcome,
    load_record,
    merge_record,
    now_utc,
    pending_lesson,
    save_record,
    summary_table,
    to_run,
    verdicts,
)
from tpu_scripts.wheelhouse import remote

STAGED = "staged"  # <run>/staged/: the exported scripts and the wheel, as copied
REMOTE_SCRIPTS = "scripts"  # ~/jax-tpu-lab/scripts/ on every worker
REMOTE_RESULTS = "results"  # ~/jax-tpu-lab/results/<slug>/ on every worker
TAIL_CHARS = 4000  # the output kept in run.json and printed on a failure
RUN_TIMEOUT_S = 3600.0  # one lesson on every worker


# ----------------------------------------------------------------------------------------
# What runs on every worker: the only remote command lines (tests assert these).


def script_name(slug: str) -> str:
    """The exported script keeps the app's file name: its results name the lesson ``slug``."""
    return f"{slug}.py"


def remote_install_command(wheel_name: str) -> str:
    """Make ~/jax-tpu-lab/.venv and install the staged wheel (again, if rebuilt)."""
    return cloud_tpu.install_remote_command(wheel_name, reinstall=True)


def remote_run_command(slug: str, multi_host: bool, offline: bool = False) -> str:
    """Run lesson ``slug``'s script on a worker, its bundle in ~/jax-tpu-lab/results/<slug>/.

    A multi-host slice's workers join one JAX job first (``JAX_TPU_LAB_MULTIHOST=1``: the
    exported script calls ``jax.distributed.initialize()``, export.JOIN_PRELUDE).
    ``offline``: the VM's python3 with the site a wheelhouse was installed into, not .venv.
    """
    out = f"{REMOTE_RESULTS}/{slug}"
    join = f"{export.MULTIHOST_ENV}=1 " if multi_host else ""
    python = remote.python() if offline else ".venv/bin/python"
    return (
        f"cd ~/{cloud_tpu.REMOTE_DIR} && rm -rf {shlex.quote(out)} && "
        f"{join}{python} {REMOTE_SCRIPTS}/{shlex.quote(script_name(slug))} "
        f"--out {shlex.quote(out)}"
    )


# ----------------------------------------------------------------------------------------
# Local steps: export, wheel


def export_scripts(
    slugs: list[str], apps_dir: pathlib.Path, staged: pathlib.Path, say=None
) -> None:
    """Export each lesson's app into ``staged/`` (kept when its source hash is unchanged),
    several at a time, with a line per app (export.export_many; ``say``: default print, flushed
    at once, so a terminal or a log read through a pipe sees each line as it comes)."""
    say = say or export.say
    todo = []
    for slug in slugs:
        app = curriculum.app_path(slug, apps_dir)
        script = staged / script_name(slug)
        digest = hashlib.sha256(app.read_bytes()).hexdigest()
        if not (script.is_file() and export.source_digest(script) == digest):
            todo.append((app, script))
    if todo:
        kept = len(slugs) - len(todo)
        say(f"# exporting {len(todo)} lesson(s) into {staged}"
            + (f" ({kept} already exported)" if kept else ""))  # fmt: skip
        export.export_many(todo, say=say)


# ----------------------------------------------------------------------------------------
# Running


@dataclasses.dataclass(frozen=True)
class Options:
    lessons: tuple[str, ...]
    vm: cloud_tpu.TpuVm | None  # None: --local
    runs_root: pathlib.Path
    date: str
    force: bool = False
    apps_dir: pathlib.Path = curriculum.APPS_DIR
    timeout_s: float = RUN_TIMEOUT_S
    wheel: pathlib.Path | None = None  # a built wheel to stage instead of building one
    dry_run: bool = False
    argv: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()  # tpu_scripts/frameworks/environments.py names
    keep_going: bool = False  # run every lesson; report all failures at the end
    record: bool = False  # write the tpu_course record from this run folder at the end
    wheelhouse: tuple[pathlib.Path, ...] = ()  # its part folders: install these, not the network
    one_process: bool = False  # --local: every lesson in this process (one_process.py)

    @property
    def run_dir(self) -> pathlib.Path:
        if self.vm is None:
            return self.runs_root / "local" / self.date
        return self.runs_root / "tpu" / self.vm.name / self.date


def delete_hint(vm: cloud_tpu.TpuVm) -> str:
    argv = ["python", "-m", "tpu_scripts", "launch", "delete", "--name", vm.name]
    argv += ["--zone", vm.zone] + (["--project", vm.project] if vm.project else [])
    return (
        f"The TPU VM {vm.name} is still running (and billing). When you are done, delete it "
        f"(this checks that describe then fails):\n  {shlex.join(argv)}"
    )


def _tail(text: str) -> str:
    return text[-TAIL_CHARS:]


def _gcloud(argv: list[str], timeout_s: float | None = None) -> tuple[int | None, str]:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return None, f"{out}\n(timed out after {timeout_s:.0f} s)"
    return result.returncode, result.stdout + result.stderr


def describe_vm(vm: cloud_tpu.TpuVm) -> dict:
    """The VM as gcloud describes it (RuntimeError if it does not exist or does not match)."""
    code, output = _gcloud([*cloud_tpu.describe_command(vm), "--format=json"], 120)
    if code != 0:
        create = ["python", "-m", "tpu_scripts", "launch", "create", "--name", vm.name]
        create += ["--zone", vm.zone, "--accelerator-type", vm.accelerator_type]
        raise RuntimeError(
            f"no TPU VM {vm.name} in {vm.zone} (describe failed): create it first with "
            f"`{shlex.join(create)}`\n{_tail(output)}"
        )
    try:
        described = json.loads(output[output.index("{") :])
    except ValueError:
        raise RuntimeError(f"describe printed no JSON:\n{_tail(output)}") from None
    kind = described.get("acceleratorType", "")
    if kind != vm.accelerator_type:
        raise RuntimeError(
            f"{vm.name} is a {kind or 'VM of unknown type'}, not {vm.accelerator_type}: "
            f"pass --accelerator-type {kind}"
        )
    if described.get("state", "READY") != "READY":
        raise RuntimeError(f"{vm.name} is {described.get('state')}, not READY")
    return {
        "name": vm.name,
        "zone": vm.zone,
        "project": vm.project,
        "accelerator_type": kind,
        "runtime_version": str(described.get("runtimeVersion", "")),
        "hosts": vm.accelerator.hosts,
        "state": str(described.get("state", "")),
        "described": described,
    }


def staging_steps(
    vm: cloud_tpu.TpuVm, staged: pathlib.Path, slugs, wheel: str, wheelhouse=()
) -> list:
    """The gcloud steps before the lessons: folders, copies (every worker), the install (from
    the ``wheelhouse`` part folders when given: no network on the VM)."""
    mkdir = f"mkdir -p ~/{cloud_tpu.REMOTE_DIR}/{REMOTE_SCRIPTS}"
    scripts = [str(staged / script_name(slug)) for slug in slugs]
    remote_scripts = f"{cloud_tpu.REMOTE_DIR}/{REMOTE_SCRIPTS}/"
    if wheelhouse:
        mkdir += f" && {remote.mkdir_line()}"
    install = [
        launch.Step(
            "install the wheel on every worker",
            tuple(cloud_tpu.ssh_command(vm, remote_install_command(pathlib.Path(wheel).name))),
        )
    ]
    if wheelhouse:
        install = [
            launch.Step("copy the wheelhouse to every worker",
                        tuple(remote.copy_argv(vm, list(wheelhouse)))),
            launch.Step("install the wheelhouse and the wheel on every worker (offline)",
                        tuple(cloud_tpu.ssh_command(vm, remote.install_line(wheel)))),
        ]  # fmt: skip
    return [
        launch.Step("make the folders on every worker", tuple(cloud_tpu.ssh_command(vm, mkdir))),
        launch.Step("copy the wheel to every worker", tuple(cloud_tpu.scp_command(vm, [wheel]))),
        launch.Step(
            "copy the lesson scripts to every worker",
            tuple(cloud_tpu.scp_command(vm, scripts, remote_scripts)),
        ),
        *install,
    ]


def lesson_steps(
    vm: cloud_tpu.TpuVm, slug: str, incoming: pathlib.Path, offline: bool = False
) -> list:
    """Run ``slug`` on every worker, then fetch each worker's bundle into incoming/<i>/."""
    command = remote_run_command(slug, vm.accelerator.multi_host, offline)
    run = cloud_tpu.ssh_command(vm, command)
    steps = [launch.Step(f"run {slug} on every worker", tuple(run))]
    for worker in range(vm.accelerator.hosts):
        fetch = launch.fetch_command(
            vm, f"{REMOTE_RESULTS}/{slug}", str(incoming / str(worker)), str(worker)
        )
        steps.append(launch.Step(f"fetch worker {worker}'s bundle", tuple(fetch)))
    return steps


def _place_bundles(run_dir: pathlib.Path, slug: str, incoming: pathlib.Path, hosts: int) -> None:
    for worker in range(hosts):
        fetched = incoming / str(worker) / slug
        if not fetched.is_dir():
            continue
        target = run_dir / slug if worker == 0 else run_dir / slug / "workers" / str(worker)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(fetched, target)
    shutil.rmtree(incoming, ignore_errors=True)
    if incoming.parent.is_dir() and not any(incoming.parent.iterdir()):
        incoming.parent.rmdir()


def run_on_tpu(
    vm: cloud_tpu.TpuVm, slug: str, run_dir: pathlib.Path, timeout_s: float, offline=False
):
    """Run one lesson on every worker and fetch the bundles: (exit code, output)."""
    incoming = run_dir / ".incoming" / slug
    shutil.rmtree(incoming, ignore_errors=True)
    run_step, *fetches = lesson_steps(vm, slug, incoming, offline)
    print(f"# {run_step.what}\n{run_step.line}", flush=True)
    code, output = _gcloud(list(run_step.argv), timeout_s)
    for step in fetches:  # every worker's bundle, also after a failure (what came back)
        pathlib.Path(step.argv[6]).mkdir(parents=True, exist_ok=True)  # fetch_command's target
        fetch_code, fetch_output = _gcloud(list(step.argv), 600)
        if fetch_code != 0:
            output += f"\n({step.what} failed: {fetch_output.strip()[-300:]})"
    _place_bundles(run_dir, slug, incoming, vm.accelerator.hosts)
    return code, output


def run_locally(slug: str, staged: pathlib.Path, run_dir: pathlib.Path, timeout_s: float):
    """Run one exported script on this machine: (exit code, output)."""
    work = run_dir / ".work"
    work.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(staged / script_name(slug)), "--out", str(run_dir / slug)]
    print(f"# run {slug} here\n{shlex.join(argv)}", flush=True)
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, cwd=work, timeout=timeout_s,
            env=runtime.child_env(),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None, f"(timed out after {timeout_s:.0f} s)"
    return result.returncode, result.stdout + result.stderr


def run_in_shared_process(slug: str, staged: pathlib.Path, run_dir: pathlib.Path, timeout_s):
    """Run one exported script in this process (--one-process): (exit code, output)."""
    script = staged / script_name(slug)
    out = str(run_dir / slug)
    print(f"# run {slug} in this process\n{shlex.join([script.name, '--out', out])}", flush=True)
    return one_process.run_script(script, ["--out", out], run_dir / ".work", timeout_s)


def _record_versions(record: dict, run_dir: pathlib.Path, slug: str) -> None:
    path = run_dir / slug / "results.json"
    if record["versions"] or not path.is_file():
        return
    receipt = results.load(path)["receipt"]
    record["versions"] = {
        **receipt["versions"],
        "python": receipt["python"],
        "backend": receipt["backend"],
        "device_kinds": ", ".join(receipt["device_kinds"]),
        "devices": str(receipt["device_count"]),
        "processes": str(receipt["process_count"]),
    }


def framework_steps(vm: cloud_tpu.TpuVm, names, wheel: str, run_dir: pathlib.Path) -> list:
    """Each framework script in its own venv on every worker (environments.remote_command:
    make the venv, install its pins and the wheel --no-deps, run with --out results/<name>),
    then worker 0's result folder fetched into <run>/<name>/."""
    from tpu_scripts.frameworks import environments

    steps = [
        launch.Step("make the folder on every worker",
                    tuple(cloud_tpu.ssh_command(vm, f"mkdir -p ~/{cloud_tpu.REMOTE_DIR}"))),
        launch.Step("copy the wheel to every worker", tuple(cloud_tpu.scp_command(vm, [wheel]))),
    ]  # fmt: skip
    for name in names:
        fw = environments.framework(name)
        out = f"{REMOTE_RESULTS}/{fw.name}"
        remote = environments.remote_command(fw, vm, wheel, ["--out", out])
        steps.append(
            launch.Step(
                f"run {fw.script} in ~/{cloud_tpu.REMOTE_DIR}/{fw.venv} on every worker",
                tuple(cloud_tpu.ssh_command(vm, remote)),
            )
        )  # fmt: skip
        fetch = launch.fetch_command(vm, out, str(run_dir), "0")
        steps.append(launch.Step(f"fetch worker 0's {fw.name} result", tuple(fetch)))
    return steps


def run_frameworks(options: Options) -> int:
    """Run the framework scripts on the VM (after the lessons); 0 when every result is back."""
    from tpu_scripts.frameworks import environments

    vm, staged = options.vm, options.run_dir / STAGED
    options.run_dir.mkdir(parents=True, exist_ok=True)  # the fetches' target
    wheel = str(options.wheel or build_wheel(staged))
    code = launch.execute(
        framework_steps(vm, options.frameworks, wheel, options.run_dir), dry_run=False
    )
    missing = [
        name
        for name in options.frameworks
        if not (options.run_dir / name / "result.json").is_file()
    ]
    for name in options.frameworks:
        where = options.run_dir / name / "result.json"
        print(f"{name}: {'back in ' + str(where) if name not in missing else 'no result'} "
              f"({environments.framework(name).script})")  # fmt: skip
    print(delete_hint(vm))
    return 1 if code != 0 or missing else 0


def dry_run(options: Options, slugs: list[str]) -> int:
    """Print every step this call would take; run nothing, write nothing."""
    vm, staged = options.vm, options.run_dir / STAGED
    wheel = str(options.wheel or staged / cloud_tpu.WHEEL.rsplit("/", 1)[-1])
    names = [*slugs, *options.frameworks]
    print(f"# dry run: {', '.join(names)} into {options.run_dir}")
    print("# export each lesson (local): " + ", ".join(str(staged / script_name(s)) for s in slugs))
    if vm is None:
        for slug in slugs:
            print(shlex.join(["python", str(staged / script_name(slug)), "--out", slug]))
        return 0
    print(
        "# verify the VM\n"
        + cloud_tpu.shell_join([*cloud_tpu.describe_command(vm), "--format=json"])
    )
    print("# build the wheel (local, offline)")
    steps = staging_steps(vm, staged, slugs, wheel, options.wheelhouse) if slugs else []
    for slug in slugs:
        incoming = options.run_dir / ".incoming" / slug
        steps += lesson_steps(vm, slug, incoming, bool(options.wheelhouse))
    if options.frameworks:
        steps += framework_steps(vm, options.frameworks, wheel, options.run_dir)
    for step in steps:
        print(f"# {step.what}\n{step.line}")
    print("# " + delete_hint(vm).replace("\n", "\n# "))
    return 0


def course_run(options: Options) -> int:
    """Run the lessons (see the module docstring). Exit code: 0, 1 (a lesson or step failed)."""
    slugs = list(options.lessons)
    run_dir, vm = options.run_dir, options.vm
    if options.dry_run:
        return dry_run(options, slugs)
    if not slugs:  # --frameworks only
        return run_frameworks(options)
    record_path = run_dir / RECORD
    load_start = records.read_load()  # this call's load is kept in run.json (course-record)
    existing = load_record(record_path) if record_path.is_file() else None
    record = merge_record(existing, slugs, "local" if vm is None else "tpu", options.argv)
    todo = [s for s in to_run(record, run_dir, options.force) if s in slugs]
    done = [s for s in slugs if s not in todo]
    if done:
        print(f"# already back (not rerun): {', '.join(done)}")
    if not todo:
        record["status"] = "passed"
        save_record(record_path, record, load_start)
        print(f"nothing to run: all {len(slugs)} lesson(s) are back in {run_dir}")
        if vm is not None:
            print(delete_hint(vm))
        return 0
    staged = run_dir / STAGED
    try:
        if vm is not None:
            record["vm"] = describe_vm(vm)
        export_scripts(todo, options.apps_dir, staged)
        if vm is not None:
            wheel = options.wheel or build_wheel(staged)
            record["wheel"] = pathlib.Path(wheel).name
            record["wheel_sha256"] = hashlib.sha256(pathlib.Path(wheel).read_bytes()).hexdigest()
            save_record(record_path, record, load_start)
            steps = staging_steps(vm, staged, todo, str(wheel), options.wheelhouse)
            code = launch.execute(steps, dry_run=False)
            if code != 0:
                raise RuntimeError("staging failed (the step's output is above)")
    except (RuntimeError, OSError, ValueError) as exc:
        record["status"] = "failed"
        save_record(record_path, record, load_start)
        print(f"error: {exc}", file=sys.stderr)
        if vm is not None and record["vm"] is not None:
            print(delete_hint(vm))
        return 1
    if options.wheelhouse:  # installed here by __main__ (--local) or on the VM by staging
        record["wheelhouse"] = remote.build_id(list(options.wheelhouse))
    lessons = {lesson["slug"]: lesson for lesson in record["lessons"]}
    failures = []
    if options.one_process:
        one_process.prepare()
    for number, slug in enumerate(todo, 1):
        lesson = lessons[slug]
        shutil.rmtree(run_dir / slug, ignore_errors=True)
        lesson.update(pending_lesson(slug))
        save_record(record_path, record, load_start)
        started = time.perf_counter()
        if vm is None:
            run_here = run_in_shared_process if options.one_process else run_locally
            code, output = run_here(slug, staged, run_dir, options.timeout_s)
            hosts = 1
        else:
            code, output = run_on_tpu(vm, slug, run_dir, options.timeout_s,
                                      bool(options.wheelhouse))  # fmt: skip
            hosts = vm.accelerator.hosts
        status, results_path, workers, problem = lesson_outcome(run_dir, slug, hosts, code)
        lesson.update(
            status=status,
            exit_code=code,
            seconds=round(time.perf_counter() - started, 2),
            finished_utc=now_utc(),
            results=results_path,
            workers=workers,
            output_tail=_tail(output),
            process=one_process.SHARED if options.one_process else one_process.OWN,
            app_sha256=export.source_digest(staged / script_name(slug)),
        )
        _record_versions(record, run_dir, slug)
        save_record(record_path, record, load_start)
        said = "; ".join(verdicts(output)[-3:])
        print(f"[{number}/{len(todo)}] {slug}: {status} ({lesson['seconds']:.1f} s) {said}")
        if status in DONE:
            continue
        failures.append(slug)
        if options.keep_going:
            print(f"  {slug} {status}: {first_problem(output)} (going on: --keep-going)")
            continue
        record["status"] = "failed"
        save_record(record_path, record, load_start)
        print(
            f"\nFAILED: {slug} ({problem}). Its output (last {TAIL_CHARS} characters):\n"
            f"{_tail(output)}\n\nThe run stopped here; the same command resumes it "
            f"(lessons already back are not rerun; --keep-going runs them all). "
            f"Record: {record_path}",
            file=sys.stderr,
        )
        print("\n" + summary_table(run_dir, record, slugs[: slugs.index(slug) + 1]))
        if vm is not None:
            print(delete_hint(vm))
        return 1
    record["status"] = "failed" if failures else "passed"
    save_record(record_path, record, load_start)
    print("\n" + summary_table(run_dir, record, slugs))
    code = 0
    if failures:
        print(
            f"\n{len(failures)} of {len(todo)} lesson(s) run did not pass: {', '.join(failures)}."
            f" Their output is in {record_path}; the same command reruns only them"
            + (" (without --one-process: each in its own process, as a learner runs it)."
               if options.one_process else "."),
            file=sys.stderr,
        )  # fmt: skip
        code = 1
    else:
        print(f"all {len(slugs)} lesson(s) back in {run_dir} (record: {record_path})")
    if options.record:
        code = max(code, write_course_record(run_dir))
    if vm is not None and options.frameworks:
        return max(code, run_frameworks(options))
    if vm is not None:
        print(delete_hint(vm))
    return code


def write_course_record(run_dir: pathlib.Path) -> int:
    """``--record``: the run folder as the tpu_course record (course_record.py); 0 or 2."""
    from tpu_scripts import course_record

    try:
        paths = course_record.record_runs([run_dir])
    except (course_record.Refused, records.BusyMachine) as exc:
        print(f"error: no course record written: {exc}", file=sys.stderr)
        return 2
    print("\n".join(f"course record: {path}" for path in paths))
    return 0
