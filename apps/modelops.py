import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="ModelOps: own, approve, roll back and retire a model",
)

with app.setup:
    import pathlib
    import tempfile

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import curriculum, lab, numerics
    from core.lab import text
    from core.lessons.operations import modelops
    from core.state import tracking

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("steps", 150, "training steps of the first version", lo=20, hi=600),
        lab.Flag("seed", 0, "data split and initialization seed", lo=0, hi=99),
        description=(
            "ModelOps: the MLflow model registry on a local SQLite store: owners, approvals, "
            "champion/challenger aliases, promotion only after approval, rollback, retirement."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # ModelOps: own, approve, roll back and retire a model
    {lab.phase_line("modelops")}

    A model registry answers four questions about every version: **who owns it, who approved
    it, what serves now, and what was withdrawn**. This lesson runs MLflow's model registry on
    a SQLite file in a temporary directory (nothing leaves the machine) and puts rules on it:

    - the registered model and each version carry an `owner`; an approval is recorded as tags
      on the version (`approval.by`, `approval.at`);
    - **aliases**, not stages (deprecated since MLflow 2.9): `champion` is what serves,
      `challenger` what is evaluated beside it. The champion alias moves only to an approved,
      unretired version whose artifact verifies against its provenance manifest;
    - **rollback** moves the champion alias back; **retirement** tags a version and deletes
      its aliases, and a retired version is never promoted again;
    - every operation is also written to the registry as an `audit.NNNN` tag, so the
      registry holds its own history, which a fresh client reads back below.
    """)
    return


@app.cell
def _():
    steps = FLAGS.control("steps", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.hstack([steps, seed], justify="start", wrap=True)
    return seed, steps


@app.cell
def _(seed, steps):
    lab.require(
        "mlflow", "flatbuffers", why="the registry is MLflow's; jax.export serializes each model"
    )
    workdir = tempfile.TemporaryDirectory(prefix="modelops-")
    with mo.status.spinner(title="Opening the registry, training and registering 3 versions..."):
        life = modelops.lifecycle(
            pathlib.Path(workdir.name),
            seed.value,
            steps.value,
            revision=tracking.git_revision(curriculum.REPO_ROOT),
        )
    seen = modelops.read_back(life.registry.uri)
    return life, seen, workdir


@app.cell
def _(life, seen):
    mo.vstack(
        [
            mo.md(
                f"## The versions, read back by a fresh client\nModel `{modelops.MODEL}`, "
                f"owner **{seen['model_owner']}**, store `{life.registry.uri}`."
            ),
            lab.table(
                [{k: v for k, v in r.items() if k != "source"} for r in seen["versions"]],
                "every version: owner, approval, aliases, retirement",
            ),
            mo.md("## Refused, as the rules say"),
            lab.table(life.refused, "promotions the registry refused (nothing changed)"),
            mo.md("## The audit log (the registry's `audit.NNNN` tags)"),
            lab.table(
                [{**o, "at": o["at"][11:23]} for o in seen["audit"]],
                "every operation, in order, read back from the registry",
            ),
        ]
    )
    return


@app.cell
def _(life, seen):
    # Independent references: (1) the operations performed, held in this process, against the
    # registry as a fresh MlflowClient reads it from the SQLite file; (2) the champion, loaded
    # through its alias by that client (artifact verified first), against the predictions its
    # version made on the held-out images when it was registered.
    _want = modelops.expected_state(life.registry.ops)
    _version, _artifacts = modelops.load_alias(life.registry.uri, "champion")
    _labels, _probabilities = _artifacts.predict(life.x)
    _then_labels, _then_probabilities = life.predictions[_version]
    check = lab.Check(
        f"the registry read back by a fresh MlflowClient equals the {len(life.registry.ops)} "
        f"operations performed; the champion (v{_version}) loaded by alias predicts exactly "
        "what it predicted when registered",
        {
            "champion by alias: labels vs at registration (differing images)": float(
                np.sum(_labels != _then_labels)
            ),
            "champion by alias: probabilities vs at registration (max |difference|)": (
                numerics.max_abs_error(_probabilities, _then_probabilities)
            ),
        },
        0.0,
        facts={
            "aliases equal the operations'": seen["aliases"] == _want["aliases"],
            "owners equal the operations'": seen["owners"] == _want["owners"],
            "approvals equal the operations'": seen["approved"] == _want["approved"],
            "retirements equal the operations'": seen["retired"] == _want["retired"],
            "audit log equals the operations, in order": seen["audit"]
            == [o.to_dict() for o in life.registry.ops],
            "both rule-breaking promotions refused": len(life.refused) == 2,
        },
    )
    check
    return (check,)


@app.cell
def _(seen):
    _ops = pd.DataFrame(
        [
            {
                "at": pd.Timestamp(o["at"]),
                "version": f"v{o['version']}" if o["version"] else "model",
                "operation": o["op"]
                + (f" ({o['detail'].split(':')[0]})" if o["op"] in ("alias", "rollback") else ""),
                "by": o["by"],
                "detail": o["detail"],
            }
            for o in seen["audit"]
        ]
    )
    # The operations run within a second: a clock axis would read ".500" at every tick, so
    # the axis is the time since the first operation (the UTC time is in the tooltip).
    _ops["ms after the first operation"] = (_ops["at"] - _ops["at"].min()).dt.total_seconds() * 1000
    lab.report("operations recorded", len(_ops))
    lab.report("champion at the end", seen["aliases"].get("champion", "none"))
    alt.Chart(_ops, title="the registry's timeline (audit tags)").mark_point(
        filled=True, size=90
    ).encode(
        x=alt.X("ms after the first operation:Q"),
        y=alt.Y("version:N", sort=["model", "v1", "v2", "v3"]),
        color=alt.Color("operation:N"),
        shape=alt.Shape("operation:N"),
        tooltip=["at:T", "version", "operation", "by", "detail"],
    ).properties(width=560, height=180)
    return


@app.cell
def _(life):
    mo.vstack([
        mo.md("## Open this registry in the MLflow UI"),
        text.code_block(tracking.ui_command(life.registry.tracker.run_dir), "bash", "mlflow ui"),
        mo.md("(Models tab: the aliases and tags above. The directory is temporary.)"),
    ])  # fmt: skip
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("modelops")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_rollback_and_retirement_happened(seen):
    assert seen["aliases"]["champion"] == "1" and "2" in seen["retired"]
    return


if __name__ == "__main__":
    app.run()
