"""The bench's optional train-step rows: the block-count sweep and the bf16 compute policy.

``block_sweep=dense,2,4,8``: the JAX train step with the dense attention core and with
core.lm.causal_blocked at each block count, timed in interleaved rounds in this process (the
figure behind causal_blocked.DEFAULT_BLOCKS).

``bf16=true``: the same model and batch four ways, interleaved: JAX float32, JAX with the
bf16 compute policy (config.compute_dtype="bfloat16": bf16 matmul inputs and activations,
float32 accumulators, softmax, LayerNorm statistics, loss and params; core.lm.transformer
Precision), torch eager float32, and torch eager under ``torch.autocast("cpu",
torch.bfloat16)`` (bf16 matmuls, float32 params and optimizer). Each advances its own copy of
the same initial state on the one reused batch, and its loss at every step is kept: the loss
curves show whether bf16 tracks float32 (on one batch the loss falls as it is memorised).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from capstones.byte_transformer import torch_twin, training
from capstones.byte_transformer.bench import steppers
from core.lm import causal_blocked, transformer
from core.perf import timing

DENSE = "dense"
BF16_ROWS = ("jax_f32", "jax_bf16", "torch_f32", "torch_bf16")


def parse_block_sweep(text: str, seq_len: int) -> list[str | int]:
    """``"dense,2,4,8"`` -> ["dense", 2, 4, 8]; ValueError naming a bad entry (not dense or a
    block count >= 1 dividing seq_len) or a repeated one. Empty text: no sweep."""
    rows: list[str | int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == DENSE:
            row: str | int = DENSE
        else:
            try:
                row = int(part)
            except ValueError:
                raise ValueError(
                    f"block_sweep entries are 'dense' or block counts, got {part!r}"
                ) from None
            causal_blocked.check_blocks(seq_len, row)
        if row in rows:
            raise ValueError(f"block_sweep lists {part!r} twice")
        rows.append(row)
    return rows


def _blocked_loss(num_blocks: int):
    attend = functools.partial(causal_blocked.causal_blocked_attention, num_blocks=num_blocks)

    def loss(config, params, batch, dropout_key):
        model = training.model_from_params(config, params)
        logits = model(
            batch["tokens_BT"],
            batch["segment_ids_BT"],
            batch["positions_BT"],
            dropout_key=dropout_key,
            attention_fn=attend,
        )
        return transformer.token_loss(logits, batch["targets_BT"], batch["weights_BT"])

    return loss


def sweep_step_fn(config, row: str | int):
    """jit(train_step) with the dense core (``"dense"``) or ``row`` causal blocks."""
    if row == DENSE:
        return training.make_train_step(config, dense_attention=True)
    return _blocked_step_program(config.program_key(), row)


@functools.lru_cache(maxsize=8)
def _blocked_step_program(config, blocks: int):
    """One jit per (program key, block count): a second caller in this process (the sweep
    after a check of the same row) runs the program already compiled, not a new one."""
    training.make_train_step(config)  # builds the model structure eagerly, outside a trace
    return jax.jit(functools.partial(training.train_step, config, loss=_blocked_loss(blocks)))


def _spread(samples: list[float]) -> dict:
    wall = timing.summarize(samples)
    return {
        "median_s": wall.median,
        "p10_s": wall.p10,
        "p90_s": wall.p90,
        "samples_s": list(samples),
    }


def _round_ratios(numerator: list[float], denominator: list[float]) -> dict:
    """Per-round ratio numerator/denominator (both sampled in the same round): median and
    the p10-p90 spread."""
    ratios = np.asarray(numerator) / np.asarray(denominator)
    return {
        "median": float(np.median(ratios)),
        "p10": float(np.percentile(ratios, 10)),
        "p90": float(np.percentile(ratios, 90)),
    }


def block_sweep(config, state, batch, rows, rounds: int, warmup: int, progress) -> dict:
    """{"method", "rounds", "default_blocks", "rows": [{"blocks", "skipped_fraction", "step",
    "vs_dense"?}], "fastest"}: each row's train step timed in interleaved rounds."""
    named = {}
    for row in rows:
        progress(f"block sweep: compiling the train step, attention {row}")
        step, _ = steppers.jax_stepper(
            config, jax.tree.map(jnp.copy, state), batch, sweep_step_fn(config, row)
        )
        named[str(row)] = step
    progress(f"block sweep: {rounds} interleaved rounds of {', '.join(named)}")
    wall, _ = steppers.interleaved(named, rounds, warmup, progress)
    out_rows = []
    for row in rows:
        entry = {
            "blocks": row,
            "skipped_fraction": 0.0 if row == DENSE else causal_blocked.skipped_fraction(row),
            "step": _spread(wall[str(row)]),
        }
        if DENSE in rows:  # dense step time / this step time, per round: > 1 is faster
            entry["vs_dense"] = _round_ratios(wall[DENSE], wall[str(row)])
        out_rows.append(entry)
        progress(f"  attention {row}: {entry['step']['median_s']:.3f}s/step")
    fastest = min(out_rows, key=lambda r: r["step"]["median_s"])["blocks"]
    return {
        "method": (
            "the JAX train step (training.train_step, the same batch) with the dense core and "
            "core.lm.causal_blocked at each block count, one step of each per round, "
            f"{steppers.PAUSE_S * 1e3:.0f} ms pause before each blocked sample; vs_dense = "
            "per-round dense / blocked step seconds"
        ),
        "rounds": rounds,
        "warmup": warmup,
        "seq_len": config.seq_len,
        "default_blocks": causal_blocked.DEFAULT_BLOCKS,
        "rows": out_rows,
        "fastest": fastest,
    }


# --- bf16 compute policy --------------------------------------------------------------------


def _jax_loss_stepper(config, state, batch, losses: list[float]):
    step_fn = training.make_train_step(config)
    batch = jax.device_put(batch)
    compiled = timing.lower_and_compile(step_fn, state, batch).executable
    holder = {"state": state}

    def step():
        new_state, metrics = compiled(holder["state"], batch)
        jax.block_until_ready((new_state, metrics))
        holder["state"] = new_state
        losses.append(float(metrics["loss"]))

    return step


def _torch_loss_stepper(config, params, batch, autocast: bool, losses: list[float]):
    import torch

    model = torch_twin.from_jax_params(config, params)
    model.train()
    optimizer = torch_twin.make_optimizer(config, model)
    torch_batch = torch_twin.batch_to_torch(batch)

    def loss_fn(b):
        if not autocast:
            return model.loss(b)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, count = model.loss(b)
        return loss.float(), count

    def step():
        metrics = torch_twin.train_step(model, optimizer, torch_batch, config.clip_norm, loss_fn)
        losses.append(float(metrics["loss"]))  # a host read waits for the step

    return step


def bf16_policy(config, state, batch, rounds: int, warmup: int, progress) -> dict:
    """The four rows of BF16_ROWS timed in interleaved rounds, with their loss curves."""
    bf16_config = dataclasses.replace(config, compute_dtype="bfloat16")
    losses = {name: [] for name in BF16_ROWS}
    progress("bf16 policy: compiling the JAX train step in float32 and with bf16 compute")
    named = {
        "jax_f32": _jax_loss_stepper(
            config, jax.tree.map(jnp.copy, state), batch, losses["jax_f32"]
        ),
        "jax_bf16": _jax_loss_stepper(
            bf16_config, jax.tree.map(jnp.copy, state), batch, losses["jax_bf16"]
        ),
        "torch_f32": _torch_loss_stepper(
            config, state["params"], batch, False, losses["torch_f32"]
        ),
        "torch_bf16": _torch_loss_stepper(
            config, state["params"], batch, True, losses["torch_bf16"]
        ),
    }
    progress(f"bf16 policy: {rounds} interleaved rounds of {', '.join(named)}")
    wall, _ = steppers.interleaved(named, rounds, warmup, progress)
    rows = {name: {**_spread(wall[name]), "loss_curve": losses[name]} for name in BF16_ROWS}
    for name in BF16_ROWS:
        progress(f"  {name}: {rows[name]['median_s']:.3f}s/step, last loss {losses[name][-1]:.4f}")

    def ratio(slow: str, fast: str) -> dict:  # slow / fast seconds: > 1 means fast is faster
        return {
            "of_medians": rows[slow]["median_s"] / rows[fast]["median_s"],
            "rounds": _round_ratios(wall[slow], wall[fast]),
        }

    def curve_gap(a: str, b: str) -> float:
        return float(np.max(np.abs(np.asarray(losses[a]) - np.asarray(losses[b]))))

    return {
        "method": (
            "jax_bf16: config.compute_dtype=bfloat16 (bf16 matmul inputs, float32 accumulation "
            "and params); torch_bf16: torch.autocast('cpu', torch.bfloat16) around the twin's "
            "loss (float32 params and AdamW); every row from the same initial state on the one "
            "reused batch, one step of each per round; loss_curve = the loss of every step, "
            "warm-up steps first"
        ),
        "rounds": rounds,
        "warmup": warmup,
        "rows": rows,
        "jax_bf16_vs_torch_bf16": ratio("torch_bf16", "jax_bf16"),
        "jax_f32_vs_torch_f32": ratio("torch_f32", "jax_f32"),
        "jax_bf16_vs_jax_f32": ratio("jax_f32", "jax_bf16"),
        "torch_bf16_vs_torch_f32": ratio("torch_f32", "torch_bf16"),
        "loss_gap_jax_bf16_vs_f32": curve_gap("jax_bf16", "jax_f32"),
        "loss_gap_torch_bf16_vs_f32": curve_gap("torch_bf16", "torch_f32"),
        "loss_gap_jax_vs_torch_f32": curve_gap("jax_f32", "torch_f32"),
    }
