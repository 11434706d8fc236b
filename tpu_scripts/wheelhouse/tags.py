"""Which Python and platform a wheel is for, read from its file name (PEP 427, PEP 600).

Standard library only: the TPU host runs this before anything is installed. pip would refuse
a wheel for another interpreter too, but with "is not a supported wheel on this platform";
``problem`` names the wheel, what it is for and what this host is.
"""

from __future__ import annotations

import dataclasses
import platform
import re
import sys

# The legacy manylinux names and the glibc each stands for (PEP 600).
LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
WHEEL_NAME = re.compile(
    r"(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?"
    r"-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl"
)


@dataclasses.dataclass(frozen=True)
class WheelName:
    """A wheel file name's parts; the tag fields are sets (``py2.py3`` is two tags)."""

    name: str
    version: str
    python: frozenset[str]
    abi: frozenset[str]
    platform: frozenset[str]

    @property
    def normal_name(self) -> str:
        return re.sub(r"[-_.]+", "-", self.name).lower()


def parse(filename: str) -> WheelName:
    """The parts of ``filename`` (ValueError when it is not a wheel's name)."""
    match = WHEEL_NAME.fullmatch(filename)
    if match is None:
        raise ValueError(f"{filename!r} is not a wheel file name (NAME-VERSION-PY-ABI-PLAT.whl)")
    return WheelName(
        match["name"],
        match["version"],
        frozenset(match["python"].split(".")),
        frozenset(match["abi"].split(".")),
        frozenset(match["platform"].split(".")),
    )


@dataclasses.dataclass(frozen=True)
class Target:
    """An interpreter and platform: CPython 3.11 on x86-64 Linux with glibc 2.36, say."""

    implementation: str  # "cp" for CPython
    python: tuple[int, int]
    machine: str  # "x86_64"
    glibc: tuple[int, int] | None  # None: not a glibc Linux

    def describe(self) -> str:
        impl = {"cp": "CPython"}.get(self.implementation, self.implementation)
        libc = f"glibc {self.glibc[0]}.{self.glibc[1]}" if self.glibc else "no glibc"
        return f"{impl} {self.python[0]}.{self.python[1]} on {self.machine} Linux ({libc})"


# The course's TPU hosts: Python 3.11 (JAX 0.10 needs it), x86-64, glibc 2.36 (Debian 12).
TPU_HOST = Target("cp", (3, 11), "x86_64", (2, 36))


def this_host() -> Target:
    """The interpreter running this code."""
    impl = {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name)
    libc, version = platform.libc_ver()
    glibc = None
    if libc == "glibc" and (match := re.match(r"(\d+)\.(\d+)", version)):
        glibc = (int(match[1]), int(match[2]))
    return Target(impl, sys.version_info[:2], platform.machine(), glibc)


def _python_ok(tag: str, abi: frozenset[str], target: Target) -> bool:
    major, minor = target.python
    if tag in (f"py{major}", f"py{major}{minor}", f"{target.implementation}{major}{minor}"):
        return True
    # a stable-ABI wheel for an older CPython 3 runs on this one
    match = re.fullmatch(r"cp(\d)(\d+)", tag)
    return bool(
        match
        and "abi3" in abi
        and target.implementation == "cp"
        and int(match[1]) == major
        and int(match[2]) <= minor
    )


def _abi_ok(tag: str, target: Target) -> bool:
    major, minor = target.python
    return tag in ("none", f"{target.implementation}{major}{minor}") or (
        tag == "abi3" and target.implementation == "cp"
    )


def _platform_ok(tag: str, target: Target) -> bool:
    if tag == "any":
        return True
    if tag == f"linux_{target.machine}":  # no promise about the libc: pip takes it as built here
        return True
    legacy = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", tag)
    if legacy:
        needs, machine = LEGACY_MANYLINUX[legacy[1]], legacy[2]
    else:
        match = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", tag)
        if match is None:
            return False
        needs, machine = (int(match[1]), int(match[2])), match[3]
    return machine == target.machine and target.glibc is not None and needs <= target.glibc


def problem(filename: str, target: Target) -> str | None:
    """Why the wheel ``filename`` cannot be installed for ``target``, or None when it can."""
    wheel = parse(filename)
    pythons = [t for t in sorted(wheel.python) if _python_ok(t, wheel.abi, target)]
    abis = [t for t in sorted(wheel.abi) if _abi_ok(t, target)]
    platforms = [t for t in sorted(wheel.platform) if _platform_ok(t, target)]
    if pythons and abis and platforms:
        return None
    wrong = []
    if not pythons or not abis:
        wrong.append(f"Python {'.'.join(sorted(wheel.python))} (ABI {'.'.join(sorted(wheel.abi))})")
    if not platforms:
        wrong.append(f"platform {'.'.join(sorted(wheel.platform))}")
    return f"{filename} is built for {' and '.join(wrong)}; this host is {target.describe()}"
