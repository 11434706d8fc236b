"""Reading the commands back: the parse, and every mismatch with the chosen values caught, also in
the commands as a page displays them."""

import pytest

from core.tpu import cloud_tpu, command_check


def test_workflow_problems_catches_each_mismatch():
    vm = cloud_tpu.TpuVm(name="lab", spot=True)
    lines = [line for _, line in cloud_tpu.workflow(vm, "run_tpu.py")]
    chosen = dict(
        name="lab",
        zone=vm.zone,
        accelerator_type=vm.accelerator_type,
        version=vm.runtime_version,
        spot=True,
        script="run_tpu.py",
    )
    assert command_check.workflow_problems(lines, **chosen) == []
    for key, wrong in [
        ("name", "other"),
        ("zone", "us-central1-a"),
        ("accelerator_type", "v5litepod-4"),
        ("version", "v2-alpha-tpuv6e"),
        ("spot", False),
        ("project", "proj-123"),
        ("script", "else_tpu.py"),
    ]:
        assert command_check.workflow_problems(lines, **{**chosen, key: wrong}), key
    single_worker = [line.replace("--worker=all", "--worker=0") for line in lines]
    assert any("--worker=0" in p for p in command_check.workflow_problems(single_worker, **chosen))
    assert command_check.workflow_problems(lines[:-1], **chosen)  # no teardown check


def test_parse_tpu_command():
    parsed = command_check.parse_tpu_command(
        "gcloud compute tpus tpu-vm ssh lab --zone=z --worker=all --command='a b'"
    )
    assert parsed.verb == "ssh" and parsed.positionals == ("lab",)
    assert parsed.flags == {"zone": "z", "worker": "all", "command": "a b"}
    with pytest.raises(ValueError, match="not a `gcloud compute tpus tpu-vm`"):
        command_check.parse_tpu_command("gcloud compute instances create x")


def test_workflow_problems_read_commands_as_displayed():
    vm = cloud_tpu.TpuVm(spot=True)
    steps = cloud_tpu.workflow(vm, "r_tpu.py")
    shown = [cloud_tpu.display_command(line, width=40) for _, line in steps]
    chosen = dict(
        name=vm.name,
        zone=vm.zone,
        accelerator_type=vm.accelerator_type,
        version=vm.runtime_version,
        spot=True,
        script="r_tpu.py",
    )
    assert command_check.workflow_problems(shown, **chosen) == []
    assert command_check.workflow_problems(shown, **{**chosen, "spot": False})
