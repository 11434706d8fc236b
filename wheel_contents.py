"""What the wheel ships: every package's modules except its tests.

Setuptools' ``exclude-package-data`` filters data files, never modules, so the tests beside
the code (``x_test.py``) would ship with it. pyproject.toml names ``BuildPy`` as the
``build_py`` command (``[tool.setuptools] cmdclass``); an editable install (``pip install -e``)
reads the source tree itself, so the tests still import there.
"""

from setuptools.command.build_py import build_py


def is_test_module(module: str) -> bool:
    """A test module: ``x_test`` beside ``x``, or a pytest ``conftest``."""
    return module.endswith("_test") or module == "conftest"


class BuildPy(build_py):
    """setuptools' build_py without the test modules."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [entry for entry in modules if not is_test_module(entry[1])]
