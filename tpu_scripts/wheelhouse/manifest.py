"""A wheelhouse part: a folder of wheels and its ``manifest.json`` (names, versions, sha256,
sizes), the split of a wheelhouse into parts under a size limit, and checking a part.

Standard library only (the TPU host reads manifests before anything is installed).
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import re

SCHEMA = "jax-tpu-lab/wheelhouse-part"
MANIFEST = "manifest.json"
PART_NAME = "part-{:02d}"
# A host without internet may take files in transfers of limited size (64 MiB with a checkout
# of ~6 MB, on the v5e host the course was tried on); 55 MB (52.5 MiB) of wheels a part leaves
# room for the checkout and the manifest.
PART_LIMIT_BYTES = 55_000_000
WHEEL_FIELDS = ("name", "version", "file", "sha256", "size")
PIN_FIELDS = ("name", "version", "sha256")


def sha256_file(path: pathlib.Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


_BUNDLE = " + "  # the name of a set of ``together`` while it is split as one item


def split(
    layers: list[dict[str, int]], limit: int, together: list[set[str]] = ()
) -> list[list[str]]:
    """Files ({name: bytes}, in layers) into parts of at most ``limit`` bytes each: layer by
    layer, largest first, each file into the first part with room (first-fit decreasing). A
    layer's files never go to a part after those its predecessors opened unless those are
    full, so the first parts hold the first layer whole. Each set of ``together`` goes into
    one part, placed with its first layer's files (parts are installed one call at a time:
    a wheel whose exact pin waits in a later part would meet the host's other version).
    ValueError names a file, or a set, larger than ``limit``."""
    layers = _bundle(layers, together)
    sizes = {name: size for layer in layers for name, size in layer.items()}
    too_big = {name: size for name, size in sizes.items() if size > limit}
    if too_big:
        listed = ", ".join(
            f"{name} ({size / 1e6:.1f} MB)" for name, size in sorted(too_big.items())
        )
        raise ValueError(
            f"larger than one part ({limit / 1e6:.1f} MB): {listed}. Raise --part-mb, or leave "
            "it out (the host's own index or disk may hold it: --host-inventory)"
        )
    parts: list[list[str]] = []
    room: list[int] = []
    bundled = {_BUNDLE.join(sorted(group)): sorted(group) for group in together if len(group) > 1}
    for layer in layers:
        for name in sorted(layer, key=lambda n: (-layer[n], n)):
            for i, left in enumerate(room):
                if layer[name] <= left:
                    parts[i].append(name)
                    room[i] -= layer[name]
                    break
            else:
                parts.append([name])
                room.append(limit - layer[name])
    return [sorted(f for name in part for f in bundled.get(name, [name])) for part in parts]


def _bundle(layers: list[dict[str, int]], together) -> list[dict[str, int]]:
    """``layers`` with each set of ``together`` (of 2 or more files) as one item, named by
    its files joined with _BUNDLE and sized as their sum, in the first layer holding one."""
    where = {name: i for i, layer in enumerate(layers) for name in layer}
    sizes = {name: size for layer in layers for name, size in layer.items()}
    out = [dict(layer) for layer in layers]
    for group in together:
        if len(group) < 2:
            continue
        unknown = sorted(set(group) - set(where))
        if unknown:
            raise ValueError(f"together names files in no layer: {unknown}")
        first = min(where[name] for name in group)
        for name in group:
            del out[where[name]][name]
        out[first][_BUNDLE.join(sorted(group))] = sum(sizes[name] for name in group)
    return out


def part_manifest(build: dict, number: int, count: int, wheels: list[dict], pins: list[dict]):
    """One part's manifest: the build's fields, which part, its wheels, and the pins the
    host's own index or wheel folders supply with it."""
    return {
        "schema": SCHEMA,
        "version": 1,
        **build,
        "part": number,
        "parts": count,
        "wheels": sorted(wheels, key=lambda w: w["name"]),
        "from_host_index": sorted(pins, key=lambda p: p["name"]),
        "size_bytes": sum(w["size"] for w in wheels),
    }


def write(folder: pathlib.Path, manifest: dict) -> pathlib.Path:
    path = folder / MANIFEST
    path.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return path


def read(folder: pathlib.Path) -> dict:
    """A part's manifest, its shape checked (ValueError naming what is wrong)."""
    path = pathlib.Path(folder) / MANIFEST
    if not path.is_file():
        raise ValueError(f"{folder} is not a wheelhouse part: no {MANIFEST} in it")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("version") != 1:
        raise ValueError(f"{path} is not a {SCHEMA} version 1 manifest")
    for key in ("build", "part", "parts", "wheels", "from_host_index", "target"):
        if key not in doc:
            raise ValueError(f"{path} lacks {key!r}")
    for entry in doc["wheels"]:
        if not all(key in entry for key in WHEEL_FIELDS):
            raise ValueError(f"{path}: a wheel entry lacks one of {WHEEL_FIELDS}: {entry}")
        if pathlib.PurePath(entry["file"]).name != entry["file"] or not re.fullmatch(
            r"[0-9a-f]{64}", entry["sha256"]
        ):
            raise ValueError(f"{path}: bad file name or sha256 in {entry}")
    for entry in doc["from_host_index"]:
        if not all(key in entry for key in PIN_FIELDS):
            raise ValueError(f"{path}: a host-index pin lacks one of {PIN_FIELDS}: {entry}")
    return doc


def problems(folder: pathlib.Path, doc: dict) -> list[str]:
    """What in ``folder`` disagrees with its manifest: a wheel missing, of another size or
    sha256, or a wheel the manifest does not list."""
    found = []
    listed = {entry["file"] for entry in doc["wheels"]}
    for entry in doc["wheels"]:
        path = pathlib.Path(folder) / entry["file"]
        if not path.is_file():
            found.append(f"{entry['file']}: missing from {folder}")
        elif path.stat().st_size != entry["size"]:
            found.append(
                f"{entry['file']}: {path.stat().st_size} bytes, the manifest says {entry['size']}"
            )
        elif (digest := sha256_file(path)) != entry["sha256"]:
            found.append(
                f"{entry['file']}: sha256 {digest}, the manifest says {entry['sha256']} "
                "(damaged or replaced in transit: copy it again)"
            )
    for path in sorted(pathlib.Path(folder).glob("*.whl")):
        if path.name not in listed:
            found.append(f"{path.name}: in {folder} but not in its manifest")
    return found


def manifest_digest(folder: pathlib.Path) -> str:
    return sha256_file(pathlib.Path(folder) / MANIFEST)
