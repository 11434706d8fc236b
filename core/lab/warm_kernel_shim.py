"""The process marimo starts for a lesson's kernel when the lab forks kernels warm.

Standard library only, run by path with ``python -I -S`` (no site-packages to import): marimo
starts it where it would start ``python -m marimo._session.app_host.main``, writes the app
host's start-up arguments to its stdin, and keeps it as the app host's process (alive while
the kernel is, killed to stop it). The shim hands its stdin's arguments, its stdout/stderr and
its environment to the warm process (core/lab/warm_kernels.py) over a Unix socket; the warm
process forks the real app host, already holding marimo, JAX, NumPy and the course's library,
and the shim waits for its exit code. When the shim dies, the warm process kills its kernel.

Where the warm process cannot be reached, the shim becomes the app host marimo would have
started (``os.execv``), with the arguments on a new stdin: the lesson opens cold, never fails.

    python -I -S warm_kernel_shim.py SOCKET PYTHON MODULE    (MODULE: marimo._session.app_host.main)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

MAX_MESSAGE = 1 << 20  # the app host's start-up arguments: addresses and a path, a few KiB


def _cold_start(arguments: bytes, python: str, module: str) -> None:
    """Become ``python -m MODULE`` (marimo's app host) with ``arguments`` on stdin."""
    read_end, write_end = os.pipe()
    os.write(write_end, arguments)  # a few KiB: fits the pipe's buffer
    os.close(write_end)
    os.dup2(read_end, 0)
    os.close(read_end)
    os.execv(python, [python, "-m", module])


def main(argv: list[str]) -> int:
    socket_path, python, module = argv
    os.setsid()  # marimo kills this process's group to stop the kernel: never the server's
    arguments = sys.stdin.buffer.read()
    request = {
        "arguments": arguments.decode("utf-8"),
        "module": module,
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "shim_pid": os.getpid(),
    }
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        connection.connect(socket_path)
        socket.send_fds(connection, [json.dumps(request).encode("utf-8")], [1, 2])
        started = json.loads(connection.recv(MAX_MESSAGE) or b"{}")
    except (OSError, ValueError):
        started = {}
    if "pid" not in started:
        connection.close()
        _cold_start(arguments, python, module)
    # A stop (SIGTERM, SIGINT, SIGHUP) ends the shim; the warm process sees its socket close
    # and kills the kernel. SIGKILL, which cannot be caught, closes the socket just the same.
    for stop in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(stop, lambda number, _frame: os._exit(128 + number))
    finished = connection.recv(MAX_MESSAGE)
    try:
        return int(json.loads(finished)["exit"])
    except (ValueError, KeyError, TypeError):
        return 1  # the warm process went away: the kernel went with it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
