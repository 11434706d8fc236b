"""The course's locks: the environment is exactly requirements.lock, the service's and
Kubeflow's locks agree with it, and the lock answers what pyproject.toml asks for.

The failure this prevents (issue 36): the course's environment was resolved afresh on every
fresh clone, so a new idna on the registry (3.21) disagreed with the service's lock (3.20) and
CI went red on every machine the day it appeared.
"""

import importlib.metadata
import sys
import tomllib

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from core import envlock

# The lock's target, for evaluating dependency markers (PEP 508) without this interpreter.
TARGET = {
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}


def course_lock() -> dict[str, str]:
    return envlock.pins(envlock.COURSE_LOCK.read_text())


def requires(name: str, extras: frozenset[str]) -> set[tuple[str, frozenset[str]]]:
    """(dependency, its extras) that the installed ``name`` needs on the lock's target, with
    ``extras`` asked of it: its metadata's Requires-Dist, markers evaluated here."""
    needed = set()
    for line in importlib.metadata.requires(name) or []:
        requirement = Requirement(line)
        marker = requirement.marker
        for extra in {"", *extras}:
            if marker is None or marker.evaluate({**TARGET, "extra": extra}):
                needed.add((envlock.normal(requirement.name), frozenset(requirement.extras)))
                break
    return needed


def closure(roots: list[str]) -> set[str]:
    """Every distribution ``roots`` need on the target, from the installed metadata (not
    pip's resolver: an independent reading of the same dependency graph)."""
    todo = [(envlock.normal(Requirement(r).name), frozenset(Requirement(r).extras)) for r in roots]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        item = todo.pop()
        if item not in seen:
            seen.add(item)
            todo += requires(*item)
    return {name for name, _extras in seen}


def test_the_course_environment_is_exactly_the_lock():
    problems = envlock.differences()
    assert problems == [], "run `make install` (python -m core.envlock sync):\n" + "\n".join(
        problems
    )


def test_the_lock_answers_every_requirement_of_pyproject():
    locked = course_lock()
    roots = envlock.course_roots()
    assert "pip" in roots and any(r.startswith("setuptools") for r in roots)
    stale = []
    for root in roots:
        requirement = Requirement(root)
        name = envlock.normal(requirement.name)
        version = locked.get(name)
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            stale.append(f"{root}: the lock has {version}")
    assert stale == [], "pyproject.toml changed without `make lock`: " + "; ".join(stale)


def test_the_lock_is_closed_under_dependencies():
    roots = [r for r in envlock.course_roots() if Requirement(r).name not in ("pip", "setuptools")]
    needed = closure(roots)
    assert needed - set(course_lock()) == set()


def test_the_service_lock_is_the_course_lock_restricted():
    course = envlock.pin_lines(envlock.COURSE_LOCK.read_text())
    service = envlock.pin_lines(envlock.SERVICE_LOCK.read_text())
    assert {name: course.get(name) for name in service} == service
    roots = envlock.requirement_lines(envlock.SERVICE_IN)
    assert {envlock.normal(Requirement(r).name) for r in roots} <= set(service)
    assert closure(roots) <= set(service), "the service lock misses a dependency"


def test_the_service_lock_pins_the_installed_versions():
    pinned = envlock.pins(envlock.SERVICE_LOCK.read_text())
    assert envlock.pin_mismatches(pinned) == []
    for name in ("jax", "jaxlib", "numpy", "fastapi", "uvicorn", "pydantic", "flatbuffers"):
        assert pinned[name] == importlib.metadata.version(name)
    wrong = {**pinned, "numpy": "1.0.0"}
    assert envlock.pin_mismatches(wrong) == [
        f"numpy: the lock pins 1.0.0, the course has {pinned['numpy']}"
    ]


def test_the_kubeflow_lock_holds_exactly_its_pins():
    wanted = {}
    for line in envlock.requirement_lines(envlock.KFP_IN):
        requirement = Requirement(line)
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"kfp_requirements.txt pins exactly: {line}"
        wanted[envlock.normal(requirement.name)] = spec.version
    assert envlock.pins(envlock.KFP_LOCK.read_text()) == wanted


def test_every_lock_line_is_an_exact_hashed_pin():
    for path in (envlock.COURSE_LOCK, envlock.SERVICE_LOCK, envlock.KFP_LOCK):
        assert envlock.pins(path.read_text())  # raises on any other line
    with pytest.raises(ValueError, match="exact, hashed"):
        envlock.pins("numpy>=2 --hash=sha256:" + "0" * 64)
    with pytest.raises(ValueError, match="exact, hashed"):
        envlock.pins("numpy==2.4.6")


def test_lock_lines_come_from_pips_report():
    report = {
        "install": [
            {
                "metadata": {"name": "Typing_Extensions", "version": "4.1"},
                "download_info": {"archive_info": {"hashes": {"sha256": "a" * 64}}},
            }
        ]
    }
    lines = envlock.report_pins(report)
    assert lines == {"typing-extensions": "typing-extensions==4.1 --hash=sha256:" + "a" * 64}
    text = envlock.lock_text(lines, ["header"])
    assert text.splitlines() == ["# header", lines["typing-extensions"]]
    report["install"][0]["download_info"] = {"url": "x"}
    with pytest.raises(ValueError, match="no sha256"):
        envlock.report_pins(report)


def test_a_sub_lock_cannot_disagree_with_the_course():
    course = {"idna": "idna==3.21 --hash=sha256:" + "1" * 64}
    assert envlock.derived_lines(dict(course), course) == course
    with pytest.raises(ValueError, match="idna"):
        envlock.derived_lines({"idna": "idna==3.20 --hash=sha256:" + "2" * 64}, course)
    with pytest.raises(ValueError, match="holds nothing"):
        envlock.derived_lines({"six": "six==1 --hash=sha256:" + "3" * 64}, course)


def test_unlocked_names_what_the_lock_does_not_hold():
    have = set(envlock.installed())
    assert "jax" in have and envlock.PROJECT not in envlock.unlocked({n: "" for n in have})
    assert "jax" in envlock.unlocked({n: "" for n in have - {"jax"}})


def test_resolution_targets_the_locks_platform():
    argv = envlock.resolve_command("r.txt", "out.json")
    assert "--only-binary=:all:" in argv and argv[argv.index("--python-version") + 1] == "3.11"
    platforms = [argv[i + 1] for i, a in enumerate(argv) if a == "--platform"]
    # pip does not expand a manylinux tag to older ones: every glibc 2.5-2.36 tag is listed
    assert platforms[0] == "manylinux_2_36_x86_64" and "manylinux_2_17_x86_64" in platforms
    assert "manylinux_2_27_x86_64" in platforms  # jaxlib 0.10.2's wheels
    sdists = envlock.resolve_command("r.txt", "out.json", wheels_only=False)
    assert "--platform" not in sdists and "--only-binary=:all:" not in sdists


def test_the_makefile_installs_the_lock_and_lock_rewrites_it():
    makefile = (envlock.ROOT / "Makefile").read_text()
    assert "-m core.envlock sync" in makefile and "-m core.envlock lock" in makefile
    assert "--require-hashes" in makefile  # the Kubeflow env installs its lock too
    stamp = makefile.split("$(STAMP): ", 1)[1].split("\n\n", 1)[0]  # the .venv recipe
    assert "core.envlock sync" in stamp and "requirements.lock" in stamp.splitlines()[0]
    assert "pip install" not in stamp


def test_markers_are_read_for_the_target_not_this_machine():
    assert Marker('sys_platform == "win32"').evaluate({**TARGET, "extra": ""}) is False
    assert SpecifierSet("==2.13.0").contains("2.13.0+cpu")  # the CPU torch wheel's version
    pyproject = tomllib.loads(envlock.PYPROJECT.read_text())
    assert set(envlock.COURSE_EXTRAS) <= set(pyproject["project"]["optional-dependencies"])


def test_a_vendored_folder_on_sys_path_is_not_the_environment(tmp_path, monkeypatch):
    """Importing setuptools appends setuptools/_vendor to sys.path; its dist-infos are not
    installed packages, so the check must not depend on which test imported setuptools first."""
    package = tmp_path / "toolkit"  # a package that vendors a dependency inside itself
    vendored = package / "_vendor" / "vendored_helper-1.0.dist-info"
    vendored.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (vendored / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vendored-helper\nVersion: 1.0\n"
    )
    monkeypatch.syspath_prepend(str(package / "_vendor"))
    assert "vendored-helper" in {
        envlock.normal(d.metadata["Name"]) for d in importlib.metadata.distributions()
    }  # the planted dist-info is visible on sys.path ...
    assert "vendored-helper" not in envlock.installed()  # ... and is not the environment
    assert "numpy" in envlock.installed()


def test_pips_package_sources_reach_uv():
    """uv reads neither pip's configuration files nor PIP_* variables: sync hands it the
    sources pip would use, in pip's order of preference, and uv keeps pip's checks."""
    listing = "\n".join(
        [
            "global.extra-index-url='file:///a/simple file:///b/simple'",
            "global.find-links='/opt/wheels'",
            "global.cert='/etc/ssl/certs/ca.crt'",
            "global.index-url='https://ignored.example/simple'",
            ":env:.find-links='/srv/wheels'",
            "install.index-url='https://mirror.example/simple'",
            "global.constraint='/etc/xdg/pip/constraints.txt'",
        ]
    )
    settings = envlock.pip_config(listing)
    assert settings["find-links"] == "/srv/wheels"  # a PIP_ variable beats the files
    assert settings["index-url"] == "https://mirror.example/simple"  # install beats global
    flags, env = envlock.uv_source_flags(settings)
    assert flags == [
        "--index-url", "https://mirror.example/simple",
        "--extra-index-url", "file:///a/simple", "--extra-index-url", "file:///b/simple",
        "--find-links", "/srv/wheels",
    ]  # fmt: skip
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca.crt"}
    assert envlock.uv_source_flags({"no-index": "true"})[0] == ["--no-index"]
    proxy = envlock.uv_source_flags({"proxy": "http://proxy.example:3128"})[1]
    assert proxy["HTTPS_PROXY"] == proxy["HTTP_PROXY"] == "http://proxy.example:3128"
    command = envlock.uv_install_command("uv", envlock.COURSE_LOCK, flags)
    for flag in ("--require-hashes", "--no-deps", "--no-cache", "--no-compile"):
        assert flag in command
    assert command[command.index("--only-binary") + 1] == ":all:"
    assert command[command.index("--python") + 1] == sys.executable
    assert envlock.INSTALLER in course_lock()  # sync installs uv from its hashed lock line


def test_a_lock_without_uv_is_installed_by_pip(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("six==1.16.0 --hash=sha256:" + "0" * 64 + "\n")
    assert envlock.install_with_uv(lock) is False  # nothing was run: sync falls back to pip
