"""Tiny real wheels for the wheelhouse's tests: pip installs them, nothing is downloaded."""

from __future__ import annotations

import base64
import hashlib
import pathlib
import zipfile


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    folder: pathlib.Path,
    name: str,
    version: str = "1.0",
    files: dict[str, str] | None = None,
    tag: str = "py3-none-any",
    padding: int = 0,
) -> pathlib.Path:
    """Write ``NAME-VERSION-TAG.whl`` into ``folder``: ``files`` ({path: text}; default one
    module ``name.py``), a valid METADATA, WHEEL and RECORD, and ``padding`` bytes of data in
    a stored (uncompressed) file so its size is known."""
    folder.mkdir(parents=True, exist_ok=True)
    module = name.replace("-", "_")
    files = dict(files or {f"{module}.py": f"VERSION = {version!r}\n"})
    if padding:
        files[f"{module}_data/blob.txt"] = "x" * padding
    info = f"{module}-{version}.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: fake_wheels\nRoot-Is-Purelib: true\nTag: {tag}\n"
    )
    record = "".join(
        f"{path},{_digest(text.encode())},{len(text.encode())}\n" for path, text in files.items()
    )
    files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    path = folder / f"{module}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lock_line(path: pathlib.Path, name: str, version: str = "1.0") -> str:
    """The lock's line for a wheel: ``name==version --hash=sha256:...``."""
    return f"{name}=={version} --hash=sha256:{sha256(path)}"


def wheelhouse(out, wheels, hosted=(), index=None, limit=10_000) -> list[pathlib.Path]:
    """Parts of ``wheels`` ({name: path}) written by build.write_parts into ``out``; ``hosted``
    ({name: path}): pins the host's own index (``index``, a URL) supplies instead."""
    from tpu_scripts.wheelhouse import build, tags

    def lines(items):
        return {name: lock_line(path, name, tags.parse(path.name).version) for name, path in items}

    carried, pins = lines(dict(wheels).items()), lines(dict(hosted).items())
    plan = build.Plan(["core"], carried, pins, {"jax": "0.10.2"}, index, [],
                      [("core", sorted(carried), sorted(pins))])  # fmt: skip
    lock_text = "\n".join([*carried.values(), *pins.values()])
    return build.write_parts(out, dict(wheels), plan, lock_text, limit)
