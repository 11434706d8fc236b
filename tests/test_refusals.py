"""A refused combination of controls stops an app cleanly: headless, `STOPPED: <why>`, exit 0.

DESIGN.md: a combination that cannot work shows a callout that says why, never a traceback,
and every cell that would fail on it depends on the stopping cell. Each case below is a
`python apps/NAME.py FLAGS...` run that must exit 0, print a `STOPPED:` line and no traceback.
The list holds every combination that once ran past its guard (found by
tests/tools/sweep_refusals.py, marked "was a bug") plus one refused combination per app
that has a guard, so a cell added later without the dependency is caught.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from core import curriculum, lab

# (app stem, flags, why it is refused). Keep this short: each case is one headless run.
REFUSALS = [
    # was a bug (issue 12): the gradient-accumulation cell ran past the stop
    ("communication_algorithms", ["--batch", "10", "--microbatches", "4"], "K does not divide B"),
    ("communication_algorithms", ["--batch", "6", "--mesh-size", "8"], "K=4 does not divide 6"),
    # was a bug: the interrupted-job cell ran the job with the refused steps
    ("stage_launch_jobs", ["--kill-after", "6"], "killed after the last step"),
]
# A hang guard, not a speed assertion (a stopped app does less than a full run).
LIMIT_S = 120


def _id(case) -> str:
    stem, flags, _why = case
    return f"{stem}[{' '.join(flags)}]"


@pytest.mark.parametrize("case", REFUSALS, ids=[_id(c) for c in REFUSALS])
def test_refused_combination_stops_cleanly(case):
    stem, flags, why = case
    app_path = curriculum.APPS_DIR / f"{stem}.py"
    result = subprocess.run(
        [sys.executable, str(app_path), *flags],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        timeout=LIMIT_S,
        env=lab.child_env(JAX_NUM_CPU_DEVICES="8", JAX_PLATFORMS="cpu"),
    )
    output = result.stdout + result.stderr
    assert "Traceback" not in output, f"{why}: a cell ran past the refusal\n{output[-4000:]}"
    assert result.returncode == 0, f"{why}: exit {result.returncode}\n{output[-4000:]}"
    stopped = [line for line in result.stdout.splitlines() if line.startswith("STOPPED: ")]
    assert stopped, f"{why}: no STOPPED line (the combination was not refused)\n{output[-4000:]}"
    assert all(len(line) > len("STOPPED: ") + 10 for line in stopped), "STOPPED says why"
