"""One trained, exported digits classifier per test session (training + export: a few
seconds), copied into a fresh directory for a test that tampers with it."""

import shutil

import pytest

from core.serving.predict import export

STEPS = 300


@pytest.fixture(scope="session")
def trained():
    return export.train(seed=0, steps=STEPS)


@pytest.fixture(scope="session")
def artifact_dir(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("predict-artifact")
    export.write_artifacts(trained, out, max_batch=16)
    return out


@pytest.fixture
def fresh_copy(artifact_dir, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(artifact_dir, out)
    return out
