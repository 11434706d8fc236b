"""Serialize prefill + decode for each KV-cache precision with jax.export, and load them back
only after checking every byte against a manifest.

    python -m capstones.byte_transformer export run_dir=RUN out=ART
        [prefill_len=64 capacity=256 batch=1]

writes into ART (each file atomically: tmp + os.replace; manifest.json last):

    weights.npz                the model's parameters, once (np.savez; loaded with
                               allow_pickle=False)
    prefill_fp32.jax_exported  Exported.serialize() bytes of
                               (weights, tokens_BP int32, lengths_B int32) -> (logits_BV, cache)
    decode_fp32.jax_exported   (weights, token_B int32, cache) -> (logits_BV, cache)
    ... the same for bf16 and int8 (six endpoints)
    manifest.json

The weights are an ARGUMENT of every endpoint, not constants baked into it: six endpoints
share one weights file, and new weights of the same shapes need no re-export. A cache is a
flat {name: array} dict (kv_cache.Cache.as_dict): k_LBSHK, v_LBSHK, length_B and, for int8,
k_scale_LBSH, v_scale_LBSH.

manifest.json schema (keys; documents.ExportManifest, docs/schemas/export_manifest.schema.json):
    {"format": "byte_transformer exported endpoints", "format_version": 1,
     "created": ISO-8601 UTC time,
     "config": Config.to_dict() of the run,
     "shapes": {"batch": B, "prefill_len": P, "capacity": S, "vocab_size": V},
     "weights": {"file", "sha256", "bytes",
                 "leaves": [{"name", "shape", "dtype"}]},          # names like blocks.0.attn.wq
     "artifacts": {"prefill_fp32": {"file", "sha256", "bytes", "kind": "prefill"|"decode",
                                    "precision", "platforms": [...],
                                    "inputs": [{"name", "shape", "dtype"}],   # flattened order
                                    "outputs": [{"name", "shape", "dtype"}]}, ...},
     "versions": {"jax", "jaxlib", "flax", "numpy", "python", "calling_convention_version"},
     "manifest_sha256": sha256 of the canonical JSON of everything else}

``load_artifacts(dir)`` verifies BEFORE deserializing anything: the manifest schema and its
own hash, every file's size and sha256, that this process's backend is one the artifacts were
built for; then it deserializes and checks that each artifact's avals equal the manifest's
shapes/dtypes and that the weights file matches. Each failure raises its own ArtifactError
subclass with a message naming the file and the problem. Every call (Artifacts.call) checks its
inputs' names, shapes and dtypes and their VALUES against the contract: token ids in
[0, vocab_size), prefill lengths in [1, P], the decode slot cache/length_B in [0, S) (inside
the compiled program such values would be clipped silently). Like core.state.checkpoint's manifest,
this detects damage and mistakes, not a deliberate forgery (whoever can rewrite the files
can rewrite the manifest).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import pathlib
import platform as platform_lib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from capstones.byte_transformer import args, documents, kv_cache

FORMAT = documents.EXPORT_FORMAT
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
WEIGHTS = "weights.npz"
SUFFIX = ".jax_exported"
KINDS = ("prefill", "decode")
ENDPOINTS = tuple(f"{kind}_{p}" for p in kv_cache.PRECISIONS for kind in KINDS)
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
    """weights.npz does not hold the leaves (names, shapes, dtypes) the manifest lists."""


class InputMismatchError(ArtifactError):
    """A call's inputs differ from the shapes/dtypes the endpoint was exported for."""


class InputOutOfRangeError(InputMismatchError):
    """A call's inputs have the right shapes and dtypes but values outside the contract
    (token ids outside the vocabulary, prompt lengths outside [1, P], a cache position
    outside the capacity): inside the compiled program they would be clipped silently."""


# --- weights as a flat {name: array} dict -------------------------------------------------


def flat_weights(model) -> dict[str, jax.Array]:
    """The model's parameters keyed by dotted path ("blocks.0.attn.wq")."""
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    return {".".join(str(k) for k in path): variable[...] for path, variable in flat}


def model_from_weights(graphdef, weights: dict):
    """A TinyLM with ``weights`` (flat_weights names; arrays or tracers) put in."""
    nested: dict = {}
    for name, value in weights.items():
        node, keys = nested, [int(k) if k.isdigit() else k for k in name.split(".")]
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return nnx.merge(graphdef, nested)


def endpoint_functions(model, precision: str, capacity: int):
    """(prefill_fn, decode_fn): pure functions of (weights, inputs) for jax.export/jit.

    prefill_fn(weights, tokens_BP, lengths_B) -> (logits_BV, cache dict)
    decode_fn(weights, token_B, cache dict)   -> (logits_BV, cache dict)
    """
    kv_cache.check_precision(precision)
    graphdef = nnx.graphdef(model)

    def prefill_fn(weights, tokens_BP, lengths_B):
        m = model_from_weights(graphdef, weights)
        logits, cache = kv_cache.prefill_apply(m, tokens_BP, lengths_B, precision, capacity)
        return logits, cache.as_dict()

    def decode_fn(weights, token_B, cache):
        m = model_from_weights(graphdef, weights)
        logits, new = kv_cache.decode_apply(m, token_B, kv_cache.Cache.from_dict(cache))
        return logits, new.as_dict()

    prefill_fn.__name__, decode_fn.__name__ = f"prefill_{precision}", f"decode_{precision}"
    return prefill_fn, decode_fn


def input_specs(model, precision: str, batch: int, prefill_len: int, capacity: int) -> dict:
    """{kind: (arg names, ShapeDtypeStruct args)} of both endpoints of one precision."""
    weights = {n: jax.ShapeDtypeStruct(a.shape, a.dtype) for n, a in flat_weights(model).items()}
    cache = jax.eval_shape(
        lambda: kv_cache.init_cache(model.config, batch, capacity, precision).as_dict()
    )
    i32 = jnp.int32
    return {
        "prefill": (
            ("weights", "tokens_BP", "lengths_B"),
            (
                weights,
                jax.ShapeDtypeStruct((batch, prefill_len), i32),
                jax.ShapeDtypeStruct((batch,), i32),
            ),
        ),
        "decode": (
            ("weights", "token_B", "cache"),
            (weights, jax.ShapeDtypeStruct((batch,), i32), cache),
        ),
    }


def named_leaves(names, tree) -> list[dict]:
    """[{"name", "shape", "dtype"}] of a tuple of arguments, in jax's flattening order."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tuple(tree))[0]:
        top = names[path[0].idx]
        rest = "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path[1:])
        out.append(
            {
                "name": f"{top}/{rest}" if rest else top,
                "shape": [int(d) for d in leaf.shape],
                "dtype": jnp.dtype(leaf.dtype).name,
            }
        )
    return out


def _avals(avals) -> list[tuple[list[int], str]]:
    return [([int(d) for d in a.shape], jnp.dtype(a.dtype).name) for a in avals]


# --- writing ------------------------------------------------------------------------------


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_bytes_atomic(path: pathlib.Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _storable(array) -> np.ndarray:
    array = np.asarray(array)
    view = BIT_VIEWS.get(array.dtype.name)
    return array.view(view) if view is not None else array


def _from_stored(array: np.ndarray, dtype: str) -> np.ndarray:
    return array.view(jnp.dtype(dtype)) if dtype in BIT_VIEWS else array


def manifest_digest(manifest: dict) -> str:
    """sha256 of the manifest's canonical JSON without its own manifest_sha256 key."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return sha256_bytes(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def versions() -> dict:
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


def export_artifacts(
    model,
    config_dict: dict,
    out_dir,
    prefill_len: int,
    capacity: int,
    batch: int = 1,
    platforms: tuple[str, ...] | None = None,
    precisions: tuple[str, ...] = kv_cache.PRECISIONS,
) -> dict:
    """Export prefill + decode of each precision into ``out_dir``; returns the manifest
    (with "timings" seconds per artifact, which are printed but not saved)."""
    if batch < 1 or not 1 <= prefill_len <= capacity <= model.config.max_len:
        raise ValueError(
            f"need batch >= 1 and 1 <= prefill_len ({prefill_len}) <= capacity ({capacity}) "
            f"<= max_len ({model.config.max_len})"
        )
    platforms = tuple(platforms or (jax.default_backend(),))
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # a half-rewritten directory has no manifest
    weights = {n: np.asarray(a) for n, a in flat_weights(model).items()}
    buffer = _npz_bytes({n: _storable(a) for n, a in weights.items()})
    _write_bytes_atomic(out / WEIGHTS, buffer)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "config": config_dict,
        "shapes": {
            "batch": batch,
            "prefill_len": prefill_len,
            "capacity": capacity,
            "vocab_size": model.config.vocab_size,
        },
        "weights": {
            "file": WEIGHTS,
            "sha256": sha256_bytes(buffer),
            "bytes": len(buffer),
            "leaves": [
                {"name": n, "shape": list(a.shape), "dtype": a.dtype.name}
                for n, a in sorted(weights.items())
            ],
        },
        "artifacts": {},
        "versions": versions(),
    }
    timings = {}
    for precision in precisions:
        functions = dict(zip(KINDS, endpoint_functions(model, precision, capacity), strict=True))
        specs = input_specs(model, precision, batch, prefill_len, capacity)
        for kind in KINDS:
            name = f"{kind}_{precision}"
            start = time.perf_counter()
            arg_names, arg_specs = specs[kind]
            exported = jax.export.export(jax.jit(functions[kind]), platforms=platforms)(*arg_specs)
            data = bytes(exported.serialize())
            timings[name] = time.perf_counter() - start
            _write_bytes_atomic(out / f"{name}{SUFFIX}", data)
            out_shapes = jax.eval_shape(functions[kind], *arg_specs)
            manifest["artifacts"][name] = {
                "file": f"{name}{SUFFIX}",
                "sha256": sha256_bytes(data),
                "bytes": len(data),
                "kind": kind,
                "precision": precision,
                "platforms": list(exported.platforms),
                "inputs": named_leaves(arg_names, arg_specs),
                "outputs": named_leaves(("logits_BV", "cache"), out_shapes),
            }
    manifest["manifest_sha256"] = manifest_digest(manifest)
    documents.write(out / MANIFEST, documents.ExportManifest, manifest)
    return {**manifest, "timings": timings}


def _npz_bytes(arrays: dict) -> bytes:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


# --- loading and verifying ------------------------------------------------------------------


def schema_problems(manifest) -> list[str]:
    """What is wrong with the manifest's structure (empty when it is well formed): its
    model (documents.ExportManifest), then what the model cannot say (format, endpoint
    names, plain file names)."""
    found = documents.problem(documents.ExportManifest, manifest)
    if found is not None:
        return [found]
    problems = []
    if manifest["format"] != FORMAT:
        problems.append(f"format is {manifest['format']!r}, expected {FORMAT!r}")
    if manifest["format_version"] != FORMAT_VERSION:
        problems.append(
            f"format_version {manifest['format_version']} is not the supported {FORMAT_VERSION}"
        )
    if set(manifest["artifacts"]) - set(ENDPOINTS) or not manifest["artifacts"]:
        problems.append(
            f"artifacts must be a non-empty subset of {list(ENDPOINTS)}, "
            f"got {list(manifest['artifacts'])}"
        )
    for name, entry in manifest["artifacts"].items():
        if f"{entry['kind']}_{entry['precision']}" != name:
            problems.append(
                f"artifacts.{name} has kind/precision {entry['kind']}/{entry['precision']}"
            )
    for entry in [manifest["weights"], *manifest["artifacts"].values()]:
        name = entry["file"]
        if pathlib.Path(name).name != name or name in ("", ".", ".."):
            problems.append(f"file {name!r} must be a plain file name inside the directory")
    return problems


def _check_file(directory: pathlib.Path, entry: dict, what: str) -> bytes:
    path = directory / entry["file"]
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


def _leaf_diff(expected: list[tuple], found: list[tuple], names: list[str]) -> str:
    if len(expected) != len(found):
        return f"{len(found)} leaves, manifest lists {len(expected)}"
    for name, e, f in zip(names, expected, found, strict=True):
        if e != f:
            return f"{name}: manifest says {e[1]}{e[0]}, artifact has {f[1]}{f[0]}"
    return ""


@dataclasses.dataclass
class Artifacts:
    """Verified, deserialized endpoints and their weights (on the default device)."""

    directory: pathlib.Path
    manifest: dict
    weights: dict  # {name: jax.Array}
    exported: dict  # {endpoint: jax.export.Exported}
    load_seconds: float = 0.0

    def __post_init__(self):
        self._jitted = {name: jax.jit(e.call) for name, e in self.exported.items()}

    @property
    def shapes(self) -> dict:
        return self.manifest["shapes"]

    @property
    def precisions(self) -> list[str]:
        return [p for p in kv_cache.PRECISIONS if f"prefill_{p}" in self.exported]

    def check_inputs(self, name: str, arg_names: tuple[str, ...], inputs: tuple) -> None:
        """InputMismatchError unless ``inputs`` (everything after the weights) have the
        exported names, shapes and dtypes."""
        expected = [
            x
            for x in self.manifest["artifacts"][name]["inputs"]
            if not x["name"].startswith("weights/")
        ]
        try:
            given = named_leaves(arg_names, inputs)
        except (TypeError, AttributeError) as exc:
            raise InputMismatchError(f"{name}: inputs must be arrays: {exc}") from None
        want = {x["name"]: x for x in expected}
        got = {x["name"]: x for x in given}
        if set(want) != set(got):
            raise InputMismatchError(f"{name}: expected inputs {sorted(want)}, got {sorted(got)}")
        for key, spec in want.items():
            g = got[key]
            if (g["shape"], g["dtype"]) != (spec["shape"], spec["dtype"]):
                raise InputMismatchError(
                    f"{name}: input {key} must be {spec['dtype']}{spec['shape']}, got "
                    f"{g['dtype']}{g['shape']}"
                )
        self.check_values(name, arg_names, inputs)

    def value_bounds(self, name: str) -> dict[str, tuple[int, int, str]]:
        """{input name: (low, high, why)}: the inclusive range each integer input of
        endpoint ``name`` must lie in (the exported contract)."""
        shapes = self.shapes
        size = shapes["vocab_size"]
        vocab = (0, size - 1, f"token ids of the {size}-entry vocabulary")
        if self.manifest["artifacts"][name]["kind"] == "prefill":
            lengths = (1, shapes["prefill_len"], "prompt lengths: 1 to the exported prefill_len")
            return {"tokens_BP": vocab, "lengths_B": lengths}
        slots = (0, shapes["capacity"] - 1, "the slot decode writes: below the exported capacity")
        return {"token_B": vocab, "cache/length_B": slots}

    def check_values(self, name: str, arg_names: tuple[str, ...], inputs: tuple) -> None:
        """InputOutOfRangeError unless every bounded input lies in value_bounds(name)."""
        names = [x["name"] for x in named_leaves(arg_names, inputs)]
        leaves = dict(zip(names, jax.tree_util.tree_leaves(tuple(inputs)), strict=True))
        for key, (low, high, why) in self.value_bounds(name).items():
            try:
                values = np.asarray(leaves[key])
            except jax.errors.JAXTypeError:  # a tracer: values unknown until run
                raise InputMismatchError(
                    f"{name}: {key} must be a concrete array (its values are checked against "
                    "the contract; call the endpoint outside jit)"
                ) from None
            outside = values[(values < low) | (values > high)]
            if outside.size:
                raise InputOutOfRangeError(
                    f"{name}: {key} must lie in [{low}, {high}] ({why}), got "
                    f"{outside[:8].tolist()}{' ...' if outside.size > 8 else ''}"
                )

    def call(self, name: str, *inputs):
        """Run endpoint ``name`` on (tokens_BP, lengths_B) or (token_B, cache) after
        checking them: (logits_BV, cache dict) as jax arrays."""
        if name not in self.exported:
            raise ArtifactError(f"no endpoint {name!r}; have {sorted(self.exported)}")
        kind = self.manifest["artifacts"][name]["kind"]
        arg_names = ("tokens_BP", "lengths_B") if kind == "prefill" else ("token_B", "cache")
        if len(inputs) != 2:
            raise InputMismatchError(f"{name} takes {arg_names}, got {len(inputs)} inputs")
        inputs = tuple(jax.tree.map(lambda x: x if hasattr(x, "dtype") else np.asarray(x), inputs))
        self.check_inputs(name, arg_names, inputs)
        return self._jitted[name](self.weights, *inputs)

    def prefill(self, precision: str, tokens_BP, lengths_B):
        return self.call(f"prefill_{precision}", tokens_BP, lengths_B)

    def decode(self, precision: str, token_B, cache: dict):
        return self.call(f"decode_{precision}", token_B, cache)


def read_manifest(directory) -> dict:
    """The parsed, schema-checked, self-consistent manifest (ArtifactError otherwise)."""
    path = pathlib.Path(directory) / MANIFEST
    if not path.is_file():
        raise MissingArtifactError(
            f"no {MANIFEST} in {directory}: not an export directory "
            "(or an export that did not finish)"
        )
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestSchemaError(f"{path} is not valid JSON: {exc}") from None
    problems = schema_problems(manifest)
    if problems:
        raise ManifestSchemaError(f"{path}: " + "; ".join(problems))
    digest = manifest_digest(manifest)
    if digest != manifest["manifest_sha256"]:
        raise ChecksumError(
            f"{path}: content hash {digest[:16]}... != recorded manifest_sha256 "
            f"{manifest['manifest_sha256'][:16]}... (the manifest was edited)"
        )
    return manifest


def load_artifacts(directory, expected_platform: str | None = None) -> Artifacts:
    """Verify, then deserialize, the artifacts in ``directory`` (see the module docstring).

    ``expected_platform``: the platform the endpoints will run on (default: this process's
    backend, jax.default_backend())."""
    start = time.perf_counter()
    directory = pathlib.Path(directory)
    manifest = read_manifest(directory)
    platform = expected_platform or jax.default_backend()
    for name, entry in manifest["artifacts"].items():
        if platform not in entry["platforms"]:
            raise UnsupportedPlatformError(
                f"unsupported platform: artifact {name} built for {entry['platforms']}, this "
                f"process runs {platform} (re-export with platforms including {platform})"
            )
    weights_data = _check_file(directory, manifest["weights"], "weights")
    blobs = {n: _check_file(directory, e, n) for n, e in manifest["artifacts"].items()}
    weights = _load_weights(weights_data, manifest["weights"]["leaves"])
    leaf_specs = [(x["shape"], x["dtype"]) for x in manifest["weights"]["leaves"]]
    exported = {}
    for name, data in blobs.items():
        entry = manifest["artifacts"][name]
        try:
            artifact = jax.export.deserialize(bytearray(data))
        except Exception as exc:  # a corrupt blob with a consistent hash: name it
            raise ArtifactError(f"{name}: cannot deserialize {entry['file']}: {exc}") from None
        for side, avals in (("inputs", artifact.in_avals), ("outputs", artifact.out_avals)):
            listed = entry[side]
            diff = _leaf_diff(
                [(x["shape"], x["dtype"]) for x in listed],
                _avals(avals),
                [x["name"] for x in listed],
            )
            if diff:
                raise SignatureMismatchError(f"{name} {side} differ from the manifest: {diff}")
        if sorted(artifact.platforms) != sorted(entry["platforms"]):
            raise SignatureMismatchError(
                f"{name}: artifact platforms {list(artifact.platforms)} != manifest "
                f"{entry['platforms']}"
            )
        weight_inputs = [
            (x["shape"], x["dtype"]) for x in entry["inputs"] if x["name"].startswith("weights/")
        ]
        names = [
            x["name"][len("weights/") :]
            for x in entry["inputs"]
            if x["name"].startswith("weights/")
        ]
        if weight_inputs != leaf_specs or names != [
            x["name"] for x in manifest["weights"]["leaves"]
        ]:
            raise WeightsMismatchError(
                f"{name}: its weight inputs differ from manifest weights.leaves"
            )
        exported[name] = artifact
    return Artifacts(directory, manifest, weights, exported, time.perf_counter() - start)


def _load_weights(data: bytes, leaves: list[dict]) -> dict:
    import io

    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            stored = {name: archive[name] for name in archive.files}
    except (ValueError, OSError) as exc:
        raise WeightsMismatchError(f"{WEIGHTS} cannot be read without pickle: {exc}") from None
    listed = {x["name"]: x for x in leaves}
    if set(stored) != set(listed):
        raise WeightsMismatchError(
            f"{WEIGHTS} holds {sorted(set(stored) - set(listed))} not in the manifest and lacks "
            f"{sorted(set(listed) - set(stored))}"
        )
    weights = {}
    for name, spec in listed.items():
        array = _from_stored(stored[name], spec["dtype"])
        if list(array.shape) != spec["shape"] or array.dtype.name != spec["dtype"]:
            raise WeightsMismatchError(
                f"{WEIGHTS}: {name} is {array.dtype.name}{list(array.shape)}, the manifest says "
                f"{spec['dtype']}{spec['shape']}"
            )
        weights[name] = jnp.asarray(array)
    return weights


# --- reproducing outputs in another process --------------------------------------------------


def probe_inputs(shapes: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic (tokens_BP, lengths_B) for checking endpoints: random bytes, lengths
    from 1 to P."""
    rng = np.random.default_rng(seed)
    b, p = shapes["batch"], shapes["prefill_len"]
    tokens = rng.integers(0, 256, (b, p)).astype(np.int32)
    lengths = rng.integers(1, p + 1, (b,)).astype(np.int32)
    lengths[0] = p  # one full row
    return tokens, lengths


def probe_outputs(prefill, decode, precisions, shapes: dict, seed: int = 0) -> dict:
    """{"<endpoint>/<output>": numpy array}: prefill on probe_inputs, then two decodes of
    the greedy tokens. ``prefill(precision, tokens, lengths)`` / ``decode(precision, token,
    cache)`` are either the artifacts' endpoints or the in-process jitted functions."""
    tokens, lengths = probe_inputs(shapes, seed)
    results = {}
    for precision in precisions:
        logits, cache = prefill(precision, tokens, lengths)
        results[f"prefill_{precision}/logits_BV"] = np.asarray(logits)
        results |= {f"prefill_{precision}/cache/{k}": np.asarray(v) for k, v in cache.items()}
        for step in range(2):
            token = np.asarray(np.argmax(np.asarray(logits), -1), np.int32)
            logits, cache = decode(precision, token, cache)
            results[f"decode_{precision}/{step}/logits_BV"] = np.asarray(logits)
            results |= {
                f"decode_{precision}/{step}/cache/{k}": np.asarray(v) for k, v in cache.items()
            }
    return results


def save_outputs(path, results: dict) -> None:
    """np.savez of raw bits (bf16 as uint16) plus each array's dtype name."""
    arrays = {k: _storable(v) for k, v in results.items()}
    arrays |= {f"{k}#dtype": np.array(np.asarray(v).dtype.name) for k, v in results.items()}
    _write_bytes_atomic(pathlib.Path(path), _npz_bytes(arrays))


def load_outputs(path) -> dict:
    with np.load(path, allow_pickle=False) as archive:
        names = [n for n in archive.files if not n.endswith("#dtype")]
        return {n: _from_stored(archive[n], str(archive[f"{n}#dtype"])) for n in names}


def replay(directory, out_path, seed: int = 0) -> None:
    """Load the artifacts (fresh process) and save probe_outputs to ``out_path``.

    python -c "from capstones.byte_transformer import export; export.replay(DIR, OUT)"
    """
    artifacts = load_artifacts(directory)
    results = probe_outputs(
        artifacts.prefill, artifacts.decode, artifacts.precisions, artifacts.shapes, seed
    )
    save_outputs(out_path, results)


# --- the command ---------------------------------------------------------------------------


def run_export(parsed: args.Parsed) -> int:
    platforms = tuple(p for p in parsed["platforms"].split(",") if p)
    for p in platforms:
        args.choice("platforms", p, ("cpu", "tpu", "cuda", "rocm"))
    config, model = kv_cache._load_model(parsed["run_dir"])
    capacity = parsed["capacity"] or min(256, model.config.max_len)
    prefill_len = parsed["prefill_len"] or min(64, capacity)
    if parsed["batch"] < 1 or not 1 <= prefill_len <= capacity <= model.config.max_len:
        raise args.UsageError(
            f"need batch >= 1 and 1 <= prefill_len ({prefill_len}) <= capacity ({capacity}) "
            f"<= max_len ({model.config.max_len})"
        )
    start = time.perf_counter()
    manifest = export_artifacts(
        model,
        config.to_dict(),
        parsed["out"],
        prefill_len,
        capacity,
        parsed["batch"],
        platforms or None,
    )
    total = time.perf_counter() - start
    print(f"{'endpoint':<14} {'bytes':>9} {'export s':>9}  platforms")
    for name, entry in manifest["artifacts"].items():
        print(
            f"{name:<14} {entry['bytes']:>9} {manifest['timings'][name]:>9.2f}  "
            f"{','.join(entry['platforms'])}"
        )
    print(f"weights.npz {manifest['weights']['bytes']} bytes; export total {total:.2f} s")
    if jax.default_backend() in next(iter(manifest["artifacts"].values()))["platforms"]:
        artifacts = load_artifacts(parsed["out"])
        start = time.perf_counter()
        tokens, lengths = probe_inputs(artifacts.shapes)
        for precision in artifacts.precisions:
            logits, cache = artifacts.prefill(precision, tokens, lengths)
            artifacts.decode(precision, np.argmax(np.asarray(logits), -1).astype(np.int32), cache)
        print(
            f"reload: verified + deserialized in {artifacts.load_seconds:.2f} s; first prefill + "
            f"decode of each precision (compile) {time.perf_counter() - start:.2f} s"
        )
    print(f"wrote {pathlib.Path(parsed['out']) / MANIFEST}")
    return 0


COMMANDS = {
    "export": args.Command(
        "serialize prefill + decode for each cache precision (jax.export)",
        {
            "run_dir": args.Option(str, args.REQUIRED, "a training run directory"),
            "out": args.Option(str, args.REQUIRED, "directory for the artifacts"),
            "prefill_len": args.Option(int, 0, "P: padded prompt length of prefill; 0: min(64, S)"),
            "capacity": args.Option(
                int, 0, "S: cache slots (prompt + generated); 0: min(256, max_len)"
            ),
            "batch": args.Option(int, 1, "B: rows per call"),
            "platforms": args.Option(
                str, "", "comma-separated (e.g. cpu,tpu); default: this backend"
            ),
        },
        run_export,
        config_overrides=False,
    ),
}

if __name__ == "__main__":  # python -m capstones.byte_transformer.export DIR OUT: replay
    replay(sys.argv[1], sys.argv[2])
