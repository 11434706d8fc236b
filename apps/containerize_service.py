import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Containerize a model service and verify its boundary",
)

with app.setup:
    import tempfile

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import envlock, lab, numerics
    from core.lab import text
    from core.lessons.deployment import containerize_service as lesson
    from core.serving import container
    from core.serving.predict import export

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "PRNG seed (split, init, the digits sent)", lo=0, hi=9999),
        lab.Flag("steps", 60, "full-batch training steps of the served model", lo=10, hi=2000),
        lab.Flag("max_batch", 32, "the artifact's largest batch", lo=32, hi=256),
        lab.Flag("rows", 8, "rows in the valid /predict request", lo=1, hi=512),
        lab.Flag("fuzz_examples", 5, "schemathesis examples per operation and mode", lo=2, hi=100),
        description="The predict service's image, its lock, its command line and its boundary.",
    )
    ARGS = FLAGS.parse()
    WORKDIR = tempfile.TemporaryDirectory(prefix="containerize-service-")


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Containerize a model service and verify its boundary
    {lab.phase_line("containerize_service")}

    A container image is a promise: this exact runtime, this exact command, this user, this
    port, this health check. `deploy/Dockerfile` packages the course's predict service (a
    digits classifier exported with `jax.export`): an exact `python:3.11.x-slim` base, a
    **lock file** of the runtime (exact versions, each wheel's sha256), a non-root user, only
    `core/` and the verified artifact copied in (`.dockerignore` keeps the rest out), `EXPOSE`,
    a `HEALTHCHECK` on `/healthz` and an exec-form `CMD`.

    No Docker engine runs on these machines, so no image is built here. What can be checked
    without one is checked: **hadolint** reads the Dockerfile, the lock's pins are compared
    with the installed versions, and the service is started with **exactly the image's
    command line**: the argv is the same, only the environment differs (`PREDICT_HOST`
    127.0.0.1 instead of the container's 0.0.0.0, a free port, this machine's artifact folder,
    a time limit). Then its **boundary** is tested with a real HTTP client (each request, the
    status expected and got) and fuzzed with **schemathesis** from its own OpenAPI document.
    """)
    return


@app.cell
def _():
    seed = FLAGS.control("seed", ARGS)
    steps = FLAGS.control("steps", ARGS)
    max_batch = FLAGS.control("max_batch", ARGS, label="artifact max batch")
    rows = FLAGS.control("rows", ARGS, label="rows per valid request")
    fuzz_examples = FLAGS.control("fuzz_examples", ARGS, label="schemathesis examples")
    serve_button = mo.ui.run_button(
        label="Start the service with the image's command line, probe and fuzz it"
    )
    mo.vstack(
        [
            mo.hstack([seed, steps, max_batch, rows], justify="start", wrap=True),
            mo.hstack([fuzz_examples, serve_button], justify="start", wrap=True),
        ]
    )
    return fuzz_examples, max_batch, rows, seed, serve_button, steps


@app.cell
def _():
    lab.require(programs=("hadolint",), why="hadolint reads the Dockerfile")
    image = container.read()
    findings = container.hadolint()
    pins = envlock.pins(container.LOCK.read_text())
    mismatches = envlock.pin_mismatches(pins)
    mo.vstack(
        [
            mo.md("## The Dockerfile"),
            text.code_block(container.DOCKERFILE.read_text(), "dockerfile", "Dockerfile"),
            lab.table(
                [
                    {"part": "base", "value": image.base},
                    {"part": "user", "value": image.user},
                    {"part": "expose", "value": ", ".join(map(str, image.expose))},
                    {"part": "healthcheck", "value": " ".join(image.healthcheck.argv)[:90]},
                    {"part": "command line", "value": " ".join(image.command_line)},
                    {
                        "part": "image problems",
                        "value": "; ".join(container.image_problems(image)) or "none",
                    },
                    {
                        "part": "hadolint findings (every level, info included)",
                        "value": len(findings),
                    },
                ],
                caption="hadolint checks its DL rules (pinned versions, pip --no-cache-dir, "
                "exec-form CMD, WORKDIR, USER...) and ShellCheck on each RUN.",
            ),
        ]
    )
    return findings, image, mismatches, pins


@app.cell
def _(mismatches, pins):
    import importlib.metadata as _metadata

    mo.vstack(
        [
            mo.md(
                "## The lock file\n`deploy/requirements.lock`, from `make lock`: pip resolves "
                "`deploy/requirements.in` within the course's own lock (`requirements.lock`, "
                "Linux x86-64 CPython 3.11 wheels, versions and sha256 from the index), so the "
                "image runs exactly what the course installs and tests. Installed with `pip "
                "install --require-hashes`, a wheel whose hash differs is refused."
            ),
            lab.table(
                [
                    {
                        "package": _name,
                        "pinned": _version,
                        "installed here": _metadata.version(_name),
                        "same": _metadata.version(_name) == _version,
                    }
                    for _name, _version in pins.items()
                ],
                caption=f"{len(pins)} pins, {len(mismatches)} differ from this environment.",
            ),
        ]
    )
    return


@app.cell
def _(max_batch, rows):
    lab.guard(
        None
        if rows.value <= max_batch.value
        else f"a valid request of {rows.value} rows is over the artifact's max batch "
        f"{max_batch.value}: the service would refuse it (400), so it cannot be the valid case",
        headline=f"{rows.value} rows do not fit a max batch of {max_batch.value}.",
    )
    rows_fit = True  # the serving cell reads it, so it runs only below the guard
    return (rows_fit,)


@app.cell
def _(fuzz_examples, max_batch, rows, rows_fit, seed, serve_button, steps):
    assert rows_fit
    mo.stop(
        lab.interactive() and not serve_button.value,
        mo.callout(mo.md("Press **Start the service** to run the boundary test."), kind="info"),
    )
    lab.require(
        "schemathesis",
        "hypothesis",
        "flatbuffers",
        sockets=True,
        why="jax.export serializes the served model; the service listens on 127.0.0.1 and "
        "schemathesis fuzzes it over HTTP",
    )
    _dir = tempfile.mkdtemp(dir=WORKDIR.name)
    with mo.status.spinner(title="training and exporting the served model"):
        export.write_artifacts(export.train(seed.value, steps.value), _dir, max_batch.value)
    inputs = export.test_inputs(seed.value, rows.value)[0]
    with mo.status.spinner(title="serving with the image's command line, probing, stopping"):
        probe = lesson.serve_and_probe(_dir, inputs, fuzz_examples.value)
    artifacts_dir = _dir
    return artifacts_dir, inputs, probe


@app.cell
def _(probe):
    lab.report("start, ready, probe and stop the service", probe.seconds, "s")
    mo.vstack(
        [
            mo.md(
                f"## The boundary\nRan `{' '.join(probe.argv[1:])}` (python = this "
                f"interpreter) with `{probe.overrides}`; the image's HEALTHCHECK command "
                f"exited {probe.healthcheck_rc}; the service stopped with "
                f"{probe.returncode} (SIGTERM) after {probe.seconds:.1f} s under load."
            ),
            lab.table(
                [{k: v for k, v in r.items() if k != "body"} for r in probe.rows],
                caption="A case passes when the status is the expected one, the error names the "
                "problem, and the request id sent came back.",
            ),
        ]
    )
    return


@app.cell
def _(probe):
    fuzz_rows = probe.fuzz_rows
    lab.table(
        fuzz_rows,
        caption="schemathesis from the running server's /openapi.json: positive = "
        "schema-valid requests (a documented status and body, never a 5xx), negative = "
        "schema-invalid bodies (must be refused with a 4xx)",
    )
    return (fuzz_rows,)


@app.cell
def _(artifacts_dir, findings, fuzz_rows, image, inputs, mismatches, probe):
    _served = probe.rows[2]["body"]
    _labels, _probabilities = lesson.numpy_forward(artifacts_dir, inputs)
    check = lab.Check(
        "the service, started with the image's command line, answers every boundary case as "
        "expected; its probabilities equal NumPy float64 (float32 tolerance)",
        numerics.scaled_max_error(np.asarray(_served["probabilities"]), _probabilities),
        numerics.tolerance("float32"),
        facts={
            "every boundary case PASS": all(r["verdict"] == "PASS" for r in probe.rows),
            "no 5xx": max(r["got"] for r in probe.rows) < 500
            and sum(r["5xx"] for r in fuzz_rows) == 0,
            "schemathesis: no failed check": sum(r["failed checks"] for r in fuzz_rows) == 0,
            "labels equal NumPy's": _served["labels"] == _labels.tolist(),
            "HEALTHCHECK passed": probe.healthcheck_rc == 0,
            "hadolint silent": findings == [],
            "lock pins = installed": mismatches == [],
            "image rules hold": container.image_problems(image) == [],
        },
    )
    check
    return (check,)


@app.cell
def _(probe):
    _rows = pd.DataFrame(
        [{"case": r["case"], "status": str(r["got"]), "verdict": r["verdict"]} for r in probe.rows]
    )
    (
        alt.Chart(_rows, title="Boundary: each request's status")
        .mark_square(size=180)
        .encode(
            y=alt.Y("case:N", sort=None, title=None),
            x=alt.X("status:N", title="HTTP status"),
            color=alt.Color(
                "verdict:N", scale=alt.Scale(domain=["PASS", "FAIL"], range=["#2a9d8f", "#e63946"])
            ),
            tooltip=["case", "status", "verdict"],
        )
        .properties(width=220)
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("containerize_service")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_the_command_line_is_the_images(image, probe):
    assert probe.argv[1:] == image.command_line[1:]
    assert probe.overrides["PREDICT_HOST"] == "127.0.0.1"
    return


if __name__ == "__main__":
    app.run()
