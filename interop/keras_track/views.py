"""What every twin app shows, marimo-free: one run under the chosen backends, its parity table
against NumPy float64 and pair by pair, the overlaid loss curves (Altair) and the timing rows.

    comparison = views.compare(spec, backends, seed, data, training)
    comparison.table        parity.Table (outputs, gradients, loss over N steps; reference rows)
    views.loss_chart(comparison.runs, "training loss")
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from interop.keras_track import models, parity, runner


@dataclasses.dataclass(frozen=True)
class Comparison:
    spec: models.Spec
    seed: int
    weights: dict[str, np.ndarray]
    data: dict[str, np.ndarray]
    runs: dict[str, runner.BackendRun]
    reference: parity.Reference
    table: parity.Table

    def accuracy_rows(self) -> list[dict]:
        """Per backend: accuracy of the final model on the evaluation set (classifiers)."""
        labels = self.data["y_eval"]
        return [
            {
                "backend": b,
                "eval accuracy": float(np.mean(np.argmax(r.eval_outputs, -1) == labels)),
                "final train loss": float(r.train_loss[-1]),
            }
            for b, r in self.runs.items()
        ]


def compare(
    spec: models.Spec,
    backends: Sequence[str],
    seed: int,
    data: Mapping[str, np.ndarray],
    training: runner.Training,
) -> Comparison:
    """Run the spec's model (weights from ``seed``) under every backend, concurrently, and
    build its parity table (NumPy float64 reference included)."""
    weights = models.init_weights(spec, seed)
    runs = runner.run_backends(spec, backends, weights, data, training)
    reference = parity.reference(spec, weights, data)
    return Comparison(
        spec, seed, weights, dict(data), runs, reference, parity.table(runs, reference)
    )


# The dashes of a chart's runs, in the order the runs first appear: the first is solid.
RUN_DASHES = ([1, 0], [6, 4], [2, 2], [8, 3, 2, 3])
# A chart embeds every row, and Altair refuses more than 5000: a curve longer than this is
# drawn from every k-th step (its last step kept), which reads the same at chart width.
MAX_POINTS_PER_CURVE = 500


def loss_chart(curves: Mapping[str, Sequence[dict]] | list[dict], title: str, log: bool = False):
    """Overlaid loss curves, one colour per backend (rows: backend, step, loss[, run]).

    Runs get their dash in the order they first appear in the rows (the first solid, the
    next dashed), never Vega-Lite's alphabetical order, so a title can say which is which.
    A curve of more than MAX_POINTS_PER_CURVE steps is thinned (the title says so).
    """
    import altair as alt
    import pandas as pd

    from core.lab import charts

    frame = pd.DataFrame(curves)
    curve = frame.groupby([c for c in ("backend", "run") if c in frame], sort=False)["step"]
    index, size = curve.cumcount(), curve.transform("size")
    stride = -(-size // MAX_POINTS_PER_CURVE)  # ceil
    if int(stride.max()) > 1:
        frame = frame[(index % stride == 0) | (index == size - 1)]
        title = f"{title} (one step in {int(stride.max())} drawn)"
    names = list(dict.fromkeys(frame["backend"]))
    color = alt.Color(
        "backend:N", scale=alt.Scale(domain=names, range=charts.distinct_colors(len(names)))
    )
    y = alt.Y("loss:Q", scale=alt.Scale(type="log") if log else alt.Undefined)
    encoding = {"x": alt.X("step:Q"), "y": y, "color": color, "tooltip": list(frame.columns)}
    if "run" in frame:
        runs = list(dict.fromkeys(frame["run"]))
        dashes = [RUN_DASHES[i % len(RUN_DASHES)] for i in range(len(runs))]
        encoding["strokeDash"] = alt.StrokeDash("run:N", scale=alt.Scale(domain=runs, range=dashes))
    widths = alt.Scale(
        domain=names, range=[6.0 - 4.5 * i / max(len(names) - 1, 1) for i in range(len(names))]
    )
    # Curves from equal backends lie on top of each other: wider lines under narrower ones.
    return (
        alt.Chart(frame, title=title)
        .mark_line(opacity=0.8)
        .encode(**encoding, strokeWidth=alt.StrokeWidth("backend:N", scale=widths, legend=None))
        .properties(width=520, height=240)
    )
