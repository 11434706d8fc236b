"""What the wheel ships: every package's modules except its tests, and the course's files that
lessons read at run time from outside the packages.

Setuptools' ``exclude-package-data`` filters data files, never modules, so the tests beside
the code (``x_test.py``) would ship with it. pyproject.toml names ``BuildPy`` as the
``build_py`` command (``[tool.setuptools] cmdclass``); an editable install (``pip install -e``)
reads the source tree itself, so the tests still import there.

An exported lesson runs on a TPU VM from the installed wheel, with no checkout beside it: the
files it reads outside the packages (the apps a lesson exports, the service's Dockerfile) ship
under ``core/_course/`` at their checkout paths, where ``core.runtime.course_path`` finds them.
"""

import glob
import os

from setuptools.command.build_py import build_py

# Checkout paths (globs) that travel in the wheel under core/_course/ (core.runtime.COURSE_DIR).
COURSE_FILES = (
    "apps/*.py",  # move_to_tpu and stage_launch_jobs export a lesson app on the VM
    "deploy/Dockerfile",  # containerize_service reads the image it runs
    "deploy/requirements.in",
    "deploy/requirements.lock",
    "docs/portfolio/*.md",  # the capstone apps show their portfolio guide
    "benchmarks/records/*/*.json",  # figures an app quotes cite a committed record
)
COURSE_DIR = os.path.join("core", "_course")


def is_test_module(module: str) -> bool:
    """A test module: ``x_test`` beside ``x``, or a pytest ``conftest``."""
    return module.endswith("_test") or module == "conftest"


def course_files(root: str = ".") -> list[str]:
    """The checkout paths of COURSE_FILES under ``root`` (relative, sorted)."""
    found = {
        os.path.relpath(path, root)
        for pattern in COURSE_FILES
        for path in glob.glob(os.path.join(root, pattern))
        if os.path.isfile(path)
    }
    return sorted(found)


class BuildPy(build_py):
    """setuptools' build_py without the test modules, plus COURSE_FILES under core/_course/."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [entry for entry in modules if not is_test_module(entry[1])]

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads the checkout
            return
        for path in course_files():
            target = os.path.join(self.build_lib, COURSE_DIR, path)
            self.mkpath(os.path.dirname(target))
            self.copy_file(path, target, preserve_mode=False)

    def get_outputs(self, include_bytecode=1):
        shipped = [os.path.join(self.build_lib, COURSE_DIR, p) for p in course_files()]
        return super().get_outputs(include_bytecode) + shipped
