"""Every app holds its check at every value its controls allow, or refuses the value cleanly.

A control's lowest and highest value (a dropdown's first and last option) are where a check
that holds at the defaults most often breaks: issue 36 found eight such runs ending in a FAIL
or a traceback. tests/tools/sweep_extremes.py runs every app with all its flags at their
lowest, then at their highest value; a run must end "ok" (exit 0, no traceback, no FAIL line)
or "refused" (`STOPPED: <why>`, exit 0: the control said no, with the reason).

The whole sweep (every app, both ends: about 210 headless runs, over an hour on two cores) is
too heavy for each CI run, so the suite runs
- REGRESSIONS: every run at allowed values that once failed (kept cheap where the defect shows
  with fewer steps), each a `python apps/NAME.py FLAGS` run, always;
- one rotating shard of the full sweep: the ends the record (tests/sweep_extremes_record.json,
  written by the tool) measured at most SLOW_S seconds, packed into shards of about SHARD_S
  recorded seconds; the day of HEAD's commit picks the shard, so every such end comes round
  within a month of commits. JAX_TPU_LAB_SWEEP=all runs them all, JAX_TPU_LAB_SWEEP=<n> shard
  n (the test ids name the app and the end; the tool prints the command line to rerun by
  hand). The slower ends are left to the full sweep, run by hand before a release.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess

import pytest

from core import curriculum, lab

_SPEC = importlib.util.spec_from_file_location(
    "sweep_extremes", curriculum.REPO_ROOT / "tests" / "tools" / "sweep_extremes.py"
)
sweep = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sweep)

# (app stem, flags, what once failed there). Each is one headless run.
REGRESSIONS = [
    # issue 36: float32 curves of three backends part ways in chaotic training (0.806 and 3.24
    # apart after 1000-2000 steps): the check now holds the first steps and names the parting
    (
        "keras_tiny_mlp",
        ["--points=1000", "--noise=0.5", "--hidden=64", "--depth=4", "--learning-rate=1.0"]
        + ["--steps=60", "--seed=9999", "--activation=tanh"],
        "loss curves of three backends held to 1e-4 through chaotic training",
    ),
    # (keras_train_eval_step's Adam at 1.0, batch 128, seed 9999 is one of the chaotic corners
    # of interop/keras_track/parity_test.py, which holds the same table without the app)
    # the full sweep: a mistake judged on purpose printed FAIL (now: the diff must catch it)
    (
        "keras_nnx_twin",
        ["--seed=9999", "--batch=64", "--mistake=act1_tanh_gelu", "--control=act1_tanh_gelu"],
        "a FAIL line whenever a mistake was planted in the judged move",
    ),
    # issue 36: a dead unit's weights need not move
    (
        "keras_custom_loop",
        ["--seed=0", "--learning-rate=0.001", "--examples=8", "--batch=1", "--epochs=1"]
        + ["--hidden=1", "--optimizer=sgd"],
        "'every weight moved' with one dead hidden unit",
    ),
    # issue 36: a bare AssertionError: two steps at 1e-4 need not lower the loss
    (
        "keras_cnn_digits",
        ["--channels1=4", "--channels2=4", "--learning-rate=0.0001", "--steps=2"]
        + ["--optimizer=sgd", "--batch-size=16"],
        "'every backend trained' asserted after two tiny steps",
    ),
    # issue 36: at 2-bit operands the planted int8 accumulator cannot overflow
    (
        "precision_policy",
        ["--weight-bits=2", "--activation-bits=2", "--calibration-images=16"]
        + ["--granularity=per channel", "--accumulator=int32"],
        "'the int8 accumulator is caught' where it is harmless",
    ),
    # issue 36: 400 steps of 2 s outlive the job's lifetime (now refused, with the reason)
    (
        "observability",
        ["--steps=400", "--hang-at=400", "--step-seconds=2.0", "--heartbeat-s=5.0"]
        + ["--stall-after-s=30.0", "--seed=1000"],
        "'exactly one alert' for a job the runner kills first",
    ),
    # issue 36: with --regression=none v2's training data is v1's: that case loads
    (
        "rollback_provenance",
        ["--steps=60", "--seed=99", "--regression=none"],
        "'every changed case refused' where v2's data did not change",
    ),
]
# A hang guard, not a speed assertion (the extremes run the longest training a control allows).
LIMIT_S = 900
ENV = "JAX_TPU_LAB_SWEEP"
# The full sweep's record (tests/tools/sweep_extremes.py --record): each end's outcome and
# seconds, measured on a loaded 2-core machine. Only the selection below reads the seconds.
RECORDED = (
    json.loads(sweep.RECORD.read_text(encoding="utf-8"))["runs"] if sweep.RECORD.exists() else {}
)
SLOW_S = 90.0  # an end slower than this in the record is left to the full sweep (by hand)
UNKNOWN_S = 30.0  # an end the record does not hold yet (a new app): assumed this long
SHARD_S = 150.0  # recorded (loaded) seconds per shard: about a minute on a quiet machine


def _seconds(run: tuple[str, str]) -> float:
    return float(RECORDED.get(f"{run[0]} {run[1]}", {}).get("seconds", UNKNOWN_S))


def _shards(runs: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The CI-sized ends, packed longest first into shards of about SHARD_S recorded seconds."""
    fast = sorted((r for r in runs if _seconds(r) <= SLOW_S), key=lambda r: (-_seconds(r), r))
    shards: list[list] = [[] for _ in range(max(1, math.ceil(sum(map(_seconds, fast)) / SHARD_S)))]
    for run in fast:
        min(shards, key=lambda shard: sum(map(_seconds, shard))).append(run)
    return shards


def _chosen(shards: list) -> set[int]:
    wanted = os.environ.get(ENV, "")
    if wanted == "all":
        return set(range(len(shards)))
    if wanted:
        return {int(wanted) % len(shards)}
    return {_head_day() % len(shards)}


def _head_day() -> int:
    """The day of HEAD's commit (every xdist worker collects the same shard, and the shard
    moves on as the project does); day 0 outside a git checkout."""
    try:
        stamp = subprocess.run(
            ["git", "log", "-1", "--format=%ct"],
            capture_output=True, text=True, cwd=curriculum.REPO_ROOT, timeout=30, check=True,
        ).stdout  # fmt: skip
        return int(stamp.strip()) // 86400
    except (OSError, subprocess.SubprocessError, ValueError):
        return 0


ALL_RUNS = [
    (path.stem, side) for path in sorted(curriculum.APPS_DIR.glob("*.py")) for side in sweep.SIDES
]
SHARDS = _shards(ALL_RUNS)
SHARD_RUNS = sorted(run for i in _chosen(SHARDS) for run in SHARDS[i])


def _assert_ok_or_refused(outcome: str, what: str, output: str) -> None:
    assert outcome in ("ok", "refused"), f"{what}: {outcome}\n{output[-4000:]}"


@pytest.mark.parametrize(
    "case", REGRESSIONS, ids=[f"{stem}[{' '.join(flags)}]" for stem, flags, _ in REGRESSIONS]
)
def test_a_run_that_once_failed_at_allowed_values_holds(case, run_lesson):
    stem, flags, why = case
    result = run_lesson(stem, *flags, timeout=LIMIT_S)
    outcome = sweep.classify(result.returncode, result.stdout, result.stderr)
    _assert_ok_or_refused(outcome, f"once failed: {why}", result.stdout + result.stderr)


@pytest.mark.parametrize("run", SHARD_RUNS, ids=[f"{stem}-{side}" for stem, side in SHARD_RUNS])
def test_every_flag_at_its_end_holds_or_is_refused(run, run_app):
    stem, side = run
    record = sweep.run_one(curriculum.APPS_DIR / f"{stem}.py", side, LIMIT_S, runner=run_app)
    _assert_ok_or_refused(record["outcome"], record["command"], record["tail"])


def test_the_extremes_are_each_flags_bounds():
    flags = lab.Flags(
        lab.Flag("n", 4, "n", lo=1, hi=9),
        lab.Flag("x", 0.5, "x", lo=0.0, hi=2.0),
        lab.Flag("kind", "b", "kind", choices=("a", "b", "c")),
        lab.Flag("on", True, "a switch"),
        lab.Flag("name", "free", "free text"),
    ).flags
    assert sweep.extreme_argv(flags, "low") == ["--n=1", "--x=0.0", "--kind=a"]
    assert sweep.extreme_argv(flags, "high") == ["--n=9", "--x=2.0", "--kind=c"]
    assert sweep.classify(0, "PASS: x\n", "") == "ok"
    assert sweep.classify(0, "STOPPED: why it cannot work\n", "") == "refused"
    assert sweep.classify(0, "FAIL: x\n", "") == "failed"
    assert sweep.classify(0, "PASS: x\n", "Traceback (most recent call last):\n") == "failed"
    assert sweep.classify(2, "", "usage: ...") == "failed"
    assert sweep.classify(None, "", "") == "timeout"
    assert SHARD_RUNS and len(ALL_RUNS) == 2 * len(list(curriculum.APPS_DIR.glob("*.py")))
