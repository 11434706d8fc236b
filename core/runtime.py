"""The process a lesson or a command runs in: devices, TPU presence, child environments.

Nothing here imports marimo, so capstones, interop and tpu_scripts can use it without the
lesson UI (`core.lab` re-exports these names for the apps).
"""

from __future__ import annotations

import contextlib
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


# Backends without float64 hardware: float64 work there raises UNIMPLEMENTED (a TPU's LU:
# "Only F32 and C64 types are implemented"), so it runs on the host's CPU backend instead.
NO_FLOAT64_BACKENDS = ("tpu",)


def _default_backend() -> str:
    import jax

    return jax.default_backend()


def float64_device(backend: str | None = None):
    """The device a float64 JAX computation runs on: None (JAX's default device) where
    ``backend`` (default: JAX's default backend) has float64, else the host's first CPU
    device. A TPU has no float64: its float64 references run on ``jax.devices("cpu")``."""
    backend = _default_backend() if backend is None else backend
    if backend not in NO_FLOAT64_BACKENDS:
        return None
    import jax

    try:
        return jax.devices("cpu")[0]
    except RuntimeError as error:
        raise RuntimeError(
            f"float64 needs the CPU backend beside the {backend.upper()} (which has no "
            f"float64): leave JAX_PLATFORMS unset or set it to '{backend},cpu' "
            f"(it is {os.environ.get('JAX_PLATFORMS')!r})"
        ) from error


def float64_note(backend: str | None = None) -> str:
    """Where ``enable_float64`` computes, to append to a check line: "" on a backend with
    float64, " (float64 on the host CPU: a TPU has no float64)" on a TPU."""
    backend = _default_backend() if backend is None else backend
    if backend not in NO_FLOAT64_BACKENDS:
        return ""
    return f" (float64 on the host CPU: a {backend.upper()} has no float64)"


@contextlib.contextmanager
def enable_float64(backend: str | None = None):
    """``jax.enable_x64(True)`` on a device that has float64: JAX's default device on a CPU
    or GPU, the host's CPU on a TPU (``float64_device``). Arrays made from NumPy inside land
    there and jitted functions run there; the process-wide default (float32) is untouched.

        with runtime.enable_float64():
            x64 = solve(jnp.asarray(a_float64), ...)
    """
    import jax

    device = float64_device(backend)
    placement = contextlib.nullcontext() if device is None else jax.default_device(device)
    with jax.enable_x64(True), placement:
        yield device


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
