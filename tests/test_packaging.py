"""The wheel ships the library without its tests: setuptools' own build_py would package
every ``x_test.py`` beside its module (145 of them); wheel_contents.BuildPy, named in
pyproject.toml, leaves them out. Read from setuptools' file list (what ``pip wheel`` packs),
without building."""

import pathlib
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


# --- the wheel alone: what an exported lesson reads on a TPU VM (issue 37, kind 4) ----------


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory):
    """The project's wheel as course-run builds it for a TPU VM (tpu_scripts.project_wheel:
    from a clean copy of the sources), unpacked: a pure-Python wheel's files are its install."""
    import zipfile

    from tpu_scripts import project_wheel

    wheel = project_wheel.build_wheel(tmp_path_factory.mktemp("dist"))
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


def test_the_wheel_ships_the_files_lessons_read_outside_the_packages(wheel_site):
    shipped = wheel_site / wheel_contents.COURSE_DIR
    for slug in sorted(curriculum.named_app_slugs()):
        assert (shipped / "apps" / f"{slug}.py").is_file(), slug
    for name in ("deploy/Dockerfile", "deploy/requirements.lock"):
        assert (shipped / name).is_file(), name
    for capstone in curriculum.CAPSTONES:
        assert (shipped / "docs" / "portfolio" / f"{capstone.slug}.md").is_file(), capstone.slug
    records = curriculum.REPO_ROOT / "benchmarks" / "records"
    assert sorted(p.relative_to(records) for p in records.glob("*/*.json")) == sorted(
        p.relative_to(shipped / "benchmarks" / "records")
        for p in (shipped / "benchmarks" / "records").glob("*/*.json")
    )
    assert (wheel_site / "tpu_scripts" / "examples" / "sharded_step.py").is_file()
    assert sorted(p.name for p in (wheel_site / "tpu_scripts" / "envs").glob("*.txt")) == sorted(
        p.name for p in (curriculum.REPO_ROOT / "tpu_scripts" / "envs").glob("*.txt")
    )
    assert not list(wheel_site.rglob("*_test.py"))


def test_an_exported_lesson_runs_from_the_wheel_alone(wheel_site, tmp_path):
    """stage_launch_jobs, exported and run on a TPU VM from the installed wheel (no checkout
    beside it), stopped with "no such file to stage: tpu_scripts/examples/sharded_step.py"; it
    also exports another lesson's app there. Run the same way here: the wheel's files first on
    the path, from a folder outside the checkout."""
    import subprocess
    import sys

    from core import runtime
    from tpu_scripts import export

    script = export.export_app(
        curriculum.APPS_DIR / "stage_launch_jobs.py", tmp_path / "stage_launch_jobs.py"
    )
    env = runtime.child_env(PYTHONPATH=str(wheel_site), JAX_PLATFORMS="cpu")
    probe = (
        "import core; from core import curriculum; from core.perf import records; "
        "from core.serving import container; print(core.__file__); "
        "print(curriculum.APPS_DIR, curriculum.PORTFOLIO_DIR, records.RECORDS_DIR, "
        "container.DOCKERFILE)"
    )
    where = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    module, found = where.stdout.splitlines()
    assert module.startswith(str(wheel_site)), where.stdout + where.stderr
    for path in map(pathlib.Path, found.split()):  # the copies the wheel ships
        assert path.is_relative_to(wheel_site / wheel_contents.COURSE_DIR) and path.exists()
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True, text=True, cwd=work, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "STOPPED" not in done.stdout and "FAIL" not in done.stdout, done.stdout[-3000:]
    assert any(line.startswith("PASS") for line in done.stdout.splitlines()), done.stdout
