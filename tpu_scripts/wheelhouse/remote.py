"""A wheelhouse on a TPU VM instead of the network: what ``launch stage --wheelhouse`` and
``course-run --wheelhouse`` copy to every worker and the shell lines they run there.

On each worker, in ~/jax-tpu-lab/: the parts go to ``wheelhouse/``; the installer runs from
the staged project wheel itself (a wheel is a zip Python imports from, and ``wheelhouse
install`` needs the standard library alone) into ``site/``; the project goes to
``project/``. Scripts then run with the VM's ``python3`` and PYTHONPATH ending in
``project:site``, so a JAX the VM has stays first. The VM's python3 must be the wheelhouse's
(CPython 3.11): the installer refuses another, by name. A stock TPU VM image has no JAX: build
the wheelhouse for it with ``--include jax --include jaxlib --include libtpu ...`` and a
``--part-mb`` that fits libtpu (gcloud scp has no 64 MiB limit).
"""

from __future__ import annotations

import pathlib
import re
import shlex

from core.tpu import cloud_tpu
from tpu_scripts.wheelhouse import manifest

REMOTE_WHEELHOUSE = "wheelhouse"
REMOTE_SITE = "site"
REMOTE_PROJECT = "project"
HOME = f"$HOME/{cloud_tpu.REMOTE_DIR}"


def parts(wheelhouse: str | pathlib.Path) -> list[pathlib.Path]:
    """The part folders of ``wheelhouse`` (itself when it is one part); ValueError when it
    holds none, or parts of different builds."""
    folder = pathlib.Path(wheelhouse)
    found = [folder] if (folder / manifest.MANIFEST).is_file() else sorted(
        p for p in folder.glob("part-*") if (p / manifest.MANIFEST).is_file()
    )  # fmt: skip
    if not found:
        raise ValueError(
            f"--wheelhouse {wheelhouse}: no wheelhouse part there (part-NN/manifest.json); "
            "build one with `python -m tpu_scripts wheelhouse` (make wheelhouse)"
        )
    builds = {manifest.read(p)["build"] for p in found}
    if len(builds) > 1:
        raise ValueError(f"--wheelhouse {wheelhouse} holds parts of {len(builds)} builds")
    return found


def build_id(found: list[pathlib.Path]) -> str:
    return manifest.read(found[0])["build"]


def mkdir_line() -> str:
    return f"mkdir -p ~/{cloud_tpu.REMOTE_DIR}/{REMOTE_WHEELHOUSE}"


def copy_argv(vm: cloud_tpu.TpuVm, found: list[pathlib.Path]) -> list[str]:
    """gcloud scp of the part folders to every worker's ~/jax-tpu-lab/wheelhouse/."""
    remote = f"{cloud_tpu.REMOTE_DIR}/{REMOTE_WHEELHOUSE}/"
    return [*cloud_tpu.scp_command(vm, [str(p) for p in found], remote), "--recurse"]


def project_wheel(paths) -> str:
    """The project wheel among ``paths`` (ValueError when there is none: the installer runs
    from it)."""
    wheels = [p for p in map(str, paths) if re.fullmatch(r"jax_tpu_lab-.*\.whl", p.rsplit("/")[-1])]
    if not wheels:
        raise ValueError(
            "--wheelhouse installs with the project wheel's own installer: stage the wheel too "
            f"(python -m pip wheel --no-deps -w dist . -> {cloud_tpu.WHEEL})"
        )
    return wheels[0]


def install_line(wheel: str) -> str:
    """Install every staged part into site/ and the project into project/ (offline)."""
    name = shlex.quote(pathlib.PurePath(wheel).name)
    return (
        f"cd ~/{cloud_tpu.REMOTE_DIR} && PYTHONPATH=./{name} python3 -m tpu_scripts wheelhouse "
        f"install {REMOTE_WHEELHOUSE} --target {REMOTE_SITE} && PIP_CONFIG_FILE=/dev/null "
        "python3 -m pip install --isolated -q --no-index --no-deps --no-compile --upgrade "
        f"--target {REMOTE_PROJECT} ./{name}"
    )


def python() -> str:
    """The VM's python3 with the project and the site after whatever PYTHONPATH it has."""
    return (
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{HOME}/{REMOTE_PROJECT}:{HOME}/{REMOTE_SITE}" '
        "python3"
    )
