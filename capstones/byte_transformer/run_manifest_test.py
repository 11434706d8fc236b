"""run-manifest: a CPU run is never a TPU run; fabricated TPU evidence fills every field;
a TPU claim on a CPU runtime is refused."""

import hashlib
import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from capstones.byte_transformer import cli, run_manifest, rundir, training
from capstones.byte_transformer import config as config_lib
from core import curriculum, runtime
from core.state import checkpoint

DESCRIBE = {
    "name": "projects/lab-project-123/locations/us-west4-a/nodes/bt-lab",
    "acceleratorType": "v5litepod-4",
    "runtimeVersion": "v2-alpha-tpuv5-lite",
    "state": "READY",
    "acceleratorConfig": {"type": "V5LITE_POD", "topology": "2x2"},
}
JOB_LOG = """\
WARNING: Logging before InitGoogle() is written to STDERR
I0000 00:00:1700000000.1 1234 tpu_initializer_helper.cc:116] libtpu.so loaded, TPU_WORKER_ID 0
backend: tpu
devices: 4 x TPU v5 lite
timing the train step on one device (10 repeats)
compile_s 3.21 (trace+lower 0.80); step 1.90 ms; 2,156,000 tokens/s
E0000 00:00:1700000001.2 1234 some_op.cc:1] RESOURCE_EXHAUSTED: attempting to allocate 20G
Traceback (most recent call last):
ValueError: something broke
step 3/4 loss 5.1
"""
TEARDOWN = (
    "ERROR: (gcloud.compute.tpus.tpu-vm.describe) NOT_FOUND: Resource "
    "'projects/lab-project-123/locations/us-west4-a/nodes/bt-lab' was not found\n"
)


def fake_tpu_runtime(count=4):
    return {
        "captured_utc": "2026-01-01T00:00:00+00:00",
        "backend": "tpu",
        "devices": [
            {
                "platform": "tpu",
                "device_kind": "TPU v5 lite",
                "id": i,
                "process_index": 0,
                "coords": [i % 2, i // 2, 0],
                "core_on_chip": 0,
            }
            for i in range(count)
        ],
        "environment": {"python": "3.11.9", "packages": {"jax": "0.10.2", "libtpu": "0.0.42.1"}},
    }


def saved_checkpoint(run_dir):
    """One verified core.state.checkpoint step under run_dir/run/checkpoints."""
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    with checkpoint.Checkpointer(
        run_dir / "run" / run_manifest.CHECKPOINTS_DIR, save_every=1, async_save=False
    ) as ckpt:
        ckpt.save(1, state, {"stream": {"epoch": 0}}, {"seed": 0}, {"loss": 1.0}, force=True)
        ckpt.wait_until_finished()
    return run_dir / "run" / run_manifest.CHECKPOINTS_DIR / "1"


def a_run(run_dir):
    """run_dir with what makes it a training run for run-manifest (its config.json)."""
    (run_dir / training.CONFIG_FILE).write_text(config_lib.Config().to_json())
    return run_dir


def test_checkpoint_folder_name_is_training_s():
    assert run_manifest.CHECKPOINTS_DIR == training.CHECKPOINTS


def test_cpu_manifest_says_not_a_tpu_run(tmp_path, capsys):
    (a_run(tmp_path) / "note.txt").write_text("hello")
    assert cli.main(["run-manifest", f"run_dir={tmp_path}"]) == 0
    manifest = json.loads((tmp_path / run_manifest.MANIFEST_FILE).read_text())
    assert manifest["schema"] == run_manifest.SCHEMA
    assert manifest["is_tpu_run"] is False
    assert manifest["backend"] == jax.default_backend() == "cpu"
    assert manifest["runtime_source"] == "live: this process"
    assert manifest["verdict"].startswith("not a TPU run")
    assert manifest["teardown"] == {
        "deleted": False,
        "applicable": False,
        "proof": "not applicable (CPU)",
        "names_tpu": None,
    }
    assert [d["platform"] for d in manifest["devices"]] == ["cpu"] * len(jax.devices())
    packages = manifest["environment"]["packages"]
    assert set(packages) == set(run_manifest.PACKAGES)
    probe = subprocess.run(  # versions as a fresh interpreter reports them
        [
            sys.executable,
            "-c",
            "import jax, flax, optax; print(jax.__version__, flax.__version__, optax.__version__)",
        ],
        capture_output=True,
        text=True,
        env=runtime.child_env(JAX_PLATFORMS="cpu"),
        check=True,
    )
    assert probe.stdout.split() == [packages["jax"], packages["flax"], packages["optax"]]
    note = next(f for f in manifest["checkpoints"]["files"] if f["path"] == "note.txt")
    assert note["sha256"] == hashlib.sha256(b"hello").hexdigest() and note["bytes"] == 5
    assert manifest["tpu"]["source"] == "none"
    assert "not a TPU run" in capsys.readouterr().out


def test_fabricated_tpu_evidence_fills_every_field(tmp_path):
    step_dir = saved_checkpoint(tmp_path)
    manifest = run_manifest.build_manifest(
        tmp_path,
        runtime=fake_tpu_runtime(),
        log_text=JOB_LOG,
        log_name="job.log",
        describe=DESCRIBE,
        teardown_text=TEARDOWN,
    )
    assert manifest["is_tpu_run"] is True
    tpu = manifest["tpu"]
    assert (tpu["name"], tpu["zone"], tpu["project"]) == ("bt-lab", "us-west4-a", "lab-project-123")
    assert (tpu["accelerator_type"], tpu["runtime_version"]) == (
        "v5litepod-4",
        "v2-alpha-tpuv5-lite",
    )
    assert tpu["topology"] == "2x2" and tpu["source"] == "describe_json" and tpu["conflicts"] == []
    assert [d["coords"] for d in manifest["devices"]][:2] == [[0, 0, 0], [1, 0, 0]]
    events = manifest["backend_events"]
    by_line = {e["line"]: e["kinds"] for e in events["events"]}
    assert "tpu_init" in by_line[2] and "platform" in by_line[3] and "compile" in by_line[6]
    assert "error" in by_line[7] and "error" in by_line[8] and "error" in by_line[9]
    assert 10 not in by_line  # an ordinary progress line is no event
    assert events["log_sha256"] == hashlib.sha256(JOB_LOG.encode()).hexdigest()
    assert events["counts"]["error"] == 3
    (step,) = manifest["checkpoints"]["steps"]
    assert step == {"directory": "run/checkpoints", "step": 1, "verified": True, "problems": []}
    listed = {f["path"]: f["sha256"] for f in manifest["checkpoints"]["files"]}
    some_file = next(p for p in step_dir.rglob("*") if p.is_file())
    relative = some_file.relative_to(tmp_path).as_posix()
    assert listed[relative] == hashlib.sha256(some_file.read_bytes()).hexdigest()
    teardown = manifest["teardown"]
    assert teardown["deleted"] is True and "NOT_FOUND" in teardown["proof"]
    assert teardown["names_tpu"] is True
    assert manifest["verdict"].startswith("TPU run") and "teardown verified" in manifest["verdict"]


def test_damaged_checkpoint_and_missing_teardown_are_reported(tmp_path):
    step_dir = saved_checkpoint(tmp_path)
    victim = next(
        p for p in sorted(step_dir.rglob("*")) if p.is_file() and p.name != "manifest.json"
    )
    victim.write_bytes(victim.read_bytes() + b"x")
    manifest = run_manifest.build_manifest(tmp_path, runtime=fake_tpu_runtime(1))
    (step,) = manifest["checkpoints"]["steps"]
    assert step["verified"] is False and "truncated or rewritten" in step["problems"][0]
    assert manifest["teardown"]["deleted"] is False and manifest["teardown"]["applicable"]
    assert "teardown NOT verified" in manifest["verdict"]
    still = run_manifest.teardown_record("state: READY\n", True, "bt-lab")
    assert still["deleted"] is False and "READY" in still["proof"]


def test_tpu_claims_on_cpu_are_refused(tmp_path, capsys):
    a_run(tmp_path)
    code = cli.main(["run-manifest", f"run_dir={tmp_path}", "claim_tpu=true"])
    assert code == 1
    assert "refused" in capsys.readouterr().err
    assert not (tmp_path / run_manifest.MANIFEST_FILE).exists()
    # a result file that says TPU, with a CPU runtime recorded beside it
    (tmp_path / run_manifest.TPU_RESULT_FILE).write_text(json.dumps({"is_tpu_result": True}))
    with pytest.raises(run_manifest.ClaimRefused, match="tpu_result.json says TPU"):
        run_manifest.build_manifest(tmp_path, runtime=run_manifest.capture_runtime())
    # "tpu" backend with CPU devices is no TPU run either
    forged = fake_tpu_runtime()
    forged["devices"][0]["platform"] = "cpu"
    with pytest.raises(run_manifest.ClaimRefused):
        run_manifest.build_manifest(tmp_path, runtime=forged)
    assert not run_manifest.is_tpu_run(forged)


def test_recorded_runtime_is_preferred_and_arguments_conflicts_listed(tmp_path):
    (tmp_path / run_manifest.RUNTIME_FILE).write_text(json.dumps(fake_tpu_runtime(2)))
    manifest = run_manifest.build_manifest(
        tmp_path, describe=DESCRIBE, zone="us-central1-a", project="lab-project-123"
    )
    assert manifest["runtime_source"] == "recorded: runtime.json"
    assert manifest["is_tpu_run"] is True and len(manifest["devices"]) == 2
    assert manifest["tpu"]["zone"] == "us-west4-a"
    assert manifest["tpu"]["conflicts"] == [
        "zone: describe JSON says 'us-west4-a', argument says 'us-central1-a'"
    ]
    identity = run_manifest.tpu_identity(None, name="x", accelerator_type="v6e-4")
    assert identity["source"] == "arguments" and identity["zone"] is None


def test_a_run_that_is_not_there_is_refused_and_nothing_is_written(tmp_path, capsys):
    """issue 12.2: run-manifest on a missing (or empty) directory wrote a manifest of
    "checkpoints 0/0 verified"; a command that reads a run must refuse a run that does not
    exist, say how to make one, and create nothing."""
    missing = tmp_path / "missing"
    assert cli.main(["run-manifest", f"run_dir={missing}"]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and f"train run_dir={missing}" in err
    assert not missing.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["run-manifest", f"run_dir={empty}"]) == 2
    err = capsys.readouterr().err
    assert "holds no run" in err and "tpu_result.json" in err and "Traceback" not in err
    assert list(empty.iterdir()) == []
    # a TPU job's directory (runtime.json recorded on the VM) is a run for run-manifest
    (empty / rundir.JOB_FILES[0]).write_text(json.dumps(run_manifest.capture_runtime()))
    assert cli.main(["run-manifest", f"run_dir={empty}"]) == 0


def test_command_line_errors_are_usage_errors(tmp_path, capsys):
    a_run(tmp_path)
    assert cli.main(["run-manifest", f"run_dir={tmp_path / 'nope'}"]) == 2
    bad = tmp_path / "describe.json"
    bad.write_text("{not json")
    assert cli.main(["run-manifest", f"run_dir={tmp_path}", f"describe_json={bad}"]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert cli.main(["run-manifest", f"run_dir={tmp_path}", "log=/no/such.log"]) == 2


def test_module_runs_as_a_fresh_process(tmp_path):
    a_run(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "capstones.byte_transformer", "run-manifest", f"run_dir={tmp_path}"],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=runtime.child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2"),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / run_manifest.MANIFEST_FILE).read_text())
    assert manifest["is_tpu_run"] is False and len(manifest["devices"]) == 2


def test_tpu_refusal_only_off_a_tpu():
    tpu = {"backend": "tpu", "devices": [{"platform": "tpu", "device_kind": "TPU v5 lite"}]}
    cpu = {"backend": "cpu", "devices": [{"platform": "cpu", "device_kind": "cpu"}]}
    assert run_manifest.tpu_refusal(tpu, "a rehearsal") is None
    message = run_manifest.tpu_refusal(cpu, "a rehearsal")
    assert message.startswith("refused: jax.default_backend() is 'cpu' (cpu), not 'tpu'")
    assert "(a rehearsal)" in message and "Nothing was written" in message
