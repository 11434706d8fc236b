"""Check cells that follow their controls and hold on every legal setting (issue 12).

transformer_block's badge used to compare the float32 block with NumPy whatever the policy
said, so with `bf16 params + compute` it printed a float32-sized error. Headless, the PASS
line must name the chosen policy, carry that policy's tolerance, and measure a bf16-sized
error. precision_xprof's check used a relative error that fails where an entry of x @ w
cancels to nearly zero (it printed FAIL at `--rows 2`, seed 0).
"""

from __future__ import annotations

import re
import subprocess

from core import curriculum, lab

# One headless run per (app, flags) in this module: two checks of one run read its one output.
_RUNS: dict[tuple[str, ...], subprocess.CompletedProcess] = {}


def headless_check_line(run_app, app: str, *flags: str, about: str = "") -> str:
    """The one PASS/FAIL line that `python apps/APP.py FLAGS` prints whose claim holds
    ``about`` (an app may have several checks), asserting it is PASS."""
    if (app, *flags) not in _RUNS:
        _RUNS[(app, *flags)] = run_app(
            [curriculum.APPS_DIR / f"{app}.py", *flags],
            env=lab.child_env(JAX_NUM_CPU_DEVICES="8", JAX_PLATFORMS="cpu"),
            cwd=curriculum.REPO_ROOT,
            timeout=300,
        )
    result = _RUNS[(app, *flags)]
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    lines = [
        line
        for line in result.stdout.splitlines()
        if line.startswith(("PASS:", "FAIL:")) and about in line
    ]
    assert len(lines) == 1 and lines[0].startswith("PASS:"), result.stdout[-3000:]
    return lines[0]


def test_headless_check_uses_the_chosen_policy(run_app):
    policy = "bf16 params + compute"
    line = headless_check_line(
        run_app,
        "transformer_block",
        *("--policy", policy, "--width", "32", "--seq-len", "16"),
        about="under the policy",  # the block's check (the app checks its RoPE block too)
    )
    assert policy in line, line
    found = re.search(r"max error (\S+) \(tolerance (\S+)\)", line)
    assert found, line
    error, tolerance = float(found[1]), float(found[2])
    assert tolerance == 2e-2, line  # the bf16 tolerance, not float32's 1e-5
    # bf16 weights and activations: an error of bf16 size (unit roundoff 2^-8), far above
    # the ~3e-7 of the float32 block the old check measured.
    assert 1e-4 < error <= tolerance, line


def test_precision_check_passes_on_two_rows(run_app):
    # seed 0, K up to 1024; its two checks: the int8/bf16/fp8 products, and lax.Precision's
    line = headless_check_line(run_app, "precision_xprof", "--rows", "2", about="int8 matmul")
    assert "rounding bound" in line, line
    line = headless_check_line(run_app, "precision_xprof", "--rows", "2", about="lax.Precision")
    assert "within the rounding bound of that many passes" in line, line
