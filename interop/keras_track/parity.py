"""The parity table: every pair of backends, and each backend against NumPy float64.

For the same spec, weights and batches:

    outputs          the probe batch's outputs                 float32 tolerance (1e-5 scaled)
    gradients        d loss / d every weight on the probe batch float32 tolerance, worst tensor
    loss after N     the training loss curve, step by step     LOSS_AFTER_STEPS_TOLERANCE

Pairs compare backend with backend; the reference rows compare each backend with the model
written out in NumPy float64 (models.forward_reference; gradients by float64 central
differences at sampled coordinates of every tensor; the probe loss). Training has no float64
reference here: its row is pairwise only.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping

import numpy as np

from core import numerics
from interop import keras_bridge
from interop.keras_track import models

# Every number in the table comes from the workers (runner.py), which compute on the CPU
# whatever this process runs on, or from NumPy float64: the CPU's float32 tolerance holds,
# on a TPU host too (there the parent's own would be the bfloat16 bound, 2000 x looser, and
# the mask contrast below would ask for a difference no mask makes).
FLOAT32 = keras_bridge.CHILD_FLOAT32
# The loss after N training steps: two float32 runs that differ by rounding (~1e-7 relative
# per operation, different summation orders per backend) start within FLOAT32 and drift apart
# as each step's difference feeds the next. At the track's stable learning rates and <= 200
# steps the drift measured here stays below 1e-6 (interop/keras_track/parity_test.py runs it
# over several seeds and all three models); 1e-4 leaves a 100x margin for it while still
# catching a real difference (a wrong epsilon or learning rate moves the loss by > 1e-3).
# A diverging run (the unstable learning rate) is chaotic: it is not held to this bound, and
# runs near the edge of stability get their own (unstable.FIXED_LOSS_TOLERANCE).
LOSS_AFTER_STEPS_TOLERANCE = 1e-4
# Where training is chaotic (a learning rate near or past the edge of stability, Adam on tiny
# batches) that rounding difference grows until float32 curves part ways: measured at the
# track's extreme controls (learning rate 1.0, the widest and deepest models, Adam on batches
# of 8) the first step over the bound was step 9 or later (9-16 for the tiny MLP's extremes,
# 12-42 for Adam), and before it the curves had already drifted 1.1e-5 to 9.7e-5 apart, ten
# times the stable drift. What holds there is agreement over the first steps (a wrong learning
# rate, epsilon or loss shows from the second step on) and the step where they part,
# measured. So a pair that parts is held over its first AGREEING_STEPS steps only when it
# drifted into the bound (CHAOS_DRIFT x the bound or more apart at an earlier step); a pair
# that jumps apart from agreement is a real difference and is held over every step. An eval
# curve (read every few steps) that parts while the train curves drift is shown, not held.
# interop/keras_track/parity_test.py measures the parting step and the drift at those ends.
AGREEING_STEPS = 3
CHAOS_DRIFT = 0.01  # x the bound: the stable drift's ceiling (1e-6 of 1e-4, see above)
# The causal-mask contrast: Keras's outputs must sit within FLOAT32 of the masked float64
# attention and at least this many tolerances away from the unmasked one, so a dropped mask
# cannot pass (with seq_len >= 2 the future positions move the outputs by ~1e-1, 1e4 x FLOAT32).
MASK_CONTRAST = 100


def mask_facts(spec: models.Spec, weights: Mapping, data: Mapping, runs: Mapping) -> dict:
    """Per backend: its outputs are far from the unmasked float64 attention (the mask is on)."""
    unmasked = models.forward_reference(spec, weights, data["x_probe"], causal=False)
    return {
        f"{name} differs from the unmasked attention by > {MASK_CONTRAST} x tolerance": bool(
            numerics.scaled_max_error(run.outputs, unmasked) > MASK_CONTRAST * FLOAT32
        )
        for name, run in runs.items()
    }


@dataclasses.dataclass(frozen=True)
class Row:
    compared: str
    quantity: str
    error: float
    tolerance: float
    held: bool = True  # False: a measurement shown beside the check, not part of it
    parted_at: int | None = None  # a loss curve pair: the step where it parts (parting_step)

    @property
    def passed(self) -> bool:
        return bool(self.error <= self.tolerance) or not self.held

    @property
    def key(self) -> str:
        return f"{self.quantity}: {self.compared}"


@dataclasses.dataclass(frozen=True)
class Reference:
    outputs: np.ndarray
    probe_loss: float
    coordinates: dict[str, np.ndarray]
    gradients: dict[str, np.ndarray]


def reference(spec: models.Spec, weights: Mapping, data: Mapping) -> Reference:
    """The NumPy float64 twin's outputs, probe loss and sampled gradients."""
    x, y = data["x_probe"], data["y_probe"]
    coordinates = models.gradient_coordinates(spec)
    return Reference(
        outputs=models.forward_reference(spec, weights, x),
        probe_loss=models.loss_reference(spec, weights, x, y),
        coordinates=coordinates,
        gradients=models.gradient_reference(spec, weights, x, y, coordinates),
    )


def _gradient_error(a: Mapping, b: Mapping) -> float:
    if sorted(a) != sorted(b):
        return float("inf")
    return max(numerics.scaled_max_error(a[n], b[n]) for n in a)


def _sampled(gradients: Mapping, coordinates: Mapping) -> dict[str, np.ndarray]:
    return {n: np.asarray(gradients[n]).ravel()[i] for n, i in coordinates.items()}


@dataclasses.dataclass(frozen=True)
class Table:
    rows: tuple[Row, ...]

    def errors(self) -> dict[str, float]:
        return {r.key: r.error for r in self.rows if r.held}

    def tolerances(self) -> dict[str, float]:
        return {r.key: r.tolerance for r in self.rows if r.held}

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rows)

    @property
    def curve_note(self) -> str:
        """For a check's title: "" when every loss curve pair agrees throughout, else where
        the first pair parts and what is held instead (AGREEING_STEPS)."""
        parted = [r.parted_at for r in self.rows if r.parted_at is not None]
        if not parted:
            return ""
        return (
            f" until they part (chaotic training: float32 curves part from step {min(parted)};"
            " the table says what is held)"
        )

    def dicts(self) -> list[dict]:
        return [
            {
                "compared": r.compared,
                "quantity": r.quantity,
                "error": r.error,
                "tolerance": r.tolerance if r.held else "shown, not held",
                "check": r.passed if r.held else "",
            }
            for r in self.rows
        ]


def parting_step(a, b, tolerance: float) -> int | None:
    """The first step (1-based) where two loss curves differ by more than ``tolerance``
    (numerics.scaled_max_error per step: a NaN in one curve only is over), or None."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    over = [not numerics.scaled_max_error(x, y) <= tolerance for x, y in zip(a, b, strict=True)]
    return over.index(True) + 1 if any(over) else None


def _drift(a, b) -> np.ndarray:
    """Per step, the curves' scaled difference (numerics.scaled_max_error of each pair)."""
    return np.array([numerics.scaled_max_error(x, y) for x, y in zip(a, b, strict=True)])


def _curve_rows(versus: str, ra, rb, steps: int, tolerance: float) -> list[Row]:
    """The train (and eval) loss rows of one pair; see AGREEING_STEPS for curves that part."""
    a, b = ra.train_loss[:steps], rb.train_loss[:steps]
    drift = _drift(a, b)
    parted = parting_step(a, b, tolerance)
    before = float(np.max(drift[: parted - 1], initial=0.0)) if parted else 0.0
    drifted = before >= CHAOS_DRIFT * tolerance
    chaotic = drifted and parted > AGREEING_STEPS
    if chaotic:
        rows = [
            Row(
                versus,
                f"loss over the first {AGREEING_STEPS} of {steps} steps (then they drift apart, "
                f"past the bound at step {parted})",
                numerics.scaled_max_error(a[:AGREEING_STEPS], b[:AGREEING_STEPS]),
                tolerance,
                parted_at=parted,
            )
        ]
    else:  # agreeing throughout, or apart without drifting there first: a real difference
        error = numerics.scaled_max_error(a, b)
        rows = [Row(versus, f"loss over {steps} steps", error, tolerance)]
    if len(ra.eval_loss) and len(ra.eval_loss) == len(rb.eval_loss):
        error = numerics.scaled_max_error(ra.eval_loss, rb.eval_loss)
        eval_parted = parting_step(ra.eval_loss, rb.eval_loss, tolerance)
        quantity = f"eval loss at {len(ra.eval_loss)} points"
        train_drifts = float(np.max(drift, initial=0.0)) >= CHAOS_DRIFT * tolerance
        if eval_parted is None or not (chaotic or train_drifts):
            rows.append(Row(versus, quantity, error, tolerance))
        else:
            at = int(ra.eval_steps[eval_parted - 1])
            shown = f"{quantity} (apart from step {at} as the train curves drift: shown, not held)"
            rows.append(Row(versus, shown, error, tolerance, held=False, parted_at=at))
    return rows


def table(
    runs: Mapping, ref: Reference | None = None, loss_tolerance: float = LOSS_AFTER_STEPS_TOLERANCE
) -> Table:
    """The rows for {backend: BackendRun} (runner.py), and against ``ref`` when given."""
    rows = []
    steps = min((len(r.train_loss) for r in runs.values()), default=0)
    if ref is not None:
        for name, run in runs.items():
            versus = f"{name} vs NumPy float64"
            rows.append(
                Row(versus, "outputs", numerics.scaled_max_error(run.outputs, ref.outputs), FLOAT32)
            )
            if run.gradients:
                error = _gradient_error(_sampled(run.gradients, ref.coordinates), ref.gradients)
                rows.append(Row(versus, "gradients (sampled)", error, FLOAT32))
                error = numerics.scaled_max_error(run.probe_loss, ref.probe_loss)
                rows.append(Row(versus, "loss on the probe batch", error, FLOAT32))
    for (a, ra), (b, rb) in itertools.combinations(runs.items(), 2):
        versus = f"{a} vs {b}"
        rows.append(
            Row(versus, "outputs", numerics.scaled_max_error(ra.outputs, rb.outputs), FLOAT32)
        )
        if ra.gradients and rb.gradients:
            error = _gradient_error(ra.gradients, rb.gradients)
            rows.append(Row(versus, "gradients", error, FLOAT32))
        if steps:
            rows += _curve_rows(versus, ra, rb, steps, loss_tolerance)
    return Table(tuple(rows))


def timing_rows(runs: Mapping) -> list[dict]:
    """Per backend: median seconds per training step (first step excluded), its jit setting,
    the worker's import and total seconds (this machine's CPU, not a TPU)."""
    return [
        {
            "backend": name,
            "ms per step (median, CPU)": 1e3 * run.median_step_seconds,
            "first step ms": 1e3 * float(run.step_seconds[0]) if len(run.step_seconds) else None,
            "jit_compile": run.summary.get("jit_compile"),
            "import s": run.summary.get("import_seconds"),
            "worker s": run.wall_seconds,
        }
        for name, run in runs.items()
    ]


def curve_rows(runs: Mapping, which: str = "train") -> list[dict]:
    """Long-format loss curve rows (backend, step, loss) for an Altair line chart."""
    rows = []
    for name, run in runs.items():
        if which == "train":
            steps, losses = np.arange(1, len(run.train_loss) + 1), run.train_loss
        else:
            steps, losses = run.eval_steps, run.eval_loss
        rows += [
            {"backend": name, "step": int(s), "loss": float(v)}
            for s, v in zip(steps, losses, strict=True)
        ]
    return rows
