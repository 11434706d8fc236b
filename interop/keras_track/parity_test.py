"""Parity of the three backends (and NumPy float64) on 2+ shapes and seeds per model, and the
loss-after-N-steps bound over several seeds: one worker per backend runs every case."""

import numpy as np
import pytest

from interop.keras_track import models, parity, runner

STEPS = 20
# (name, spec, seed, batch, training): the default shape at seeds 0 and 1, another at seed 3.
CASES = [
    ("mlp_s0", models.MLPSpec(), 0, 64, runner.Training("sgd", 0.1, STEPS)),
    ("mlp_s1", models.MLPSpec(), 1, 64, runner.Training("sgd", 0.1, STEPS)),
    (
        "mlp_relu",
        models.MLPSpec(hidden=8, depth=3, classes=2, activation="relu"),
        3,
        16,
        runner.Training("adam", 0.01, STEPS),
    ),
    ("cnn_s0", models.CNNSpec(), 0, 16, runner.Training("sgd", 0.05, STEPS)),
    ("cnn_s1", models.CNNSpec(), 1, 16, runner.Training("sgd", 0.05, STEPS)),
    (
        "cnn_wide",
        models.CNNSpec(channels1=4, channels2=12),
        3,
        8,
        runner.Training("adam", 0.01, STEPS),
    ),
    ("tf_s0", models.TransformerSpec(), 0, 4, runner.Training("adam", 0.01, STEPS)),
    ("tf_s1", models.TransformerSpec(), 1, 4, runner.Training("adam", 0.01, STEPS)),
    (
        "tf_odd",
        models.TransformerSpec(width=12, heads=3, seq_len=5),
        3,
        2,
        runner.Training("adam", 0.01, STEPS),
    ),
]


def _case(name, spec, seed, batch, training):
    data = models.make_data(spec, seed, steps=STEPS, batch=batch, points=64)
    return runner.Case(name, spec, models.init_weights(spec, seed), data, training)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cases = [_case(*c) for c in CASES]
    result = runner.run_cases(cases, runner.BACKENDS, tmp_path_factory.mktemp("parity"))
    return {c.name: (c, {b: result[b][c.name] for b in runner.BACKENDS}) for c in cases}


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_every_backend_agrees_with_numpy_and_each_other(runs, name):
    case, by_backend = runs[name]
    ref = parity.reference(case.spec, case.weights, case.data)
    result = parity.table(by_backend, ref)
    assert result.passed, [r for r in result.rows if not r.passed]
    quantities = {r.quantity for r in result.rows}
    assert {"outputs", "gradients", "gradients (sampled)", f"loss over {STEPS} steps"} <= quantities
    for run in by_backend.values():
        assert sorted(run.gradients) == sorted(models.weight_shapes(case.spec))
        assert run.train_loss.shape == (STEPS,) and np.all(np.isfinite(run.train_loss))


def test_the_loss_bound_holds_with_margin_over_seeds(runs):
    # The claim behind LOSS_AFTER_STEPS_TOLERANCE: after STEPS steps the backends' losses
    # differ by at most a tenth of the bound, for every model and seed, and training moved.
    worst = 0.0
    for case, by_backend in runs.values():
        rows = [r for r in parity.table(by_backend).rows if r.quantity.startswith("loss over")]
        worst = max(worst, *(r.error for r in rows))
        loss = by_backend["jax"].train_loss
        assert loss[-5:].mean() < loss[:5].mean(), case.name
    print(f"worst loss drift over {STEPS} steps: {worst:.3g}")
    assert worst <= parity.LOSS_AFTER_STEPS_TOLERANCE / 10, worst


def test_a_wrong_weight_fails_the_table(runs):
    case, by_backend = runs["cnn_s0"]
    moved = dict(case.weights)
    moved["head/bias"] = moved["head/bias"] + 1e-3
    result = parity.table(by_backend, parity.reference(case.spec, moved, case.data))
    failed = {r.quantity for r in result.rows if not r.passed}
    assert "outputs" in failed


def test_timing_and_curves(runs):
    _case_, by_backend = runs["mlp_s0"]
    rows = parity.timing_rows(by_backend)
    assert [r["backend"] for r in rows] == list(runner.BACKENDS)
    assert all(r["ms per step (median, CPU)"] > 0 for r in rows)
    assert len(parity.curve_rows(by_backend)) == 3 * STEPS
