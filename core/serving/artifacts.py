"""The format-agnostic half of an exported-artifact directory, shared by every exporter of the
course (the byte LM capstone's endpoints, core.serving.predict's classifier): the errors, sha256
of bytes and of a manifest, a listed file's size + sha256 check, bfloat16's storable bit view,
the named (shape, dtype) leaves of arguments and avals, and a pickle-free .npz weights file.

A directory holds files and a manifest.json that records each file's size and sha256 and its
own hash (``manifest_digest``); a reader checks all of it BEFORE deserializing anything. Like
core.state.checkpoint's manifest this detects damage and mistakes, not a deliberate forgery
(whoever can rewrite the files can rewrite the manifest).

Shapes may hold symbolic dimensions (``jax.export.symbolic_shape("b")``): ``dim`` writes a
constant as its int and a symbolic one as its name ("b"), so a manifest reads ["b", 64].
"""

from __future__ import annotations

import hashlib
import io
import json
import pathlib
import platform as platform_lib

import jax
import jax.numpy as jnp
import numpy as np

# dtypes numpy cannot store in .npz without pickle: saved as their raw bits
BIT_VIEWS = {"bfloat16": np.uint16}


# --- errors -------------------------------------------------------------------------------


class ArtifactError(ValueError):
    """Exported artifacts that cannot be trusted or used; the message names the problem."""


class MissingArtifactError(ArtifactError):
    """The manifest or a file it lists is not there."""


class ManifestSchemaError(ArtifactError):
    """manifest.json is not valid JSON, lacks keys, or has values of the wrong type."""


class ChecksumError(ArtifactError):
    """A file (or the manifest itself) differs from the size/sha256 the manifest records."""


class SignatureMismatchError(ArtifactError):
    """A deserialized artifact's inputs/outputs/platforms differ from the manifest's."""


class UnsupportedPlatformError(ArtifactError):
    """The artifacts were built for platforms other than the one this process runs."""


class WeightsMismatchError(ArtifactError):
    """The weights file does not hold the leaves (names, shapes, dtypes) the manifest lists."""


class InputMismatchError(ArtifactError):
    """A call's inputs differ from the shapes/dtypes the endpoint was exported for."""


class InputOutOfRangeError(InputMismatchError):
    """A call's inputs have the right shapes and dtypes but values outside the contract
    (inside the compiled program they would be clipped or computed silently)."""


# --- shapes, dtypes, leaves -----------------------------------------------------------------


def dim(d) -> int | str:
    """A dimension for a manifest: its int when constant, its name ("b") when symbolic."""
    if isinstance(d, int | np.integer):
        return int(d)
    return str(d)  # a jax.export symbolic dimension


def named_leaves(names, tree) -> list[dict]:
    """[{"name", "shape", "dtype"}] of a tuple of arguments, in jax's flattening order."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tuple(tree))[0]:
        top = names[path[0].idx]
        rest = "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path[1:])
        out.append(
            {
                "name": f"{top}/{rest}" if rest else top,
                "shape": [dim(d) for d in leaf.shape],
                "dtype": jnp.dtype(leaf.dtype).name,
            }
        )
    return out


def aval_list(avals) -> list[tuple[list, str]]:
    """[(shape, dtype name)] of an Exported's in_avals/out_avals (symbolic dims by name)."""
    return [([dim(d) for d in a.shape], jnp.dtype(a.dtype).name) for a in avals]


def leaf_diff(expected: list[tuple], found: list[tuple], names: list[str]) -> str:
    """'' when the (shape, dtype) lists agree, else the first difference, named."""
    if len(expected) != len(found):
        return f"{len(found)} leaves, manifest lists {len(expected)}"
    for name, e, f in zip(names, expected, found, strict=True):
        if e != f:
            return f"{name}: manifest says {e[1]}{e[0]}, artifact has {f[1]}{f[0]}"
    return ""


# --- hashes and files -------------------------------------------------------------------------


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_digest(manifest: dict) -> str:
    """sha256 of the manifest's canonical JSON without its own manifest_sha256 key."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return sha256_bytes(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def plain_name_problem(name: str) -> str | None:
    """Why ``name`` is not a plain file name inside the directory (None when it is)."""
    if pathlib.Path(name).name != name or name in ("", ".", ".."):
        return f"file {name!r} must be a plain file name inside the directory"
    return None


def check_file(directory: pathlib.Path, entry: dict, what: str) -> bytes:
    """The bytes of ``entry["file"]`` in ``directory`` once its size and sha256 equal the
    entry's ``bytes`` and ``sha256`` (MissingArtifactError / ChecksumError otherwise)."""
    path = pathlib.Path(directory) / entry["file"]
    if not path.is_file():
        raise MissingArtifactError(f"{what}: file {path} listed in the manifest is missing")
    data = path.read_bytes()
    if len(data) != entry["bytes"]:
        raise ChecksumError(
            f"{what}: {path.name} has {len(data)} bytes, the manifest says {entry['bytes']} "
            "(truncated or replaced)"
        )
    digest = sha256_bytes(data)
    if digest != entry["sha256"]:
        raise ChecksumError(
            f"{what}: sha256 of {path.name} is {digest[:16]}..., the manifest says "
            f"{entry['sha256'][:16]}... (the file was modified or the manifest is wrong)"
        )
    return data


def check_manifest_digest(path, manifest: dict) -> None:
    """ChecksumError unless the manifest's recorded manifest_sha256 is its content's hash."""
    digest = manifest_digest(manifest)
    if digest != manifest["manifest_sha256"]:
        raise ChecksumError(
            f"{path}: content hash {digest[:16]}... != recorded manifest_sha256 "
            f"{manifest['manifest_sha256'][:16]}... (the manifest was edited)"
        )


# --- arrays on disk ----------------------------------------------------------------------------


def storable(array) -> np.ndarray:
    """``array`` as numpy can save it without pickle (bfloat16 as its uint16 bits)."""
    array = np.asarray(array)
    view = BIT_VIEWS.get(array.dtype.name)
    return array.view(view) if view is not None else array


def from_stored(array: np.ndarray, dtype: str) -> np.ndarray:
    """The inverse of storable, given the original dtype's name."""
    return array.view(jnp.dtype(dtype)) if dtype in BIT_VIEWS else array


def npz_bytes(arrays: dict) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def weight_leaves(weights: dict) -> list[dict]:
    """The manifest's [{"name", "shape", "dtype"}] of a flat {name: array} dict, by name."""
    return [
        {"name": n, "shape": list(np.shape(a)), "dtype": np.asarray(a).dtype.name}
        for n, a in sorted(weights.items())
    ]


def load_npz_weights(data: bytes, leaves: list[dict], file_name: str) -> dict[str, np.ndarray]:
    """{name: numpy array} from .npz bytes (read with allow_pickle=False) holding exactly the
    listed leaves with their shapes and dtypes (WeightsMismatchError otherwise)."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            stored = {name: archive[name] for name in archive.files}
    except (ValueError, OSError) as exc:
        raise WeightsMismatchError(f"{file_name} cannot be read without pickle: {exc}") from None
    listed = {x["name"]: x for x in leaves}
    if set(stored) != set(listed):
        raise WeightsMismatchError(
            f"{file_name} holds {sorted(set(stored) - set(listed))} not in the manifest and "
            f"lacks {sorted(set(listed) - set(stored))}"
        )
    weights = {}
    for name, spec in listed.items():
        array = from_stored(stored[name], spec["dtype"])
        if list(array.shape) != spec["shape"] or array.dtype.name != spec["dtype"]:
            raise WeightsMismatchError(
                f"{file_name}: {name} is {array.dtype.name}{list(array.shape)}, the manifest "
                f"says {spec['dtype']}{spec['shape']}"
            )
        weights[name] = array
    return weights


def versions() -> dict:
    """The library versions an export was made with, and jax.export's calling convention."""
    import flax
    import jaxlib

    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "flax": flax.__version__,
        "numpy": np.__version__,
        "python": platform_lib.python_version(),
        "calling_convention_version": jax.export.maximum_supported_calling_convention_version,
    }
