"""The environment receipt for the lesson "Set up your learning workspace".

A receipt records what a run actually used: the Python and package versions, JAX's backend
and devices, the JAX/XLA environment variables, the host, and the git revision of the
checkout. It is a plain JSON-serializable dict, so it can be saved beside a result and
verified (``from_json``) before anyone trusts it.

Package versions come from the installed distributions' metadata (importlib.metadata), never
from importing the package: importing torch or tensorflow takes seconds.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tomllib

import pydantic

from core import curriculum, documents, runtime

SCHEMA_VERSION = 1
REPO_ROOT = curriculum.REPO_ROOT
PYPROJECT = REPO_ROOT / "pyproject.toml"
ENV_VARS = ("XLA_FLAGS", "JAX_PLATFORMS", "JAX_NUM_CPU_DEVICES")
STATUSES = ("ok", "mismatch", "missing", "optional")
GROUPS = ("all", "jax", "tools", "frameworks", "tpu")
GIT_TIMEOUT_S = 10

# The one command that installs the whole pinned stack (what `make lab` runs).
REINSTALL_ALL = ".venv/bin/pip install -e '.[dev,frameworks]'"


@dataclasses.dataclass(frozen=True)
class Package:
    """A package the course uses; ``distributions`` are the pip names that provide it."""

    name: str
    group: str
    distributions: tuple[str, ...]


PACKAGES: tuple[Package, ...] = (
    Package("jax", "jax", ("jax",)),
    Package("jaxlib", "jax", ("jaxlib",)),
    Package("flax", "jax", ("flax",)),
    Package("optax", "jax", ("optax",)),
    Package("orbax-checkpoint", "jax", ("orbax-checkpoint",)),
    Package("chex", "jax", ("chex",)),
    Package("grain", "jax", ("grain",)),
    Package("marimo", "tools", ("marimo",)),
    Package("mlflow", "tools", ("mlflow",)),
    Package("altair", "tools", ("altair",)),
    Package("keras", "frameworks", ("keras",)),
    Package("torch", "frameworks", ("torch",)),
    # The lab pins the CPU-only build; a full `tensorflow` install provides the same module.
    Package("tensorflow", "frameworks", ("tensorflow-cpu", "tensorflow")),
    # libtpu comes with the `tpu` extra and is needed only on a TPU VM.
    Package("libtpu", "tpu", ("libtpu",)),
)
PACKAGES_BY_NAME = {package.name: package for package in PACKAGES}


def normalize_name(name: str) -> str:
    """A distribution name in PEP 503 form: lower case, runs of -_. become one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_version(*distributions: str) -> tuple[str | None, str | None]:
    """(distribution, version) of the first of ``distributions`` installed, else (None, None)."""
    for distribution in distributions:
        try:
            return distribution, importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


def git_revision(repo: str | os.PathLike = REPO_ROOT) -> tuple[str | None, bool | None]:
    """(HEAD commit sha, dirty) of the git checkout at ``repo``.

    Dirty means files differ from HEAD: modified, staged, deleted or untracked (not ignored)
    files, since any of them means the sha alone cannot reproduce the run. Not a git
    repository, git not installed or git too slow: (None, None). A repository without
    commits: (None, dirty).
    """

    def git(*args: str) -> subprocess.CompletedProcess | None:
        try:
            return subprocess.run(
                ["git", "-C", os.fspath(repo), *args],
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None

    status = git("status", "--porcelain", "--untracked-files=normal")
    if status is None or status.returncode != 0:
        return None, None
    dirty = bool(status.stdout.strip())
    head = git("rev-parse", "--verify", "--quiet", "HEAD")
    sha = head.stdout.strip() if head is not None and head.returncode == 0 else None
    return sha or None, dirty


def _jax_summary() -> dict:
    """JAX's backend and devices; starts the backend. On failure, the error instead."""
    summary = {
        "backend": None,
        "device_kind": None,
        "device_count": None,
        "devices": [],
        "error": None,
    }
    try:
        import jax

        devices = jax.devices()
        summary.update(
            backend=jax.default_backend(),
            device_kind=devices[0].device_kind,
            device_count=len(devices),
            devices=[str(device) for device in devices],
        )
    except Exception as exc:  # a receipt must still be written when JAX is broken
        summary["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return summary


def environment_receipt(repo: str | os.PathLike = REPO_ROOT, include_env: bool = True) -> dict:
    """What this process runs on, as a JSON-serializable dict (see ``Receipt``).

    Starts JAX's backend (device count is then fixed for the process). With
    ``include_env=False`` the environment variables are left out (an empty dict).
    """
    packages = {}
    for package in PACKAGES:
        distribution, version = installed_version(*package.distributions)
        packages[package.name] = {"distribution": distribution, "version": version}
    sha, dirty = git_revision(repo)
    return {
        "schema_version": SCHEMA_VERSION,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python_version": platform.python_version(),
        "python_executable": sys.executable,
        "packages": packages,
        "jax": _jax_summary(),
        "env": {name: os.environ.get(name) for name in ENV_VARS} if include_env else {},
        "host": {
            "hostname": socket.gethostname(),
            "os": platform.system(),
            "platform": platform.platform(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "tpu_vm": runtime.host_has_tpu(),
        },
        "git": {"revision": sha, "dirty": dirty},
    }


class _Package(documents.Document):
    distribution: str | None
    version: str | None


class _Jax(documents.Document):
    backend: str | None
    device_kind: str | None
    device_count: int | None
    devices: list[str]
    error: str | None


class _Host(documents.Document):
    hostname: str
    os: str
    platform: str
    machine: str
    cpu_count: int | None
    tpu_vm: bool


class _Git(documents.Document):
    revision: str | None
    dirty: bool | None


class Receipt(documents.Document):
    """environment_receipt.json (schema_version 1): what one process ran on."""

    schema_version: int
    created_utc: str
    python_version: str
    python_executable: str
    packages: dict[str, _Package]
    jax: _Jax
    env: dict[str, str | None]
    host: _Host
    git: _Git

    _iso_created = pydantic.field_validator("created_utc")(documents.iso_time)


def validate(receipt) -> dict:
    """``receipt`` if it has every required field with the right type, else ValueError."""
    if not isinstance(receipt, dict):
        raise ValueError(f"an environment receipt is a JSON object, got {type(receipt).__name__}")
    version = receipt.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(
            f"environment receipt schema_version {version!r}: this lab reads version "
            f"{SCHEMA_VERSION} (is this file an environment_receipt.json?)"
        )
    return documents.validate(Receipt, receipt, "environment receipt")


def to_json(receipt: dict) -> str:
    """The receipt as indented JSON text (validated first, so only good receipts are saved)."""
    return json.dumps(validate(receipt), indent=2, sort_keys=True) + "\n"


def from_json(text: str | bytes) -> dict:
    """Parse and validate a saved receipt; ValueError naming the problem on a bad file."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:  # + UnicodeDecodeError, a 5000-digit number
        raise ValueError(f"environment receipt is not valid JSON: {exc}") from None
    return validate(document)


_PIN = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*(?P<version>[^\s;,]+)\s*(?:;.*)?\Z"
)


def pinned_versions(
    pyproject_path: str | os.PathLike = PYPROJECT, extras: tuple[str, ...] = ("frameworks",)
) -> dict[str, str]:
    """{normalized distribution name: version} for every ``name==version`` requirement.

    Reads ``[project].dependencies`` and the optional extras named in ``extras``;
    requirements without an exact pin (``pandas``, ``pytest>=8``) are skipped.
    """
    with open(pyproject_path, "rb") as file:
        document = tomllib.load(file)
    project = document.get("project")
    if not isinstance(project, dict):
        raise ValueError(f"{pyproject_path}: no [project] table, so no pins to compare with")
    requirements = list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise ValueError(
                f"{pyproject_path}: no optional extra {extra!r}; it has {sorted(optional)}"
            )
        requirements += optional[extra]
    pins: dict[str, str] = {}
    for requirement in requirements:
        match = _PIN.match(requirement)
        if not match:
            continue
        name, version = normalize_name(match["name"]), match["version"]
        if pins.get(name, version) != version:
            raise ValueError(
                f"{pyproject_path}: {name} is pinned to both {pins[name]} and {version}"
            )
        pins[name] = version
    return pins


def versions_match(installed: str, pinned: str) -> bool:
    """Whether an installed version satisfies ``==pinned``.

    As in pip, a local label (``2.13.0+cpu``) satisfies a pin without one (``2.13.0``).
    """
    if "+" not in pinned:
        installed = installed.split("+", 1)[0]
    return installed == pinned


def package_table(receipt: dict, pins: dict[str, str]) -> list[dict]:
    """One row per package of the receipt: installed vs pinned version and a status.

    status: "ok" (installed, and matches the pin if there is one), "mismatch", "missing", or
    "optional" (libtpu absent on a host without TPU chips, where it is not needed).
    """
    pins = {normalize_name(name): version for name, version in pins.items()}
    rows = []
    for name, entry in receipt["packages"].items():
        package = PACKAGES_BY_NAME.get(name, Package(name, "other", (name,)))
        installed, distribution = entry["version"], entry["distribution"]
        candidates = ((distribution,) if distribution else ()) + package.distributions
        pinned_distribution = next((d for d in candidates if normalize_name(d) in pins), None)
        pinned = pins[normalize_name(pinned_distribution)] if pinned_distribution else None
        if installed is None:
            needed = package.group != "tpu" or receipt["host"]["tpu_vm"]
            status = "missing" if needed else "optional"
        elif pinned is None or versions_match(installed, pinned):
            status = "ok"
        else:
            status = "mismatch"
        rows.append(
            {
                "package": name,
                "group": package.group,
                "distribution": distribution or pinned_distribution or package.distributions[0],
                "installed": installed,
                "pinned": pinned,
                "status": status,
            }
        )
    return rows


def fix_command(row: dict) -> str:
    """The shell command that installs the pinned version of one package-table row."""
    distribution, pinned = row["distribution"], row["pinned"]
    if row["group"] == "tpu":
        return ".venv/bin/pip install -e '.[tpu]'  # libtpu: on a TPU VM only"
    if row["package"] == "torch":
        version = pinned or "2.13.0"
        return (
            f".venv/bin/pip install torch=={version}  "
            "# the pinned CPU wheel; an unpinned torch pulls a multi-GB CUDA build"
        )
    if pinned is None:
        return f"{REINSTALL_ALL}  # or: make lab"
    return f".venv/bin/pip install '{distribution}=={pinned}'  # or the whole stack: make lab"


def fixes(rows: list[dict]) -> list[str]:
    """One line per missing or mismatched row: what is wrong, and the command that fixes it."""
    lines = []
    for row in rows:
        if row["status"] not in ("missing", "mismatch"):
            continue
        found = "not installed" if row["installed"] is None else f"{row['installed']} installed"
        wanted = f", pinned {row['pinned']}" if row["pinned"] else ""
        lines.append(f"{row['package']}: {row['status']} ({found}{wanted}) -> {fix_command(row)}")
    return lines


def receipt_rows(receipt: dict) -> list[dict]:
    """The receipt flattened to {"field", "value"} rows (dotted field names), for a table."""
    rows = []

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else key, item)
        elif isinstance(value, list):
            rows.append({"field": prefix, "value": ", ".join(map(str, value))})
        else:
            rows.append({"field": prefix, "value": "-" if value is None else str(value)})

    walk("", receipt)
    return rows


PROBE_CODE = (
    "import json, sys, jax, jaxlib; print(json.dumps({"
    "'python_version': sys.version.split()[0], 'jax_version': jax.__version__, "
    "'jaxlib_version': jaxlib.__version__, 'backend': jax.default_backend(), "
    "'device_count': jax.device_count()}))"
)


def probe_fresh_process(cpu_devices: int, timeout_s: float = 60.0) -> dict:
    """Versions and device count as a fresh Python process sees them, on CPU.

    The independent reference for a receipt: a new interpreter (same executable) that imports
    jax and asks it directly, with JAX_NUM_CPU_DEVICES=``cpu_devices`` and JAX_PLATFORMS=cpu
    (a TPU is held by the process that opened it, so the probe never asks for one).
    """
    if cpu_devices < 1:
        raise ValueError(f"cpu_devices must be >= 1, got {cpu_devices}")
    env = runtime.child_env(JAX_NUM_CPU_DEVICES=str(cpu_devices), JAX_PLATFORMS="cpu")
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE_CODE],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the fresh Python process took longer than {timeout_s} s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"the fresh Python process failed: {last}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare_with_probe(receipt: dict, probe: dict) -> list[dict]:
    """Rows {"field", "receipt", "subprocess", "match"} for what both sides report.

    The device count is compared only when this process runs JAX on CPU (the probe always
    does).
    """
    packages = receipt["packages"]
    pairs = [
        ("python version", receipt["python_version"], probe.get("python_version")),
        ("jax version", packages.get("jax", {}).get("version"), probe.get("jax_version")),
        ("jaxlib version", packages.get("jaxlib", {}).get("version"), probe.get("jaxlib_version")),
    ]
    if receipt["jax"]["backend"] == "cpu":
        pairs.append(("device count", receipt["jax"]["device_count"], probe.get("device_count")))
    return [
        {"field": field, "receipt": str(mine), "subprocess": str(theirs), "match": mine == theirs}
        for field, mine, theirs in pairs
    ]
