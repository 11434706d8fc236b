"""Faults injected into a real training job (core.workload.job), for the recovery lessons.

``--fault KIND@STEP`` on the job's command line, repeatable; KIND is one of KINDS. Each is
real, not a simulated outcome:

- ``hang@S``: ``before_step(S)`` blocks the training thread forever (a stalled collective, a
  wedged input pipeline). The process stays alive and its heartbeat thread keeps writing: only
  the missing steps show the stall. Something outside has to kill it.
- ``nan@S``: step S's loss is reported as NaN (what an overflow or a bad batch produces); the
  job refuses to save a non-finite state and exits.
- ``disk-full@S``: the save at step S fails with a real ``OSError(ENOSPC)`` from the kernel.
  How: when the plan has a disk-full fault, ``parse`` moves the job process into a private
  mount namespace (``unshare(CLONE_NEWNS)``, while the process has no worker threads yet, so
  every thread created later shares it); ``before_save(S)`` mounts a one-page tmpfs over the
  checkpoint directory **in that namespace only** and fills it. Orbax's write then gets ENOSPC
  from the file system. The mount is invisible to every other process and vanishes with the
  job, so the real checkpoint directory (and its committed steps) is untouched. This needs
  Linux and CAP_SYS_ADMIN (root in a container); ``disk_full_supported()`` says whether this
  machine allows it, and ``parse`` refuses the fault with a clear message where it does not.

SIGKILL and SIGTERM are sent from outside (core.workload.recovery's supervisor), not planned
here: a process cannot be trusted to kill itself the way the OS or a spot reclaim does.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import os
import pathlib
import sys
import threading
from collections.abc import Sequence

KINDS = ("nan", "hang", "disk-full")
EXTERNAL = ("sigkill", "sigterm")  # sent by the supervisor, not by the job
TINY_FS_BYTES = 4096  # one page: the smallest tmpfs; filled before the save starts
FILLER = "filler"

_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_private_namespace = False


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _enter_private_mount_namespace() -> None:
    """This thread (and every thread it starts from now on) gets its own mount table."""
    global _private_namespace
    if _private_namespace:
        return
    libc = _libc()
    _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    # Mounts made from here on must not propagate back to the machine's namespace.
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    _private_namespace = True


def _mount_tiny_fs(directory: pathlib.Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    options = f"size={TINY_FS_BYTES},mode=0755".encode()
    _check(
        _libc().mount(b"tmpfs", os.fsencode(directory), b"tmpfs", 0, options),
        f"mount tmpfs on {directory}",
    )
    try:  # fill it: the next write anywhere in it is ENOSPC
        with open(directory / FILLER, "wb") as f:
            while True:
                f.write(b"\0" * TINY_FS_BYTES)
                f.flush()
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise


_support: bool | None = None


def disk_full_supported() -> bool:
    """Whether this machine lets a process mount a tmpfs in a private mount namespace.

    Probed once in a short-lived child process, so this process's mount table is untouched.
    """
    global _support
    if _support is None:
        import subprocess
        import tempfile

        from core import runtime

        probe = (
            "import sys, pathlib; from core.workload import faults;"
            "faults._enter_private_mount_namespace();"
            "faults._mount_tiny_fs(pathlib.Path(sys.argv[1]))"
        )
        root = pathlib.Path(__file__).resolve().parents[2]
        # The parent owns the probe's folder: the child's mount dies with it, the folder not.
        with tempfile.TemporaryDirectory(prefix="disk-full-probe-") as folder:
            result = subprocess.run(
                [sys.executable, "-c", probe, folder],
                cwd=root,
                capture_output=True,
                timeout=60,
                env=runtime.child_env(JAX_PLATFORMS="cpu"),  # a mount probe: never the TPU
            )
        _support = sys.platform == "linux" and result.returncode == 0
    return _support


@dataclasses.dataclass(frozen=True)
class FaultPlan:
    faults: tuple[tuple[str, int], ...] = ()  # (kind, step)

    @classmethod
    def parse(cls, specs: Sequence[str]) -> FaultPlan:
        """``["nan@12", "hang@20"]`` -> a plan; a bad spec is a ValueError naming it.

        A plan with "disk-full" moves this process into a private mount namespace (see the
        module docstring); where that is not allowed the spec is refused here.
        """
        faults = []
        for spec in specs:
            kind, _, step = spec.partition("@")
            if kind not in KINDS or not step.isdigit() or int(step) < 1:
                raise ValueError(
                    f"--fault {spec!r}: expected KIND@STEP with KIND one of {', '.join(KINDS)} "
                    "and STEP >= 1"
                )
            faults.append((kind, int(step)))
        if any(kind == "disk-full" for kind, _ in faults):
            try:
                _enter_private_mount_namespace()
            except OSError as exc:
                raise ValueError(
                    "--fault disk-full needs Linux and CAP_SYS_ADMIN (a private mount namespace "
                    f"for a one-page tmpfs): {exc}"
                ) from None
        return cls(tuple(faults))

    def at(self, kind: str, step: int) -> bool:
        return (kind, step) in self.faults

    def before_step(self, step: int) -> None:
        """Called before step ``step``'s update ("hang" never returns: the job stalls)."""
        if self.at("hang", step):
            threading.Event().wait()  # nobody sets it: a real stall, until a kill

    def loss(self, step: int, loss: float) -> float:
        """Called with step ``step``'s loss; "nan" makes it non-finite."""
        return float("nan") if self.at("nan", step) else loss

    def before_save(self, step: int, checkpoint_dir: str | os.PathLike) -> None:
        """Called before step ``step``'s checkpoint save ("disk-full" makes the save fail)."""
        if self.at("disk-full", step):
            _mount_tiny_fs(pathlib.Path(checkpoint_dir))
