"""core.workload.recovery: every injected failure detected and recovered, bit for bit.

Trials: 3 runs, each with all five failures (sigkill, sigterm, nan, hang, disk-full) injected
one per attempt at different steps in a different order (seeded), so each failure kind is
recovered 3 times; every run's per-step losses and final state digest equal one fresh
process's uninterrupted run. 19 job processes in all (with the compilation cache ~2.2 s of
CPU each).
"""

from __future__ import annotations

import random

import pytest

from core.workload import faults, job, recovery

STEPS = 18
SAVE_EVERY = 2
SEED = 20261203
TRIALS = 3
STALL_S = 5.0  # a step takes ~0.05 s and a save ~0.1 s: 50x a save is a stall even on a loaded CI


def test_exit_codes_and_kinds_agree_with_the_job():
    assert recovery.EXIT_NONFINITE_LOSS == job.EXIT_NONFINITE_LOSS
    assert recovery.EXIT_SAVE_FAILED == job.EXIT_SAVE_FAILED
    assert recovery.EXIT_PREEMPTED == job.EXIT_PREEMPTED
    assert recovery.CHECKPOINTS == job.CHECKPOINTS_DIR
    assert set(recovery.IN_JOB) == set(faults.KINDS)
    assert set(recovery.KINDS) == set(faults.KINDS) | set(faults.EXTERNAL)


def test_bad_failures_are_refused():
    with pytest.raises(ValueError, match="KIND@STEP"):
        recovery.Failure.parse("segfault@3")
    with pytest.raises(ValueError, match="outside"):
        recovery.supervise("/nonexistent", recovery.Failure.parse("nan@9"), 4, 2)
    with pytest.raises(ValueError, match="step order"):
        recovery.supervise(
            "/nonexistent", [recovery.Failure("nan", 5), recovery.Failure("hang", 3)], 9, 2
        )


def _plan(rng: random.Random) -> list[recovery.Failure]:
    kinds = list(recovery.KINDS)
    rng.shuffle(kinds)
    steps, step = [], 0
    for kind in kinds:
        step += rng.choice([2, 3])  # after the previous failure's step (the resume is earlier)
        if kind == "disk-full":
            step += step % SAVE_EVERY  # a full disk shows at a save
        steps.append(step)
    return [recovery.Failure(kind, step) for kind, step in zip(kinds, steps, strict=True)]


DETECTED = {
    "sigkill": "killed by SIGKILL",
    "sigterm": "preempted: SIGTERM honoured",
    "nan": "non-finite loss",
    "hang": "stall: no step for",
    "disk-full": "No space left on device, errno 28",
}


@pytest.mark.skipif(not faults.disk_full_supported(), reason="no private mount namespace here")
def test_each_failure_recovers_bitwise_over_three_trials(tmp_path):
    cache = tmp_path / "jax-cache"
    reference = recovery.uninterrupted(tmp_path / "reference", STEPS, SAVE_EVERY, cache_dir=cache)
    assert sorted(reference.losses) == list(range(1, STEPS + 1))
    rng = random.Random(SEED)
    recovered = {kind: 0 for kind in recovery.KINDS}
    for trial in range(TRIALS):
        plan = _plan(rng)
        result = recovery.supervise(
            tmp_path / f"trial-{trial}", plan, STEPS, SAVE_EVERY, stall_s=STALL_S, cache_dir=cache
        )
        assert recovery.compare(result, reference) == [], [a.detected for a in result.attempts]
        assert len(result.attempts) == len(plan) + 1 and result.attempts[-1].outcome == "succeeded"
        for failure, before, after in zip(plan, result.attempts, result.attempts[1:], strict=False):
            assert DETECTED[failure.kind] in before.detected, (failure, before.detected)
            assert "fault not re-injected" in before.action
            # resumed from the newest checkpoint the failed process saw committed (or older
            # ones kept from before it), never from a partial save
            newest = max(
                [s for a in result.attempts[: before.index + 1] for s in a.committed], default=0
            )
            assert after.start_step == newest, (failure, after.start_step, newest)
            lost = before.last_step - after.start_step
            if failure.kind == "sigterm":
                assert lost == 0  # the step in flight finished and was saved
            else:
                assert 0 <= lost <= SAVE_EVERY  # only the work since the last commit
            recovered[failure.kind] += 1
    assert recovered == {kind: TRIALS for kind in recovery.KINDS}
