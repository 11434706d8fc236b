"""The app-side views on hand-made runs (the real runs: parity_test.py and the apps)."""

import numpy as np

from interop.keras_track import models, parity, runner, views


def _run(name, loss, logits):
    return runner.BackendRun(
        backend=name,
        outputs=np.zeros((2, 2), np.float32),
        probe_loss=0.5,
        gradients={},
        train_loss=np.asarray(loss),
        step_seconds=np.array([1.0, 0.002, 0.004, 0.003]),
        eval_steps=np.array([2, 4]),
        eval_loss=np.array([0.6, 0.4]),
        eval_outputs=np.asarray(logits, np.float32),
        summary={"jit_compile": "True", "import_seconds": 1.0},
        wall_seconds=2.0,
    )


def test_accuracy_timing_and_chart():
    spec = models.MLPSpec()
    data = {"y_eval": np.array([0, 1, 1])}
    runs = {
        "jax": _run("jax", [0.7, 0.6, 0.5, 0.4], [[1, 0], [0, 1], [1, 0]]),
        "torch": _run("torch", [0.7, 0.6, 0.5, 0.41], [[1, 0], [0, 1], [0, 1]]),
    }
    comparison = views.Comparison(spec, 0, {}, data, runs, None, parity.table(runs))
    accuracy = {r["backend"]: r["eval accuracy"] for r in comparison.accuracy_rows()}
    assert accuracy == {"jax": 2 / 3, "torch": 1.0}
    timing = parity.timing_rows(runs)
    assert timing[0]["ms per step (median, CPU)"] == 3.0  # first (compile) step excluded
    rows = parity.curve_rows(runs) + [{**r, "run": "eval"} for r in parity.curve_rows(runs, "e")]
    spec_dict = views.loss_chart(rows, "loss", log=True).to_dict()
    assert spec_dict["encoding"]["color"]["scale"]["domain"] == ["jax", "torch"]
    # the pairwise loss row: 0.41 vs 0.4 is far outside the loss bound
    failed = [r for r in comparison.table.rows if not r.passed]
    assert [r.quantity for r in failed] == ["loss over 4 steps"]


def test_loss_chart_draws_its_first_run_solid_as_its_title_says():
    """keras_train_eval_step's title says train (solid), eval (dashed): Vega-Lite's sorted
    default would draw "eval" (first alphabetically) solid."""
    from core.lab import charts

    runs = {"jax": _run("jax", [0.7, 0.6, 0.5, 0.4], [[1, 0]])}
    rows = [{**r, "run": "train"} for r in parity.curve_rows(runs)]
    rows += [{**r, "run": "eval"} for r in parity.curve_rows(runs, "eval")]
    chart = views.loss_chart(rows, "train (solid) and eval (dashed) loss").to_dict()
    assert charts.spec_problems(chart) == []
    dashes = charts.dash_of(next(charts.unit_views(chart)), rows)
    assert dashes["train"] == [1, 0] and dashes["eval"] != [1, 0]


def test_a_long_loss_chart_is_thinned_under_altairs_row_limit():
    """keras_train_eval_step at 2000 steps drew 6030 rows, past Altair's 5000 (issue 36)."""
    steps = 2000
    runs = {
        name: _run(name, np.linspace(1.0, 0.1, steps), [[1, 0]])
        for name in ("jax", "torch", "tensorflow")
    }
    rows = [{**r, "run": "train"} for r in parity.curve_rows(runs)]
    chart = views.loss_chart(rows, "train loss")
    spec = chart.to_dict()  # raises MaxRowsError past 5000 rows
    drawn = chart.data
    assert len(drawn) <= 3 * views.MAX_POINTS_PER_CURVE + 3
    assert set(drawn.groupby("backend")["step"].max()) == {steps}  # the last step kept
    assert "one step in 4 drawn" in str(spec["title"])
    short = views.loss_chart(rows[:30], "short").to_dict()
    assert short["title"] == "short"
