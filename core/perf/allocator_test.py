"""The malloc settings: parsed from GLIBC_TUNABLES, applied by mallopt, and they remove the
page faults of a large buffer allocated and freed again and again (in fresh processes)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from core import runtime
from core.perf import allocator

# A process that allocates and frees a 64 MiB buffer (written, so its pages are touched) 20
# times and prints the minor faults of those 20 rounds; configure() first when asked.
_CHURN = """
import json, sys
from core.perf import allocator
state = allocator.configure() if sys.argv[1] == "configure" else allocator.in_force()
import numpy as np
np.ones(1 << 24, np.float32)  # the first allocation may fault: the heap grows once
before = allocator.page_faults()["minor_faults"]
for _ in range(20):
    np.ones(1 << 24, np.float32)
print(json.dumps({"faults": allocator.page_faults()["minor_faults"] - before, "state": state}))
"""


def _churn(mode: str) -> dict:
    """The churn in a child with glibc's defaults ("defaults") or calling configure()."""
    env = allocator.child_env(tuned=False)
    if mode == "configure":
        env.pop(allocator.DISABLE_ENV)
    done = subprocess.run(
        [sys.executable, "-c", _CHURN, mode], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_child_env_sets_one_side_of_the_comparison():
    tuned, defaults = allocator.child_env(True, X="1"), allocator.child_env(False)
    assert tuned["GLIBC_TUNABLES"] == allocator.TUNABLES and allocator.DISABLE_ENV not in tuned
    assert "GLIBC_TUNABLES" not in defaults and defaults[allocator.DISABLE_ENV] == "1"
    assert tuned["X"] == "1" and not any(k.startswith("PYTEST_") for k in tuned)


def test_tunables_string_round_trips_through_the_parser():
    assert allocator.from_environment({"GLIBC_TUNABLES": allocator.TUNABLES}) == allocator.SETTINGS
    mixed = {"GLIBC_TUNABLES": "glibc.cpu.x86_shstk=0:glibc.malloc.arena_max=2"}
    assert allocator.from_environment(mixed) == {"arena_max": 2}
    assert allocator.from_environment({}) == {}


@pytest.mark.skipif(not allocator.is_glibc(), reason="mallopt is glibc's")
def test_configure_removes_the_page_faults_of_a_freed_large_buffer():
    default = _churn("defaults")
    tuned = _churn("configure")
    assert default["state"]["mechanism"] == "none"
    assert tuned["state"] == {
        "mechanism": "mallopt",
        "settings": allocator.SETTINGS,
        "reason": "mallopt(3) at start-up",
    }
    if default["faults"] < 1000:  # e.g. transparent huge pages: little for the settings to do
        pytest.skip(f"glibc's defaults faulted only {default['faults']} times here")
    assert tuned["faults"] < default["faults"] / 10, (tuned, default)


@pytest.mark.skipif(not allocator.is_glibc(), reason="mallopt is glibc's")
def test_configure_recognises_settings_made_before_the_process_started():
    done = subprocess.run(
        [sys.executable, "-c", "from core.perf import allocator; print(allocator.configure())"],
        env=allocator.child_env(tuned=True),
        capture_output=True,
        text=True,
        check=True,
    )
    assert "'mechanism': 'GLIBC_TUNABLES'" in done.stdout


def test_the_makefile_exports_the_same_settings():
    """`make lab`, `make test` and `make capstone` start their processes with TUNABLES."""
    import pathlib
    import shutil

    if shutil.which("make") is None:
        pytest.skip("no make here")
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {k: v for k, v in runtime.child_env().items() if k != "GLIBC_TUNABLES"}
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval=show: ; @echo $$GLIBC_TUNABLES", "show"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == allocator.TUNABLES
