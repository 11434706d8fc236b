"""The claim, over seeds and on every backend: unstable diverges, each fix trains."""

import numpy as np

from interop.keras_track import parity, runner, unstable


def test_verdict():
    assert unstable.verdict([1.0, 2.0, np.nan]) == "diverged"
    assert unstable.verdict([1.0, 11.0, 0.1, 0.1, 0.1, 0.1]) == "diverged"
    assert unstable.verdict([0.7, 0.2, 0.1, 0.1, 0.1, 0.1]) == "trained"
    assert unstable.verdict([0.7, 0.6, 0.6, 0.6, 0.6, 0.6]) == "neither"


def test_unstable_diverges_and_every_fix_trains_on_every_backend(tmp_path):
    cases = [c for seed in (0, 1, 2) for c in unstable.cases(seed)]
    runs = runner.run_cases(cases, runner.BACKENDS, tmp_path)
    for backend, by_case in runs.items():
        for name, run in by_case.items():
            assert unstable.verdict(run.train_loss) == unstable.expected(name), (backend, name)
            if unstable.expected(name) == "trained":  # with margin: half the bound
                assert run.train_loss[-5:].mean() < unstable.TRAINED_LOSS / 2, name
    # the fixed runs agree across backends within a fifth of their loss bound
    for case in cases:
        if unstable.expected(case.name) == "trained":
            by_backend = {b: runs[b][case.name] for b in runs}
            bound = unstable.FIXED_LOSS_TOLERANCE / 5
            rows = parity.table(by_backend, loss_tolerance=bound).rows
            assert all(r.passed for r in rows), (case.name, [r for r in rows if not r.passed])
