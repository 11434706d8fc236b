"""`python -m tpu_scripts receipt`: what JAX sees, and a psum checked against the closed form."""

import json
import subprocess
import sys

import pytest

from core import curriculum, runtime
from tpu_scripts import receipt


def run_receipt(*args, devices="8"):
    return subprocess.run(
        [sys.executable, "-m", "tpu_scripts", "receipt", *args],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        timeout=120,
        env=runtime.child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES=devices),
    )


@pytest.mark.parametrize("devices", ["8", "3"])
def test_cli_writes_a_valid_receipt_whose_psum_matches_the_closed_form(tmp_path, devices):
    path = tmp_path / "sub" / "receipt.json"
    result = run_receipt("--json", str(path), "--repeats", "2", devices=devices)
    assert result.returncode == 0, result.stderr[-2000:]
    saved = receipt.read_json(path)
    n = int(devices)
    assert saved["device_count"] == n == len(saved["devices"])
    assert saved["collective"]["result"] == sum(range(1, n + 1)) == saved["collective"]["expected"]
    assert saved["collective"]["passed"] and saved["collective"]["repeats"] == 2
    assert saved["backend"] == "cpu" and saved["process_count"] == 1
    assert "PASS" in result.stdout and str(path) in result.stdout
    assert not list(path.parent.glob(".*.tmp"))  # atomic write leaves no temp file


def test_in_process_receipt_matches_jax():
    import jax

    document = receipt.runtime_receipt(repeats=1)
    assert document["device_count"] == jax.device_count()
    assert document["versions"]["jax"] == jax.__version__
    assert [d["id"] for d in document["devices"]] == [d.id for d in jax.devices()]


def test_live_receipt_runs_the_command_in_a_child(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    live = receipt.live_receipt(repeats=1, cwd=curriculum.REPO_ROOT)
    assert live.returncode == 0, live.stderr[-2000:]
    assert live.where == "a child process" and live.receipt["collective"]["passed"]


def test_live_receipt_of_a_process_holding_the_tpu_starts_no_child(monkeypatch):
    """Kind 3 of issue 37: on a TPU the lesson's own process holds the chip, and the child
    `python -m tpu_scripts receipt` got libtpu's multi-process lockfile error. Holding the TPU
    (faked), the receipt is taken in this process and no child is started."""
    monkeypatch.setattr(runtime, "_started_platforms", lambda: {"tpu", "cpu"})

    real_popen = subprocess.Popen

    class NoPythonChild(real_popen):  # platform.platform() may still run `uname`
        def __init__(self, argv, *args, **kwargs):
            if sys.executable in list(argv):
                raise AssertionError("a child would ask for the chip this process holds")
            super().__init__(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", NoPythonChild)
    live = receipt.live_receipt(repeats=1, cwd=curriculum.REPO_ROOT)
    assert live.where == "this process" and live.returncode == 0
    assert live.receipt == receipt.validate(live.receipt) and live.receipt["collective"]["passed"]
    assert "psum" in live.stdout


@pytest.mark.parametrize("n", [1, 2, 8, 64])
def test_psum_expected_is_the_triangular_number(n):
    assert receipt.psum_expected(n) == float(sum(range(1, n + 1)))


def test_validate_rejects_missing_and_mistyped_fields():
    good = receipt.runtime_receipt(repeats=1)
    receipt.validate(json.loads(json.dumps(good)))
    bad = json.loads(json.dumps(good))
    del bad["collective"]["median_s"]
    with pytest.raises(ValueError, match="collective.median_s"):
        receipt.validate(bad)
    bad = json.loads(json.dumps(good))
    bad["device_count"] = True
    with pytest.raises(ValueError, match="device_count"):
        receipt.validate(bad)
    bad = json.loads(json.dumps(good))
    bad["devices"] = bad["devices"][:1]
    with pytest.raises(ValueError, match="device_count"):
        receipt.validate(bad)
    with pytest.raises(ValueError, match="schema_version"):
        receipt.validate({"schema_version": 99})


def test_read_json_names_a_file_that_is_not_json(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("{oops")
    with pytest.raises(ValueError, match="not JSON"):
        receipt.read_json(path)


def test_distributed_receipt_spans_every_process(tmp_path):
    from tpu_scripts import rehearse

    script = tmp_path / "receipt_job.py"
    script.write_text(
        "import json, sys\n"
        "from tpu_scripts import receipt, rehearse\n"
        "code = receipt.main(sys.argv[1] + "
        "f'/r{__import__(\"os\").environ[rehearse.ENV_PROCESS_ID]}.json',"
        " repeats=2, distributed=True)\n"
        "rehearse.print_result({'code': code})\n"
    )
    run = rehearse.rehearse(script, 2, 2, [str(tmp_path)], timeout_s=90)
    for process_id in (0, 1):
        saved = receipt.read_json(tmp_path / f"r{process_id}.json")
        assert saved["process_count"] == 2 and saved["process_index"] == process_id
        assert saved["device_count"] == 4 and saved["local_device_count"] == 2
        assert saved["collective"]["result"] == 10.0 == 1 + 2 + 3 + 4
    assert all(o.result == {"code": 0} for o in run.outputs)
