"""The claim, over seeds and on every backend: unstable diverges, each fix trains."""

import numpy as np

from interop.keras_track import parity, runner, unstable


def test_verdict():
    assert unstable.verdict([1.0, 2.0, np.nan]) == "diverged"
    assert unstable.verdict([1.0, 11.0, 12.0, 15.0, 14.0, 13.0]) == "diverged"
    assert unstable.verdict([0.6, 9.0, 0.69, 0.69, 0.69, 0.69, 0.69]) == "diverged"  # dead
    assert unstable.verdict([0.7, 0.2, 0.1, 0.1, 0.1, 0.1]) == "trained"
    assert unstable.verdict([0.7, 0.6, 0.6, 0.6, 0.6, 0.6]) == "neither"
    # a spike that comes back down is not a divergence (keras_debug_unstable, lr 0.05, seed 0:
    # 0.62 -> 13.6 -> 0.001 was labelled "diverged")
    assert unstable.verdict([0.62, 13.6, 0.01, 0.001, 0.001, 0.001, 0.001]) == "trained"
    assert unstable.peak_ratio([0.5, 5.0, np.inf, 0.1]) == 10.0


def test_a_spike_that_recovers_reads_trained(tmp_path):
    """At learning rate 0.05 the loss spikes past 10x its first value (seeds 0 and 2, jax) and
    either comes back down to a trained loss (seed 0: 0.62 -> 13.6 -> 0.001) or stays dead at
    chance (seed 2: ends at ln 2). Measured on seeds 0-3: a run that ends trained is "trained"
    whatever its peak, and at least one of them spiked past the factor first."""
    cases = [unstable.cases(seed, {"learning_rate": 0.05})[0] for seed in (0, 1, 2, 3)]
    runs = runner.run_cases(cases, ("jax",), tmp_path)["jax"]
    ended_trained = [r for r in runs.values() if r.train_loss[-5:].mean() < unstable.TRAINED_LOSS]
    assert ended_trained and all(unstable.verdict(r.train_loss) == "trained" for r in ended_trained)
    spiked = [unstable.peak_ratio(r.train_loss) for r in ended_trained]
    assert max(spiked) > unstable.DIVERGED_FACTOR, spiked


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
