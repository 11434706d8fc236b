"""Lesson "Containerize a model service and verify its boundary": the boundary cases sent to
the service started with the image's command line (core.serving.container.LocalRun), an
independent NumPy float64 forward pass of the served artifact, and a schemathesis summary."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import pathlib
import tempfile

import numpy as np

MAX_VALUE = 16.0  # the digits' pixel range [0, 16] (the predict contract)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    expected: int
    body: bytes | None = None
    content_type: str | None = "application/json"
    request_id: str | None = None
    expect_in_error: str = ""  # a phrase the error message must contain


def _json(obj) -> bytes:
    return json.dumps(obj).encode()


def boundary_cases(rows: np.ndarray, max_batch: int) -> list[Case]:
    """One request per edge of the service's boundary; ``rows`` (n, 64) valid inputs."""
    good = rows.tolist()
    one = good[0]
    return [
        Case("liveness", "GET", "/healthz", 200),
        Case("readiness", "GET", "/readyz", 200),
        Case("valid batch", "POST", "/predict", 200, _json({"inputs": good})),
        Case("request id echoed", "GET", "/healthz", 200, None, None, "lesson-case-1"),
        Case(
            "65 features",
            "POST",
            "/predict",
            400,
            _json({"inputs": [one + [0.0]]}),
            expect_in_error="64",
        ),
        Case("pixel above 16", "POST", "/predict", 400, _json({"inputs": [[17.0] + one[1:]]})),
        Case("false as a number", "POST", "/predict", 400, _json({"inputs": [[False] + one[1:]]})),
        Case(
            "unknown key",
            "POST",
            "/predict",
            400,
            _json({"inputs": [one], "x": 1}),
            expect_in_error="unknown keys",
        ),
        Case("empty batch", "POST", "/predict", 400, _json({"inputs": []})),
        Case("batch over max", "POST", "/predict", 400, _json({"inputs": [one] * (max_batch + 1)})),
        Case("not JSON", "POST", "/predict", 400, b"{inputs: [", expect_in_error="JSON"),
        Case(
            "body over 64 KiB",
            "POST",
            "/predict",
            400,
            b" " * (64 * 1024 + 1),
            expect_in_error="limit",
        ),
        Case("not declared JSON", "POST", "/predict", 415, _json({"inputs": [one]}), "text/plain"),
        Case("no such path", "GET", "/predictions", 404, expect_in_error="no such path"),
        Case("wrong method", "GET", "/predict", 405, expect_in_error="takes POST"),
    ]


def send(url: str, cases: list[Case], timeout_s: float = 10.0) -> list[dict]:
    """Each case sent with httpx to the running server: a row per case with PASS when the
    status is the expected one, the error names the problem, and the request id comes back."""
    import httpx

    rows = []
    with httpx.Client(base_url=url, timeout=timeout_s) as client:
        for case in cases:
            headers = {}
            if case.body is not None and case.content_type:
                headers["content-type"] = case.content_type
            if case.request_id:
                headers["x-request-id"] = case.request_id
            answer = client.request(case.method, case.path, content=case.body, headers=headers)
            try:
                body = answer.json()
            except ValueError:
                body = {"error": f"not JSON: {answer.text[:60]!r}"}
            error = body.get("error", "") if isinstance(body, dict) else ""
            echoed = answer.headers.get("x-request-id", "")
            ok = answer.status_code == case.expected and case.expect_in_error in error
            if case.request_id:
                ok = ok and echoed == case.request_id
            rows.append(
                {
                    "case": case.name,
                    "request": f"{case.method} {case.path}",
                    "expected": case.expected,
                    "got": answer.status_code,
                    "answer": (error or json.dumps(body))[:90],
                    "request id": echoed,
                    "verdict": "PASS" if ok else "FAIL",
                    "body": body,
                }
            )
    return rows


def numpy_forward(artifacts_dir, x_BF) -> tuple[np.ndarray, np.ndarray]:
    """(labels, probabilities) of the artifact's weights.npz in NumPy float64, written here
    from the MLP's definition (x / 16, ReLU between layers, softmax), not from the service."""
    with np.load(pathlib.Path(artifacts_dir) / "weights.npz", allow_pickle=False) as data:
        weights = {k: np.asarray(data[k], np.float64) for k in data.files}
    layers = len(weights) // 2
    h = np.asarray(x_BF, np.float64) / MAX_VALUE
    for i in range(layers):
        h = h @ weights[f"layer{i}/w"] + weights[f"layer{i}/b"]
        if i + 1 < layers:
            h = np.maximum(h, 0.0)
    z = np.exp(h - h.max(axis=1, keepdims=True))
    p = z / z.sum(axis=1, keepdims=True)
    return p.argmax(axis=1), p


def fuzz(url: str, examples: int = 10, derandomize: bool = True) -> list[dict]:
    """schemathesis against the running server's /openapi.json: per operation and mode
    (positive: schema-valid requests; negative: schema-invalid bodies), the requests sent,
    the statuses seen, the 5xx count and the checks that failed."""
    import schemathesis
    from schemathesis import checks as schemathesis_checks
    from schemathesis.specs.openapi import checks as openapi_checks

    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    positive = [
        schemathesis_checks.not_a_server_error,
        openapi_checks.status_code_conformance,
        openapi_checks.content_type_conformance,
        openapi_checks.response_schema_conformance,
    ]
    rows = []
    with _hypothesis_home():  # its files in a temporary folder, not the working directory
        for path, method, modes in (
            ("/healthz", "GET", ("positive",)),
            ("/readyz", "GET", ("positive",)),
            ("/predict", "POST", ("positive", "negative")),
        ):
            operation = schema[path][method]
            for mode in modes:
                checks = positive + (
                    [openapi_checks.negative_data_rejection] if mode == "negative" else []
                )
                statuses, failures = [], []
                run = _fuzz_run(operation, mode, checks, examples, derandomize, statuses, failures)
                run()
                rows.append(
                    {
                        "operation": f"{method} {path}",
                        "mode": mode,
                        "requests": len(statuses) + len(failures),
                        "statuses": ", ".join(
                            f"{s}x{statuses.count(s)}" for s in sorted(set(statuses))
                        ),
                        "5xx": sum(s >= 500 for s in statuses),
                        "failed checks": len(failures),
                        "first failure": failures[0] if failures else "",
                    }
                )
    return rows


@contextlib.contextmanager
def _hypothesis_home():
    """Point hypothesis' storage (its example database, its constants and unicode caches) at
    a temporary folder while the fuzzing runs: by default it is ``.hypothesis/`` in the
    working directory, the repository root when the app runs. The folder hypothesis used
    before (a test session's, HYPOTHESIS_STORAGE_DIRECTORY) is restored after."""
    from hypothesis import configuration

    previous = getattr(configuration, "__hypothesis_home_directory", None)
    with tempfile.TemporaryDirectory(prefix="hypothesis-") as home:
        configuration.set_hypothesis_home_dir(home)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(previous)


def _fuzz_run(operation, mode, checks, examples, derandomize, statuses, failures):
    """A hypothesis test sending ``examples`` cases of one operation in one mode."""
    import hypothesis
    import schemathesis
    from schemathesis.generation import feedback

    @hypothesis.settings(
        max_examples=examples,
        derandomize=derandomize,  # the same examples every run
        database=None,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(
        case=operation.as_strategy(
            schemathesis.GenerationMode(mode), feedback=feedback.FeedbackSources()
        )
    )
    def run(case):
        try:
            statuses.append(case.call_and_validate(checks=checks).status_code)
        except Exception as exc:  # a failed check: record it, keep fuzzing
            failures.append(f"{type(exc).__name__}: {str(exc)[:120]}")

    return run


@dataclasses.dataclass
class Probe:
    argv: list[str]  # the command line run here (the image's, python = this interpreter)
    overrides: dict[str, str]  # the environment variables set differently from the image
    ready: dict
    healthcheck_rc: int
    rows: list[dict]
    fuzz_rows: list[dict]  # schemathesis' summary ([] with fuzz_examples=0)
    log: str
    returncode: int | None
    seconds: float


def serve_and_probe(
    artifacts_dir, x_BF: np.ndarray, fuzz_examples: int = 0, max_seconds: float = 120.0
) -> Probe:
    """Start the service with the image's command line, wait for /readyz, run the image's
    HEALTHCHECK, send the boundary cases, fuzz it with schemathesis (``fuzz_examples`` per
    operation and mode; 0: no fuzzing), stop it (bounded: SIGTERM, then SIGKILL)."""
    import time

    from core.serving import container

    start = time.perf_counter()
    image = container.read()
    with container.LocalRun(artifacts_dir, image, max_seconds=max_seconds) as run:
        ready = run.wait_ready()
        health = run.healthcheck()
        rows = send(run.url, boundary_cases(x_BF, ready["max_batch"]))
        fuzz_rows = fuzz(run.url, fuzz_examples) if fuzz_examples else []
        overrides = {k: run.env[k] for k in container.LOCAL_OVERRIDES}
        argv = run.argv
        run.stop()
        log = run.log()
    return Probe(
        argv,
        overrides,
        ready,
        health,
        rows,
        fuzz_rows,
        log,
        run.process.returncode,
        time.perf_counter() - start,
    )
