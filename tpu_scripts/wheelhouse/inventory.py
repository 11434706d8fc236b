"""What a TPU host already has: ``wheelhouse inventory -o host.json`` (run ON the host).

Standard library only. Records the interpreter (Python, machine, glibc, pip), the
distributions it imports and whether each comes from a PYTHONPATH folder (those stay ahead
of the wheelhouse's SITE) or from site-packages (the wheelhouse's copy comes first), and what
the host's own package index (a PEP 503 folder, ``file:///opt/pypi/simple``) and wheel
folders (``--find-links /opt/wheels``) hold: file names and sha256. Back here,
``wheelhouse --host-inventory host.json`` leaves out of the wheelhouse every pin the host
holds as the very file the course lock names (same sha256).
"""

from __future__ import annotations

import html.parser
import importlib.metadata
import json
import os
import pathlib
import re
import sys

from tpu_scripts.wheelhouse import manifest, tags

SCHEMA = "jax-tpu-lab/host-inventory"


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def _folder(index: str) -> pathlib.Path:
    return pathlib.Path(index[len("file://") :] if index.startswith("file://") else index)


def index_files(index: str) -> dict[str, list[dict]]:
    """{normal name: [{file, sha256}]} of a PEP 503 index folder's wheels (their sha256 from
    the links' ``#sha256=`` fragments; a link without one is hashed from its file)."""
    root = _folder(index)
    found: dict[str, list[dict]] = {}
    for page in sorted(root.glob("*/index.html")):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        for href in parser.hrefs:
            url, _, fragment = href.partition("#")
            name = url.rsplit("/", 1)[-1]
            if not name.endswith(".whl"):
                continue
            digest = fragment[len("sha256=") :] if fragment.startswith("sha256=") else ""
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                path = (page.parent / url).resolve()
                digest = manifest.sha256_file(path) if path.is_file() else ""
            try:
                wheel = tags.parse(name)
            except ValueError:
                continue
            found.setdefault(wheel.normal_name, []).append({"file": name, "sha256": digest})
    return found


def folder_files(folder: str) -> dict[str, list[dict]]:
    """{normal name: [{file, sha256}]} of the wheels lying in ``folder`` (hashed here)."""
    found: dict[str, list[dict]] = {}
    for path in sorted(pathlib.Path(folder).glob("*.whl")):
        try:
            wheel = tags.parse(path.name)
        except ValueError:
            continue
        entry = {"file": path.name, "sha256": manifest.sha256_file(path)}
        found.setdefault(wheel.normal_name, []).append(entry)
    return found


def installed() -> dict[str, dict]:
    """{normal name: {version, first}} of what this interpreter imports; ``first``: it comes
    from a PYTHONPATH folder, so it stays ahead of a SITE appended to PYTHONPATH."""
    pythonpath = [
        pathlib.Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
    ]
    found: dict[str, dict] = {}
    # sys.path without a package's vendored tree (setuptools/_vendor); the rule of
    # core.envlock.environment_paths, restated: this module runs on a host without the project
    paths = [
        p
        for p in sys.path
        if not (pathlib.Path(p or ".").resolve().parent / "__init__.py").is_file()
    ]
    for dist in importlib.metadata.distributions(path=paths):
        name = dist.metadata["Name"]
        if not name:
            continue
        where = pathlib.Path(str(dist.locate_file(""))).resolve()
        key = re.sub(r"[-_.]+", "-", name).lower()
        found.setdefault(key, {"version": dist.version, "first": where in pythonpath})
    return found


def inventory(index: str | None, find_links: list[str]) -> dict:
    host = tags.this_host()
    try:
        pip = importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        pip = None
    return {
        "schema": SCHEMA,
        "version": 1,
        "python": ".".join(map(str, sys.version_info[:3])),
        "target": host.describe(),
        "glibc": ".".join(map(str, host.glibc)) if host.glibc else None,
        "machine": host.machine,
        "pip": pip,
        "installed": installed(),
        "index": index,
        "index_files": index_files(index) if index else {},
        "find_links": list(find_links),
        "find_links_files": {
            name: entries for folder in find_links for name, entries in folder_files(folder).items()
        },
    }


def load(path: pathlib.Path) -> dict:
    """A host inventory written by ``inventory`` (ValueError when it is not one)."""
    doc = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a {SCHEMA} (python -m tpu_scripts wheelhouse inventory)")
    return doc


def held_files(doc: dict) -> dict[str, str]:
    """{sha256: where} of every wheel file the host holds (its index, its wheel folders)."""
    held = {}
    for entries in doc["index_files"].values():
        for entry in entries:
            held[entry["sha256"]] = "index"
    for entries in doc["find_links_files"].values():
        for entry in entries:
            held[entry["sha256"]] = "find_links"
    return held
