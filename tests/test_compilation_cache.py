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
