"""The course's environments, locked: every package pinned to one version and one wheel's sha256.

`make lock` resolves once and writes three locks for Linux x86-64, CPython 3.11 (the course's
machines, the TPU VM's Python and the service image's base):

- ``requirements.lock``: the course's own environment (.venv): pyproject.toml's dependencies
  and the extras ``make`` installs, its build requirements, and pip. ``make lab`` and
  ``make test`` install exactly this (``python -m core.envlock sync``): nothing unpinned is
  ever resolved on a learner's machine or in CI, so a new release of any package on the
  registry changes nothing until someone runs ``make lock`` and commits the result.
- ``deploy/requirements.lock``: the predict service's image. Derived from the course's
  resolution (pip resolves ``deploy/requirements.in`` constrained to the course's pins, and
  each line is copied from ``requirements.lock``), so the image and the course never disagree.
- ``core/lessons/operations/kfp_requirements.lock``: Kubeflow Pipelines' own environment
  (.venv-kfp; kfp pins conflict with .venv), from the pins of ``kfp_requirements.txt``.

This module imports only the standard library: ``sync`` runs before anything is installed.

    python -m core.envlock lock     resolve (pip, network) and write the three locks
    python -m core.envlock sync     make this interpreter's environment exactly the course lock
    python -m core.envlock check    list what differs between this environment and the lock
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import pathlib
import re
import subprocess
import sys
import sysconfig
import tempfile
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
COURSE_LOCK = ROOT / "requirements.lock"
SERVICE_IN = ROOT / "deploy" / "requirements.in"
SERVICE_LOCK = ROOT / "deploy" / "requirements.lock"
KFP_IN = ROOT / "core" / "lessons" / "operations" / "kfp_requirements.txt"
KFP_LOCK = ROOT / "core" / "lessons" / "operations" / "kfp_requirements.lock"
# The extras `make` installs into .venv (the Makefile's STAMP recipe).
COURSE_EXTRAS = ("dev", "frameworks", "tpu", "operations")
PROJECT = "jax-tpu-lab"
# The target: CPython 3.11 on x86-64 Linux with glibc up to 2.36 (Debian bookworm: this
# machine, CI, the TPU VM and python:3.11.7-slim-bookworm). pip takes the platform tags as
# given, in order of preference, without expanding older manylinux versions: list them all.
LOCK_PYTHON = "3.11"
LOCK_PLATFORMS = (
    *(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)),
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
INSTALL_HINT = "pip install --require-hashes --only-binary=:all: --no-deps -r"
# What unpacks the lock's wheels into .venv when the lock pins it: uv installs the same files,
# hash-checked, without resolution, but unpacks them in parallel where pip works on one core
# (the commit that made this has the A/B). pip remains the fallback and installs uv itself.
INSTALLER = "uv"
# pip's settings that say where packages come from, and uv's flag for each (pip reads its own
# configuration files and PIP_* variables; uv reads neither, so sync passes them on).
PIP_TO_UV_FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "trusted-host": "--allow-insecure-host",
}
# pip's sources in the order it prefers them: its variables, then the install command's
# section, then the global one.
PIP_CONFIG_SECTIONS = (":env:", "install", "global")
PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?: --hash=sha256:[0-9a-f]{64})+)")


def normal(name: str) -> str:
    """A distribution name in PEP 503 normal form (``Typing_Extensions`` -> typing-extensions)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pin_lines(text: str) -> dict[str, str]:
    """{normalized name: its whole line} of a lock; ValueError for a line that is not an
    exact, hashed pin."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.fullmatch(line)
        if match is None:
            raise ValueError(f"not an exact, hashed pin: {line[:80]!r}")
        out[normal(match[1])] = line
    return out


def pins(text: str) -> dict[str, str]:
    """{normalized name: version} of a lock file; ValueError for a line without == or hash."""
    return {name: PIN.fullmatch(line)[2] for name, line in pin_lines(text).items()}


def environment_paths() -> list[str]:
    """sys.path without the folders a package vendors inside itself.

    Importing setuptools (>= 71) appends its own ``setuptools/_vendor`` to sys.path, whose
    dist-infos (jaraco.*, tomli, ...) would then look installed, but only in a process that
    happened to import setuptools first. A folder whose parent is a package (holds
    ``__init__.py``) is such a vendored tree, not a place the environment installs into."""
    return [
        entry
        for entry in sys.path
        if not (pathlib.Path(entry or ".").resolve().parent / "__init__.py").is_file()
    ]


def distributions() -> list[importlib.metadata.Distribution]:
    """The distributions installed in this environment, first on sys.path first."""
    return list(importlib.metadata.distributions(path=environment_paths()))


def installed() -> dict[str, str]:
    """{normalized name: version} of every distribution installed in this environment."""
    found = {}
    for dist in distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normal(name), dist.version)
    return found


def pin_mismatches(pinned: dict[str, str]) -> list[str]:
    """Each pin whose version differs from the one installed in this environment."""
    have = installed()
    problems = []
    for name, version in sorted(pinned.items()):
        if name not in have:
            problems.append(f"{name}=={version} is not installed here")
        elif have[name] != version:
            problems.append(f"{name}: the lock pins {version}, the course has {have[name]}")
    return problems


def unlocked(pinned: dict[str, str], ignore: tuple[str, ...] = (PROJECT,)) -> list[str]:
    """Installed distributions the lock does not name (the project itself aside)."""
    return sorted(set(installed()) - set(pinned) - {normal(n) for n in ignore})


def course_roots(pyproject: pathlib.Path = PYPROJECT) -> list[str]:
    """What the course asks for: dependencies, COURSE_EXTRAS, build requirements, pip and the
    installer ``sync`` uses (INSTALLER)."""
    document = tomllib.loads(pyproject.read_text())
    project = document["project"]
    roots = list(project["dependencies"])
    for extra in COURSE_EXTRAS:
        roots += project["optional-dependencies"][extra]
    return roots + list(document["build-system"]["requires"]) + ["pip", INSTALLER]


def resolve_command(
    requirements: pathlib.Path, report: pathlib.Path, constraints=None, wheels_only=True
) -> list[str]:
    """pip's resolution of ``requirements`` without installing: for the lock's platform
    (wheels only), or, where a package ships only a source archive (kfp-server-api), for this
    interpreter (which must then be CPython 3.11 on x86-64 Linux)."""
    argv = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
        "--report", str(report), "-r", str(requirements),
    ]  # fmt: skip
    if wheels_only:
        argv += ["--only-binary=:all:", "--implementation", "cp", "--python-version", LOCK_PYTHON]
        argv += ["--target", tempfile.gettempdir()]
        for tag in LOCK_PLATFORMS:
            argv += ["--platform", tag]
    return argv + (["-c", str(constraints)] if constraints else [])


def report_pins(report: dict) -> dict[str, str]:
    """{normalized name: "name==version --hash=sha256:..."} of pip's install report."""
    lines = {}
    for item in report["install"]:
        name, version = normal(item["metadata"]["name"]), item["metadata"]["version"]
        hashes = item["download_info"].get("archive_info", {}).get("hashes", {})
        if "sha256" not in hashes:
            raise ValueError(f"{name}: the index gave no sha256")
        lines[name] = f"{name}=={version} --hash=sha256:{hashes['sha256']}"
    return lines


def lock_text(lines: dict[str, str], header: list[str]) -> str:
    """A lock file: '# ' header lines, then one pin per line, sorted by name."""
    return "\n".join([f"# {h}" for h in header] + [lines[n] for n in sorted(lines)]) + "\n"


def resolve(
    requirements: list[str], constraints: dict[str, str] | None = None, wheels_only=True
) -> dict:
    """pip's install report for ``requirements`` (and ``constraints``: {name: version})."""
    with tempfile.TemporaryDirectory() as tmp:
        wanted, report = pathlib.Path(tmp) / "requirements.txt", pathlib.Path(tmp) / "r.json"
        wanted.write_text("\n".join(requirements) + "\n")
        pinned = None
        if constraints:
            pinned = pathlib.Path(tmp) / "constraints.txt"
            pinned.write_text("".join(f"{n}=={v}\n" for n, v in sorted(constraints.items())))
        subprocess.run(resolve_command(wanted, report, pinned, wheels_only), check=True)
        return json.loads(report.read_text())


def requirement_lines(path: pathlib.Path) -> list[str]:
    """The requirement lines of a requirements file (comments and blanks dropped)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def derived_lines(resolved: dict[str, str], course: dict[str, str]) -> dict[str, str]:
    """A sub-environment's lock lines, each copied from the course lock; ValueError when the
    sub-resolution picked a package or version the course lock does not hold."""
    out = {}
    for name, line in resolved.items():
        if course.get(name) != line:
            held = course.get(name, "nothing")
            raise ValueError(f"{name}: the sub-resolution gave {line!r}, the course holds {held}")
        out[name] = course[name]
    return out


def write_locks() -> None:
    """Resolve the course once and write its lock, the service's and Kubeflow's."""
    command = "make lock (python -m core.envlock lock)"
    course = report_pins(resolve(course_roots()))
    header = [
        "The course's environment (.venv), for Linux x86-64 CPython 3.11: every package, one",
        f"wheel each, with its sha256. Generated by `{command}`",
        "from pyproject.toml; `make lab` and `make test` install exactly this",
        f"({INSTALL_HINT} requirements.lock).",
    ]
    COURSE_LOCK.write_text(lock_text(course, header))
    versions = {name: pins(line)[name] for name, line in course.items()}
    service = report_pins(resolve(requirement_lines(SERVICE_IN), constraints=versions))
    header = [
        "The predict service's runtime, for the image (Linux x86-64, CPython 3.11).",
        f"Generated by `{command}` from deploy/requirements.in,",
        "resolved within the course's own lock (requirements.lock): each line is its line.",
        f"Install with {INSTALL_HINT} requirements.lock",
    ]
    SERVICE_LOCK.write_text(lock_text(derived_lines(service, course), header))
    if sys.version_info[:2] != (3, 11):
        raise RuntimeError("the Kubeflow lock resolves for this interpreter: run on CPython 3.11")
    kfp = report_pins(resolve(requirement_lines(KFP_IN), wheels_only=False))
    header = [
        "Kubeflow Pipelines' own environment (.venv-kfp), Linux x86-64 CPython 3.11: the pins",
        "of kfp_requirements.txt with their files' sha256 (kfp-server-api ships only a source",
        f"archive). Generated by `{command}`.",
    ]
    KFP_LOCK.write_text(lock_text(kfp, header))


def compile_installed(workers: int = 0) -> None:
    """Byte-compile this environment's site-packages on ``workers`` processes (0: one per
    core), the files pip would compile one at a time (the A/B of a fresh venv's ``sync`` is in
    the commit that made this). Files already compiled are skipped; a file that does not
    compile (a package's template or Python 2 example) is left as pip leaves it."""
    import compileall
    import sysconfig

    for folder in sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}):
        compileall.compile_dir(folder, quiet=2, workers=workers)


def pip_config(listing: str) -> dict[str, str]:
    """{setting: value} that pip's install command uses, from ``pip config list``'s lines
    (``global.find-links='/opt/wheels'``, ``:env:.index-url='...'``): for each setting the
    value of the first section of PIP_CONFIG_SECTIONS that sets it."""
    found: dict[tuple[str, str], str] = {}
    for line in listing.splitlines():
        match = re.fullmatch(r"(:env:|[a-z]+)\.([a-z-]+)=(.*)", line.strip())
        if match:
            value = match[3]
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            found[match[1], match[2]] = value
    settings = {}
    for section in reversed(PIP_CONFIG_SECTIONS):
        settings |= {key: value for (where, key), value in found.items() if where == section}
    return settings


def uv_source_flags(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's flags and environment for the package sources pip's ``settings`` name: indexes,
    find-links folders, trusted hosts, ``no-index``, the certificate bundle and the proxy."""
    flags: list[str] = []
    for setting, flag in PIP_TO_UV_FLAGS.items():
        for value in settings.get(setting, "").split():
            flags += [flag, value]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        flags.append("--no-index")
    env = {"SSL_CERT_FILE": settings["cert"]} if settings.get("cert") else {}
    if settings.get("proxy"):
        env |= {"HTTPS_PROXY": settings["proxy"], "HTTP_PROXY": settings["proxy"]}
    return flags, env


def uv_install_command(uv: str, lock: pathlib.Path, source_flags: list[str]) -> list[str]:
    """uv installing exactly ``lock`` into this interpreter's environment: the same checks as
    pip's (every file's sha256, wheels only, no dependency resolution). uv's cache stays off:
    every install unpacks afresh, as pip's does, so no copy of the stack is left in ~/.cache."""
    return [
        uv, "pip", "install", "--quiet", "--python", sys.executable, "--no-cache",
        "--require-hashes", "--only-binary", ":all:", "--no-deps", "--no-compile",
        # Every file is pinned by its sha256, so which index serves it cannot change what is
        # installed; pip, too, takes the best match across all its indexes.
        "--index-strategy", "unsafe-best-match", *source_flags, "-r", str(lock),
    ]  # fmt: skip


def install_with_uv(lock: pathlib.Path) -> bool:
    """Install ``lock`` with uv when the lock pins it: uv itself first (pip, hash-checked
    from its lock line), then the whole lock. False, with the reason printed, when the lock
    does not pin uv or uv fails (pip then installs the lock)."""
    line = pin_lines(lock.read_text()).get(INSTALLER)
    if line is None:
        return False
    pip = [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory() as tmp:
        requirement = pathlib.Path(tmp) / "installer.txt"
        requirement.write_text(line + "\n")
        subprocess.run(
            [*pip, "install", "--quiet", "--require-hashes", "--only-binary=:all:", "--no-deps",
             "-r", str(requirement)],
            check=True,
        )  # fmt: skip
    uv = str(pathlib.Path(sysconfig.get_path("scripts")) / INSTALLER)
    listing = subprocess.run([*pip, "config", "list"], capture_output=True, text=True).stdout
    flags, env = uv_source_flags(pip_config(listing))
    done = subprocess.run(uv_install_command(uv, lock, flags), env={**os.environ, **env})
    if done.returncode != 0:
        print(f"uv could not install {lock.name} (exit {done.returncode}); pip installs it")
    return done.returncode == 0


def sync(lock: pathlib.Path = COURSE_LOCK, editable: pathlib.Path | None = ROOT) -> None:
    """Make this interpreter's environment exactly ``lock``: install every pin (hash-checked,
    wheels only, no resolution; uv when the lock pins it, else pip), byte-compile, uninstall
    what the lock does not name, then install the project itself (editable, no dependencies,
    no build isolation: its build requirements are in the lock). Raises RuntimeError when the
    result still differs from the lock."""
    pip = [sys.executable, "-m", "pip"]
    if not install_with_uv(lock):
        subprocess.run(
            [*pip, "install", "--quiet", "--require-hashes", "--only-binary=:all:", "--no-deps",
             "--no-compile", "-r", str(lock)],
            check=True,
        )  # fmt: skip
    compile_installed()
    pinned = pins(lock.read_text())
    extra = unlocked(pinned)
    if extra:
        print(f"removing {len(extra)} package(s) the lock does not name: {' '.join(extra)}")
        subprocess.run([*pip, "uninstall", "--quiet", "--yes", *extra], check=True)
    if editable is not None:
        subprocess.run(
            [*pip, "install", "--quiet", "--no-deps", "--no-build-isolation", "-e", str(editable)],
            check=True,
        )
    problems = differences(lock)
    if problems:
        raise RuntimeError("the environment differs from the lock:\n" + "\n".join(problems))


def differences(lock: pathlib.Path = COURSE_LOCK) -> list[str]:
    """What differs between this environment and ``lock``: versions, missing, extra."""
    pinned = pins(lock.read_text())
    extra = [f"{name} is installed but not in the lock" for name in unlocked(pinned)]
    return pin_mismatches(pinned) + extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.envlock", description=__doc__.split(
        "\n")[0])  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("lock", help="resolve (network) and write the three locks")
    do_sync = sub.add_parser("sync", help="make this environment exactly a lock")
    do_sync.add_argument("--lock", type=pathlib.Path, default=COURSE_LOCK)
    do_sync.add_argument("--no-project", action="store_true", help="do not install the project")
    sub.add_parser("check", help="what differs between this environment and the course lock")
    args = parser.parse_args(argv)
    if args.command == "lock":
        write_locks()
        for path in (COURSE_LOCK, SERVICE_LOCK, KFP_LOCK):
            print(f"wrote {path.relative_to(ROOT)}: {len(pins(path.read_text()))} pins")
        return 0
    if args.command == "sync":
        try:
            sync(args.lock, None if args.no_project else ROOT)
        except (RuntimeError, subprocess.CalledProcessError) as error:
            print(f"sync failed: {error}", file=sys.stderr)
            return 1
        print(f"the environment is exactly {args.lock.name} ({len(pins(args.lock.read_text()))})")
        return 0
    problems = differences()
    print("\n".join(problems) if problems else "the environment is exactly requirements.lock")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
