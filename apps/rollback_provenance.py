import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Changes, rollback, and artifact provenance",
)

with app.setup:
    import pathlib
    import tempfile

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd
    import sklearn.metrics

    from core import curriculum, lab, numerics
    from core.lab import claims
    from core.lessons.operations import rollback_provenance as rp
    from core.serving.predict import export
    from core.state import tracking
    from core.workload import provenance

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("regression", "label_noise", "the change planted in v2", choices=rp.REGRESSIONS),
        lab.Flag("steps", 200, "training steps of each version", lo=10, hi=600),
        lab.Flag("seed", 0, "data split and initialization seed", lo=0, hi=99),
        description=(
            "Changes, rollback, and artifact provenance: two model versions with manifests, "
            "a planted regression caught and rolled back, tampered artifacts refused."
        ),
    )
    ARGS = FLAGS.parse()
    # A baseline below this is no model to protect: the gate compares against it.
    MIN_BASELINE_ACCURACY = 0.85


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Changes, rollback, and artifact provenance
    {lab.phase_line("rollback_provenance")}

    A model in production changes: new data, a new learning rate, a new preprocessing step.
    Each change is a new **version**, built once and never edited, and each version carries
    its **provenance manifest**: the git revision of the code, the config, the sha256 of the
    training data, the environment lock (every installed package and its version), and the
    sha256 of every checkpoint and export file. In this lesson you will

    - build version v1 of the digits classifier (exported with `jax.export`), write its
      manifest and promote it;
    - build v2 with a **planted regression** (choose it below), promote it, and catch the
      regression on held-out images with a gate (more than
      {100 * rp.MAX_ACCURACY_DROP:g} points of accuracy lost);
    - **roll back** to v1, whose artifact is verified against its manifest before it is
      loaded again, as every artifact is before every use;
    - see a tampered artifact, another config, other data and another environment refused,
      with what differs named.
    """)
    return


@app.cell
def _():
    regression = FLAGS.control("regression", ARGS)
    steps = FLAGS.control("steps", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.hstack([regression, steps, seed], justify="start", wrap=True)
    return regression, seed, steps


@app.cell
def _(regression, seed, steps):
    mo.md(f"v2's changes: **{rp.change_text(regression.value, seed.value, steps.value)}**")
    return


@app.cell
def _(regression, seed, steps):
    lab.require("flatbuffers", why="jax.export serializes each version's model artifact")
    workdir = tempfile.TemporaryDirectory(prefix="rollback_provenance-")
    root = pathlib.Path(workdir.name)
    with mo.status.spinner(title="Training, exporting and promoting two versions..."):
        outcome = rp.change_and_rollback(
            root,
            regression.value,
            seed.value,
            steps.value,
            revision=tracking.git_revision(curriculum.REPO_ROOT),
        )
    x_held, y_held = rp.held_out(seed.value)
    return outcome, root, workdir, x_held, y_held


@app.cell
def _(outcome):
    _v1 = outcome.evaluations["v1"]["accuracy"]
    _problem = (
        f"v1 reaches only {100 * _v1:.1f}% held-out accuracy (below "
        f"{100 * MIN_BASELINE_ACCURACY:g}%): there is no good version to protect or roll back "
        "to. Train it longer (more steps)."
        if _v1 < MIN_BASELINE_ACCURACY
        else None
    )
    lab.guard(_problem, headline="The baseline is not a usable model.")
    baseline_ok = True
    return (baseline_ok,)


@app.cell
def _(baseline_ok, outcome, root):
    assert baseline_ok
    manifests = {n: provenance.read(root / n) for n in ("v1", "v2")}
    _v1 = manifests["v1"]
    versions_table = lab.table(
        [
            {
                "version": n,
                "changed config": ", ".join(
                    f"{k}={v}" for k, v in m["config"].items() if v != _v1["config"][k]
                )
                or "(v1)",
                "held-out accuracy": outcome.evaluations[n]["accuracy"],
                "data sha256": m["data_sha256"][:12] + "...",
                "weights sha256": m["checkpoint"][export.WEIGHTS]["sha256"][:12] + "...",
                "export sha256": m["export"][export.EXPORTED]["sha256"][:12] + "...",
                "environment": m["environment"]["sha256"][:12]
                + f"... ({len(m['environment']['packages'])} packages)",
                "git revision": m["git_revision"][:12],
            }
            for n, m in manifests.items()
        ],
        "the two versions, as their provenance manifests record them",
    )
    history_table = lab.table(
        [
            {
                "at (UTC)": h["at"][11:23],
                "action": h["action"],
                "version": h["version"],
                "replaces": h["previous"] or "-",
                "reason": h["reason"],
            }
            for h in outcome.history
        ],
        "the release channel (releases.json): every move verified the target first",
    )
    _drop = outcome.evaluations["v1"]["accuracy"] - outcome.evaluations["v2"]["accuracy"]
    _verdict = (
        f"**Regression caught**: v2 lost {100 * _drop:.1f} points of held-out accuracy; "
        f"rolled back, the channel serves **{outcome.served}**."
        if outcome.regression_found
        else f"v2 passed the gate ({100 * _drop:+.1f} points lost); serving **{outcome.served}**."
    )
    _note = mo.md(
        "The export's sha256 is the same for both versions: the weights are an argument of "
        "the exported program, not constants in it, so a retrained version changes the "
        "checkpoint (`weights.npz`) and leaves the program alone. The data hash tells the "
        "versions' training data apart (noisy labels or mirrored images are other data)."
    )
    mo.vstack([versions_table, _note, history_table, mo.md(_verdict)])
    return (manifests,)


@app.cell
def _(manifests, root, workdir):
    refusal_rows = rp.refusals(root / "v1", root / "v2", pathlib.Path(workdir.name) / "scratch")
    mo.vstack(
        [
            mo.md(
                "## Verified before every use\nEach row hands v1 (or a copy of it) to "
                "`provenance.verify` with one thing changed. Only what matches the record "
                "loads: the last row, as recorded (and v2's training data when v2 changed "
                "only its seed)."
            ),
            lab.table(refusal_rows, "verification of v1 against its manifest"),
            mo.accordion(
                {
                    "v1's provenance.json (packages left out)": mo.json(
                        {
                            **manifests["v1"],
                            "environment": {
                                k: v
                                for k, v in manifests["v1"]["environment"].items()
                                if k != "packages"
                            },
                        }
                    )
                }
            ),
        ]
    )
    return (refusal_rows,)


@app.cell
def _(outcome, refusal_rows, regression, root, seed, steps, x_held, y_held):
    # Independent references: a fresh verified load of the served version, compared with the
    # labels and probabilities that version gave when it was promoted (exactly); each version's
    # accuracy against scikit-learn's accuracy_score on a NumPy float64 forward of its stored
    # weights (read with allow_pickle=False, no jax).
    _fresh = rp.evaluate(rp.verified_load(root / outcome.served), x_held, y_held)
    _then = outcome.evaluations[outcome.served]
    _reference = {}
    for _name in ("v1", "v2"):
        with np.load(root / _name / export.WEIGHTS, allow_pickle=False) as _z:
            _labels, _ = export.reference_forward({k: _z[k] for k in _z.files}, x_held)
        _reference[_name] = sklearn.metrics.accuracy_score(y_held, _labels)
    _at_defaults = claims.at_defaults(
        FLAGS, {"regression": regression.value, "steps": steps.value, "seed": seed.value}
    )
    _expected = "v1" if outcome.regression_found else "v2"
    check = lab.Check(
        f"after the change ({regression.value}), the channel serves {outcome.served}: a fresh "
        "verified load predicts exactly what it predicted when promoted; accuracies agree with "
        "scikit-learn on a NumPy float64 forward",
        {
            "served labels: fresh load vs at promotion (differing images)": float(
                np.sum(_fresh["labels"] != _then["labels"])
            ),
            "served probabilities: fresh load vs at promotion (max |difference|)": (
                numerics.max_abs_error(_fresh["probabilities"], _then["probabilities"])
            ),
            **{
                f"{n} accuracy: served float32 program vs sklearn on float64": abs(
                    outcome.evaluations[n]["accuracy"] - _reference[n]
                )
                for n in ("v1", "v2")
            },
        },
        {
            "served labels: fresh load vs at promotion (differing images)": 0.0,
            "served probabilities: fresh load vs at promotion (max |difference|)": 0.0,
            **{
                f"{n} accuracy: served float32 program vs sklearn on float64": (
                    rp.ARGMAX_TIE_SLACK / len(y_held)
                )
                for n in ("v1", "v2")
            },
        },
        facts={
            "the channel serves the version the gate kept": outcome.served == _expected,
            "every changed case refused, every unchanged one loads": all(
                r["refused"] == r["changed"] for r in refusal_rows
            ),
            "at the defaults, the planted regression was caught": (
                outcome.regression_found == (regression.value != "none") if _at_defaults else True
            ),
        },
    )
    check
    return (check,)


@app.cell
def _(outcome):
    _v1 = outcome.evaluations["v1"]["accuracy"]
    _bars = pd.DataFrame(
        [
            {
                "version": n,
                "held-out accuracy": e["accuracy"],
                "served at the end": n == outcome.served,
            }
            for n, e in outcome.evaluations.items()
        ]
    )
    lab.report("v1 held-out accuracy", _v1)
    lab.report("v2 held-out accuracy", outcome.evaluations["v2"]["accuracy"])
    lab.report("regression caught and rolled back", outcome.regression_found)
    _chart = (
        alt.Chart(_bars)
        .mark_bar()
        .encode(
            x=alt.X("version:N"),
            y=alt.Y("held-out accuracy:Q", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("served at the end:N"),
            tooltip=["version", "held-out accuracy"],
        )
    )
    _gate = (
        alt.Chart(pd.DataFrame({"gate": [_v1 - rp.MAX_ACCURACY_DROP]}))
        .mark_rule(strokeDash=[4, 4], color="firebrick")
        .encode(y="gate:Q")
    )
    (_chart + _gate).properties(
        width=320, height=220, title="held-out accuracy; dashed: the gate (v1 minus 3 points)"
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("rollback_provenance")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_tampered_artifact_is_refused(refusal_rows):
    _row = next(r for r in refusal_rows if r["case"] == "one bit flipped in the weights")
    assert _row["refused"] and "weights.npz was changed" in _row["why"]
    return


if __name__ == "__main__":
    app.run()
