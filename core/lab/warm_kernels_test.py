"""The warm kernel process (core/lab/warm_kernels.py) and its shim, with a stand-in module
for marimo's app host (tests/fixtures/warm_kernels/warm_probe.py): arguments on stdin,
stdout/stderr, environment, exit codes, a killed shim's kernel, the cold fallback."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from core import curriculum, runtime
from core.lab import warm_kernels

PROBE_DIR = curriculum.REPO_ROOT / "tests" / "fixtures" / "warm_kernels"
EXIT_WAIT_S = 30  # a killed process is gone within ms; a loaded 2-core CI machine, margin


@pytest.fixture(scope="module")
def warm():
    env = runtime.child_env(PYTHONPATH=runtime.python_path(PROBE_DIR, curriculum.REPO_ROOT))
    server = warm_kernels.start(env)
    assert server.usable(), "the warm process came up and can fork"
    yield server
    server.stop()


def shim(socket_path: str, arguments: dict, **env) -> subprocess.Popen:
    """The shim as marimo starts it (the launcher's argv), for the stand-in module."""
    argv = [sys.executable, "-I", "-S", str(warm_kernels.SHIM), socket_path, sys.executable,
            "warm_probe"]  # fmt: skip
    process = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(PROBE_DIR),
        env=runtime.child_env(
            PYTHONPATH=runtime.python_path(PROBE_DIR, curriculum.REPO_ROOT), **env
        ),
    )
    process.stdin.write(json.dumps(arguments))
    process.stdin.close()
    return process


def test_a_forked_kernel_is_the_module_run_with_the_shims_stdin_streams_and_environment(warm):
    process = shim(warm.socket_path, {"exit": 3, "hello": "there"}, WARM_PROBE_MARKER="m1")
    said = json.loads(process.stdout.readline())
    assert process.wait(timeout=EXIT_WAIT_S) == 3  # the module's exit code, through the shim
    assert said["arguments"] == {"exit": 3, "hello": "there"}
    assert said["ppid"] == warm.process.pid, "forked by the warm process, not started cold"
    assert said["jax_imported"], "the stack came imported"
    assert said["argv0"].endswith("warm_probe.py"), "sys.argv as `python -m` sets it"
    assert said["cwd"] == str(PROBE_DIR) and said["marker"] == "m1"
    # The imports came frozen: the kernel's full collections skip them (JAX alone leaves
    # well over 10,000 tracked objects).
    assert said["frozen_objects"] > 10_000, said["frozen_objects"]
    assert process.stderr.read() == "to stderr\n"


def test_a_killed_shim_takes_its_kernel_with_it(warm):
    process = shim(warm.socket_path, {"wait": True})
    kernel = json.loads(process.stdout.readline())["pid"]
    assert psutil.pid_exists(kernel)
    os.kill(process.pid, signal.SIGKILL)  # marimo's shutdown kills the app host's process
    process.wait(timeout=EXIT_WAIT_S)
    deadline = time.monotonic() + EXIT_WAIT_S
    while psutil.pid_exists(kernel) and time.monotonic() < deadline:
        time.sleep(0.1)  # waiting for the warm process to kill it, not timing anything
    assert not psutil.pid_exists(kernel)


def test_without_the_warm_process_the_shim_starts_the_module_cold(tmp_path):
    process = shim(str(tmp_path / "no.sock"), {"exit": 0, "cold": True})
    said = json.loads(process.stdout.readline())
    assert process.wait(timeout=120) == 0
    assert said["arguments"] == {"exit": 0, "cold": True}
    assert said["pid"] == process.pid, "the shim became the module (execv)"
    assert not said["jax_imported"]


def test_install_routes_marimos_app_hosts_through_the_shim(warm, monkeypatch):
    from marimo._session.app_host import host

    started = []
    monkeypatch.setattr(host.AppHost, "start", lambda self: started.append(self._plan))
    warm_kernels.install(warm)
    app_host = host.AppHost.__new__(host.AppHost)
    app_host._plan = None
    host.AppHost.start(app_host)
    assert started[0].argv == warm.launcher()
    assert started[0].argv[-1] == warm_kernels.APP_HOST_MODULE
    sandboxed = host.AppHost.__new__(host.AppHost)
    sandboxed._plan = "a sandbox plan"
    host.AppHost.start(sandboxed)
    assert started[1] == "a sandbox plan", "a plan marimo made is kept"


def test_the_switch_turns_it_off():
    assert warm_kernels.enabled({}) and not warm_kernels.enabled({warm_kernels.ENV_SWITCH: "0"})


def test_a_warm_process_that_ends_unready_sends_lessons_cold_without_waiting(capsys):
    """No lesson waits out READY_TIMEOUT_S for a warm process that died before its hello."""
    died = subprocess.Popen(
        [sys.executable, "-c", "raise SystemExit(1)"], stdout=subprocess.PIPE, text=True
    )
    server = warm_kernels.WarmServer(died, "/nonexistent/kernels.sock")
    warm_kernels.watch_hello(server)
    assert server.settled.is_set() and not server.usable(timeout_s=0)
    assert "lessons start cold" in capsys.readouterr().err
    died.wait(timeout=EXIT_WAIT_S)


def test_first_run_imports_exist_here_and_a_missing_one_is_skipped(monkeypatch):
    # Every name must import in this install: a private module that moved in a library update
    # would otherwise stop being preloaded without anyone noticing.
    for name in warm_kernels.FIRST_RUN_IMPORTS:
        importlib.import_module(name)  # an ImportError fails the test with the name
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    monkeypatch.setattr(warm_kernels, "FIRST_RUN_IMPORTS", ("no_such_module_jax_lab", "colorsys"))
    warm_kernels.import_first_run()  # the missing one is skipped, the next still imported
    assert "colorsys" in sys.modules
