"""Exported lessons run one after another in this one Python process (``course-run --local
--one-process``).

Each program that opens a TPU pays for it at its start (libtpu's start and the imports:
6-15 s on a v5e host), more than many lessons' own work, so a whole
course run lesson by lesson in its own process spends much of the chip's time starting. Here the
process, its imports and the chip are opened once.

The price is isolation: what a lesson changes in the process could reach the next lesson, and
a change such as ``jax_default_matmul_precision = "highest"`` left behind would let a later
float32 check pass that fails on its own. So around each lesson the process's state that
lessons change is saved and put back: every ``jax.config`` value (those that can still change),
``os.environ``, ``sys.argv``, ``sys.path``, the working directory and NumPy's error state;
``leaks`` names what a lesson left changed. A lesson that does not pass here is run again in
its own process by course-run, whose record says which process gave each result
(``LessonRecord.process``).

A timeout is a SIGALRM that raises in the lesson's Python code: a lesson stuck inside one long
XLA call is stopped when the call returns (the run's outer ``timeout`` is the backstop).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import pathlib
import runpy
import signal
import sys
import traceback

SHARED = "shared"  # the result came from this shared process
OWN = "own"  # from the lesson's own process (course-run's default, and the rerun)


class LessonTimeout(Exception):
    """The lesson ran past its time in the shared process."""


@dataclasses.dataclass
class ProcessState:
    """What a lesson may change in the process it runs in, as it was before the lesson."""

    jax_config: dict
    environ: tuple[tuple[str, str], ...]  # a snapshot to put back, not a child's environment
    argv: list
    path: list
    cwd: str
    numpy_errors: dict

    @classmethod
    def take(cls) -> ProcessState:
        import jax
        import numpy as np

        return cls(
            jax_config=dict(jax.config.values),
            environ=tuple(os.environ.items()),
            argv=list(sys.argv),
            path=list(sys.path),
            cwd=os.getcwd(),
            numpy_errors=np.geterr(),
        )

    def restore(self) -> list[str]:
        """Put the saved state back; returns what the lesson had left changed ("jax_x: a -> b")."""
        import jax
        import numpy as np

        left = []
        for name, before in self.jax_config.items():
            after = jax.config.values.get(name)
            if after == before:
                continue
            try:
                jax.config.update(name, before)
            except Exception as error:  # some options are fixed once the backend started
                left.append(f"{name}: {before!r} -> {after!r} (could not be put back: {error})")
                continue
            left.append(f"{name}: {before!r} -> {after!r}")
        before = dict(self.environ)
        changed = {k for k in set(before) | set(os.environ)
                   if before.get(k) != os.environ.get(k)}  # fmt: skip
        left += [f"${name}" for name in sorted(changed)]
        os.environ.clear()
        os.environ.update(before)
        sys.argv[:] = self.argv
        sys.path[:] = self.path
        os.chdir(self.cwd)
        np.seterr(**self.numpy_errors)
        return left


def prepare() -> None:
    """The process-wide settings every lesson's setup makes (``runtime.use_cpu_devices``: the
    virtual CPU devices, fixed once the backend starts), made once before the first lesson."""
    from core import runtime

    runtime.use_cpu_devices()


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    if not seconds:
        yield
        return

    def _stop(signum, frame):
        raise LessonTimeout(f"timed out after {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, _stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _exit_code(error: SystemExit) -> tuple[int, str]:
    """sys.exit's argument as an exit code and what the interpreter would print for it."""
    if error.code is None:
        return 0, ""
    if isinstance(error.code, int):
        return error.code, ""
    return 1, f"{error.code}\n"


def run_script(
    script: pathlib.Path, args: list[str], cwd: pathlib.Path, timeout_s: float | None
) -> tuple[int | None, str]:
    """Run ``script`` as ``__main__`` with ``args`` in this process, in ``cwd``: (exit code or
    None on timeout, its output). The process's state is put back afterwards; the output ends
    with a line naming what the script had left changed, if anything."""
    state = ProcessState.take()
    output = io.StringIO()
    code: int | None = 0
    try:
        cwd.mkdir(parents=True, exist_ok=True)
        os.chdir(cwd)
        sys.argv[:] = [str(script), *args]
        sys.path.insert(0, str(script.parent))  # as `python script.py` puts it first
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            with _time_limit(timeout_s):
                runpy.run_path(str(script), run_name="__main__")
    except SystemExit as error:
        code, said = _exit_code(error)
        output.write(said)
    except LessonTimeout as error:
        code = None
        output.write(f"({error})\n")
    except Exception:  # the lesson's own failure: its traceback is its output, as in a process
        code = 1
        output.write(traceback.format_exc())
    finally:
        left = state.restore()
    if left:
        output.write(f"(one process: the lesson left changed, now put back: {', '.join(left)})\n")
    return code, output.getvalue()
