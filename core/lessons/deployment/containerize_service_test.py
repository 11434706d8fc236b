import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from core import numerics, runtime
from core.lessons.deployment import containerize_service as lesson
from core.serving import container
from core.serving.predict import export


@pytest.fixture(scope="module")
def artifact_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("containerize-artifact")
    export.write_artifacts(export.train(seed=1, steps=60), out, max_batch=32)
    return out


@pytest.fixture(scope="module")
def inputs():
    return export.test_inputs(seed=2, count=6)[0]


@pytest.fixture(scope="module")
def running(artifact_dir):
    with container.LocalRun(artifact_dir, max_seconds=180) as run:
        run.wait_ready()
        yield run


def test_every_boundary_case_is_answered_as_expected(running, inputs):
    rows = lesson.send(running.url, lesson.boundary_cases(inputs, 32))
    assert [r["case"] for r in rows if r["verdict"] != "PASS"] == []
    assert max(r["got"] for r in rows) < 500
    assert {r["expected"] for r in rows} == {200, 400, 404, 405, 415}


def test_a_wrong_expectation_fails(running, inputs):
    cases = lesson.boundary_cases(inputs, 32)
    wrong = [
        dataclasses.replace(cases[5], expected=200),  # a pixel of 17 accepted?
        dataclasses.replace(cases[2], expected=415),  # a JSON body called not JSON?
        dataclasses.replace(cases[7], expect_in_error="missing keys"),
    ]
    rows = lesson.send(running.url, wrong)
    assert [r["verdict"] for r in rows] == ["FAIL"] * 3
    cases[3] = dataclasses.replace(cases[3], request_id="bad id!")  # refused id: a fresh one
    echoed = lesson.send(running.url, [cases[3]])[0]
    assert echoed["verdict"] == "FAIL" and echoed["request id"] != "bad id!"


def test_the_service_equals_numpy_float64_and_a_wrong_forward_is_caught(
    running, inputs, artifact_dir
):
    body = lesson.send(running.url, [lesson.boundary_cases(inputs, 32)[2]])[0]["body"]
    labels, probabilities = lesson.numpy_forward(artifact_dir, inputs)
    error = numerics.scaled_max_error(np.asarray(body["probabilities"]), probabilities)
    assert error < numerics.tolerance("float32")
    assert body["labels"] == labels.tolist()
    unscaled = lesson.numpy_forward(artifact_dir, inputs * lesson.MAX_VALUE)[1]  # no / 16
    assert numerics.scaled_max_error(np.asarray(body["probabilities"]), unscaled) > 1e-2


def test_schemathesis_finds_no_5xx_and_no_failed_check(running):
    rows = lesson.fuzz(running.url, examples=8)
    assert {(r["operation"], r["mode"]) for r in rows} >= {("POST /predict", "negative")}
    for row in rows:
        assert row["requests"] >= 4 and row["5xx"] == 0 and row["failed checks"] == 0, row


def test_serve_and_probe_runs_the_images_command_and_stops(artifact_dir, inputs):
    probe = lesson.serve_and_probe(artifact_dir, inputs, fuzz_examples=3)
    assert probe.argv[1:] == container.read().command_line[1:]
    assert probe.overrides["PREDICT_HOST"] == "127.0.0.1" and probe.healthcheck_rc == 0
    assert all(r["verdict"] == "PASS" for r in probe.rows)
    assert probe.returncode is not None and "ready:" in probe.log
    assert len(probe.fuzz_rows) == 4 and sum(r["5xx"] for r in probe.fuzz_rows) == 0


def test_fuzzing_writes_nothing_into_the_working_directory(running, tmp_path):
    """Issue 36: running containerize_service wrote hypothesis' .hypothesis/ (its example
    database and constants cache) into the repository root, its working directory. In a
    fresh process, as the app runs it: hypothesis picks its folder from the working
    directory when it is imported."""
    code = (
        "from core.lessons.deployment import containerize_service as lesson; "
        f"lesson.fuzz({running.url!r}, examples=2)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=runtime.child_env(JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []
