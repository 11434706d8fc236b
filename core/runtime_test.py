"""core.runtime with a faked TPU state: where float64 runs, what a child process may open."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import runtime


def test_float64_on_a_cpu_stays_on_the_default_device():
    assert runtime.float64_device("cpu") is None
    assert runtime.float64_note("cpu") == ""
    with runtime.enable_float64("cpu") as device:
        assert device is None
        assert jnp.asarray(np.ones(2)).dtype == jnp.float64
    assert jnp.asarray(np.ones(2)).dtype == jnp.float32  # the process default is untouched


def test_float64_on_a_tpu_runs_on_the_host_cpu(monkeypatch):
    """Kind 2 of issue 37: a float64 reference asked of a TPU raised UNIMPLEMENTED. With the
    default backend faked to "tpu", float64 work is placed on a CPU device and said so."""
    monkeypatch.setattr(runtime, "_default_backend", lambda: "tpu")
    real_devices = jax.devices
    # The host CPU handed out is not JAX's default device here: placement must be explicit.
    monkeypatch.setattr(jax, "devices", lambda backend=None: real_devices(backend)[3:])
    device = runtime.float64_device()
    assert device.platform == "cpu" and device != jax.local_devices()[0]
    assert runtime.float64_note() == " (float64 on the host CPU: a TPU has no float64)"
    with runtime.enable_float64() as placed:
        assert placed == device
        x = jnp.asarray(np.arange(3.0))
        y = jax.jit(lambda v: jnp.linalg.solve(jnp.eye(3) * 2.0, v))(x)
        assert x.dtype == jnp.float64 and y.dtype == jnp.float64
        assert {d.platform for d in y.devices()} == {"cpu"}
        assert y.devices() == {device}
    np.testing.assert_array_equal(np.asarray(y), np.arange(3.0) / 2)


def test_float64_without_a_cpu_backend_says_how_to_get_one(monkeypatch):
    def no_cpu(backend=None):
        raise RuntimeError("Unknown backend cpu")

    monkeypatch.setattr(jax, "devices", no_cpu)
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    with pytest.raises(RuntimeError, match="tpu,cpu"):
        runtime.float64_device("tpu")
