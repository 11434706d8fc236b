"""`python -m tpu_scripts launch`: the exact gcloud commands, printed or run (fake gcloud)."""

import json
import os
import shlex
import subprocess
import sys

import pytest

from core import curriculum, runtime
from core.tpu import cloud_tpu

SCRIPT = "tpu_scripts/examples/sharded_step.py"

FAKE_GCLOUD = """#!{python}
import json, os, sys
with open(os.environ["FAKE_GCLOUD_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
verb = sys.argv[4] if len(sys.argv) > 4 else ""
print("fake gcloud", verb)
if verb == os.environ.get("FAKE_GCLOUD_FAIL", ""):
    print("ERROR: fake failure of " + verb, file=sys.stderr)
    sys.exit(1)
if verb == "describe" and not os.environ.get("FAKE_GCLOUD_STILL_THERE"):
    print("ERROR: NOT_FOUND", file=sys.stderr)
    sys.exit(1)
"""


@pytest.fixture
def fake_gcloud(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gcloud = bin_dir / "gcloud"
    gcloud.write_text(FAKE_GCLOUD.format(python=sys.executable))
    gcloud.chmod(0o755)
    return tmp_path


def launch(*args, path=None, **env):
    environment = runtime.child_env(**env)
    if path is not None:
        environment["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "tpu_scripts", "launch", *args],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        timeout=60,
        env=environment,
    )


def calls(tmp_path):
    log = tmp_path / "log.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def with_fake(tmp_path, *args, **env):
    return launch(
        *args,
        path=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        FAKE_GCLOUD_LOG=str(tmp_path / "log.jsonl"),
        **env,
    )


def printed_commands(stdout):
    return [shlex.split(line) for line in stdout.splitlines() if line.startswith("gcloud ")]


def test_create_runs_the_command_cloud_tpu_builds(fake_gcloud):
    result = with_fake(
        fake_gcloud,
        "create",
        "--name",
        "lab-a",
        "--accelerator-type",
        "v6e-16",
        "--zone",
        "us-east5-a",
        "--spot",
    )
    assert result.returncode == 0, result.stderr
    vm = cloud_tpu.TpuVm("lab-a", "v6e-16", "us-east5-a", spot=True)
    expected = cloud_tpu.create_command(vm)
    assert calls(fake_gcloud) == [expected[1:]]
    assert printed_commands(result.stdout) == [expected]


def test_stage_run_fetch_in_order(fake_gcloud):
    assert with_fake(fake_gcloud, "stage", SCRIPT).returncode == 0
    assert with_fake(fake_gcloud, "run", SCRIPT, "--", "--steps", "5").returncode == 0
    assert with_fake(fake_gcloud, "fetch", "results.json", str(fake_gcloud)).returncode == 0
    verbs = [argv[3] for argv in calls(fake_gcloud)]
    assert verbs == ["ssh", "scp", "ssh", "scp"]
    run_argv = calls(fake_gcloud)[2]
    assert "--worker=all" in run_argv
    command = next(a for a in run_argv if a.startswith("--command="))
    assert shlex.split(command.split("=", 1)[1])[-3:] == ["sharded_step.py", "--steps", "5"]
    assert "--worker=0" in calls(fake_gcloud)[3]


def test_delete_verifies_the_vm_is_gone(fake_gcloud):
    result = with_fake(fake_gcloud, "delete", "--name", "lab-a")
    assert result.returncode == 0, result.stderr
    assert [argv[3] for argv in calls(fake_gcloud)] == ["delete", "describe"]
    assert "verified" in result.stdout


def test_delete_fails_when_the_vm_is_still_there(fake_gcloud):
    result = with_fake(fake_gcloud, "delete", "--name", "lab-a", FAKE_GCLOUD_STILL_THERE="1")
    assert result.returncode == 1
    assert "still exists" in result.stderr


def test_delete_needs_the_name(fake_gcloud):
    result = with_fake(fake_gcloud, "delete")
    assert result.returncode == 2
    assert "--name" in result.stderr
    assert calls(fake_gcloud) == []


def test_the_first_failure_stops_the_sequence_with_its_output(fake_gcloud):
    result = with_fake(fake_gcloud, "stage", SCRIPT, FAKE_GCLOUD_FAIL="ssh")
    assert result.returncode == 1
    assert "fake failure of ssh" in result.stderr
    assert [argv[3] for argv in calls(fake_gcloud)] == ["ssh"]  # scp never ran


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create", "--accelerator-type", "v9-8"], "unknown accelerator type"),
        (["create", "--zone", "mars-north1-a"], "not offered in zone"),
        (["stage", "no/such/script.py"], "no such file"),
        (["run", "no/such/script.py"], "no such script"),
        (["run", SCRIPT, "--worker", "3"], "does not exist"),
        (["create", "--name", "Bad_Name"], "not allowed"),
    ],
)
def test_bad_input_exits_2_before_anything_runs(fake_gcloud, args, message):
    result = with_fake(fake_gcloud, *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert calls(fake_gcloud) == []


def test_dry_run_is_the_default_without_gcloud(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = launch("create", path=str(empty))
    assert result.returncode == 0, result.stderr
    assert "dry run" in result.stdout
    assert printed_commands(result.stdout) == [cloud_tpu.create_command(cloud_tpu.TpuVm())]


def test_explicit_dry_run_never_calls_gcloud(fake_gcloud):
    result = with_fake(fake_gcloud, "delete", "--name", "lab-b", "--dry-run")
    assert result.returncode == 0
    assert calls(fake_gcloud) == []
    vm = cloud_tpu.TpuVm(name="lab-b")
    assert printed_commands(result.stdout) == [
        cloud_tpu.delete_command(vm),
        cloud_tpu.describe_command(vm),
    ]


def test_a_killed_checkpointed_job_resumes_and_matches_an_uninterrupted_run(tmp_path):
    import numpy as np

    from tpu_scripts import launch as launch_module
    from tpu_scripts import rehearse

    run = launch_module.interrupted_and_resumed(
        rehearse.EXAMPLE,
        tmp_path / "ckpt",
        steps=5,
        kill_after_step=2,
        script_args=("--batch", "16"),
    )
    assert run.killed_returncode == -9
    assert "step 2 " in run.killed_stdout and "step 3 " not in run.killed_stdout
    assert run.resumed_from_step == 2 and run.resumed_result["first_step"] == 3
    np.testing.assert_allclose(run.resumed_result["w"], run.uninterrupted_result["w"], atol=1e-6)
    assert run.resumed_result["losses"] == pytest.approx(
        run.uninterrupted_result["losses"][2:], abs=1e-6
    )


def test_kill_step_must_leave_steps_to_resume():
    from tpu_scripts import launch as launch_module

    with pytest.raises(ValueError, match="kill after step"):
        launch_module.interrupted_and_resumed("x.py", "d", steps=3, kill_after_step=3)


def test_create_carries_the_cost_labels(fake_gcloud):
    result = with_fake(
        fake_gcloud,
        "create",
        "--label",
        "team=ml-platform",
        "--label",
        "job=sweep-7,cost-center=cc_42",
    )
    assert result.returncode == 0, result.stderr
    (argv,) = calls(fake_gcloud)
    assert "--labels=team=ml-platform,job=sweep-7,cost-center=cc_42" in argv


def test_create_refuses_bad_labels_before_running_anything(fake_gcloud):
    for bad in ("Team=ml", "team=ML", "team", "t=" + "x" * 64, "1team=x"):
        result = with_fake(fake_gcloud, "create", "--label", bad)
        assert result.returncode == 2, (bad, result.stdout)
        assert "label" in result.stderr
    assert calls(fake_gcloud) == []


def test_stage_with_a_wheelhouse_copies_it_and_installs_it_offline(fake_gcloud):
    from tpu_scripts.wheelhouse import fake_wheels

    tmp = fake_gcloud
    fake_wheels.wheelhouse(tmp / "wh", {"alpha": fake_wheels.make_wheel(tmp / "src", "alpha")})
    wheel = tmp / "jax_tpu_lab-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"stands for the project wheel")
    result = with_fake(tmp, "stage", SCRIPT, str(wheel), "--wheelhouse", str(tmp / "wh"))
    assert result.returncode == 0, result.stderr
    mkdir, copy, copy_parts, install = calls(tmp)
    assert mkdir[-1] == "--command=mkdir -p ~/jax-tpu-lab && mkdir -p ~/jax-tpu-lab/wheelhouse"
    assert copy[3] == "scp" and str(wheel) in copy
    assert copy_parts[4:6] == [
        str(tmp / "wh" / "part-01"),
        "jax-tpu-lab:jax-tpu-lab/wheelhouse/",
    ]  # the default VM
    assert copy_parts[-1] == "--recurse"
    command = install[-1].removeprefix("--command=")
    assert command.startswith("cd ~/jax-tpu-lab && PYTHONPATH=./jax_tpu_lab-0.1.0-py3-none-any.whl")
    assert "python3 -m tpu_scripts wheelhouse install wheelhouse --target site" in command
    assert "uv " not in command
    # then the script runs with the VM's python3 and the site, never a .venv from the network
    result = with_fake(tmp, "run", SCRIPT, "--offline", "--", "--steps", "5")
    assert result.returncode == 0, result.stderr
    run = calls(tmp)[-1][-1].removeprefix("--command=")
    assert run.endswith('/jax-tpu-lab/site" python3 sharded_step.py --steps 5')
    assert ".venv" not in run and "uv " not in run


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["stage", SCRIPT, "--wheelhouse", "."], "no wheelhouse part there"),
        (["run", SCRIPT, "--offline", "--framework", "torch-xla"], "needs its own venv"),
    ],
)
def test_offline_refusals_exit_2_before_anything_runs(fake_gcloud, args, message):
    result = with_fake(fake_gcloud, *args)
    assert result.returncode == 2 and message in result.stderr
    assert calls(fake_gcloud) == []


def test_a_wheelhouse_needs_the_project_wheel_staged_beside_it(fake_gcloud):
    from tpu_scripts.wheelhouse import fake_wheels

    tmp = fake_gcloud
    fake_wheels.wheelhouse(tmp / "wh", {"alpha": fake_wheels.make_wheel(tmp / "src", "alpha")})
    result = with_fake(tmp, "stage", SCRIPT, "--wheelhouse", str(tmp / "wh"))
    assert result.returncode == 2 and "stage the wheel too" in result.stderr
    assert calls(tmp) == []
