"""The Pallas kernel tests' two modes: a test of this folder that takes ``mode`` runs once per
mode, so every kernel is checked the same two ways.

- "interpret": Pallas interpret mode, the kernel's semantics on the host's CPU (the same on
  every host, and what CI runs); cpu_only, so a chip's run skips it with that reason.
- "tpu": compiled by Mosaic, where the default backend is a TPU; skipped elsewhere.
"""

import jax
import pytest

INTERPRET_ON_THE_HOST = (
    "Pallas interpret mode runs the kernel's semantics on the host's CPU, the same on every "
    "host and run in CI; on a chip the 'tpu' variant compiles it through Mosaic"
)


def pytest_generate_tests(metafunc):
    if "mode" not in metafunc.fixturenames:
        return
    metafunc.parametrize(
        "mode",
        [
            pytest.param(
                "interpret", id="interpret", marks=pytest.mark.cpu_only(INTERPRET_ON_THE_HOST)
            ),
            pytest.param(
                "tpu",
                id="tpu",
                marks=pytest.mark.skipif(jax.default_backend() != "tpu", reason="needs a TPU"),
            ),
        ],
    )
