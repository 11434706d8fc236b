"""The suite's shared compilation cache is switched on only when it reads back."""

import importlib.util
import pathlib

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "compilation_cache", pathlib.Path(__file__).parent / "tools" / "compilation_cache.py"
)
cache = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(cache)


def test_a_cache_the_caller_set_is_left_alone(tmp_path):
    environ = {cache.ENV_DIR: "/elsewhere"}
    assert "set by the caller" in cache.enable(tmp_path, environ)
    assert environ == {cache.ENV_DIR: "/elsewhere"}


def test_switched_off_by_its_variable(tmp_path):
    environ = {cache.ENV_DISABLE: "0"}
    assert "off" in cache.enable(tmp_path, environ)
    assert cache.ENV_DIR not in environ


@pytest.mark.parametrize("hits, enabled", [(None, False), (0, False), (1, True)])
def test_enabled_only_when_the_probe_hits(tmp_path, monkeypatch, hits, enabled):
    calls = []

    def fake_probe(cache_dir: pathlib.Path, env):
        calls.append(cache_dir)
        return hits

    monkeypatch.setattr(cache, "probe_hits", fake_probe)
    environ = {}
    status = cache.enable(tmp_path, environ)
    assert (environ.get(cache.ENV_DIR) == str(tmp_path)) is enabled, status
    assert calls and all(c == tmp_path / "probe" for c in calls)
    if enabled:
        assert environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    else:
        assert "not read back" in status


def test_an_unwritable_folder_leaves_it_off(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    environ = {}
    assert "cannot be written" in cache.enable(blocker / "cache", environ)
    assert cache.ENV_DIR not in environ


def test_the_session_has_its_own_trained_weights_cache():
    """conftest.py points core.post_training.cache at a fresh folder for this session, so no
    test reads weights a previous run (or a learner's `make lab`) left in ~/.cache."""
    import os

    from core.post_training import cache as weights_cache

    folder = pathlib.Path(os.environ[weights_cache.ENV_VAR])
    assert folder.is_dir()
    assert pathlib.Path.home() / ".cache" not in folder.parents


def test_fast_compile_appends_its_flags_and_keeps_the_callers():
    environ = {"XLA_FLAGS": "--xla_backend_optimization_level=2 --xla_cpu_foo=1"}
    assert "fast compile" in cache.fast_compile(environ, "cpu")
    flags = environ["XLA_FLAGS"].split()
    assert flags[:2] == ["--xla_backend_optimization_level=2", "--xla_cpu_foo=1"]
    assert flags[2:] == ["--xla_llvm_disable_expensive_passes=true"]  # the caller's level kept


@pytest.mark.parametrize("environ, backend", [({cache.ENV_FAST_COMPILE: "0"}, "cpu"), ({}, "tpu")])
def test_fast_compile_stays_off_when_asked_or_on_a_tpu(environ, backend):
    cache.fast_compile(environ, backend)
    assert "XLA_FLAGS" not in environ


def test_this_session_compiles_fast_and_its_children_inherit_it():
    """The suite's XLA:CPU programs compile at O0 (conftest.py): every worker and child sees
    the flags, and a jitted program still computes what NumPy does."""
    import os

    import jax.numpy as jnp
    import numpy as np

    if os.environ.get(cache.ENV_FAST_COMPILE) == "0":
        pytest.skip(f"{cache.ENV_FAST_COMPILE}=0: the caller kept XLA's default")
    if os.environ.get("JAX_TPU_LAB_TEST_BACKEND") == "tpu":
        pytest.skip("on a TPU the flags stay off (they would reach the TPU's compiler)")
    assert set(cache.FAST_COMPILE_XLA_FLAGS) <= set(os.environ.get("XLA_FLAGS", "").split())
    x = np.linspace(-3.0, 3.0, 64, dtype=np.float32).reshape(8, 8)
    got = np.asarray(jax_tanh_matmul(jnp.asarray(x)))
    np.testing.assert_allclose(got, np.tanh(x.astype(np.float64) @ x.T), rtol=1e-5, atol=1e-5)


def jax_tanh_matmul(x):
    import jax
    import jax.numpy as jnp

    return jax.jit(lambda a: jnp.tanh(a @ a.T))(x)
