"""Install wheelhouse parts on the TPU host: ``wheelhouse install DIR... --target SITE``.

Standard library and pip only. Before anything is installed, every wheel of every part given
is checked: its manifest read, its file's size and sha256 against the manifest, its tags
against this interpreter (a wheel for another Python or platform is refused by name). Then
pip installs them without an index, resolution or dependencies (``--no-index --no-deps
--require-hashes``, the hashes the manifest's, which are the course lock's) into a fresh
folder, which is merged into SITE: pip's own ``--target`` replaces a whole top-level folder
such as ``google/`` that several distributions share, so parts installed one call after
another would erase each other. SITE goes at the END of PYTHONPATH: the host's own JAX,
jaxlib, libtpu, NumPy and SciPy stay first (the wheelhouse leaves them out anyway).

A part already installed (its manifest's sha256 recorded in SITE, its distributions there) is
skipped, so the same command run with more parts installs only the new ones.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

from tpu_scripts.wheelhouse import manifest, tags

RECORD = ".jax-tpu-lab-wheelhouse.json"  # in SITE: the parts installed there


class Refused(Exception):
    """Nothing was installed, and why."""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pip_env() -> dict[str, str]:
    """No pip configuration file of this host (an extra index, a constraint) takes part."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def load_parts(dirs: list[pathlib.Path]) -> list[tuple[pathlib.Path, dict]]:
    """(folder, manifest) of each part given; a folder holding part-NN folders stands for all
    of them. Refused: no manifest, parts of two different builds, a part given twice."""
    folders: list[pathlib.Path] = []
    for folder in map(pathlib.Path, dirs):
        if not (folder / manifest.MANIFEST).is_file() and folder.is_dir():
            inner = sorted(p for p in folder.glob("part-*") if (p / manifest.MANIFEST).is_file())
            folders += inner or [folder]
        else:
            folders.append(folder)
    parts = []
    for folder in folders:
        try:
            parts.append((folder, manifest.read(folder)))
        except ValueError as exc:
            raise Refused(str(exc)) from None
    builds = {doc["build"] for _, doc in parts}
    if len(builds) > 1:
        raise Refused(f"these parts come from {len(builds)} different wheelhouse builds: "
                      + ", ".join(f"{f} ({d['build']})" for f, d in parts))  # fmt: skip
    numbers = [doc["part"] for _, doc in parts]
    if len(set(numbers)) != len(numbers):
        raise Refused(f"a part is given twice: parts {sorted(numbers)}")
    return sorted(parts, key=lambda item: item[1]["part"])


def check_parts(parts, host: tags.Target) -> None:
    """Refused (nothing installed) when a wheel is for another Python or platform, or
    differs from its manifest."""
    wrong_host, damaged = [], []
    for folder, doc in parts:
        for entry in doc["wheels"]:
            if why := tags.problem(entry["file"], host):
                wrong_host.append(why)
        damaged += [f"{folder.name}: {p}" for p in manifest.problems(folder, doc)]
    if wrong_host:
        target = parts[0][1]["target"]
        raise Refused(
            "REFUSED: wheels for another Python or platform (nothing was installed):\n  "
            + "\n  ".join(wrong_host)
            + f"\nThis wheelhouse was built for {target}: run the install with that Python "
            "(python3.11 -m tpu_scripts wheelhouse install ...), or build a wheelhouse for this "
            "host."
        )
    if damaged:
        raise Refused(
            "REFUSED: wheels that differ from their manifest (nothing was installed):\n  "
            + "\n  ".join(damaged)
        )


def installed_in(site: pathlib.Path) -> dict[str, pathlib.Path]:
    """{normal name: its .dist-info folder} of the distributions in ``site``."""
    found = {}
    for info in site.glob("*.dist-info"):
        found[_normal(info.name[: -len(".dist-info")].rsplit("-", 1)[0])] = info
    return found


def _remove_distribution(site: pathlib.Path, info: pathlib.Path) -> None:
    """Uninstall one distribution from ``site``: the files its RECORD lists, then its
    .dist-info (an upgrade: the new version's files are merged in next)."""
    record = info / "RECORD"
    if record.is_file():
        for line in record.read_text(encoding="utf-8").splitlines():
            rel = line.split(",", 1)[0]
            path = (site / rel).resolve()
            if rel and path.is_relative_to(site.resolve()) and path.is_file():
                path.unlink()
    shutil.rmtree(info, ignore_errors=True)


def merge(source: pathlib.Path, site: pathlib.Path) -> None:
    """Move what pip installed in ``source`` into ``site``, file by file (folders that
    several distributions share keep the others' files), each older version of a
    distribution removed first."""
    have = installed_in(site)
    for name, info in installed_in(source).items():
        if name in have and have[name].name != info.name:
            _remove_distribution(site, have[name])
    for path in sorted(source.rglob("*")):
        if path.is_dir():
            continue
        target = site / path.relative_to(source)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)


def _pip_install(pins: list[dict], sources: list[str], into: pathlib.Path, python: str) -> None:
    """pip: exactly these pins (hash-checked, no dependencies, wheels only) into ``into``."""
    requirements = into.parent / f"{into.name}-requirements.txt"
    requirements.write_text(
        "".join(f"{p['name']}=={p['version']} --hash=sha256:{p['sha256']}\n" for p in pins)
    )
    argv = [
        python, "-m", "pip", "install", "--isolated", "--disable-pip-version-check", "-q",
        "--no-deps", "--require-hashes", "--only-binary=:all:", "--no-compile",
        "--no-warn-script-location", "--target", str(into), *sources, "-r", str(requirements),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, env=_pip_env())
    requirements.unlink()
    if result.returncode != 0:
        raise Refused(f"pip failed ({' '.join(argv[:4])} ...):\n{result.stderr.strip()[-3000:]}")


def _host_sources(doc: dict, host_index: str | None, find_links: list[str]) -> list[str]:
    index = host_index or doc.get("host_index") or ""
    links = find_links or doc.get("host_find_links") or []
    if not index:
        raise Refused("part 1 names pins from the host's own package index, but no index is "
                      "known: pass --host-index URL (e.g. file:///opt/pypi/simple)")  # fmt: skip
    if index.startswith("file://") and not pathlib.Path(index[len("file://") :]).is_dir():
        raise Refused(f"the host's package index {index} is not on this machine: pass "
                      "--host-index, or build the wheelhouse without --host-inventory")  # fmt: skip
    sources = ["--index-url", index]
    for link in links:
        sources += ["--find-links", link]
    return sources


def install(
    dirs: list[pathlib.Path],
    site: pathlib.Path,
    host: tags.Target | None = None,
    host_index: str | None = None,
    find_links: list[str] | None = None,
    python: str = sys.executable,
    out=print,
) -> list[int]:
    """Install the parts in ``dirs`` into ``site`` (see the module docstring); the numbers of
    the parts installed now. Raises Refused with nothing installed when a check fails."""
    parts = load_parts(dirs)
    check_parts(parts, host or tags.this_host())
    site = pathlib.Path(site)
    site.mkdir(parents=True, exist_ok=True)
    record_path = site / RECORD
    record = json.loads(record_path.read_text()) if record_path.is_file() else {"parts": {}}
    if record.get("build") != parts[0][1]["build"]:
        record = {"build": parts[0][1]["build"], "parts": {}}
    have = installed_in(site)
    todo = []
    for folder, doc in parts:
        names = [_normal(e["name"]) for e in doc["wheels"] + doc["from_host_index"]]
        done = record["parts"].get(str(doc["part"])) == manifest.manifest_digest(folder)
        if done and all(name in have for name in names):
            out(f"part {doc['part']}/{doc['parts']}: already installed in {site}")
        else:
            todo.append((folder, doc))
    with tempfile.TemporaryDirectory(prefix=".incoming-", dir=site.parent) as tmp:
        for folder, doc in todo:
            into = pathlib.Path(tmp) / f"part-{doc['part']}"
            if doc["wheels"]:
                _pip_install(doc["wheels"], ["--no-index", "--find-links", str(folder)], into,
                             python)  # fmt: skip
            if doc["from_host_index"]:
                sources = _host_sources(doc, host_index, list(find_links or []))
                _pip_install(doc["from_host_index"], sources, into, python)
        for folder, doc in todo:
            into = pathlib.Path(tmp) / f"part-{doc['part']}"
            if into.is_dir():
                merge(into, site)
            record["parts"][str(doc["part"])] = manifest.manifest_digest(folder)
            count = len(doc["wheels"]) + len(doc["from_host_index"])
            out(f"part {doc['part']}/{doc['parts']}: installed {count} distribution(s) into {site}")
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    _report(parts, record, site, out)
    return [doc["part"] for _, doc in todo]


def _report(parts, record: dict, site: pathlib.Path, out) -> None:
    count = parts[0][1]["parts"]
    missing = [n for n in range(1, count + 1) if str(n) not in record["parts"]]
    if missing:
        out(f"still to install: part(s) {', '.join(map(str, missing))} of {count}")
    else:
        out(f"all {count} part(s) of wheelhouse {parts[0][1]['build']} are installed in {site}")
    for name, locked in sorted(parts[0][1].get("host_provides", {}).items()):
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out(f"note: this host has no {name} (the wheelhouse leaves it out: the lock pins "
                f"{locked}); build with --include {name} to carry it")  # fmt: skip
            continue
        if have != locked:
            out(f"note: this host's {name} is {have}; the course lock pins {locked}")
    out(f"export PYTHONPATH=$PYTHONPATH:{site.resolve()}  # the host's JAX stays first")
