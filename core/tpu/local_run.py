"""The local half of taking a lesson to a TPU: export an app as a headless script and run it.

``export_and_run`` exports with the same command the TPU workflow uses
(``cloud_tpu.export_command``) into a temporary folder, then runs the script's ``--help`` and a
real run at once; the export and its --help are kept per process, keyed by what they read, so
the same app run again with other flags runs only the script. ``unknown_flags`` names the
options that --help never mentions before a TPU run is paid for.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from core import runtime
from core.tpu import cloud_tpu


def unknown_flags(script_flags: Sequence[str], help_text: str) -> list[str]:
    """Options in ``script_flags`` that ``help_text`` (a script's --help) never mentions.

    A lesson script refuses such options (core.lab.Flags.parse: exit 2); this names them
    before a run is paid for.
    """
    options = [flag.split("=", 1)[0] for flag in script_flags if flag.startswith("--")]
    known = set(re.findall(r"--[A-Za-z0-9][-A-Za-z0-9_]*", help_text))
    return [option for option in options if option not in known]


def previous_lesson_app(
    apps_dir: str | os.PathLike, preferred: Sequence[str] = ("virtual_devices", "arrays_devices")
) -> pathlib.Path:
    """The first of ``preferred`` apps that exists in ``apps_dir`` (the lesson to take to a TPU)."""
    for slug in preferred:
        path = pathlib.Path(apps_dir) / f"{slug}.py"
        if path.is_file():
            return path
    raise FileNotFoundError(f"none of {', '.join(preferred)} is in {apps_dir}")


@dataclasses.dataclass(frozen=True)
class ProcessResult:
    """One finished subprocess: what ran, its exit code (None: timed out), output, seconds."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def printed_pass(self) -> bool:
        """True when a line of stdout starts with PASS and none with FAIL (lab.check_badge)."""
        lines = self.stdout.splitlines()
        return any(line.startswith("PASS") for line in lines) and not any(
            line.startswith("FAIL") for line in lines
        )


def run_processes(
    argvs: Sequence[Sequence[str]],
    cwd: str | os.PathLike,
    timeout_s: float = 120,
    env: dict | None = None,
) -> list[ProcessResult]:
    """Run the commands at the same time (they are independent) and wait for all of them."""
    # runtime.child_env drops pytest's markers: a child that saw PYTEST_CURRENT_TEST would run in
    # marimo's "test" mode and ignore its flags (even --help). JAX_PLATFORMS=cpu: no TPU probe.
    env = runtime.child_env(JAX_PLATFORMS="cpu", **(env or {}))
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            list(argv), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for argv in argvs
    ]
    results = []
    for argv, proc in zip(argvs, procs, strict=True):
        remaining = max(1.0, timeout_s - (time.perf_counter() - started))
        try:
            out, err = proc.communicate(timeout=remaining)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            code, err = None, err + f"\n(timed out after {timeout_s:.0f} s)"
        results.append(ProcessResult(tuple(argv), code, out, err, time.perf_counter() - started))
    return results


@dataclasses.dataclass(frozen=True)
class ExportRun:
    """The export of an app and the two runs of its script (--help, then for real)."""

    export: ProcessResult
    help: ProcessResult | None  # None when the export failed
    run: ProcessResult | None
    script_name: str
    script_header: str  # the exported file's leading comment: origin, hash, flags

    @property
    def passed(self) -> bool:
        return self.export.ok and self.run is not None and self.run.ok and self.run.printed_pass


# export_key(...) -> (the export, its --help, the exported script's text), for this process:
# move_to_tpu's flags box runs the same export again with other flags (export and --help are
# 8 of its 14 CPU s per run). A failed export or --help is not kept.
_EXPORTS: dict[tuple[str, ...], tuple[ProcessResult, ProcessResult, str]] = {}


def export_key(app: str | os.PathLike, repo_root: str | os.PathLike) -> tuple[str, ...]:
    """What an export and its --help read: the app as named and its source, the repository
    root (the export runs there) and its exporter's source, and this interpreter."""
    root = pathlib.Path(repo_root).resolve()
    source = root / app if not pathlib.Path(app).is_absolute() else pathlib.Path(app)
    exporter = root / "tpu_scripts" / "export.py"  # what `python -m tpu_scripts` runs there

    def digest(path: pathlib.Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"

    return (str(app), digest(source), str(root), digest(exporter), sys.executable)


def export_and_run(
    app: str | os.PathLike,
    repo_root: str | os.PathLike,
    script_flags: Sequence[str] = (),
    timeout_s: float = 120,
    keep_dir: bool = False,
) -> ExportRun:
    """Export ``app`` with ``python -m tpu_scripts export`` into a fresh temporary folder, then
    run the script twice at once: ``--help`` and with ``script_flags``. An export of the same
    source done before in this process (``export_key``) is reused: its script is written into
    the folder and only the real run starts. The folder is removed afterwards unless
    ``keep_dir``.
    """
    app = pathlib.Path(app)
    if app.is_absolute() and app.resolve().is_relative_to(pathlib.Path(repo_root).resolve()):
        app = app.resolve().relative_to(pathlib.Path(repo_root).resolve())  # a shorter header
    out_dir = pathlib.Path(tempfile.mkdtemp(prefix="jax_tpu_lab_export_"))
    script = out_dir / f"{app.stem}_tpu.py"
    key = export_key(app, repo_root)
    real_argv = [sys.executable, script.name, *script_flags]
    try:
        if key in _EXPORTS:
            export, help_run, text = _EXPORTS[key]
            script.write_text(text, encoding="utf-8")
            (real_run,) = run_processes([real_argv], out_dir, timeout_s)
        else:
            (export,) = run_processes(
                [cloud_tpu.export_command(str(app), str(script), sys.executable)],
                repo_root,
                timeout_s,
            )
            if not (export.ok and script.is_file()):
                return ExportRun(export, None, None, script.name, "")
            text = script.read_text(encoding="utf-8")
            help_run, real_run = run_processes(
                [[sys.executable, script.name, "--help"], real_argv], out_dir, timeout_s
            )
            if help_run.ok:
                _EXPORTS[key] = (export, help_run, text)
        lines = text.splitlines()
        header = "\n".join(itertools.takewhile(lambda line: line.startswith("#"), lines))
        return ExportRun(export, help_run, real_run, script.name, header)
    finally:
        if not keep_dir:
            shutil.rmtree(out_dir, ignore_errors=True)
