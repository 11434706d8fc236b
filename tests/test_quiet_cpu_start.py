"""A documented command starts quietly on a CPU host that has libtpu (the `tpu` extra, for the
TPU compiler) with JAX_PLATFORMS unset: no libtpu start-up errors ("E0000 ... common_lib.cc
... unexpected worker hostname ... TPU_WORKER_HOSTNAMES" and a source location trace), which a
learner reads as a failure. The command's entry point chooses the CPU backend where the host
has no TPU (core.runtime.use_cpu_without_tpu; an app's lab.use_cpu_devices).

One command of each kind runs, without JAX_PLATFORMS: a lesson app headless, the capstone's
CLI (a tiny train), the TPU scripts' CLI (the runtime receipt). Each entry point's choice is
read back from the process (JAX_PLATFORMS at exit), so the test means something where libtpu
is not installed too; where it is, a bare `import jax; jax.devices()` shows the noise exists.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from core import curriculum, runtime
from core.tpu import topology_compile

pytestmark = pytest.mark.skipif(
    runtime.host_has_tpu(), reason="a host with TPU chips: JAX is meant to open them here"
)
LIBTPU_NOISE = re.compile(
    r"common_lib\.cc|TPU worker hostnames|TPU_WORKER_HOSTNAMES|libtpu_init_utils|"
    r"Source Location Trace|^E0000 ",
    re.MULTILINE,
)
LIMIT_S = 300  # a hang guard, not a speed assertion
# Runs the module as `python -m MODULE ARGS` does, then says what JAX_PLATFORMS ended as.
AS_MAIN = (
    "import atexit, os, runpy, sys\n"
    "atexit.register(lambda: print('JAX_PLATFORMS at exit:', os.environ.get('JAX_PLATFORMS'),"
    " file=sys.stderr))\n"
    "module, sys.argv = sys.argv[1], sys.argv[1:]\n"
    "runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
)


def unset_env() -> dict[str, str]:
    # libtpu stays silent while another process holds its lock file (/tmp/libtpu_lockfile): a
    # neighbouring test that opened libtpu would hide the noise from the control and make every
    # quiet check below pass for nothing. Loading it beside another process shows it each time.
    env = runtime.child_env(JAX_NUM_CPU_DEVICES="8", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    env.pop("JAX_PLATFORMS", None)
    # A test in this worker that compiled for a TPU topology left libtpu's CPU-host settings in
    # os.environ (core.tpu.topology_compile: a worker hostname, an accelerator type); inherited,
    # they silence libtpu too. A learner's shell has none of them.
    for name in topology_compile.CPU_HOST_LIBTPU_ENV:
        env.pop(name, None)
    return env


def run(argv, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=unset_env(),
        timeout=LIMIT_S,
    )


def quiet(result: subprocess.CompletedProcess) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert not LIBTPU_NOISE.search(result.stderr), result.stderr[-4000:]


def test_the_noise_exists_where_libtpu_is_installed(tmp_path):
    """The control: with libtpu and no platform chosen, JAX's start prints libtpu's errors."""
    if runtime.package_version("libtpu") is None:
        pytest.skip("libtpu is not installed here: the commands below still show their choice")
    result = run(["-c", "import jax; print(jax.devices()[0].platform)"], tmp_path)
    assert result.stdout.strip() == "cpu"
    assert LIBTPU_NOISE.search(result.stderr), "libtpu stopped printing: keep the test's patterns"


def test_the_capstone_cli_trains_quietly_on_the_cpu(tmp_path):
    tiny = "d_model=32 num_layers=2 num_heads=2 max_len=96 seq_len=32 batch_size=2 max_files=6"
    tiny += " max_bytes=1024 heldout_fraction=0.34 steps=2 ckpt_every=2 eval_every=2"
    argv = ["train", f"run_dir={tmp_path / 'run'}", "mlflow=false", "async_ckpt=false"]
    result = run(["-c", AS_MAIN, "capstones.byte_transformer", *argv, *tiny.split()], tmp_path)
    quiet(result)
    assert "JAX_PLATFORMS at exit: cpu" in result.stderr
    assert "trained steps 1-2" in result.stdout


def test_the_tpu_scripts_cli_reports_the_cpu_quietly(tmp_path):
    result = run(["-c", AS_MAIN, "tpu_scripts", "receipt", "--repeats", "1"], tmp_path)
    quiet(result)
    assert result.stdout.startswith("backend: cpu"), result.stdout[:400]
    assert "JAX_PLATFORMS at exit: cpu" in result.stderr


def test_a_lesson_app_runs_quietly_on_the_cpu(tmp_path):
    result = run([str(curriculum.APPS_DIR / "arrays_devices.py")], tmp_path)
    quiet(result)
    assert "PASS: " in result.stdout and "STOPPED" not in result.stdout


def test_a_tpu_vm_or_a_chosen_platform_is_left_as_it_is(monkeypatch):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    monkeypatch.setattr(runtime, "host_has_tpu", lambda: True)
    assert runtime.use_cpu_without_tpu() is False and "JAX_PLATFORMS" not in os.environ
    monkeypatch.setattr(runtime, "host_has_tpu", lambda: False)
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    assert runtime.use_cpu_without_tpu() is False and os.environ["JAX_PLATFORMS"] == "cuda"
    monkeypatch.delenv("JAX_PLATFORMS")
    assert runtime.use_cpu_without_tpu() is True and os.environ["JAX_PLATFORMS"] == "cpu"


ENTRY_POINTS = (
    "capstones/byte_transformer/__main__.py",
    "capstones/pallas_kernel/__main__.py",
    "tpu_scripts/__main__.py",
    "core/assessment/__main__.py",
    "core/serving/predict/__main__.py",
    "core/workload/job.py",
)


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_each_command_line_chooses_its_platform_first(path):
    """The CLIs whose commands start JAX call runtime.use_cpu_without_tpu (before the
    command runs; the capstones before importing their CLI)."""
    text = (curriculum.REPO_ROOT / path).read_text(encoding="utf-8")
    assert "runtime.use_cpu_without_tpu()" in text, path
    if path.startswith("capstones/"):
        assert text.index("use_cpu_without_tpu()") < text.index("import cli")
