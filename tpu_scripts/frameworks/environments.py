"""Where each framework script runs on a TPU VM: its own venv, its pins, its command line.

The JAX lessons use ~/jax-tpu-lab/.venv (core/tpu/cloud_tpu.py). PyTorch/XLA and TensorFlow
each get a venv of their own beside it (torch-xla 2.9 cannot load beside the course's torch,
TensorFlow's TPU build pins its own libtpu), made by uv like the JAX one, with the pins from
tpu_scripts/envs/ and the staged project wheel installed without dependencies (it carries
tpu_scripts/frameworks/ and the stdlib-only core modules the scripts read). These functions
only build shell lines; tests assert them, launch.py and course_run.py run them.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import shlex

from core.tpu import cloud_tpu

ENVS_DIR = pathlib.Path(__file__).resolve().parent.parent / "envs"


@dataclasses.dataclass(frozen=True)
class Framework:
    name: str  # the --framework value
    venv: str  # under ~/jax-tpu-lab/ on every worker
    pins_file: str  # in tpu_scripts/envs/
    module: str  # python -m MODULE
    script: str  # the same module as a checkout path
    env: str  # environment assignments before the command
    generations: tuple[str, ...]  # the TPU generations it runs on
    multi_host: bool  # whether a multi-host slice works with this script

    def requirements(self, tpu: bool = True) -> list[str]:
        """The pinned requirements (``tpu``: with the extras a TPU VM needs)."""
        lines = (ENVS_DIR / self.pins_file).read_text(encoding="utf-8").splitlines()
        pins = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
        if tpu:  # torch-xla's [tpu] extra brings libtpu
            pins = [re.sub(r"^torch-xla==", "torch-xla[tpu]==", pin) for pin in pins]
        return pins


FRAMEWORKS: dict[str, Framework] = {
    "torch-xla": Framework(
        "torch-xla",
        ".venv-torch-xla",
        "torch_xla.txt",
        "tpu_scripts.frameworks.torch_xla_train",
        "tpu_scripts/frameworks/torch_xla_train.py",
        "PJRT_DEVICE=TPU",
        ("v5e", "v5p", "v6e", "tpu7x"),
        True,
    ),
    "tensorflow": Framework(
        "tensorflow",
        ".venv-tensorflow",
        "tensorflow_tpu.txt",
        "tpu_scripts.frameworks.tf_train",
        "tpu_scripts/frameworks/tf_train.py",
        "",
        ("v5e", "v5p", "v6e"),  # tf_train.TF_GENERATIONS: TPU7x does not run TensorFlow
        False,  # TPUClusterResolver(tpu="local") drives one host's chips
    ),
}


def framework(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r}; choose one of {', '.join(FRAMEWORKS)}")
    return FRAMEWORKS[name]


def vm_problem(fw: Framework, vm: cloud_tpu.TpuVm) -> str | None:
    """Why ``fw``'s script cannot run on ``vm``, or None (checked before anything runs)."""
    if vm.generation not in fw.generations:
        return (
            f"{fw.name} does not run on {vm.generation} ({vm.accelerator_type}); it runs on "
            f"{', '.join(fw.generations)}"
        )
    if vm.accelerator.multi_host and not fw.multi_host:
        return (
            f"{vm.accelerator_type} has {vm.accelerator.hosts} hosts; {fw.script} resolves "
            'only TPUClusterResolver(tpu="local") (one host; a TPU name makes a DNS lookup): '
            "use a single-host slice"
        )
    return None


def install_command(fw: Framework, wheel: str = cloud_tpu.WHEEL) -> str:
    """Make ~/jax-tpu-lab/<venv> (uv, Python 3.11), install the pins, then the staged wheel
    without dependencies (reinstalled: a rebuilt wheel of the same version)."""
    wheel_name = wheel.rsplit("/", 1)[-1]
    if not re.fullmatch(r"[A-Za-z0-9._+-]+\.whl", wheel_name):
        raise ValueError(f"{wheel!r} is not a wheel file name (NAME-VERSION-...-any.whl)")
    python = f"{fw.venv}/bin/python"
    pins = shlex.join(fw.requirements(tpu=True))
    return (
        f'cd ~/{cloud_tpu.REMOTE_DIR} && export PATH="$HOME/.local/bin:$PATH" && '
        "(command -v uv >/dev/null || python3 -m pip install --user -q uv) && "
        f"([ -x {python} ] || uv venv --python 3.11 {fw.venv}) && "
        f"uv pip install --python {python} -q {pins} && "
        f"uv pip install --python {python} -q --no-deps --reinstall-package jax-tpu-lab "
        f"./{shlex.quote(wheel_name)}"
    )


def run_command(fw: Framework, vm: cloud_tpu.TpuVm, script_args: list[str] = ()) -> str:
    """Run ``fw``'s script in its venv on a worker (the TensorFlow one is told the slice type)."""
    args = list(script_args)
    if fw.name == "tensorflow":
        args = ["--strategy", "tpu", "--accelerator-type", vm.accelerator_type, *args]
    env = f"{fw.env} " if fw.env else ""
    line = f"{env}{fw.venv}/bin/python -m {fw.module}"
    return f"cd ~/{cloud_tpu.REMOTE_DIR} && {line}" + (f" {shlex.join(args)}" if args else "")


def remote_command(
    fw: Framework, vm: cloud_tpu.TpuVm, wheel: str = cloud_tpu.WHEEL, script_args=()
) -> str:
    """The one line ``launch run --framework`` sends to every worker: install, then run."""
    problem = vm_problem(fw, vm)
    if problem:
        raise ValueError(problem)
    return f"{install_command(fw, wheel)} && {run_command(fw, vm, list(script_args))}"
