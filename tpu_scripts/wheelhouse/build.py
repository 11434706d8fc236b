"""Build the wheelhouse here: the chosen profiles' closure in requirements.lock, downloaded
for the TPU host (pip, hash-checked against the lock), checked again, split into parts.

    plan  -> which pins are carried, which the host's own index supplies, which it has first
    fetch -> pip download --no-deps --require-hashes for CPython 3.11 manylinux x86-64
    write -> part-01/, part-02/, ... each with its wheels and manifest.json
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

from core import envlock
from tpu_scripts.wheelhouse import imports, inventory, manifest, profiles, tags

DOWNLOADS = ".downloads"  # <out>/.downloads/: every wheel fetched, reused by the next build


@dataclasses.dataclass
class Plan:
    """What a build carries and leaves out, pin by pin (normal name -> lock line)."""

    profiles: list[str]
    carried: dict[str, str]
    from_host: dict[str, str]  # the host's index or wheel folders hold this very file
    host_first: dict[str, str]  # the host imports its own copy first: {name: locked version}
    host_index: str | None = None
    host_find_links: list[str] = dataclasses.field(default_factory=list)
    # [(profile, the carried names it adds, the host's pins it adds)], in the profiles'
    # order: the parts follow it, so the first parts hold the core lessons' wheels
    layers: list[tuple[str, list[str], list[str]]] = dataclasses.field(default_factory=list)


def _sha(line: str) -> str:
    return re.search(r"--hash=sha256:([0-9a-f]{64})", line)[1]


def _version(line: str) -> str:
    return envlock.PIN.fullmatch(line)[2]


def plan(names: list[str], lock_text: str, host: dict | None = None, include=()) -> Plan:
    """The pins the profiles ``names`` need, split by where the host gets each one."""
    lines = envlock.pin_lines(lock_text)
    pinned = {name: _version(line) for name, line in lines.items()}
    include = sorted({envlock.normal(name) for name in include})
    first = set(profiles.HOST_FIRST)
    if host is not None:
        first |= {name for name, entry in host["installed"].items() if entry["first"]}
    leaves = first - set(include)
    held = inventory.held_files(host) if host is not None else {}
    carried, from_host, layers = {}, {}, []
    chosen = profiles.chosen(names)
    for label, roots in [("include", include)] + [(p.name, p.roots) for p in chosen]:
        added, hosted = [], []
        for name in sorted(profiles.closure(roots, pinned, leaves)):
            if name in carried or name in from_host:
                continue
            if _sha(lines[name]) in held:
                from_host[name] = lines[name]
                hosted.append(name)
            else:
                carried[name] = lines[name]
                added.append(name)
        if added or hosted:
            layers.append((label, added, hosted))
    host_first = {name: pinned[name] for name in sorted(leaves) if name in pinned}
    return Plan(
        [p.name for p in chosen],
        carried,
        dict(sorted(from_host.items())),
        host_first,
        host["index"] if host is not None else None,
        list(host["find_links"]) if host is not None else [],
        layers,
    )


def download_command(requirements: pathlib.Path, into: pathlib.Path) -> list[str]:
    """pip download, wheels only, for the TPU host's interpreter, every file hash-checked."""
    argv = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--require-hashes", "--implementation", "cp", "--python-version", envlock.LOCK_PYTHON,
        "--dest", str(into), "-r", str(requirements),
    ]  # fmt: skip
    for tag in envlock.LOCK_PLATFORMS:
        argv += ["--platform", tag]
    return argv


def fetch(lines: dict[str, str], downloads: pathlib.Path) -> dict[str, pathlib.Path]:
    """{name: its wheel in ``downloads``}: each file's sha256 is the lock's (a wheel already
    there is reused), its tags fit the TPU host. RuntimeError otherwise."""
    downloads.mkdir(parents=True, exist_ok=True)
    have = {manifest.sha256_file(path): path for path in downloads.glob("*.whl")}
    missing = {name: line for name, line in lines.items() if _sha(line) not in have}
    if missing:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
            handle.write("".join(line + "\n" for _, line in sorted(missing.items())))
        try:
            result = subprocess.run(download_command(pathlib.Path(handle.name), downloads),
                                    capture_output=True, text=True)  # fmt: skip
        finally:
            os.unlink(handle.name)
        if result.returncode != 0:
            raise RuntimeError(f"pip download failed:\n{result.stderr.strip()[-3000:]}")
        have = {manifest.sha256_file(path): path for path in downloads.glob("*.whl")}
    found, problems = {}, []
    for name, line in sorted(lines.items()):
        path = have.get(_sha(line))
        if path is None:
            problems.append(f"{name}: no downloaded wheel has the lock's sha256 {_sha(line)}")
        elif why := tags.problem(path.name, tags.TPU_HOST):
            problems.append(why)
        elif tags.parse(path.name).normal_name != name:
            problems.append(f"{path.name} has the sha256 the lock gives {name}")
        else:
            found[name] = path
    if problems:
        raise RuntimeError(
            "the downloaded wheels do not match the lock:\n  " + "\n  ".join(problems)
        )
    return found


def build_id(lock_text: str, the_plan: Plan) -> str:
    digest = hashlib.sha256(lock_text.encode())
    for line in sorted([*the_plan.carried.values(), *the_plan.from_host.values()]):
        digest.update(line.encode())
    return digest.hexdigest()[:12]


def exact_pins(requirements) -> set[str]:
    """The distributions ``requirements`` (packaging Requirements, as
    profiles.requirements_of gives them for the TPU host) ask for at one exact version
    (``name==X``), normalized. Such a pair checks each other at import (pydantic and
    pydantic-core): both must be installed at once."""
    return {
        envlock.normal(requirement.name)
        for requirement in requirements
        if len(requirement.specifier) == 1
        and next(iter(requirement.specifier)).operator in ("==", "===")
    }


def exact_pin_groups(
    wheels: dict[str, pathlib.Path], requires=profiles.requirements_of
) -> list[set[str]]:
    """The wheels' file names grouped by exact pins among them (connected sets of 2 or
    more; ``requires(name)``: a distribution's requirements): each group must travel in one
    part (write_parts' ``together``, manifest.split's)."""
    parent = {name: name for name in wheels}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for name in sorted(wheels):
        for pinned in exact_pins(requires(name)) & set(wheels):
            parent[root(pinned)] = root(name)
    groups: dict[str, set[str]] = {}
    for name, path in wheels.items():
        groups.setdefault(root(name), set()).add(path.name)
    return [group for _, group in sorted(groups.items()) if len(group) > 1]


def write_parts(
    out: pathlib.Path,
    wheels: dict[str, pathlib.Path],
    the_plan: Plan,
    lock_text: str,
    limit: int,
    together: list[set[str]] = (),
) -> list[pathlib.Path]:
    """Replace ``out``'s part-NN folders by this build's; their paths. Each set of file
    names in ``together`` (exact_pin_groups) goes into one part."""
    sizes = {path.name: path.stat().st_size for path in wheels.values()}
    layers = [{wheels[n].name: sizes[wheels[n].name] for n in names} for _, names, _ in
              the_plan.layers]  # fmt: skip
    label = {
        file: name
        for (name, *_), layer in zip(the_plan.layers, layers, strict=True)
        for file in layer
    }
    groups = manifest.split(layers, limit, together) or [[]]
    # the host's pins of a profile go with the first part that holds one of its wheels
    pin_part = {}
    for (_, _, hosted), layer in zip(the_plan.layers, layers, strict=True):
        first = min((i for i, files in enumerate(groups) if set(files) & set(layer)), default=0)
        pin_part.update({name: first for name in hosted})
    by_file = {path.name: name for name, path in wheels.items()}
    order = {file: i for i, layer in enumerate(layers) for file in layer}
    for old in out.glob("part-*"):
        shutil.rmtree(old)
    common = {
        "build": build_id(lock_text, the_plan),
        "target": tags.TPU_HOST.describe(),
        "profiles": the_plan.profiles,
        "lock_sha256": hashlib.sha256(lock_text.encode()).hexdigest(),
        "host_index": the_plan.host_index,
        "host_find_links": the_plan.host_find_links,
        "host_provides": the_plan.host_first,
    }
    folders = []
    for number, files in enumerate(groups, 1):
        folder = out / manifest.PART_NAME.format(number)
        folder.mkdir(parents=True)
        entries = []
        for file in files:
            name, source = by_file[file], wheels[by_file[file]]
            target = folder / file
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
            line = the_plan.carried[name]
            entries.append({"name": name, "version": _version(line), "file": file,
                            "sha256": _sha(line), "size": sizes[file]})  # fmt: skip
        pins = [
            {"name": name, "version": _version(line), "sha256": _sha(line)}
            for name, line in the_plan.from_host.items()
            if pin_part[name] == number - 1
        ]
        doc = manifest.part_manifest(common, number, len(groups), entries, pins)
        held = ", ".join(dict.fromkeys(label[file] for file in sorted(files, key=order.get)))
        manifest.write(folder, {**doc, "profiles_held": held or "none"})
        folders.append(folder)
    return folders


def main(args) -> int:
    out = pathlib.Path(args.out)
    lock_text = pathlib.Path(args.lock).read_text()
    host = inventory.load(pathlib.Path(args.host_inventory)) if args.host_inventory else None
    try:
        the_plan = plan(args.profile.split(","), lock_text, host, args.include)
        wheels = fetch(the_plan.carried, out / DOWNLOADS)
        limit = int(args.part_mb * 1e6)
        together = exact_pin_groups(wheels)
        folders = write_parts(out, wheels, the_plan, lock_text, limit, together)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    total = 0
    for folder in folders:
        doc = manifest.read(folder)
        total += doc["size_bytes"]
        print(f"{folder}: {doc['profiles_held']}: {len(doc['wheels'])} wheels, "
              f"{doc['size_bytes'] / 1e6:.1f} MB")  # fmt: skip
    print(
        f"wheelhouse {manifest.read(folders[0])['build']} ({', '.join(the_plan.profiles)}): "
        f"{len(wheels)} wheels, {total / 1e6:.1f} MB in {len(folders)} part(s); "
        f"{len(the_plan.from_host)} pins from the host's own index or wheels; left out as the "
        f"host's own: {', '.join(the_plan.host_first)}"
    )
    print(f"on the host: python3 -m tpu_scripts wheelhouse install {out}/part-* --target SITE")
    return 0


def show_profiles(host_inventory: str | None) -> int:
    """Each profile's roots and closure size, and what each app needs beyond ``core``."""
    pinned = envlock.pins(envlock.COURSE_LOCK.read_text())
    brings = {}
    for profile in profiles.PROFILES:
        brings[profile.name] = set(profiles.closure(profile.roots, pinned))
        print(f"{profile.name}: {profile.what}\n  {', '.join(profile.roots)} "
              f"({len(brings[profile.name])} with their dependencies)")  # fmt: skip
    beyond = profiles.coverage(["core"])
    print(f"\napps that need more than core ({len(beyond)} of {len(imports.app_files())}):")
    for app, missing in sorted(beyond.items()):
        extra = []
        for module in missing:
            holders = profiles.providers(module)[1]
            extra += [name for name, dists in brings.items() if holders & dists][:1] or ["?"]
        tops = sorted({module.split(".")[0] for module in missing})
        print(f"  {app}: {', '.join(dict.fromkeys(extra))} ({', '.join(tops)})")
    if host_inventory:
        the_plan = plan(["all"], envlock.COURSE_LOCK.read_text(), inventory.load(host_inventory))
        print(
            f"\nall profiles with {host_inventory}: {len(the_plan.from_host)} pins from the "
            f"host's own index or wheels, {len(the_plan.carried)} carried"
        )
    return 0
