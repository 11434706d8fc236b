"""LoRA: low-rank adapters beside the frozen kernels of the byte Transformer.

Every adapted kernel W, read as a matrix of d_in rows and d_out columns (the model computes
x @ W), gets A and B with rank R:

    a_IR (d_in x R, random: N(0, 1/d_in)),  b_RO (R x d_out, zeros: the adapter starts at 0)
    output = x @ W + (alpha / R) * (x @ a_IR) @ b_RO                  ("base + adapter")
    merged W' = W + (alpha / R) * a_IR @ b_RO

In the W (out x in) convention of the LoRA paper that is W + (alpha/r) B A with B = b_RO^T,
A = a_IR^T. Only the adapters train; the base stays frozen (its content hash never changes).

Unmerging by subtraction, W' - delta, is off by one float32 rounding in some weights
(fl(fl(W + d) - d) != W in general). ``merge`` therefore also returns a *patch*: the
positions where subtraction does not give W back and W's value there, so that
``unmerge(..., patch)`` restores the base bit for bit.

Adapters are saved as an .npz (``np.savez``: arrays only, loaded with allow_pickle=False)
with the rank, alpha and targets as JSON inside.

Glossary: L layers, I kernel input size, O kernel output size, R rank.
"""

from __future__ import annotations

import io
import json
import math

import jax
import jax.numpy as jnp
import numpy as np

from core.post_training import cache, losses, model

ATTENTION = ("wq", "wk", "wv", "wo")
MLP = ("w_in", "w_out")
TARGET_SETS = {"attention + MLP": ATTENTION + MLP, "attention": ATTENTION, "MLP": MLP}


def kernel(params: dict, layer: int, name: str) -> jax.Array:
    block = params["blocks"][layer]
    return block["attn"][name] if name in ATTENTION else block[name]


def kernel_sides(shape: tuple[int, ...], name: str) -> tuple[int, int]:
    """(d_in, d_out) of a kernel as a matrix: wq/wk/wv (D, H, K) -> (D, H*K), wo (H, K, D)
    -> (H*K, D), w_in (D, F), w_out (F, D)."""
    if name == "wo":
        return shape[0] * shape[1], shape[2]
    return shape[0], math.prod(shape[1:])


def _check(params: dict, rank: int, targets) -> None:
    unknown = sorted(set(targets) - set(ATTENTION + MLP))
    if unknown or not targets:
        raise ValueError(f"targets must be a non-empty subset of {ATTENTION + MLP}, got {targets}")
    smallest = min(
        min(kernel_sides(kernel(params, 0, n).shape, n)) for n in targets
    )  # every layer has the same shapes
    if not 1 <= rank <= smallest:
        raise ValueError(
            f"rank R={rank} must be in [1, {smallest}] (the smallest side of an adapted kernel): "
            "a larger R is no longer low-rank"
        )


def init_adapters(params: dict, rank: int, targets, key) -> dict:
    """{layer: {name: {"a_IR", "b_RO"}}}: A ~ N(0, 1/d_in), B = 0 (the adapter starts at 0)."""
    _check(params, rank, targets)
    adapters = {}
    for layer in range(model.num_layers(params)):
        adapters[layer] = {}
        for i, name in enumerate(targets):
            d_in, d_out = kernel_sides(kernel(params, layer, name).shape, name)
            draw = jax.random.normal(jax.random.fold_in(key, layer * 16 + i), (d_in, rank))
            adapters[layer][name] = {
                "a_IR": np.asarray(draw / math.sqrt(d_in), np.float32),
                "b_RO": np.zeros((rank, d_out), np.float32),
            }
    return adapters


def trainable_count(params: dict, rank: int, targets) -> int:
    """Closed form: L * sum over adapted kernels of R * (d_in + d_out)."""
    per_layer = sum(rank * sum(kernel_sides(kernel(params, 0, n).shape, n)) for n in targets)
    return model.num_layers(params) * per_layer


def count(tree) -> int:
    """Number of numbers in a pytree (adapters or a whole model)."""
    return sum(int(np.size(leaf)) for leaf in jax.tree.leaves(tree))


def delta(adapter: dict, scale, shape) -> jax.Array:
    """scale * a_IR @ b_RO, in the kernel's shape (float32), its matmul at HIGHEST precision:
    at a TPU's DEFAULT (one bfloat16 pass) the merged kernels were off by 0.00288 of their
    scale on a v5e, and the merged model's logits by 0.0111 of theirs from base + adapter."""
    a_IR, b_RO = jnp.asarray(adapter["a_IR"]), jnp.asarray(adapter["b_RO"])
    return (scale * jnp.matmul(a_IR, b_RO, precision=jax.lax.Precision.HIGHEST)).reshape(shape)


def _replace(params: dict, layer: int, name: str, value) -> dict:
    blocks = dict(params["blocks"])
    block = dict(blocks[layer])
    if name in ATTENTION:
        block["attn"] = {**block["attn"], name: value}
    else:
        block[name] = value
    blocks[layer] = block
    return {**params, "blocks": blocks}


def merge(params: dict, adapters: dict, scale: float) -> tuple[dict, dict]:
    """(merged params with W + scale * A B in every adapted kernel, patch for unmerge).

    The patch holds, per kernel, the flat indices where fl(W' - delta) != W and W there."""
    merged, patch = params, {}
    for layer, named in adapters.items():
        for name, adapter in named.items():
            w = np.asarray(kernel(params, layer, name), np.float32)
            d = np.asarray(delta(adapter, np.float32(scale), w.shape), np.float32)
            w_merged = (w + d).astype(np.float32)
            off = np.flatnonzero((w_merged - d).astype(np.float32) != w)
            patch[f"{layer}.{name}"] = {"index": off.astype(np.int64), "value": w.ravel()[off]}
            merged = _replace(merged, layer, name, w_merged)
    return merged, patch


def merged_and_adapter_logits(merged: dict, base: dict, adapters: dict, scale: float, tokens_BT):
    """(the merged model's logits, base + adapter logits), both with every matmul at HIGHEST
    precision. They are two float32 expressions of one function (x (W + s A B) vs x W +
    s (x A) B), so they agree to float32 rounding at the precision they run at: on a TPU at
    DEFAULT each matmul is one bfloat16 pass, and the two differed by 0.0217 of the logits'
    scale on a v5e, past even the bfloat16 bound. At HIGHEST they are judged at
    numerics.tolerance("float32", precision="HIGHEST") on any backend."""
    with jax.default_matmul_precision("highest"):
        return (
            model.logits_BTV(merged, tokens_BT),
            model.logits_BTV(base, tokens_BT, adapters, scale),
        )


def unmerge(merged: dict, adapters: dict, scale: float, patch: dict | None = None) -> dict:
    """W' - scale * A B in every adapted kernel; with ``patch`` (from merge) the weights
    that subtraction rounds differently are put back, so the base returns bit for bit."""
    params = merged
    for layer, named in adapters.items():
        for name, adapter in named.items():
            w_merged = np.asarray(kernel(merged, layer, name), np.float32)
            d = np.asarray(delta(adapter, np.float32(scale), w_merged.shape), np.float32)
            w = (w_merged - d).astype(np.float32)
            if patch is not None:
                fix = patch[f"{layer}.{name}"]
                w = w.ravel()
                w[fix["index"]] = fix["value"]
                w = w.reshape(w_merged.shape)
            params = _replace(params, layer, name, w)
    return params


def patch_size(patch: dict) -> int:
    """How many weights the patch restores."""
    return sum(len(p["index"]) for p in patch.values())


def merged_reference(params: dict, adapters: dict, scale: float) -> dict:
    """{"layer.name": W + scale * A B} in NumPy float64 (the merge written out)."""
    out = {}
    for layer, named in adapters.items():
        for name, adapter in named.items():
            w = np.asarray(kernel(params, layer, name), np.float64)
            a, b = (np.asarray(adapter[k], np.float64) for k in ("a_IR", "b_RO"))
            out[f"{layer}.{name}"] = w + scale * (a @ b).reshape(w.shape)
    return out


# --- saving ----------------------------------------------------------------------------------


def save(adapters: dict, rank: int, alpha: float) -> bytes:
    """The adapters alone as .npz bytes (arrays only; rank, alpha, targets as JSON)."""
    arrays = {
        f"{layer}.{name}.{part}": np.asarray(value, np.float32)
        for layer, named in adapters.items()
        for name, adapter in named.items()
        for part, value in adapter.items()
    }
    targets = sorted({name for named in adapters.values() for name in named})
    meta = json.dumps({"rank": rank, "alpha": alpha, "targets": targets}).encode()
    arrays["meta"] = np.frombuffer(meta, np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def load(data: bytes) -> tuple[dict, dict]:
    """(adapters, meta) from ``save``'s bytes; never unpickles anything."""
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        meta = json.loads(archive["meta"].tobytes().decode())
        adapters: dict = {}
        for key in archive.files:
            if key == "meta":
                continue
            layer, name, part = key.split(".")
            adapters.setdefault(int(layer), {}).setdefault(name, {})[part] = archive[key]
    return adapters, meta


# --- training --------------------------------------------------------------------------------


def loss(adapters, frozen, batch):
    """The response-only token loss of base + adapter (frozen = {"params", "scale"})."""
    logits = model.logits_BTV(frozen["params"], batch["tokens_BT"], adapters, frozen["scale"])
    return losses.token_loss_from_logits(logits, batch["tokens_BT"], batch["weights_BT"])


def train(params, adapters, scale: float, batches_S, learning_rate: float):
    """Train the adapters only (the base is a frozen input): (adapters, losses_S)."""
    frozen = {"params": params, "scale": jnp.float32(scale)}
    trained, losses_S, _ = cache.train(loss, adapters, frozen, batches_S, learning_rate)
    return trained, losses_S
