"""The wheel ships the library without its tests: setuptools' own build_py would package
every ``x_test.py`` beside its module (145 of them); wheel_contents.BuildPy, named in
pyproject.toml, leaves them out. Read from setuptools' file list (what ``pip wheel`` packs),
without building."""

import warnings

import pytest
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

import wheel_contents
from core import curriculum


def _modules(monkeypatch, command=None) -> list[str]:
    """The module files build_py puts in the wheel, as pyproject.toml configures it."""
    monkeypatch.chdir(curriculum.REPO_ROOT)
    dist = Distribution({"script_name": "setup.py"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setuptools' deprecation notices about the metadata
        dist.parse_config_files()
    if command is not None:
        dist.cmdclass["build_py"] = command
    build = dist.get_command_obj("build_py")
    build.ensure_finalized()
    return [path for _package, _module, path in build.find_all_modules()]


def test_the_wheel_has_no_test_modules(monkeypatch):
    files = _modules(monkeypatch)
    assert "core/numerics.py" in files and "capstones/byte_transformer/serve.py" in files
    tests = [f for f in files if f.endswith("_test.py") or f.endswith("conftest.py")]
    assert not tests, f"the wheel would ship {len(tests)} test modules: {tests[:5]}"


def test_setuptools_alone_would_ship_them(monkeypatch):
    """The check bites: with setuptools' own build_py the same list holds the tests."""
    files = _modules(monkeypatch, build_py)
    assert "core/numerics_test.py" in files


@pytest.mark.parametrize(
    "module,is_test",
    [("numerics_test", True), ("conftest", True), ("numerics", False),
     ("test_utils", False), ("latest", False)],
)  # fmt: skip
def test_which_modules_are_tests(module, is_test):
    assert wheel_contents.is_test_module(module) is is_test
