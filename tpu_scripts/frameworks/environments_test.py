"""The framework scripts' own environments on a TPU VM: the exact lines `launch run
--framework` sends (printed with --dry-run, nothing run), and what it refuses."""

from __future__ import annotations

import shlex

import pytest

from core.tpu import cloud_tpu
from tpu_scripts import __main__ as cli
from tpu_scripts import launch
from tpu_scripts.frameworks import environments

VM = cloud_tpu.TpuVm(name="lab", accelerator_type="v5litepod-8", zone="us-west4-a")
WHEEL = "jax_tpu_lab-0.1.0-py3-none-any.whl"


def _plan(*argv, script_args=()):
    """launch run's parsed arguments -> its steps (what --dry-run prints), nothing run."""
    base = ["launch", "run", "--name", "lab", "--zone", "us-west4-a", "--dry-run"]
    args = cli.build_parser().parse_args([*base, *argv])
    args.script_args = [*args.script_args, *script_args]  # what main() does with "-- ..."
    return launch.plan(args)


def _remote(steps) -> str:
    """The --command= of the gcloud ssh step."""
    (step,) = steps
    words = list(step.argv)
    assert words[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh"] and "--worker=all" in words
    assert shlex.split(step.line) == words  # the printed line is the same argv
    return next(w for w in words if w.startswith("--command=")).removeprefix("--command=")


def test_torch_xla_runs_in_its_own_venv_with_the_pins_and_pjrt_tpu(capsys):
    remote = _remote(
        _plan(
            "--accelerator-type", "v5litepod-8", "--framework", "torch-xla",
            "tpu_scripts/frameworks/torch_xla_train.py",
            script_args=["--steps", "50", "--out", "t"],
        )
    )  # fmt: skip
    assert "uv venv --python 3.11 .venv-torch-xla" in remote
    assert "-q torch==2.9.0 'torch-xla[tpu]==2.9.0' numpy==2.2.6 &&" in remote
    assert f"-q --no-deps --reinstall-package jax-tpu-lab ./{WHEEL} &&" in remote
    assert remote.endswith(
        "PJRT_DEVICE=TPU .venv-torch-xla/bin/python -m tpu_scripts.frameworks.torch_xla_train "
        "--steps 50 --out t"
    )
    assert ".venv/bin/python" not in remote  # never the JAX lessons' venv


def test_tensorflow_runs_in_its_own_venv_told_the_slice_type(capsys):
    remote = _remote(
        _plan(
            "--accelerator-type", "v6e-4", "--zone", "us-east5-b", "--framework",
            "tensorflow", "tpu_scripts/frameworks/tf_train.py", script_args=["--steps", "20"],
        )
    )  # fmt: skip
    assert "uv venv --python 3.11 .venv-tensorflow" in remote
    assert (
        "uv pip install --python .venv-tensorflow/bin/python -q tensorflow-tpu==2.20.0 &&" in remote
    )
    assert remote.endswith(
        ".venv-tensorflow/bin/python -m tpu_scripts.frameworks.tf_train --strategy tpu "
        "--accelerator-type v6e-4 --steps 20"
    )


def test_jax_stays_the_default(capsys):
    steps = _plan("--accelerator-type", "v5litepod-8", "tpu_scripts/examples/sharded_step.py")
    assert _remote(steps).endswith(".venv/bin/python sharded_step.py")


def test_refusals_before_anything_runs():
    with pytest.raises(ValueError, match=r'v5litepod-16 has 2 hosts.*tpu="local"'):
        _plan(
            "--accelerator-type", "v5litepod-16", "--framework", "tensorflow",
            "tpu_scripts/frameworks/tf_train.py",
        )  # fmt: skip
    with pytest.raises(ValueError, match="runs tpu_scripts/frameworks/torch_xla_train.py"):
        _plan(
            "--accelerator-type", "v5litepod-8", "--framework", "torch-xla",
            "tpu_scripts/frameworks/tf_train.py",
        )  # fmt: skip


def test_a_refusal_exits_2_from_the_command_line(capsys):
    argv = ["launch", "run", "--name", "lab", "--zone", "us-west4-a", "--dry-run"]
    argv += ["--accelerator-type", "v5litepod-16", "--framework", "tensorflow"]
    assert cli.main([*argv, "tpu_scripts/frameworks/tf_train.py"]) == 2
    assert "error: v5litepod-16 has 2 hosts" in capsys.readouterr().err


def test_multi_host_torch_xla_runs_on_every_worker():
    multi = cloud_tpu.TpuVm(name="lab", accelerator_type="v5litepod-16", zone="us-west4-a")
    fw = environments.framework("torch-xla")
    assert environments.vm_problem(fw, multi) is None
    assert "PJRT_DEVICE=TPU" in environments.remote_command(fw, multi, WHEEL)


def test_tpu7x_is_not_a_tensorflow_generation():
    from tpu_scripts.frameworks import tf_train

    assert environments.framework("tensorflow").generations == tf_train.TF_GENERATIONS
    assert "tpu7x" in environments.framework("torch-xla").generations
    with pytest.raises(ValueError, match="unknown framework 'mxnet'"):
        environments.framework("mxnet")


def test_local_pins_are_the_vm_pins_without_the_tpu_extra():
    fw = environments.framework("torch-xla")
    assert fw.requirements(tpu=False) == ["torch==2.9.0", "torch-xla==2.9.0", "numpy==2.2.6"]
    with pytest.raises(ValueError, match="not a wheel file name"):
        environments.install_command(fw, "dist/not-a-wheel.tar.gz")


# ---------------------------------------------------------------------------------------
# course-run --frameworks (dry run: the steps printed, nothing run)


def test_course_run_stages_the_wheel_and_runs_each_framework_in_its_venv(tmp_path, capsys):
    from tpu_scripts import course_run

    argv = ["course-run", "--name", "lab", "--zone", "us-west4-a"]
    argv += ["--accelerator-type", "v5litepod-8", "--frameworks", "torch-xla,tensorflow"]
    argv += ["--runs-root", str(tmp_path), "--date", "2026-12-03", "--dry-run"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("gcloud ")]
    ssh = [shlex.split(x) for x in lines if " ssh " in x]
    commands = [next(w for w in words if w.startswith("--command=")) for words in ssh]
    assert commands[0] == "--command=mkdir -p ~/jax-tpu-lab"
    run_dir = tmp_path / "tpu" / "lab" / "2026-12-03"
    fw = environments.framework
    expected = [
        environments.remote_command(fw(n), VM, str(run_dir / course_run.STAGED / WHEEL), a)
        for n, a in (("torch-xla", ["--out", "results/torch-xla"]),
                     ("tensorflow", ["--out", "results/tensorflow"]))
    ]  # fmt: skip
    assert [c.removeprefix("--command=") for c in commands[1:]] == expected
    fetches = [x for x in lines if " scp lab:" in x]
    assert fetches == [
        f"gcloud compute tpus tpu-vm scp lab:jax-tpu-lab/results/{n} {run_dir} "
        "--zone=us-west4-a --worker=0 --recurse"
        for n in ("torch-xla", "tensorflow")
    ]
    assert not (tmp_path / "tpu").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--accelerator-type", "v5litepod-16", "--frameworks", "tensorflow"], "2 hosts"),
        (["--accelerator-type", "v5litepod-8", "--frameworks", "mxnet"], "unknown framework"),
        (["--accelerator-type", "v5litepod-8"], "name --lessons, --frameworks"),
    ],
)
def test_course_run_refuses_before_anything_runs(extra, message, capsys):
    argv = ["course-run", "--name", "lab", "--zone", "us-west4-a", "--dry-run", *extra]
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
