"""Lessons that open warm: each app's kernel process forked from one that already imported
marimo, JAX, NumPy, pandas, Altair, Flax, Optax and the course's library.

`make lab` serves every app in its own process (pyproject.toml: isolate_apps), and marimo
starts each as a fresh interpreter that spends seconds of CPU importing the stack before the
lesson's first cell. Here one warm process imports it once, before JAX starts a backend or
any thread (forking is unsafe after either: the same check as the test suite's app runner),
and forks an app host per lesson. marimo itself is unchanged but for one thing: its app host
is started through core/lab/warm_kernel_shim.py (a launcher "plan", the hook marimo's own
sandbox mode uses), which hands the start-up arguments to the warm process.

What a forked kernel shares with a fresh one: marimo's app host code, run as marimo runs it,
with the shim's environment, working directory, stdout and stderr. What differs: modules come
imported (the same files, imported with the same environment), and ``sys.argv`` is set as
``python -m`` sets it. JAX_TPU_LAB_WARM_KERNELS=0 turns it off (fresh interpreters).

    server = warm_kernels.start()   # the warm process, importing
    warm_kernels.install(server)    # marimo's app hosts start through it from now on
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback

from core import runtime

ENV_SWITCH = "JAX_TPU_LAB_WARM_KERNELS"  # "0": every kernel starts in a fresh interpreter
SHIM = pathlib.Path(__file__).with_name("warm_kernel_shim.py")
APP_HOST_MODULE = "marimo._session.app_host.main"
# What nearly every lesson imports lazily during its first run, whatever its own imports (88
# to 105 of the apps each, `python -X importtime`): the MHLO dialect (JAX's first lowering),
# narwhals' pandas backend (Altair's first chart), the lab's comparison and records modules
# (the check cell) and markdown's toc extension (the first mo.md). The test suite's headless
# runner (tests/tools/app_runner.py) preloads them too; each is best-effort (import_first_run).
FIRST_RUN_IMPORTS = (
    "jaxlib.mlir.dialects.mhlo",
    "narwhals._pandas_like.namespace",
    "core.lab.comparison",
    "core.perf.records",
    "markdown.extensions.toc",
)
# What a lesson's kernel imports before its first cell, or soon after: paid once here.
PRELOAD = (
    "numpy",
    "pandas",
    "altair",
    "jax",
    "jax.numpy",
    "flax.nnx",
    "optax",
    "scipy.linalg",
    "zmq",
    "marimo",
    APP_HOST_MODULE,
    "marimo._output.formatters.formatters",
    "marimo._output.md",
    "core.lab",
    "core.numerics",
    # Every lesson's header reads its exercises' progress (core.lab.phase_line).
    "core.exercises.progress",
)
MAX_MESSAGE = 1 << 22  # a request carries the shim's environment: well under 4 MiB
POLL_S = 0.2  # how often the warm process reaps kernels and checks that its server lives
READY_TIMEOUT_S = 120  # its imports on a loaded 2-core machine, with margin


def import_first_run() -> None:
    """Import FIRST_RUN_IMPORTS, skipping any this install lacks (a library's private module
    may move between versions: a kernel then imports what it needs itself)."""
    import importlib

    for name in FIRST_RUN_IMPORTS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def fork_problem() -> str | None:
    """Why forking this process would be unsafe (threads, a started JAX backend), or None."""
    if threading.active_count() != 1:
        return f"{threading.active_count()} threads are running"
    if "jax" in sys.modules:
        from jax._src import xla_bridge

        if xla_bridge._backends:
            return "a JAX backend has started"
    return None


# ---- the warm process (python -m core.lab.warm_kernels SOCKET) -----------------------------


def freeze_imports() -> None:
    """Move every object the imports made to the collector's permanent generation, once,
    before the first fork (what Python's gc docs advise for a process that forks workers).

    A forked process's full collections walk every tracked object it inherited, about 300,000
    for this stack; frozen, they are skipped (their pages also stay shared with the parent).
    A lesson run forked from a frozen process: 0.15-0.3 CPU s less of 1.2-2.6 (tiny_mlp,
    attention; the collector's own timings, a warm compilation cache, this 2-core machine).
    """
    import gc

    gc.collect()  # what the imports left as garbage goes now, not into the permanent generation
    gc.freeze()


def _become_module(request: dict, fds: list[int], closing: list[socket.socket]) -> None:
    """In the forked child: become ``python -m MODULE`` with the shim's start-up arguments on
    stdin, its stdout and stderr, environment and working directory; never return."""
    code = 0
    try:
        for other in closing:
            other.close()
        read_end, write_end = os.pipe()
        os.write(write_end, request["arguments"].encode("utf-8"))  # a few KiB: fits the pipe
        os.close(write_end)
        for fd, target in ((read_end, 0), (fds[0], 1), (fds[1], 2)):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 (a fresh interpreter would print it and exit 1)
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _kill(pid: int) -> None:
    """Kill a kernel and what it started (it leads its own session: marimo's app host
    calls setsid first), and reap it."""
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.waitpid(pid, 0)  # SIGKILL: gone in milliseconds; no zombie left behind
    except ChildProcessError:
        pass


def serve(socket_path: str) -> int:
    """Import the stack, then fork an app host for each shim that connects (``python -m
    core.lab.warm_kernels SOCKET [...]``: what follows the socket only names the process)."""
    import importlib

    parent = os.getppid()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the server's stop: kill the kernels
    for name in PRELOAD:
        importlib.import_module(name)
    import_first_run()
    freeze_imports()
    problem = fork_problem()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(socket_path)
    listener.listen(16)
    print(json.dumps({"ready": problem is None, "fork_problem": problem}), flush=True)
    if problem:
        return 1  # the shims find no socket and start their kernels cold
    kernels: dict[socket.socket, int] = {}  # each shim's connection -> its kernel's pid
    try:
        while os.getppid() == parent:  # the server is gone: so are its kernels
            readable, _, _ = select.select([listener, *kernels], [], [], POLL_S)
            for ready in readable:
                if ready is listener:
                    _start_kernel(listener, kernels)
                elif not ready.recv(1):  # the shim ended (stopped or killed)
                    _kill(kernels.pop(ready))
                    ready.close()
            _reap(kernels)
    finally:
        for pid in kernels.values():
            _kill(pid)
    return 0


def _start_kernel(listener: socket.socket, kernels: dict[socket.socket, int]) -> None:
    connection, _ = listener.accept()
    try:
        message, fds, _flags, _address = socket.recv_fds(connection, MAX_MESSAGE, 2)
        request = json.loads(message)
    except (OSError, ValueError):
        connection.close()
        return
    if len(fds) != 2 or not isinstance(request.get("module"), str) or fork_problem():
        for fd in fds:
            os.close(fd)
        connection.close()  # the shim starts its kernel cold
        return
    pid = os.fork()
    if pid == 0:
        _become_module(request, fds, [listener, connection, *kernels])
    for fd in fds:
        os.close(fd)
    connection.sendall(json.dumps({"pid": pid}).encode("utf-8"))
    kernels[connection] = pid


def _reap(kernels: dict[socket.socket, int]) -> None:
    """Tell each shim whose kernel exited its exit code."""
    for connection, pid in list(kernels.items()):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            try:
                connection.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
            except OSError:
                pass
            connection.close()
            del kernels[connection]


# ---- the server's side -------------------------------------------------------------------


@dataclasses.dataclass
class WarmServer:
    process: subprocess.Popen
    socket_path: str
    ready: threading.Event = dataclasses.field(default_factory=threading.Event)
    # Set once the warm process said whether it can fork, or ended without saying: no lesson
    # waits for a process that will never be ready.
    settled: threading.Event = dataclasses.field(default_factory=threading.Event)

    def launcher(self) -> tuple[str, ...]:
        """The command marimo runs for an app host: the shim, with the module's name in its
        command line (so a process list still shows each kernel as marimo's app host)."""
        return (sys.executable, "-I", "-S", str(SHIM), self.socket_path, sys.executable,
                APP_HOST_MODULE)  # fmt: skip

    def usable(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """Whether kernels can be forked now: waits for the imports (a lesson opened in the
        first seconds waits for them rather than importing them again)."""
        self.settled.wait(timeout_s)
        return self.ready.is_set() and self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(os.path.dirname(self.socket_path), ignore_errors=True)


def start(env: dict[str, str] | None = None) -> WarmServer:
    """Start the warm process; it imports the stack while the server starts. Its ``ready``
    is set once it can fork; when it cannot (a thread, a started backend), it says why on
    stderr and every kernel starts cold."""
    folder = tempfile.mkdtemp(prefix="jax-tpu-lab-warm-")
    socket_path = os.path.join(folder, "kernels.sock")
    process = subprocess.Popen(
        # APP_HOST_MODULE in its command line: a process list shows it, and each kernel forked
        # from it, as marimo's app host (the browser tests find every kernel of a tab by it).
        [sys.executable, "-m", "core.lab.warm_kernels", socket_path, APP_HOST_MODULE],
        stdout=subprocess.PIPE,
        env=runtime.child_env() if env is None else env,
        text=True,
    )
    server = WarmServer(process, socket_path)
    threading.Thread(target=watch_hello, args=(server,), daemon=True).start()
    return server


def watch_hello(server: WarmServer) -> None:
    """Read the warm process's first line: ready, or why not (then lessons start cold)."""
    try:
        hello = json.loads(server.process.stdout.readline() or "{}")
    except ValueError:
        hello = {}
    if hello.get("ready"):
        server.ready.set()
    else:
        why = hello.get("fork_problem") or "it ended before it was ready"
        print(f"lessons start cold: the warm kernel process cannot fork ({why})", file=sys.stderr)
    server.settled.set()


def install(server: WarmServer) -> None:
    """Start marimo's app hosts through the shim: a launcher plan on every AppHost whose
    pool gave it none (marimo's sandbox mode gives its own, and keeps it)."""
    from marimo._environments.environment import ProcessPlan
    from marimo._session.app_host import host

    original_start = host.AppHost.start
    if getattr(original_start, "warm_kernels", False):
        return

    def start_warm(self) -> None:
        if self._plan is None and server.usable():
            self._plan = ProcessPlan(argv=server.launcher(), env=runtime.child_env())
        original_start(self)

    start_warm.warm_kernels = True
    host.AppHost.start = start_warm


def enabled(environ=os.environ) -> bool:
    return environ.get(ENV_SWITCH) != "0" and hasattr(os, "fork") and sys.platform != "win32"


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
