"""The global objective stays the same: the byte Transformer's loss and every parameter
gradient with the flash kernel as its attention core equal those with the reference core.

The kernel enters through TinyLM's ``attention_fn`` hook (``kernel_attention``). The flash
kernel is causal-only, so the model is called WITHOUT segment ids: every row is one document
and the mask the hook receives is exactly causal. ``kernel_attention`` verifies that: a
concrete mask that is not causal raises ValueError; a traced one (under jit) is compared
with the causal mask inside the program and a mismatch turns the output into NaN, which no
check passes. It never silently ignores a document mask.

The comparison: value_and_grad of the mean next-byte loss with each core (same params, same
batch of single-document rows of the standard library), loss error relative to the loss,
gradient error per parameter leaf as max |g - g_ref| / max |g_ref| (normwise, no floor at 1:
gradients are far below 1), judged with the float32 tolerance. An independent anchor: the
PyTorch twin (capstones/byte_transformer/torch_twin.py) in float64 computes the same loss
and gradients from the same parameters.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib

import numpy as np

from capstones.byte_transformer import args, torch_twin, training
from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import data as data_lib
from capstones.pallas_kernel import common
from core import numerics

# Small enough to run in interpret mode in seconds; dropout off (the compared losses must be
# deterministic functions of params and batch).
SMALL = config_lib.Config(
    d_model=32,
    num_layers=2,
    num_heads=2,
    seq_len=32,
    batch_size=2,
    max_files=4,
    max_bytes=4096,
    max_len=64,
    dropout=0.0,
)
BLOCK = 16  # block_q = block_k: divides SMALL's T and keeps bfloat16's 16-row tile


def _causal_TS(t: int, s: int) -> np.ndarray:
    return np.tril(np.ones((t, s), bool))


def kernel_attention(block_q: int = BLOCK, block_k: int = BLOCK, interpret=None):
    """A TinyLM ``attention_fn``: the flash kernel (causal, Pallas backward) in the model's
    (B, T, H, K) layout. Only for single-document rows (the model called without segment
    ids): the mask must be exactly causal; see the module docstring for how that is held."""
    import jax
    import jax.numpy as jnp

    from core.kernels import flash_attention

    def attend(q_BTHK, k_BSHK, v_BSHK, mask):
        t, s = q_BTHK.shape[1], k_BSHK.shape[1]
        causal = _causal_TS(t, s)
        if t != s:
            raise ValueError(f"the flash kernel needs T == S (no KV cache), got T={t}, S={s}")
        try:
            concrete = np.asarray(mask)
        except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
            concrete = None
        if concrete is not None and not np.array_equal(
            np.broadcast_to(concrete, (*concrete.shape[:2], t, s)),
            np.broadcast_to(causal, (*concrete.shape[:2], t, s)),
        ):
            raise ValueError(
                "the flash kernel is causal-only: this mask separates documents (segment ids) "
                "or is not causal; call the model without segment ids (single-document rows)"
            )
        out_BHTD = flash_attention.flash_attention(
            *(jnp.swapaxes(x, 1, 2) for x in (q_BTHK, k_BSHK, v_BSHK)),
            causal=True,
            block_q=block_q,
            block_k=block_k,
            backward="kernel",
            interpret=interpret,
        )
        honoured = jnp.all(mask == jnp.asarray(causal))  # traced masks: checked in the program
        return jnp.where(honoured, jnp.swapaxes(out_BHTD, 1, 2), jnp.nan).astype(q_BTHK.dtype)

    return attend


def single_document_batch(config: config_lib.Config, seed: int) -> dict:
    """(B, T) rows each cut from ONE standard-library file (random file and offset), so one
    document per row: tokens, targets (each position's next byte, from the same file: the
    window is T + 1 bytes long) and weights (all 1)."""
    corpus = data_lib.load_corpus(config)
    t, rng = config.seq_len, np.random.default_rng(seed)
    long_enough = [d for d in corpus.train if len(d.content) > t + 1]
    if not long_enough:
        raise ValueError(f"no training file holds more than seq_len + 1 = {t + 1} bytes")
    rows = []
    for _ in range(config.batch_size):
        tokens = long_enough[rng.integers(len(long_enough))].tokens
        start = int(rng.integers(len(tokens) - t))
        rows.append(tokens[start : start + t + 1])
    window = np.stack(rows).astype(np.int32)
    weights = np.ones((config.batch_size, t), np.float32)
    return {"tokens_BT": window[:, :t], "targets_BT": window[:, 1:], "weights_BT": weights}


def loss(config: config_lib.Config, params: dict, batch: dict, attention_fn=None):
    """Mean next-byte cross-entropy of single-document rows (no segment ids, no dropout)."""
    from core.lm import transformer

    model = training.model_from_params(config, params)
    logits = model(batch["tokens_BT"], attention_fn=attention_fn)
    return transformer.token_loss(logits, batch["targets_BT"], batch["weights_BT"])[0]


@functools.lru_cache(maxsize=4)
def value_and_grad_program(config: config_lib.Config, core: str, interpret=None):
    """jit(value_and_grad(loss)) with the "kernel" or "reference" attention core."""
    import jax

    from core.kernels import flash_attention

    training._graphdef(config.program_key())  # build the model structure outside the trace
    fn = kernel_attention(interpret=interpret) if core == "kernel" else None
    options = flash_attention.COMPILER_OPTIONS if core == "kernel" else None
    return jax.jit(
        jax.value_and_grad(functools.partial(loss, config, attention_fn=fn), argnums=0),
        compiler_options=options,
    )


def torch_float64(config: config_lib.Config, params: dict, batch: dict):
    """(loss, gradients shaped like params) from the PyTorch twin in float64: an independent
    implementation (torch's scaled_dot_product_attention, autograd)."""
    import torch

    model = torch_twin.from_jax_params(config, params).double().eval()
    b, t = batch["tokens_BT"].shape
    full = {
        **batch,
        "segment_ids_BT": np.ones((b, t), np.int32),
        "positions_BT": np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)).copy(),
    }
    tb = torch_twin.batch_to_torch(full)
    tb["weights_BT"] = tb["weights_BT"].double()
    value, _ = model.loss(tb)
    value.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    with torch.no_grad():
        return float(value), torch_twin.to_jax_params(config, model, grads)


def _leaves(tree, prefix=""):
    if isinstance(tree, dict):
        for key in sorted(tree, key=str):
            yield from _leaves(tree[key], f"{prefix}/{key}" if prefix else str(key))
    else:
        yield prefix, tree


def leaf_errors(grads: dict, reference: dict) -> dict[str, float]:
    """{parameter path: max |g - g_ref| / max |g_ref|} for every leaf (normwise, no floor)."""
    ref = dict(_leaves(reference))
    return {
        path: numerics.tree_normwise_max_error(value, ref[path]) for path, value in _leaves(grads)
    }


def compare(config: config_lib.Config, seed: int, interpret=None, anchor: bool = True) -> dict:
    """One (params seed, batch seed) case: loss and gradients, kernel core vs reference core
    (and vs the float64 torch twin when ``anchor``)."""
    config = dataclasses.replace(config, seed=seed)
    params = training.init_state(config)["params"]
    batch = single_document_batch(config, seed)
    # one program for every seed: the seed only draws the parameters, not the structure
    program_config = dataclasses.replace(config, seed=0).program_key()
    loss_k, grads_k = value_and_grad_program(program_config, "kernel", interpret)(params, batch)
    loss_r, grads_r = value_and_grad_program(program_config, "reference")(params, batch)
    grads_k, grads_r = _to_dict(grads_k), _to_dict(grads_r)
    per_leaf = leaf_errors(grads_k, grads_r)
    result = {
        "seed": seed,
        "loss kernel": float(loss_k),
        "loss reference": float(loss_r),
        "loss error (relative)": abs(float(loss_k) - float(loss_r)) / abs(float(loss_r)),
        "worst gradient leaf": max(per_leaf, key=per_leaf.get),
        "worst gradient error": max(per_leaf.values()),
        "leaves": len(per_leaf),
        "per_leaf": per_leaf,
    }
    if anchor:
        loss_64, grads_64 = torch_float64(config, params, batch)
        anchor_leaf = leaf_errors(grads_k, grads_64)
        result["loss float64 (torch twin)"] = loss_64
        result["loss error vs float64"] = abs(float(loss_k) - loss_64) / abs(loss_64)
        result["worst gradient error vs float64"] = max(anchor_leaf.values())
    return result


def _to_dict(tree):
    """Params/gradients as plain nested dicts (nnx pure dicts may use int keys: kept)."""
    if isinstance(tree, dict):
        return {k: _to_dict(v) for k, v in tree.items()}
    return np.asarray(tree)


TOLERANCE = numerics.tolerance("float32")  # both cores compute in float32


def run(
    config: config_lib.Config = SMALL,
    seeds=(0, 1, 2),
    interpret: str = "tpu",
    anchor: bool = True,
) -> dict:
    """The objective section: one row per seed (params and batch), the verdict, the hardware."""
    if config.compute_dtype != "float32" or config.dropout != 0.0:
        raise ValueError("the objective compares float32 models without dropout")
    if config.seq_len % BLOCK:
        raise ValueError(f"seq_len {config.seq_len} must be a multiple of the block {BLOCK}")
    mode = common.interpret_mode(interpret)
    cases = [compare(config, seed, mode, anchor) for seed in seeds]
    worst = {
        "loss": max(c["loss error (relative)"] for c in cases),
        "gradients": max(c["worst gradient error"] for c in cases),
    }
    if anchor:
        worst["loss vs float64"] = max(c["loss error vs float64"] for c in cases)
        worst["gradients vs float64"] = max(c["worst gradient error vs float64"] for c in cases)
    return {
        "section": "objective",
        "created_utc": common.now_utc(),
        "hardware": common.hardware(),
        "label": common.INTERPRET_LABEL if mode is not False else "compiled by Mosaic on a TPU",
        "config": config.to_dict(),
        "blocks": [BLOCK, BLOCK],
        "how": "value_and_grad of the mean next-byte loss on single-document rows (no "
        "segment ids: the mask is exactly causal), attention core = flash kernel (Pallas "
        "forward and backward) vs core.lm.attention; gradient error per leaf = max|g - g_ref| "
        "/ max|g_ref|; anchor: the PyTorch twin in float64",
        "tolerance": TOLERANCE,
        "cases": cases,
        "worst": worst,
        "all_pass": all(v <= TOLERANCE for v in worst.values()),
    }


def command(parsed: args.Parsed) -> int:
    from capstones.pallas_kernel import cli

    config = cli.make_config(parsed, SMALL)
    interpret = args.choice("interpret", parsed["interpret"], common.INTERPRETS)
    if not 1 <= parsed["seeds"] <= 16:
        raise args.UsageError(f"seeds must be in 1..16, got {parsed['seeds']}")
    try:
        section = run(config, tuple(range(parsed["seeds"])), interpret, parsed["anchor"])
    except ValueError as exc:
        raise args.UsageError(str(exc)) from None
    rows = [{k: v for k, v in c.items() if k != "per_leaf"} for c in section["cases"]]
    common.print_rows(rows, f"\nobjective ({section['label']}), tolerance {TOLERANCE:g}:")
    path = common.write_json(pathlib.Path(parsed["out"]), "objective.json", section)
    print(f"worst: {section['worst']}; all pass: {section['all_pass']}\nwrote {path}")
    return 0 if section["all_pass"] else 1


OPTIONS = {
    "out": args.Option(str, common.DEFAULT_OUT, "output folder (objective.json)"),
    "seeds": args.Option(int, 3, "params/batch seeds 0..N-1"),
    "interpret": args.Option(str, "tpu", "tpu (races detected) or hlo (plain HLO interpreter)"),
    "anchor": args.Option(bool, True, "also compare with the float64 PyTorch twin"),
}
COMMANDS = {
    "objective": args.Command(
        "model loss and gradients: kernel core vs reference core", OPTIONS, command, True
    )
}
