"""`python -m tpu_scripts rehearse`: 2 processes x 4 CPU devices == 1 process x 8 devices."""

import subprocess
import sys

import pytest

from core import curriculum, runtime
from tpu_scripts import rehearse


def test_two_processes_of_four_devices_match_one_process_of_eight():
    multi, single, difference = rehearse.compare_with_single_process(
        rehearse.EXAMPLE, 2, 4, ["--steps", "2", "--batch", "32"]
    )
    assert difference <= 1e-6
    assert [o.process_id for o in multi.outputs] == [0, 1]
    assert all(o.returncode == 0 for o in multi.outputs)
    assert rehearse.results_agree(multi)
    assert "4 local of 8 devices" in multi.outputs[1].stdout
    assert "8 local of 8 devices" in single.outputs[0].stdout
    assert "compile (first step)" in multi.outputs[0].stdout
    # Independent reference: the same SGD in NumPy float64 on the same data.
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 16)).astype(np.float32).astype(np.float64)
    w_true = rng.standard_normal(16).astype(np.float32)
    y = (x.astype(np.float32) @ w_true + 0.01 * rng.standard_normal(32).astype(np.float32)).astype(
        np.float64
    )
    w = np.zeros(16)
    for _ in range(2):
        w = w - 0.1 * (2 / 32) * x.T @ (x @ w - y)
    np.testing.assert_allclose(multi.result["w"], w, atol=1e-4)


def test_a_failing_process_is_reported_and_the_others_killed(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(
        "import os, sys, time\n"
        "from tpu_scripts import rehearse\n"
        "pid, n = rehearse.initialize_from_env()\n"
        "if pid == 1:\n    os._exit(3)  # a crash: no orderly distributed shutdown\n"
        "time.sleep(60)\n"
    )
    # A generous timeout: the run must end because process 1 failed (the survivor is killed
    # after the grace period), which the message tells, not because the clock ran out.
    with pytest.raises(rehearse.RehearsalFailed, match="process 1: exit code 3") as info:
        rehearse.rehearse(script, 2, 1, timeout_s=120, grace_s=1)
    outputs = info.value.rehearsal.outputs
    assert outputs[0].returncode is None  # killed, not left running
    assert "timed out" not in str(info.value)
    assert "process 0: killed" in str(info.value)


def test_a_hung_run_times_out(tmp_path):
    script = tmp_path / "hangs.py"
    script.write_text("import time\ntime.sleep(60)\n")
    with pytest.raises(rehearse.RehearsalFailed, match="timed out"):
        rehearse.rehearse(script, 2, 1, timeout_s=2)


@pytest.mark.parametrize(
    ("processes", "devices", "message"),
    [(0, 4, "--processes"), (9, 4, "--processes"), (2, 0, "--devices-per-process")],
)
def test_bad_arguments_are_refused(processes, devices, message):
    with pytest.raises(ValueError, match=message):
        rehearse.rehearse(rehearse.EXAMPLE, processes, devices)


def test_max_difference_against_numpy():
    a = {"w": [1.0, 2.0], "loss": 3.0, "step_s": 9.0}
    b = {"w": [1.0, 2.5], "loss": 2.0, "step_s": 1.0}
    assert rehearse.max_difference(a, b) == 1.0
    with pytest.raises(ValueError, match="different keys"):
        rehearse.max_difference(a, {"w": [1.0]})


def test_free_port_is_bindable():
    import socket

    port = rehearse.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_cli_missing_script_exits_2():
    result = subprocess.run(
        [sys.executable, "-m", "tpu_scripts", "rehearse", "no/such/script.py"],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        timeout=60,
        env=runtime.child_env(JAX_PLATFORMS="cpu"),
    )
    assert result.returncode == 2
    assert "no such script" in result.stderr
