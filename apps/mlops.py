import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="MLOps: data contracts, CI gates and monitoring",
)

with app.setup:
    import tempfile

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd
    import scipy.stats
    from sklearn import metrics as sk_metrics

    from core import lab, numerics
    from core.lab import text
    from core.lessons.operations import mlops as lesson

    FLAGS = lab.Flags(
        lab.Flag("rows", 600, "rows in the ingested batch (digits)", lo=20, hi=1797),
        lab.Flag("plant", True, "plant one violation of each kind in the batch"),
        lab.Flag("label_noise", 0.6, "candidate: share of training labels replaced", lo=0.0,
                 hi=1.0, step=0.05),
        lab.Flag("max_regression", 0.02, "gate: largest accuracy drop allowed", lo=0.0, hi=0.2,
                 step=0.005),
        lab.Flag("train_steps", 200, "gradient steps per model", lo=20, hi=1000),
        lab.Flag("shift", 0.05, "incoming data: brightness shift", lo=0.0, hi=0.5, step=0.01),
        lab.Flag("drift_rows", 300, "rows per drift sample", lo=50, hi=800),
        lab.Flag("psi_bins", 10, "PSI: quantile bins", lo=2, hi=50),
        lab.Flag("pipeline_rows", 300, "rows the Kubeflow pipeline ingests", lo=40, hi=1797),
        lab.Flag("min_accuracy", 0.8, "pipeline's publish gate (accuracy)", lo=0.0, hi=1.0,
                 step=0.01),
        lab.Flag("seed", 0, "seed (planting, splits, training, samples)", lo=0, hi=99),
        description="Data contract, promotion gate, drift, a Kubeflow pipeline, Cloud Build.",
    )  # fmt: skip
    ARGS = FLAGS.parse()
    KS_ALERT = 0.1  # a pixel whose KS statistic exceeds this is flagged (about the 1% critical
    # value of two 300-row samples: 1.63 * sqrt(2 / 300) = 0.13, rounded down to alert early)
    PSI_ALERT = 0.25  # the industry rule of thumb: PSI > 0.25 is a major population shift
    MIN_ROWS_PER_BIN = 5  # fewer reference rows per PSI bin than this measures noise
    REGION = "us-central1"
    PIPELINE_ROOT = "gs://PROJECT-ml/pipelines"  # a placeholder bucket


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # MLOps: data contracts, CI gates and monitoring
    {lab.phase_line("mlops")}

    The playbook asks for "repeatable pipelines with Vertex AI Pipelines or Cloud Build so a
    single commit can preprocess data, train, evaluate, and publish artifacts". Each stage
    needs a gate that a person can read. In this lesson you will

    - check every ingested batch against a **data contract** (pandera: columns, dtypes,
      ranges, nulls, duplicate ids and duplicate images) and see each planted violation
      refused with its row and rule;
    - **gate a promotion**: a candidate trained on partly wrong labels is evaluated against the
      champion on the same held-out rows, and blocked when it regresses past the threshold;
    - **watch for drift**: the two-sample Kolmogorov-Smirnov statistic and the population
      stability index of every pixel of an incoming batch against the training data;
    - run the four stages as a **Kubeflow pipeline** (the format Vertex AI Pipelines runs):
      compiled to its YAML and executed by kfp's local runner in its own environment
      (`.venv-kfp`, `make kfp-env`), its Dataset/Model/Metrics artifacts read back and
      validated; then generate the **Cloud Build** config that runs the tests and submits it.
    """)
    return


@app.cell
def _():
    rows = FLAGS.control("rows", ARGS)
    plant = FLAGS.control("plant", ARGS)
    label_noise = FLAGS.control("label_noise", ARGS)
    max_regression = FLAGS.control("max_regression", ARGS)
    train_steps = FLAGS.control("train_steps", ARGS)
    shift = FLAGS.control("shift", ARGS)
    drift_rows = FLAGS.control("drift_rows", ARGS)
    psi_bins = FLAGS.control("psi_bins", ARGS)
    pipeline_rows = FLAGS.control("pipeline_rows", ARGS)
    min_accuracy = FLAGS.control("min_accuracy", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.vstack([
        mo.md("**Ingestion and gate**"),
        mo.hstack([rows, plant, label_noise, max_regression, train_steps], justify="start",
                  wrap=True),
        mo.md("**Drift**"),
        mo.hstack([shift, drift_rows, psi_bins], justify="start", wrap=True),
        mo.md("**Pipeline**"),
        mo.hstack([pipeline_rows, min_accuracy, seed], justify="start", wrap=True),
    ])  # fmt: skip
    return (
        drift_rows, label_noise, max_regression, min_accuracy, pipeline_rows, plant, psi_bins,
        rows, seed, shift, train_steps,
    )  # fmt: skip


@app.cell
def _(plant, rows, seed):
    lab.require("pandera", why="the ingestion contract is a pandera schema")
    batch = lesson.raw_rows(rows.value)
    planted = []
    if plant.value:
        batch, planted = lesson.plant(batch, lesson.VIOLATIONS, seed.value)
    breaches = lesson.check_contract(batch)
    _rules = {p["violation"]: lesson.violation_rule(p["violation"]) for p in planted}
    caught = {
        p["violation"]: any(b["row"] == p["row"] and _rules[p["violation"]] in b["rule"]
                            for b in breaches)
        for p in planted
    }  # fmt: skip
    lab.report("contract breaches (grouped by row and rule)", len(lesson.by_row(breaches)))
    mo.vstack([
        lab.table(
            [{**p, "refused": caught[p["violation"]]} for p in planted] or [{"planted": "none"}],
            "Planted violations",
        ),
        lab.table(lesson.by_row(breaches) or [{"verdict": "batch accepted"}],
                  f"The contract's verdict on {rows.value} rows (pandera, lazy: every breach)"),
    ])  # fmt: skip
    return caught, planted


@app.cell
def _(label_noise, max_regression, seed, train_steps):
    duel = lesson.champion_and_candidate(label_noise.value, train_steps.value, seed.value)
    accuracy = {k: float(np.mean(duel[k] == duel["y_test"])) for k in ("champion", "candidate")}
    decision = lesson.gate(accuracy["champion"], accuracy["candidate"], max_regression.value)
    lab.report("promotion", "promote" if decision["promote"] else "blocked")
    lab.table(
        [
            {
                "model": "champion",
                "trained on": f"clean labels, {train_steps.value} steps",
                "held-out accuracy": accuracy["champion"],
            },
            {
                "model": "candidate",
                "trained on": f"{duel['flipped']} labels replaced, {train_steps.value} steps",
                "held-out accuracy": accuracy["candidate"],
            },
            {
                "model": "gate",
                "trained on": f"max regression {max_regression.value:g}",
                "held-out accuracy": f"regression {decision['regression']:.4f}: "
                + ("PROMOTE" if decision["promote"] else "BLOCKED"),
            },
        ],  # fmt: skip
        f"Champion vs candidate on the same {len(duel['y_test'])} held-out digits",
    )
    return accuracy, decision, duel


@app.cell
def _(drift_rows, psi_bins, seed, shift):
    lab.guard(
        None if drift_rows.value >= MIN_ROWS_PER_BIN * psi_bins.value else (
            f"{psi_bins.value} PSI bins over {drift_rows.value} rows leave fewer than "
            f"{MIN_ROWS_PER_BIN} reference rows per bin: the index would measure noise. "
            "Use fewer bins or more rows."
        ),
        headline="Too many bins for the sample.",
    )  # fmt: skip
    reference = lesson.incoming(drift_rows.value, 0.0, seed.value)
    current = lesson.incoming(drift_rows.value, shift.value, seed.value + 1000)
    drift = pd.DataFrame(lesson.drift_table(reference, current, psi_bins.value))
    drift["alert"] = (drift["ks"] > KS_ALERT) | (drift["psi"] > PSI_ALERT)
    lab.report("pixels with a drift alert", int(drift["alert"].sum()))
    lab.table(
        drift.sort_values("ks", ascending=False).head(8).to_dict("records"),
        f"Most drifted pixels (KS > {KS_ALERT} or PSI > {PSI_ALERT} alerts)",
    )
    return current, drift, reference


@app.cell
def _(min_accuracy, pipeline_rows, seed):
    lab.guard(lesson.kfp_missing(), headline="The kfp environment is missing.")
    lab.require("pandera", why="the pipeline's batch is checked by the pandera contract first")
    workdir = tempfile.TemporaryDirectory(prefix="mlops-kfp-")
    _clean = lesson.raw_rows(pipeline_rows.value)
    assert lesson.check_contract(_clean) == [], "the pipeline ingests only a clean batch"
    lesson.write_raw(_clean, f"{workdir.name}/raw.json")
    _published = True
    try:
        run, _log = lesson.run_pipeline(
            f"{workdir.name}/raw.json", f"{workdir.name}/out", seed.value, 0.25,
            min_accuracy.value,
        )  # fmt: skip
    except RuntimeError as _exc:
        if "below the gate" not in str(_exc):
            raise
        _published = False
    lab.guard(
        None if _published else (
            f"the pipeline's model did not reach the publish gate {min_accuracy.value:g}: "
            "the publish step refused it (that is the gate working). Lower the gate."
        ),
        headline="Nothing was published.",
    )  # fmt: skip
    artifacts = lesson.read_artifacts(run)
    dag = lesson.pipeline_dag(f"{workdir.name}/out/pipeline.yaml")
    lab.report("pipeline accuracy (Metrics artifact)", run.accuracy)
    mo.vstack([
        lab.table(dag, "The compiled pipeline's DAG (pipeline.yaml, root.dag.tasks)"),
        lab.table(
            [{"artifact": k, "kind": type(v).__name__, "metadata": str(run.artifacts[k].metadata)}
             for k, v in [("train_data", artifacts["train"]), ("test_data", artifacts["test"]),
                          ("model", artifacts["model"]), ("published", artifacts["published"])]],
            f"Artifacts of the local run (kfp {run.kfp_version}, SubprocessRunner, .venv-kfp)",
        ),
    ])  # fmt: skip
    return artifacts, dag, run, workdir


@app.cell
def _(min_accuracy):
    cloudbuild = lesson.cloudbuild_yaml(
        lesson.cloudbuild_config(REGION, PIPELINE_ROOT, min_accuracy.value)
    )
    cloudbuild_problems = lesson.check_cloudbuild(cloudbuild)
    mo.vstack([
        mo.md("**cloudbuild.yaml** (a commit trigger runs it: tests, compile, submit)"),
        text.code_block(cloudbuild, "yaml", "cloudbuild.yaml"),
        lab.table([{"problem": p} for p in cloudbuild_problems] or [{"problem": "none"}],
                  "Checked against the build config schema, waitFor and substitutions"),
    ])  # fmt: skip
    return (cloudbuild_problems,)


@app.cell
def _(
    accuracy, artifacts, caught, cloudbuild_problems, current, decision, drift, duel,
    max_regression, planted, psi_bins, reference, run,
):  # fmt: skip
    _ks_err = max(
        abs(r.ks - scipy.stats.ks_2samp(reference[:, r.pixel], current[:, r.pixel]).statistic)
        for r in drift.itertuples()
    )
    _psi_err = max(
        abs(r.psi - lesson.psi_reference(reference[:, r.pixel], current[:, r.pixel],
                                         psi_bins.value)) / max(1.0, r.psi)
        for r in drift.itertuples()
    )  # fmt: skip
    _acc = {k: sk_metrics.accuracy_score(duel["y_test"], duel[k]) for k in accuracy}
    _gate = _acc["champion"] - _acc["candidate"] <= max_regression.value
    check = lab.Check(
        "KS == scipy.stats.ks_2samp, PSI == scipy rel_entr, the pipeline's accuracy == NumPy "
        "float64 on its Model artifact; planted violations refused, gate and build config",
        {
            "KS statistic (max over pixels)": _ks_err,
            "PSI (max over pixels, relative)": _psi_err,
            "pipeline accuracy": abs(
                run.accuracy - lesson.centroid_accuracy(artifacts["model"], artifacts["test"])
            ),
            "gate accuracies (sklearn)": max(abs(_acc[k] - accuracy[k]) for k in accuracy),
        },
        numerics.tolerance("float64", backend="cpu"),
        facts={
            "every planted violation refused with its row and rule": all(caught.values()),
            "one planted violation of each kind": not planted
            or len(planted) == len(lesson.VIOLATIONS),
            "gate decision agrees with sklearn's accuracies": _gate == decision["promote"],
            "cloudbuild.yaml passes the schema and substitution checks": not cloudbuild_problems,
        },
    )
    check
    return (check,)


@app.cell
def _(drift):
    _chart = (
        alt.Chart(drift)
        .mark_bar()
        .encode(
            x=alt.X("pixel:O", title="pixel (row-major, 8 x 8)"),
            y=alt.Y("ks:Q", title="KS statistic"),
            color=alt.Color("alert:N", title="alert"),
            tooltip=[
                "pixel",
                alt.Tooltip("ks:Q", format=".3f"),
                alt.Tooltip("psi:Q", format=".3f"),
            ],
        )
        .properties(title="Drift of the incoming batch, per pixel", width=600, height=200)
    )
    _rule = alt.Chart(pd.DataFrame({"y": [KS_ALERT]})).mark_rule(strokeDash=[4, 4]).encode(y="y")
    _chart + _rule
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("mlops")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()


@app.cell
def test_gate_blocks_the_noisy_candidate_at_defaults(decision, label_noise, max_regression):
    if label_noise.value == 0.6 and max_regression.value == 0.02:
        assert not decision["promote"]


@app.cell
def test_pipeline_published_the_evaluated_model(artifacts, run):
    assert artifacts["published"].accuracy == run.accuracy
    assert artifacts["published"].centroids == artifacts["model"].centroids


if __name__ == "__main__":
    app.run()
