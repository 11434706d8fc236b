"""Headless app runs from a pre-imported Python: `python apps/NAME.py FLAGS` without the imports.

The suite runs about 190 lesson apps as scripts (every app headless, the refusals, the claims that
once failed). Each fresh interpreter spent ~2 s of CPU (4-5 s on a slower machine) importing
marimo, JAX, NumPy, pandas, Altair, Flax and core.lab before the app's first line. Here one
server process per xdist worker imports them once and forks a child per run; the child runs the
app file exactly as `python FILE FLAGS` does: ``__main__``, ``sys.argv`` and ``sys.path[0]``
as the interpreter sets them, its own stdout/stderr files, its own process group, and the
normal interpreter shutdown (atexit, non-daemon threads) when it ends, with one difference:
the collector is frozen after the app's atexit handlers, so cyclic garbage goes to the OS.

Forking is safe only while the server holds no threads and no JAX backend (XLA starts threads
when its backend starts); the server checks both after its imports and, if either is found,
every run falls back to a fresh interpreter, as it does for a run whose environment differs
from the server's.

    result = app_runner.run([app_path, "--seed", "3"], env=env, cwd=root, timeout=300)
    result.returncode, result.stdout, result.stderr   # a subprocess.CompletedProcess

Protocol (one JSON line each way per run, on the server's stdin/stdout):
    {"argv": [...], "cwd": ..., "stdout": PATH, "stderr": PATH, "timeout": S} -> {"returncode": N}
A run past its timeout has its process group killed and answers {"returncode": ..., "timed_out":
true}; the client raises subprocess.TimeoutExpired as subprocess.run would.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time

# What nearly every app imports before its first cell: paid once per server, not per run.
PRELOAD = (
    "numpy",
    "pandas",
    "altair",
    "marimo",
    "jax",
    "jax.numpy",
    "flax.nnx",
    "optax",
    "core.lab",
    "core.numerics",
    # Every lesson's header reads its exercises' progress (core.lab.phase_line).
    "core.exercises.progress",
    # What marimo's script runner imports in every run, after the app's own imports: its
    # matplotlib backend (pyplot, whenever matplotlib is installed), its output formatters and
    # its markdown renderer (markdown, pymdownx).
    "marimo._output.mpl",
    "marimo._output.formatters.formatters",
    "marimo._output.md",
    # Imported by a fifth of the apps through their lesson code.
    "scipy.linalg",
)
_SERVERS: dict[tuple, subprocess.Popen] = {}
_LOCK = threading.Lock()


# ---- the server (python tests/tools/app_runner.py) ----------------------------------------


def _fork_problem() -> str | None:
    """Why forking this process would be unsafe (threads, a started JAX backend), or None:
    the lab's warm kernels ask the same (core/lab/warm_kernels.py)."""
    from core.lab import warm_kernels

    return warm_kernels.fork_problem()


def _child(request: dict) -> None:
    """In the forked child: become `python ARGV...` and never return (SystemExit ends it)."""
    import runpy
    import traceback

    os.setpgid(0, 0)  # its own process group, so a timeout kills what it started too
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(request["cwd"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    # At exit, after every handler the app registers (atexit runs last-in first-out), move
    # every object to the collector's permanent generation: the interpreter's last
    # collections then skip the JAX/Flax/pandas objects a run leaves, 0.7-1.2 CPU s of a
    # lesson's 3-5 (attention, tiny_mlp; forked as here). Objects are still freed by their
    # reference counts as modules are torn down; only cyclic garbage is left to the OS.
    atexit.register(gc.freeze)
    script = os.path.abspath(request["argv"][0])
    sys.argv = [request["argv"][0], *request["argv"][1:]]
    sys.path[0] = os.path.dirname(script)  # as `python FILE` sets it
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # noqa: BLE001 (the interpreter would print it and exit 1)
        traceback.print_exc()
        code = 1
    raise SystemExit(code)  # normal shutdown: atexit, non-daemon threads, flushed streams


def _wait(pid: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status)}
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _done, status = os.waitpid(pid, 0)
            return {"returncode": os.waitstatus_to_exitcode(status), "timed_out": True}
        time.sleep(0.05)  # polling a child's exit, not timing anything


def serve() -> int:
    import importlib

    from core.lab import warm_kernels

    for name in PRELOAD:
        importlib.import_module(name)
    warm_kernels.import_first_run()

    warm_kernels.freeze_imports()  # each run's collections skip what the imports made
    problem = _fork_problem()
    reply = sys.stdout
    reply.write(json.dumps({"ready": True, "fork_problem": problem}) + "\n")
    reply.flush()
    for line in sys.stdin:
        request = json.loads(line)
        problem = problem or _fork_problem()
        if problem:
            answer = {"fork_problem": problem}
        else:
            pid = os.fork()
            if pid == 0:
                _child(request)
            answer = _wait(pid, float(request["timeout"]))
        reply.write(json.dumps(answer) + "\n")
        reply.flush()
    return 0


# ---- the client (used by the tests) -------------------------------------------------------


def _server(env: dict[str, str], cwd: str) -> subprocess.Popen | None:
    key = (tuple(sorted(env.items())), cwd)
    with _LOCK:
        if key in _SERVERS:
            server = _SERVERS[key]
            if server is None:  # this server refused to fork: fresh interpreters from now on
                return None
            if server.poll() is None:
                return server
        server = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            cwd=cwd,
            env=env,
        )
        hello = json.loads(server.stdout.readline() or "{}")
        if not hello.get("ready") or hello.get("fork_problem"):
            server.kill()
            server.wait()
            _SERVERS[key] = None
            return None
        _SERVERS[key] = server
        return server


def _close_all() -> None:
    for server in _SERVERS.values():
        if server is not None and server.poll() is None:
            server.stdin.close()
            server.wait(timeout=30)


atexit.register(_close_all)


def _fresh(argv: list[str], env, cwd: str, timeout: float) -> subprocess.CompletedProcess:
    """The run in a fresh interpreter (one-off, or the server refused to fork)."""
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


def run(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str | os.PathLike,
    timeout: float,
    one_off: bool = False,
) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, *argv], capture_output=True, text=True, ...)``, run
    by a forked child of a pre-imported server (a fresh interpreter if forking is unsafe).

    ``one_off``: the caller uses this environment for this run alone, so it runs in a fresh
    interpreter: a server per environment pays its imports plus a fork, 0.5-1.3 CPU s more
    than one run (tests/test_host_lacks.py's made-up hosts, measured with RUSAGE_CHILDREN)."""
    argv = [str(a) for a in argv]
    cwd = str(cwd)
    if one_off:
        return _fresh(argv, env, cwd, timeout)
    server = _server(dict(env), cwd)
    if server is None:
        return _fresh(argv, env, cwd, timeout)
    with tempfile.TemporaryDirectory(prefix="app-run-") as folder:
        out, err = pathlib.Path(folder, "stdout"), pathlib.Path(folder, "stderr")
        request = {"argv": argv, "cwd": cwd, "stdout": str(out), "stderr": str(err)}
        request["timeout"] = timeout
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        answer = json.loads(server.stdout.readline())
        stdout = out.read_text(errors="replace") if out.exists() else ""
        stderr = err.read_text(errors="replace") if err.exists() else ""
    if "fork_problem" in answer:
        return _fresh(argv, env, cwd, timeout)
    if answer.get("timed_out"):
        raise subprocess.TimeoutExpired([sys.executable, *argv], timeout, stdout, stderr)
    return subprocess.CompletedProcess(
        [sys.executable, *argv], answer["returncode"], stdout, stderr
    )


if __name__ == "__main__":
    sys.exit(serve())
