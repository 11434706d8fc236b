"""A content-addressed on-disk cache for the weights the post-training lessons train.

The five post-training apps (and their tests) each start from the same pretrained base model,
and several retrain what another already trained (lora's full fine-tuning is the SFT
lesson's policy; dpo runs the RLHF lesson's PPO run). ``train`` (a cached ``model.train``)
and ``cached`` (any pytree of arrays) keep one copy of each result on disk, so a second
process loads it instead of training it again.

**The key** is the sha256 of everything that determines the result: the caller's ``spec``
(for ``train``: the loss function's name, the content hashes of the initial weights, the
frozen inputs and the batches, the learning rate) and ``environment()``: the bytes of the
source files that compute it (SOURCES), the versions of Python, NumPy, JAX, jaxlib, Flax and
Optax, the backend, the device count and kind, the CPU (model and feature flags), XLA_FLAGS
and the JAX settings that change numerics. The device count is in it because XLA:CPU rounds
training differently with 1 and with 8 devices in the process (see model.hash_note).

**An entry** is ``<key>.npz`` (the leaves, ``allow_pickle=False``: never pickle) beside
``<key>.json`` (the manifest: the sha256 of the .npz bytes, each leaf's path, dtype and
shape, the tree's content hash, the readable spec and environment). Each file is written to
a temporary name in the folder and renamed into place (the manifest last), so a crash or two
processes writing the same entry at once (pytest-xdist workers, browser-test kernels,
headless runs) never leave a half entry that a reader would take. A reader checks the
manifest's schema and key, the .npz's sha256, the leaves' paths, dtypes and shapes and the
content hash before it returns anything; an entry that fails any check is ignored (and
replaced by the retrained result), never trusted.

**Where**: the folder named by the environment variable JAX_LAB_CACHE_DIR (ENV_VAR); unset,
``$XDG_CACHE_HOME/jax-tpu-lab`` or ``~/.cache/jax-tpu-lab``; ``off`` (or 0, none, false, or
empty) turns the cache off.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import platform
import sys
from collections.abc import Callable

import jax
import numpy as np
import pydantic

from core.documents import write_bytes_atomic, write_text_atomic
from core.post_training import model

ENV_VAR = "JAX_LAB_CACHE_DIR"
OFF_VALUES = ("", "0", "off", "none", "false", "no")
SUBFOLDER = "post_training"
SCHEMA_VERSION = 1
_ROOT = pathlib.Path(__file__).resolve().parents[2]
# The code that computes what is cached: a change to any of these files changes every key.
SOURCES = (
    "core/post_training/cache.py",
    "core/post_training/model.py",
    "core/post_training/losses.py",
    "core/post_training/task.py",
    "core/post_training/preferences.py",
    "core/post_training/dpo.py",
    "core/post_training/lora.py",
    "core/post_training/rlhf.py",
    "core/lm/transformer.py",
    "core/lm/precision.py",
    "core/lm/attention.py",
    "core/lm/tokenizer.py",
)
ORIGIN_CACHE = "on-disk cache"
ORIGIN_TRAINED = "trained in this process"


class Leaf(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    path: list[str | int]
    dtype: str
    shape: list[int]


class Manifest(pydantic.BaseModel):
    """What ``<key>.json`` holds."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    schema_version: int
    kind: str
    key: str
    npz_sha256: str
    content_hash: str
    leaves: list[Leaf]
    spec: dict
    environment: dict


def directory() -> pathlib.Path | None:
    """The cache folder (None when the cache is off)."""
    value = os.environ.get(ENV_VAR)
    if value is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return pathlib.Path(base) / "jax-tpu-lab" / SUBFOLDER
    if value.strip().lower() in OFF_VALUES:
        return None
    return pathlib.Path(value).expanduser() / SUBFOLDER


def sources_hash(sources=SOURCES) -> str:
    digest = hashlib.sha256()
    for name in sources:
        digest.update(name.encode())
        digest.update((_ROOT / name).read_bytes())
    return digest.hexdigest()


def _cpu() -> dict:
    """The CPU's model and a hash of its feature flags (XLA:CPU compiles for what it finds)."""
    out = {"machine": platform.machine(), "model": "", "flags_sha256": ""}
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return {**out, "model": platform.processor()}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "model name" and not out["model"]:
            out["model"] = value.strip()
        if name.strip() in ("flags", "Features") and not out["flags_sha256"]:
            out["flags_sha256"] = hashlib.sha256(value.strip().encode()).hexdigest()
    return out


def environment(sources=SOURCES) -> dict:
    """Everything outside the spec that can change a trained result's bits."""
    import flax
    import jaxlib
    import optax

    devices = jax.devices()
    return {
        "sources_sha256": sources_hash(sources),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "flax": flax.__version__,
        "optax": optax.__version__,
        "backend": jax.default_backend(),
        "device_count": len(devices),
        "device_kind": devices[0].device_kind,
        "cpu": _cpu(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "jax_enable_x64": bool(jax.config.jax_enable_x64),
        "jax_default_matmul_precision": str(jax.config.jax_default_matmul_precision),
    }


def key_of(kind: str, spec: dict, sources=SOURCES) -> tuple[str, dict]:
    """(sha256 key, environment) of a result of ``kind`` computed from ``spec``."""
    env = environment(sources)
    text = json.dumps({"kind": kind, "spec": spec, "environment": env}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest(), env


# --- a pytree of arrays <-> leaves -----------------------------------------------------------


def _flatten(tree, path=()) -> list[tuple[list, np.ndarray]]:
    if isinstance(tree, dict):
        out = []
        for k in sorted(tree, key=lambda k: (isinstance(k, str), str(k))):
            if not isinstance(k, str | int) or isinstance(k, bool):
                raise ValueError(f"cache keys must be str or int, got {k!r} at {list(path)}")
            out += _flatten(tree[k], (*path, k))
        return out
    array = np.asarray(tree)
    if array.dtype == object:
        raise ValueError(f"cache leaves must be numeric arrays, got an object at {list(path)}")
    return [(list(path), array)]


def _unflatten(items: list[tuple[list, np.ndarray]]):
    if len(items) == 1 and not items[0][0]:
        return items[0][1]
    root: dict = {}
    for path, array in items:
        node = root
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = array
    return root


# --- load and store --------------------------------------------------------------------------


def load(kind: str, key: str, folder: pathlib.Path | None = None):
    """The verified tree of entry ``key`` (numpy arrays), or None when there is none or it
    fails any check (schema, key, kind, sha256, leaves, content hash)."""
    folder = directory() if folder is None else folder
    if folder is None:
        return None
    try:
        manifest = Manifest.model_validate_json((folder / f"{key}.json").read_text())
        data = (folder / f"{key}.npz").read_bytes()
    except (OSError, ValueError):
        return None
    if (
        manifest.schema_version != SCHEMA_VERSION
        or manifest.key != key
        or manifest.kind != kind
        or hashlib.sha256(data).hexdigest() != manifest.npz_sha256
    ):
        return None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            if sorted(npz.files) != sorted(f"leaf_{i}" for i in range(len(manifest.leaves))):
                return None
            items = []
            for i, leaf in enumerate(manifest.leaves):
                array = npz[f"leaf_{i}"]
                if array.dtype.str != leaf.dtype or list(array.shape) != leaf.shape:
                    return None
                items.append((leaf.path, array))
    except (OSError, ValueError, EOFError):
        return None
    tree = _unflatten(items)
    if model.content_hash(tree) != manifest.content_hash:
        return None
    return tree


def store(kind: str, key: str, tree, spec: dict, env: dict, folder=None) -> pathlib.Path | None:
    """Write ``tree`` as entry ``key`` (the .npz, then the manifest, each renamed into
    place); None when the cache is off or the folder cannot be written (the result is
    still returned to the caller: a cache that cannot write is a cache miss next time)."""
    folder = directory() if folder is None else folder
    if folder is None:
        return None
    items = _flatten(tree)
    buffer = io.BytesIO()
    np.savez(buffer, **{f"leaf_{i}": a for i, (_, a) in enumerate(items)})
    data = buffer.getvalue()
    manifest = Manifest(
        schema_version=SCHEMA_VERSION,
        kind=kind,
        key=key,
        npz_sha256=hashlib.sha256(data).hexdigest(),
        content_hash=model.content_hash(_unflatten(items)),
        leaves=[Leaf(path=p, dtype=a.dtype.str, shape=list(a.shape)) for p, a in items],
        spec=spec,
        environment=env,
    )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(folder / f"{key}.npz", data)
        write_text_atomic(folder / f"{key}.json", manifest.model_dump_json(indent=1))
    except OSError:
        return None
    return folder / f"{key}.json"


def cached(kind: str, spec: dict, compute: Callable[[], object], sources=SOURCES):
    """(tree, origin): the verified entry for (kind, spec) if there is one (origin
    ORIGIN_CACHE), else ``compute()`` (a nested dict of arrays, or one array), stored
    (origin ORIGIN_TRAINED). The tree comes back as numpy arrays either way."""
    key, env = key_of(kind, spec, sources)
    found = load(kind, key)
    if found is not None:
        return found, ORIGIN_CACHE
    tree = _unflatten(_flatten(jax.device_get(compute())))
    store(kind, key, tree, spec, env)
    return tree, ORIGIN_TRAINED


def _hash_or_none(tree) -> str:
    return "none" if tree is None else model.content_hash(tree)


def train(loss_fn, trainable, frozen, batches_S, learning_rate: float, has_aux: bool = False):
    """model.train through the cache: (trained, values, origin), ``values`` as model.train
    returns them (losses_S, or (losses_S, aux) with ``has_aux``), all numpy."""
    spec = {
        "loss_fn": f"{loss_fn.__module__}.{loss_fn.__qualname__}",
        "trainable": model.content_hash(trainable),
        "frozen": _hash_or_none(frozen),
        "batches": model.content_hash(batches_S),
        "learning_rate": float(learning_rate),
        "has_aux": bool(has_aux),
    }

    def compute():
        trained, values = model.train(loss_fn, trainable, frozen, batches_S, learning_rate, has_aux)
        if has_aux:
            return {"trained": trained, "losses": values[0], "aux": values[1]}
        return {"trained": trained, "losses": values}

    out, origin = cached("model.train", spec, compute)
    values = (out["losses"], out.get("aux", {})) if has_aux else out["losses"]
    return out["trained"], values, origin
