"""The test suite on a TPU chip: ``JAX_TPU_LAB_TEST_BACKEND=tpu pytest core/ -p no:xdist``.

By default (unset, or ``cpu``) the suite pins JAX to the CPU with 8 virtual devices, as CI runs
it. In chip mode it leaves JAX's default backend alone (the TPU) and keeps the CPU backend
beside it (``JAX_PLATFORMS=tpu,cpu``) for float64 references and claims about the CPU; the 8
virtual CPU devices stay on ``jax.devices("cpu")``. Two markers say what a test needs, with the
reason a skip prints; they are read only in chip mode, so on the CPU every test runs:

    @pytest.mark.needs_devices(8)            8 devices of the default backend
    @pytest.mark.needs_devices("devices")    as many as the test's parameter ``devices`` holds
                                             (a mesh shape: its product; several: the most)
    @pytest.mark.cpu_only("why")             a claim about XLA:CPU (its cost fields, its bugs)

Standard library only: conftest.py loads this before anything imports jax.
"""

from __future__ import annotations

import math
import os

ENV = "JAX_TPU_LAB_TEST_BACKEND"
BACKENDS = ("cpu", "tpu")
CPU_DEVICES = "8"  # the lab's virtual CPU devices (core.runtime.DEFAULT_CPU_DEVICES)

MARKERS = (
    "needs_devices(*counts): needs COUNT devices of JAX's default backend (an int, or the name "
    "of a test parameter holding one or a mesh shape; the most of several); skipped with the "
    "reason where there are fewer (a chip)",
    "cpu_only(reason): a claim about the CPU backend (XLA:CPU's cost fields, its bugs); "
    "skipped with REASON where JAX's default backend is not the CPU",
)


def backend_asked(environ=os.environ) -> str:
    """The backend the suite runs on: "cpu" (default) or "tpu"; ValueError for anything else."""
    asked = environ.get(ENV, "").strip().lower() or "cpu"
    if asked not in BACKENDS:
        raise ValueError(f"{ENV}={environ[ENV]!r}: expected one of {', '.join(BACKENDS)}")
    return asked


def set_platforms(environ=os.environ) -> str:
    """Set JAX's platform variables in ``environ`` before jax is imported (a caller's own
    values win); return the backend asked for."""
    asked = backend_asked(environ)
    environ.setdefault("JAX_NUM_CPU_DEVICES", CPU_DEVICES)  # the CPU backend's, on a chip too
    # On the CPU: skip the TPU probe when libtpu is installed. On a chip: the TPU is JAX's
    # default backend and the CPU backend stays beside it for float64 and CPU claims.
    environ.setdefault("JAX_PLATFORMS", "tpu,cpu" if asked == "tpu" else "cpu")
    return asked


def _count(mark, params: dict) -> int:
    """The devices a needs_devices mark asks for: the largest of its arguments, each an int or
    the name of a test parameter holding an int or a mesh shape (a tuple: its product)."""
    counts = []
    for count in mark.args:
        if isinstance(count, str):
            if count not in params:
                raise ValueError(f"needs_devices({count!r}) names no parameter of this test")
            count = params[count]
        counts.append(math.prod(count) if isinstance(count, (tuple, list)) else int(count))
    return max(counts)


def skip_reason(
    markers, backend: str, device_count: int, device_kind: str, params: dict | None = None
) -> str | None:
    """Why a test with these pytest marks cannot run on ``backend`` (``device_count`` devices
    of kind ``device_kind``), or None when it can. ``params``: the test's parameters, for
    ``needs_devices("name")``."""
    for mark in markers:
        if mark.name == "needs_devices":
            needed = _count(mark, params or {})
            if needed > device_count:
                return (
                    f"needs {needed} devices; this backend has {device_count} ({device_kind}); "
                    "CI runs it on 8 virtual CPU devices"
                )
        elif mark.name == "cpu_only" and backend != "cpu":
            (why,) = mark.args
            return f"a claim about the CPU backend, not {backend}: {why}"
    return None
