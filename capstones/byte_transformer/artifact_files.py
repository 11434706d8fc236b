"""The exported artifacts' format and their verified loading: the file names, the manifest's
digest, the errors, and ``load_artifacts`` (export.py writes them).

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
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from capstones.byte_transformer import documents, kv_cache

# The format-agnostic pieces (errors, hashes, file checks, leaves, bfloat16's stored bits)
# are the course's (core.serving.artifacts, shared with core.serving.predict); their names
# stay importable from here.
from core.serving.artifacts import (  # noqa: F401 (re-exported)
    BIT_VIEWS,
    ArtifactError,
    ChecksumError,
    InputMismatchError,
    InputOutOfRangeError,
    ManifestSchemaError,
    MissingArtifactError,
    SignatureMismatchError,
    UnsupportedPlatformError,
    WeightsMismatchError,
    aval_list,
    check_file,
    check_manifest_digest,
    from_stored,
    leaf_diff,
    load_npz_weights,
    manifest_digest,
    named_leaves,
    plain_name_problem,
    sha256_bytes,
    storable,
)

FORMAT = documents.EXPORT_FORMAT
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
WEIGHTS = "weights.npz"
SUFFIX = ".jax_exported"
KINDS = ("prefill", "decode")
ENDPOINTS = tuple(f"{kind}_{p}" for p in kv_cache.PRECISIONS for kind in KINDS)
_check_file = check_file
_leaf_diff = leaf_diff


# --- the format's schema ------------------------------------------------------------------


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
        problem = plain_name_problem(entry["file"])
        if problem is not None:
            problems.append(problem)
    return problems


# --- loading and verifying ------------------------------------------------------------------


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
    except (ValueError, RecursionError) as exc:  # + UnicodeDecodeError, a 5000-digit number
        raise ManifestSchemaError(f"{path} is not valid JSON: {exc}") from None
    problems = schema_problems(manifest)
    if problems:
        raise ManifestSchemaError(f"{path}: " + "; ".join(problems))
    check_manifest_digest(path, manifest)
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
                aval_list(avals),
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
    """{name: jax.Array} of weights.npz's bytes (core.serving.artifacts.load_npz_weights)."""
    return {n: jnp.asarray(a) for n, a in load_npz_weights(data, leaves, WEIGHTS).items()}
