"""core.runtime with a faked TPU state: where float64 runs, what a child process may open."""

from __future__ import annotations

import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import runtime


def test_float64_on_a_cpu_stays_on_the_default_device():
    assert runtime.float64_device("cpu") is None
    assert runtime.float64_note("cpu") == ""
    with runtime.enable_float64("cpu") as device:
        assert device is None
        assert jnp.asarray(np.ones(2)).dtype == jnp.float64
    assert jnp.asarray(np.ones(2)).dtype == jnp.float32  # the process default is untouched


def test_float64_on_a_tpu_runs_on_the_host_cpu(monkeypatch):
    """Kind 2 of issue 37: a float64 reference asked of a TPU raised UNIMPLEMENTED. With the
    default backend faked to "tpu", float64 work is placed on a CPU device and said so."""
    monkeypatch.setattr(runtime, "_default_backend", lambda: "tpu")
    real_devices = jax.devices
    # The host CPU handed out is not JAX's default device here: placement must be explicit.
    monkeypatch.setattr(jax, "devices", lambda backend=None: real_devices(backend)[3:])
    device = runtime.float64_device()
    assert device.platform == "cpu" and device != jax.local_devices()[0]
    assert runtime.float64_note() == " (float64 on the host CPU: a TPU has no float64)"
    with runtime.enable_float64() as placed:
        assert placed == device
        x = jnp.asarray(np.arange(3.0))
        y = jax.jit(lambda v: jnp.linalg.solve(jnp.eye(3) * 2.0, v))(x)
        assert x.dtype == jnp.float64 and y.dtype == jnp.float64
        assert {d.platform for d in y.devices()} == {"cpu"}
        assert y.devices() == {device}
    np.testing.assert_array_equal(np.asarray(y), np.arange(3.0) / 2)


def test_float64_without_a_cpu_backend_says_how_to_get_one(monkeypatch):
    def no_cpu(backend=None):
        raise RuntimeError("Unknown backend cpu")

    monkeypatch.setattr(jax, "devices", no_cpu)
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    with pytest.raises(RuntimeError, match="tpu,cpu"):
        runtime.float64_device("tpu")


# --- one process per chip --------------------------------------------------------------------


def test_a_child_of_a_process_holding_the_tpu_runs_on_the_cpu(monkeypatch):
    """Kind 3 of issue 37: tpu_receipt started `python -m tpu_scripts receipt` while its own
    process held the chip; the child got libtpu's multi-process lockfile error. A child started
    while this process holds a TPU gets JAX_PLATFORMS=cpu, and a child that asks for the TPU
    by name is refused."""
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.setattr(runtime, "_started_platforms", lambda: {"tpu", "cpu"})
    assert runtime.holds_tpu()
    assert runtime.child_env()["JAX_PLATFORMS"] == "cpu"
    assert runtime.child_env(JAX_PLATFORMS="cpu")["JAX_PLATFORMS"] == "cpu"
    monkeypatch.setenv("JAX_PLATFORMS", "tpu,cpu")  # inherited: the child would open the TPU
    assert runtime.child_env()["JAX_PLATFORMS"] == "cpu"
    assert "holds the TPU" in runtime.child_note()
    with pytest.raises(runtime.ChipHeld, match="one process per chip"):
        runtime.child_env(JAX_PLATFORMS="tpu")


def test_a_child_of_a_process_without_the_tpu_keeps_its_platforms(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "tpu,cpu")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "x")
    for started in (set(), {"cpu"}):  # before any computation; a CPU-only process
        monkeypatch.setattr(runtime, "_started_platforms", lambda started=started: started)
        env = runtime.child_env(EXTRA="1")
        assert env["JAX_PLATFORMS"] == "tpu,cpu" and env["EXTRA"] == "1"
        assert "PYTEST_CURRENT_TEST" not in env
        assert runtime.child_env(JAX_PLATFORMS="tpu")["JAX_PLATFORMS"] == "tpu"
        assert runtime.child_note() == ""


def test_the_real_started_platforms_of_this_cpu_process():
    jax.numpy.zeros(1).block_until_ready()
    assert runtime._started_platforms() == {"cpu"} and not runtime.holds_tpu()


# --- the lab on a TPU VM: a second app finds the chip held ---------------------------------

HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what libtpu does to /tmp/libtpu_lockfile
print("locked", flush=True)
time.sleep(120)
"""


@pytest.fixture
def held_lockfile(tmp_path):
    """(lockfile, pid): a real process holding a POSIX lock on a file, as libtpu holds its
    lockfile for as long as it has the chip."""
    import subprocess
    import sys

    lockfile = tmp_path / "libtpu_lockfile"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(lockfile)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield lockfile, holder.pid
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("source", ["/proc/locks", "fcntl F_GETLK"])
def test_the_process_holding_the_chip_is_named(held_lockfile, tmp_path, monkeypatch, source):
    lockfile, pid = held_lockfile
    if source == "/proc/locks":  # the fallback must not answer for it
        monkeypatch.setattr(runtime, "_holder_from_fcntl", lambda path: None)
    else:
        monkeypatch.setattr(runtime, "PROC_LOCKS", str(tmp_path / "no-proc-locks"))
    busy = runtime.busy_tpu([tmp_path / "absent", lockfile])
    assert busy is not None and busy.pid == pid and busy.lockfile == str(lockfile)
    assert "python" in busy.command and "\n" not in busy.command  # its command line, one line
    notice = busy.notice()
    assert f"process {pid}" in notice and "runs on the CPU" in notice and f"kill {pid}" in notice
    assert runtime.busy_tpu([tmp_path / "absent"]) is None


def test_a_free_or_own_lock_is_not_busy(tmp_path):
    import fcntl
    import os

    lockfile = tmp_path / "libtpu_lockfile"
    lockfile.write_text("")
    assert runtime.busy_tpu([lockfile]) is None  # nobody holds it
    fd = os.open(lockfile, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert runtime.busy_tpu([lockfile]) is None  # this process holds it: not "another"
    finally:
        os.close(fd)


SECOND_APP = """
import sys
from core import runtime
runtime.TPU_LOCKFILES = (sys.argv[1],)
runtime.host_has_tpu = lambda: True  # a TPU VM whose chip another app's kernel holds
runtime.use_cpu_devices(2)
import jax
print(jax.default_backend(), jax.device_count())
print(runtime.tpu_notice())
"""


def test_a_second_app_on_a_tpu_vm_runs_on_the_cpu_and_says_who_holds_the_chip(held_lockfile):
    """`make lab` on a TPU VM serves each app in its own kernel: the first holds the chip. A
    second app's setup (use_cpu_devices) finds libtpu's lock held, runs on the CPU and says
    which process holds the chip and how to free it, instead of failing to start the TPU."""
    import subprocess
    import sys

    lockfile, pid = held_lockfile
    env = runtime.child_env()
    env.pop("JAX_PLATFORMS", None)  # as on a TPU VM: JAX would try the TPU first
    done = subprocess.run(
        [sys.executable, "-c", SECOND_APP, str(lockfile)],
        capture_output=True,
        text=True,
        env=env,
        cwd=pathlib.Path(__file__).resolve().parents[1],
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    backend, notice = done.stdout.strip().splitlines()
    assert backend == "cpu 2"
    assert f"process {pid}" in notice and "runs on the CPU" in notice
    assert f"process {pid}" in done.stderr  # said in a headless run's output too


# --- what the host lacks ------------------------------------------------------------------


def test_host_lacks_names_each_missing_module_and_how_to_get_it(monkeypatch):
    monkeypatch.setattr(runtime, "has_module", lambda name: name not in ("torch", "gymnasium"))
    monkeypatch.setattr(runtime, "loopback_socket_problem", lambda: None)
    assert runtime.host_lacks(["numpy"], sockets=True) is None
    why = runtime.host_lacks(["torch", "numpy", "gymnasium"], why="the references")
    assert why.startswith("the references: ")
    assert "`torch` is not installed" in why and "download.pytorch.org/whl/cpu" in why
    assert "`gymnasium` is not installed" in why and "pip install gymnasium" in why
    assert "numpy" not in why and "wheelhouse" in why


def test_host_lacks_a_loopback_socket(monkeypatch):
    problem = "socket(AF_INET).bind(('127.0.0.1', 0)) raised [Errno 97] Address family ..."
    monkeypatch.setattr(runtime, "loopback_socket_problem", lambda: problem)
    assert runtime.host_lacks() is None  # nothing asked for
    why = runtime.host_lacks(sockets=True, why="jax.distributed's coordinator")
    assert "[Errno 97]" in why and "loopback" in why and "coordinator" in why
    assert not runtime.can_open_loopback_socket()


def test_the_probes_on_this_host():
    assert runtime.has_module("numpy") and not runtime.has_module("no_such_module_here")
    assert not runtime.has_module("no_such_package.sub")
    assert runtime.can_open_loopback_socket()  # the suite's own servers need one here


def test_a_reference_for_a_child_runs_on_the_childs_backend(monkeypatch):
    """Issue 37's chip run: a fresh child's losses (on the CPU: its parent held the TPU) vs the
    parent's own run (on the TPU) differed by 1e-3 where bit for bit was claimed. While this
    process holds a TPU, a reference for a child runs on this host's CPU, and the check says so;
    otherwise on JAX's default device, with nothing to say."""
    assert runtime.child_device() is None and runtime.child_backend_note("x") == ""
    with runtime.on_child_backend() as device:
        assert device is None
    real_devices = jax.devices
    # the CPU handed out is not JAX's default device here: placement must follow it
    monkeypatch.setattr(jax, "devices", lambda backend=None: real_devices(backend)[2:])
    monkeypatch.setattr(runtime, "_started_platforms", lambda: {"tpu", "cpu"})
    with runtime.on_child_backend() as device:
        assert device.platform == "cpu" and device != jax.local_devices()[0]
        y = jax.jit(lambda v: v * 2)(np.arange(3.0, dtype=np.float32))
    assert y.devices() == {device}
    assert "both on the CPU" in runtime.child_backend_note("the uninterrupted run")
    assert "the uninterrupted run runs there too" in runtime.child_backend_note(
        "the uninterrupted run"
    )


def test_a_childs_python_path_keeps_the_parents_after_the_project(monkeypatch, tmp_path):
    """Kind 7 of issue 37: every Keras worker on the chip's host failed with "No module named
    'safetensors'", installed in a folder on the parent's PYTHONPATH that the child's
    PYTHONPATH=<project> dropped. A module found only through the parent's PYTHONPATH must
    import in a child started with python_path(project)."""
    import subprocess
    import sys

    (tmp_path / "only_on_the_parents_path.py").write_text("VALUE = 7\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}/x{os.pathsep}{tmp_path}")
    path = runtime.python_path("/project")
    assert path.split(os.pathsep) == ["/project", str(tmp_path), "/x"]  # in order, no repeat
    probe = [sys.executable, "-c", "import only_on_the_parents_path as m; print(m.VALUE)"]
    done = subprocess.run(
        probe, env=runtime.child_env(PYTHONPATH=path), capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "7", done.stderr
    # what the fix replaced: the project root alone does not find it
    lost = subprocess.run(
        probe, env=runtime.child_env(PYTHONPATH="/project"), capture_output=True, timeout=60
    )
    assert lost.returncode != 0
    monkeypatch.delenv("PYTHONPATH")
    assert runtime.python_path("/project") == "/project"
