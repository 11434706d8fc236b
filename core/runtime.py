"""The process a lesson or a command runs in: devices, TPU presence, child environments.

Nothing here imports marimo, so capstones, interop and tpu_scripts can use it without the
lesson UI (`core.lab` re-exports these names for the apps).
"""

from __future__ import annotations

import glob
import os

DEFAULT_CPU_DEVICES = 8  # `make lab` and the tests run with this many virtual CPU devices


def host_has_tpu() -> bool:
    """Whether this host has TPU chips attached (Cloud TPU VMs expose /dev/accel* or vfio)."""
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def use_cpu_devices(count: int | None = None) -> int:
    """Ask JAX for ``count`` virtual CPU devices (default: $JAX_NUM_CPU_DEVICES or 8).

    Device count is process-wide and fixed once the backend starts, so this only takes
    effect before the first JAX computation; afterwards it leaves JAX as it is. On a host
    without TPU chips it also pins JAX to the CPU (unless JAX_PLATFORMS says otherwise):
    with libtpu installed (the `tpu` extra) JAX would otherwise spend seconds probing for a
    TPU. On a TPU VM the TPU stays the default backend. Returns the count requested.
    """
    import jax
    from jax._src import xla_bridge

    if count is None:
        count = int(os.environ.get("JAX_NUM_CPU_DEVICES", DEFAULT_CPU_DEVICES))
    if count < 1:
        raise ValueError(f"CPU device count must be >= 1, got {count}")
    if not xla_bridge.backends_are_initialized():
        jax.config.update("jax_num_cpu_devices", count)
        if not os.environ.get("JAX_PLATFORMS") and not host_has_tpu():
            jax.config.update("jax_platforms", "cpu")
    return count


def child_env(**extra: str) -> dict[str, str]:
    """os.environ for a child Python process, minus pytest's markers, plus ``extra``.

    marimo decides it runs under pytest from PYTEST_CURRENT_TEST; a `python apps/x.py`
    started from a test must not inherit it, or it runs in "test" mode and ignores its flags.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return {**env, **extra}


def package_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` ("jaxlib", "libtpu"), or None if absent."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
