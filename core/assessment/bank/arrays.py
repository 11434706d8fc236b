"""The assessment item of the phase "Arrays & pure functions".

- ``arrays.plausible_bug`` (diagnose): a shape/dtype/update mistake that still returns numbers.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from core.assessment.bank.common import format_array, run_source
from core.assessment.items import DiagnoseItem, Evidence, Item


class PlausibleBug(DiagnoseItem):
    """A scoring script with one shape, dtype or update mistake that still prints a number."""

    id = "arrays.plausible_bug"
    phase = "Arrays & pure functions"
    lesson = "shapes_broadcasting"
    title = "A bug that still returns a plausible number"
    defects: ClassVar[dict[str, tuple[str, str]]] = {
        "wrong_axis": (
            "The counts are normalized over the wrong axis",
            "`counts.sum(axis=0, keepdims=True)` sums each class over the examples, so the "
            "rows of `probs` do not sum to 1. Normalize each example over its classes: "
            "`axis=1` (the K axis), with `keepdims=True` so (B, 1) broadcasts against (B, K).",
        ),
        "broadcast_column": (
            "The targets broadcast against the predictions into a (B, B) matrix",
            "`targets` is a (B, 1) column, and (B,) minus (B, 1) broadcasts to (B, B): the mean "
            "then averages every prediction against every target. Keep both (B,) (a flat list, "
            "or `targets[:, 0]`), or check `(pred - targets).shape` before reducing.",
        ),
        "discarded_update": (
            "An update's result is thrown away",
            "`probs.at[0].set(...)` returns a new array and leaves `probs` as it was: JAX arrays "
            "are immutable. Assign it: `probs = probs.at[0].set(...)`.",
        ),
        "integer_dtype": (
            "An integer dtype silently truncates the uniform probabilities",
            "`jnp.full_like(counts[0], 1 / K)` takes its dtype from `counts`, which is int32: "
            "1/K is truncated to 0, so example 0 gets all-zero probabilities. Take a float "
            "template (`jnp.full_like(probs[0], 1 / K)`) or pass `dtype=jnp.float32`.",
        ),
    }
    PROBES: ClassVar[dict[str, tuple[str, str]]] = {
        "wrong_axis": ("probs.sum(axis=1)", "each example's probabilities summed"),
        "broadcast_column": ("(pred - targets).shape", "the shape that is averaged"),
        "discarded_update": ("probs[0]", "example 0's probabilities"),
        "integer_dtype": ("probs[0]", "example 0's probabilities"),
    }

    def params(self, generator):
        # Fixed sizes (the numbers change with the seed): the eager operations of the programs
        # compile once per shape, so every seed after the first runs from JAX's caches.
        batch, classes = 5, 4
        counts = generator.integers(1, 10, size=(batch, classes))
        while len(set(counts[0])) == 1:  # example 0 must not already be uniform
            counts[0] = generator.integers(1, 10, size=classes)
        values = np.sort(generator.choice(np.arange(1, 9), classes, replace=False))
        updated = int(generator.integers(classes))
        new_value = float(values[updated] + generator.choice([0.25, 0.5, 0.75]))
        targets = np.round(generator.uniform(values.min(), values.max(), batch), 1)
        return {
            "counts": counts.tolist(),
            "values": [int(v) for v in values],
            "updated": updated,
            "new_value": new_value,
            "targets": [float(t) for t in targets],
        }

    def prompt(self, params):
        batch, classes = len(params["counts"]), len(params["values"])
        return (
            f"This script scores {batch} examples (B = {batch}) labelled by votes over "
            f"K = {classes} classes: each example's votes become probabilities, example 0 "
            "(not labelled yet) gets the uniform distribution, and the mean squared error "
            "of the expected value against the measured targets is printed. It runs and prints "
            "a plausible number, but one line is wrong. Which mistake is it?"
        )

    def program(self, defect, params):
        classes = len(params["values"])
        values = "[" + ", ".join(f"{v:.1f}" for v in params["values"]) + "]"
        if defect == "broadcast_column":
            targets = "[" + ", ".join(f"[{t}]" for t in params["targets"]) + "]"
        else:
            targets = "[" + ", ".join(str(t) for t in params["targets"]) + "]"
        axis = 0 if defect == "wrong_axis" else 1
        template = "counts[0]" if defect == "integer_dtype" else "probs[0]"
        uniform = f"probs.at[0].set(jnp.full_like({template}, 1 / {classes}))"
        if defect != "discarded_update":
            uniform = f"probs = {uniform}"
        counts = "[" + ", ".join(str(row) for row in params["counts"]) + "]"
        return (
            "import jax.numpy as jnp\n"
            "\n"
            f"counts = jnp.array({counts})  # (B, K) votes\n"
            f"values = jnp.array({values})  # (K,) what each class is worth\n"
            f"targets = jnp.array({targets})  # measured value per example\n"
            "\n"
            f"values = values.at[{params['updated']}].set({params['new_value']})"
            f"  # class {params['updated']} was re-measured\n"
            f"probs = counts / counts.sum(axis={axis}, keepdims=True)  # (B, K)\n"
            f"{uniform}  # example 0 is unlabelled: uniform\n"
            "pred = probs @ values  # (B,) expected value per example\n"
            "mse = jnp.mean((pred - targets) ** 2)\n"
            'print(f"mse = {float(mse):.4f}")\n'
        )

    def fixed_program(self, params) -> str:
        return self.program("none", params)

    def evidence(self, defect, params):
        shown, shown_out = run_source(self.program(defect, params))
        fixed, fixed_out = run_source(self.fixed_program(params))
        probe, meaning = self.PROBES[defect]
        probe_shown = eval(probe, shown)  # noqa: S307 (our own fixed expression)
        probe_fixed = eval(probe, fixed)  # noqa: S307
        mse_shown, mse_fixed = float(shown["mse"]), float(fixed["mse"])

        def show(value):
            if isinstance(value, tuple):
                return str(value)
            return f"{format_array(value)} ({value.dtype})"

        markdown = (
            "Both programs were run here:\n\n"
            "| | the program shown | the fixed program |\n|---|---|---|\n"
            f"| printed | `{shown_out}` | `{fixed_out}` |\n"
            f"| `{probe}` ({meaning}) | `{show(probe_shown)}` | `{show(probe_fixed)}` |\n\n"
            f"The mean squared error is off by {abs(mse_shown - mse_fixed):.4g} and nothing "
            "raised: the mistake is only visible if you check a shape, a dtype or a sum."
        )
        facts = {
            "the defect changes the result": abs(mse_shown - mse_fixed)
            > 1e-6 * max(abs(mse_fixed), 1.0),
            "the probe differs between the programs": show(probe_shown) != show(probe_fixed),
            "the fixed program's probabilities sum to 1 per example": bool(
                np.allclose(np.asarray(fixed["probs"]).sum(axis=1), 1.0, atol=1e-6)
            ),
        }
        return Evidence(markdown, facts)


ITEMS: tuple[Item, ...] = (PlausibleBug(),)
