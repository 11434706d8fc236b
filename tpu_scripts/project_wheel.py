"""The project as one wheel, built here without the network from a clean copy of its
sources: what course-run stages on a TPU VM (and what runs ``wheelhouse install`` there)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tempfile

from core import curriculum

TAIL_CHARS = 4000  # pip's output kept when the build fails


def _source_tree(target: pathlib.Path) -> None:
    """The files the wheel is built from, copied: pyproject.toml, README.md, the modules of the
    build commands pyproject names ([tool.setuptools] cmdclass: wheel_contents.py, which
    leaves the tests out) and the packages [tool.setuptools.packages.find] includes. A build
    in the checkout would reuse its build/ folder, where a module deleted since the last
    build still sits."""
    import tomllib

    root = curriculum.REPO_ROOT
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    includes = config["tool"]["setuptools"]["packages"]["find"]["include"]
    commands = config["tool"]["setuptools"].get("cmdclass", {}).values()
    modules = sorted({f"{name.rpartition('.')[0]}.py" for name in commands})
    for name in ("pyproject.toml", "README.md", *modules):
        shutil.copy2(root / name, target / name)
    for name in _course_files(root):  # what exported lessons read outside the packages
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "__marimo__")
    for pattern in includes:
        package = pattern.rstrip("*")
        if (root / package).is_dir():
            shutil.copytree(root / package, target / package, ignore=skip)


def _course_files(root: pathlib.Path) -> list[str]:
    """wheel_contents.course_files: the checkout's files the wheel ships under core/_course/
    (read from the build module itself, which is not a package of the project)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("wheel_contents", root / "wheel_contents.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.course_files(str(root))


def build_wheel(staged: pathlib.Path) -> pathlib.Path:
    """The project wheel, built here without the network (the venv's setuptools), from a clean
    copy of the sources."""
    with tempfile.TemporaryDirectory(prefix="jax_tpu_lab_wheel_") as tmp:
        source, dist = pathlib.Path(tmp) / "src", pathlib.Path(tmp) / "dist"
        source.mkdir()
        _source_tree(source)
        argv = [
            sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
            "--no-index", "-q", "-w", str(dist), str(source),
        ]  # fmt: skip
        result = subprocess.run(argv, capture_output=True, text=True, cwd=source)
        wheels = list(dist.glob("*.whl"))
        if result.returncode != 0 or len(wheels) != 1:
            raise RuntimeError(f"building the wheel failed:\n{result.stderr[-TAIL_CHARS:]}")
        staged.mkdir(parents=True, exist_ok=True)
        target = staged / wheels[0].name
        shutil.move(str(wheels[0]), target)
    return target
