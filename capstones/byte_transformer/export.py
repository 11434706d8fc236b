"""Serialize prefill + decode for each KV-cache precision with jax.export, and load them back
only after checking every byte against a manifest.

    python -m capstones.byte_transformer export run_dir=RUN out=ART
        [prefill_len=64 capacity=256 batch=1]

writes into ART (each file atomically: core.documents.write_bytes_atomic; manifest.json last):

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

artifact_files.py holds the format's names and errors and reads the artifacts back, verifying
every byte first (load_artifacts); this module writes them (export_artifacts), reproduces
their outputs in another process (replay) and holds the ``export`` command.
"""

from __future__ import annotations

import datetime
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from capstones.byte_transformer import args, documents, kv_cache
from capstones.byte_transformer.artifact_files import (
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    MANIFEST,
    SUFFIX,
    WEIGHTS,
    from_stored,
    load_artifacts,
    manifest_digest,
    named_leaves,
    sha256_bytes,
    storable,
)
from core.documents import write_bytes_atomic
from core.serving.artifacts import npz_bytes as _npz_bytes
from core.serving.artifacts import versions  # noqa: F401 (the export module's name for it)

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


# --- writing ------------------------------------------------------------------------------


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
    buffer = _npz_bytes({n: storable(a) for n, a in weights.items()})
    write_bytes_atomic(out / WEIGHTS, buffer)
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
            write_bytes_atomic(out / f"{name}{SUFFIX}", data)
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
    arrays = {k: storable(v) for k, v in results.items()}
    arrays |= {f"{k}#dtype": np.array(np.asarray(v).dtype.name) for k, v in results.items()}
    write_bytes_atomic(path, _npz_bytes(arrays))


def load_outputs(path) -> dict:
    with np.load(path, allow_pickle=False) as archive:
        names = [n for n in archive.files if not n.endswith("#dtype")]
        return {n: from_stored(archive[n], str(archive[f"{n}#dtype"])) for n in names}


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
