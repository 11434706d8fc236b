"""The same model's first training losses on two machines, side by side: the relative
difference at every step, a tolerance derived before the comparison, and the verdict.

Why the chip's float32 losses differ from the CPU's at all: a TPU runs a float32 matmul on its
MXU as bfloat16 passes (DEFAULT 1 pass: operands rounded to 8 significant bits; HIGHEST 6
passes: near float32), and its float32 elementwise functions (log, exp, tanh) are
approximations of their own. Each step's loss carries that rounding, and the parameters the
next step starts from carry the earlier steps'.

The tolerance of one comparison (``tolerance``):

    SAFETY x (predicted MXU divergence + the chip's float32 elementwise error)

- the predicted MXU divergence is the largest relative difference, over the same steps,
  between the CPU's float32 run and the same run with every float32 matmul computed as the
  MXU computes it at that precision (``first_losses(..., mxu=...)``: core.perf.tpu_emulation
  on the CPU, where elementwise functions stay the CPU's);
- the chip's elementwise error is what the emulation cannot know: the worst float32
  elementwise function the loss uses, measured on the chip against float64 (log, in the
  float32_precision record, ``elementwise_error``);
- SAFETY = 4: the emulation is one realization of rounding noise (its per-step size moved by
  ~1.2x between two seeds of a small model here), the chip accumulates in its own order and
  may run matrix-vector products in float32; a factor of a few covers that. A real bug is
  far beyond it: a learning rate 10% off moves the losses by ~2e-2 within a few steps, a
  target not shifted by O(1) (loss_agreement_test.py plants both).

Relative difference at step s: |measured_s - reference_s| / |reference_s|, the reference
being the CPU's float32 run.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Sequence

SAFETY = 4.0
# The float32 elementwise function of the loss with the largest error on the chip, and the
# record that measured it (core/numerics.py TPU_FLOAT32 cites the same record).
ELEMENTWISE_RECORD = "float32_precision"
ELEMENTWISE_FIGURE = "elementwise_log"
PRECISIONS = ("DEFAULT", "HIGHEST")


def relative_differences(reference: Sequence[float], measured: Sequence[float]) -> list[float]:
    """|measured - reference| / |reference| per step (the first min(len) steps); ValueError
    when either is empty or a reference loss is 0 or not finite."""
    steps = min(len(reference), len(measured))
    if steps == 0:
        raise ValueError("no losses to compare (one side is empty)")
    out = []
    for step, (ref, got) in enumerate(zip(reference[:steps], measured[:steps], strict=True), 1):
        if not math.isfinite(ref) or ref == 0.0:
            raise ValueError(f"the reference loss at step {step} is {ref}: nothing to scale by")
        out.append(abs(got - ref) / abs(ref) if math.isfinite(got) else math.inf)
    return out


def elementwise_error(root=None) -> tuple[float, str]:
    """(the chip's worst float32 elementwise error the loss meets, its citation), from the
    newest float32_precision record (core.perf.records)."""
    from core.perf import records

    record = records.latest(ELEMENTWISE_RECORD, root=root)
    value = float(record.figures[ELEMENTWISE_FIGURE])
    return (
        value,
        f"{ELEMENTWISE_FIGURE} {value:.3g} ({records.cite(ELEMENTWISE_RECORD, root=root)})",
    )


def tolerance(
    precision: str, predicted: Sequence[float], elementwise: float, citation: str = ""
) -> dict:
    """The tolerance of the chip's losses at ``precision`` against the CPU's: SAFETY x
    (max of ``predicted``, the emulated run's relative differences, + ``elementwise``), with
    every term and the reason."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if not predicted:
        raise ValueError("no predicted differences: run the emulation first")
    mxu = max(predicted)
    value = SAFETY * (mxu + elementwise)
    reason = (
        f"{SAFETY:g} x (the MXU at {precision} emulated on the CPU: max relative difference "
        f"{mxu:.3g} over {len(predicted)} steps + the chip's float32 elementwise error "
        f"{elementwise:.3g}{': ' + citation if citation else ''})"
    )
    return {
        "precision": precision,
        "value": value,
        "predicted_mxu_max_relative_difference": mxu,
        "elementwise_error": elementwise,
        "safety": SAFETY,
        "reason": reason,
    }


def agreement(reference: Sequence[float], measured: Sequence[float], bound: dict) -> dict:
    """The verdict of ``measured`` against ``reference`` (the CPU's losses) under ``bound``
    (``tolerance``'s dict): steps compared, max relative difference and its step, the first
    step's (a pure forward pass: the same initial weights), and whether it holds."""
    differences = relative_differences(reference, measured)
    worst = max(range(len(differences)), key=differences.__getitem__)
    return {
        "precision": bound["precision"],
        "steps": len(differences),
        "max_relative_difference": differences[worst],
        "at_step": worst + 1,
        "first_step_relative_difference": differences[0],
        "tolerance": bound["value"],
        "tolerance_reason": bound["reason"],
        "agrees": differences[worst] <= bound["value"],
        "relative_differences": differences,
    }


# --- the losses of a run's first steps, computed here ------------------------------------


def first_losses(config, steps: int, mxu: str | None = None, loss: Callable | None = None):
    """The losses of ``training.train``'s first ``steps`` steps of ``config`` (same initial
    state, same data stream, same step function), computed in this process without a run
    directory. ``mxu``: "DEFAULT" or "HIGHEST" computes every float32 matmul as a TPU's MXU
    does at that precision (core.perf.tpu_emulation); None: as this backend does. ``loss``:
    another loss function for training.train_step (a planted bug in the tests)."""
    import jax

    from capstones.byte_transformer import data, training
    from core.perf import tpu_emulation

    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if mxu is not None and mxu not in PRECISIONS:
        raise ValueError(f"mxu must be None or one of {PRECISIONS}, got {mxu!r}")
    trainers_step = training.make_train_step(config)  # also builds the model structure
    step = functools.partial(training.train_step, config, loss=loss or training.loss_fn)
    precision = jax.default_matmul_precision(mxu.lower()) if mxu else contextlib.nullcontext()
    stream = data.training_stream(config, data.load_corpus(config))
    # committed to its device as training.train commits it: the same program's cache entry
    state = jax.tree.map(
        lambda leaf: jax.device_put(leaf, leaf.sharding), training.init_state(config)
    )
    losses = []
    with precision:  # traced (and so emulated) at this precision
        if mxu is None and loss is None:  # the trainer's program, compiled once per process
            program = trainers_step
        else:
            program = jax.jit(tpu_emulation.emulate(step) if mxu else step)
        for _ in range(steps):
            state, metrics = program(state, stream.next_batch())
            losses.append(float(metrics["loss"]))
    return losses
