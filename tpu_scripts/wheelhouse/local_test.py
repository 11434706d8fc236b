"""A local run's site goes after the host's own PYTHONPATH (its JAX first), before
site-packages; the wheelhouse's part folders are found and refused clearly."""

import os
import sys

import pytest

from tpu_scripts.wheelhouse import fake_wheels, local, remote


def test_the_site_follows_the_host_s_pythonpath_here_and_for_children(tmp_path, monkeypatch):
    host = tmp_path / "host-jax"
    host.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(host))
    monkeypatch.setattr(sys, "path", ["", str(host), "/usr/lib/python311.zip", "/site-packages"])
    local.activate(tmp_path / "site")
    site = str((tmp_path / "site").resolve())
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [str(host), str(local.ROOT), site]
    assert sys.path[:4] == ["", str(host), str(local.ROOT), site]
    assert sys.path[-1] == "/site-packages"
    local.activate(tmp_path / "site")  # twice: nothing added twice
    assert os.environ["PYTHONPATH"].count(site) == 1 and sys.path.count(site) == 1


def test_only_a_local_course_run_with_a_wheelhouse_is_prepared(tmp_path):
    assert local.wants(["course-run", "--local", "--wheelhouse", "w"])
    assert local.wants(["course-run", "--local", "--wheelhouse=w"])
    assert not local.wants(["course-run", "--wheelhouse", "w", "--name", "vm"])
    assert not local.wants(["course-run", "--local", "--lessons", "vmap"])
    assert local.site_for(["--runs-root", str(tmp_path)]) == tmp_path / "site"
    assert local.site_for(["--site", "s", "--runs-root", "r"]) == tmp_path.__class__("s")


def test_parts_are_found_in_the_wheelhouse_and_mixed_builds_refused(tmp_path):
    one = fake_wheels.wheelhouse(tmp_path / "wh", {"a": fake_wheels.make_wheel(tmp_path, "a")})
    assert remote.parts(tmp_path / "wh") == one and remote.parts(one[0]) == one
    with pytest.raises(ValueError, match="no wheelhouse part there"):
        remote.parts(tmp_path / "src-nothing")
    other = fake_wheels.wheelhouse(tmp_path / "b", {"b": fake_wheels.make_wheel(tmp_path, "b")})
    other[0].rename(tmp_path / "wh" / "part-02")
    with pytest.raises(ValueError, match="holds parts of 2 builds"):
        remote.parts(tmp_path / "wh")
    assert remote.project_wheel(["x.py", "dist/jax_tpu_lab-0.1.0-py3-none-any.whl"]).endswith(
        "jax_tpu_lab-0.1.0-py3-none-any.whl"
    )
