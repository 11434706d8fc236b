import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Regularization and honest validation")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import claims
    from core.lessons.math_optimization import regularization_validation as rv

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("train", 40, "training examples n", lo=10, hi=200),
        lab.Flag("val", 40, "validation examples", lo=10, hi=200),
        lab.Flag("features", 40, "features D (5 of them informative)", lo=5, hi=100),
        lab.Flag("noise", 1.0, "label noise std", lo=0.0, hi=3.0, step=0.1),
        lab.Flag("l2", 0.0, "L2 strength lam", lo=-0.1, hi=1.0, step=0.01),
        lab.Flag(
            "lr_fraction",
            0.9,
            "step size as a fraction of the stability limit 2/lambda_max",
            lo=0.05,
            hi=1.5,
            step=0.05,
        ),
        lab.Flag("steps", 2000, "gradient steps", lo=50, hi=5000, step=50),
        lab.Flag("leak_examples", 60, "rows of the leakage demo", lo=20, hi=200, step=10),
        lab.Flag(
            "noise_features",
            1000,
            "pure-noise features of the leakage demo",
            lo=10,
            hi=2000,
            step=10,
        ),
        lab.Flag("select_k", 10, "features selected by correlation", lo=1, hi=50),
        lab.Flag("leak_seeds", 5, "seeds the leakage is measured over", lo=1, hi=10),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        description="Regularization and honest validation: L2, early stopping, leakage.",
    )
    ARGS = FLAGS.parse()
    TEST_EXAMPLES = 200  # a held-out test split that no choice ever looks at
    SPLIT_COLORS = alt.Scale(
        domain=["train", "val", "test"], range=["#4c78a8", "#f58518", "#54a24b"]
    )


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Regularization and honest validation
    {lab.phase_line("regularization_validation")}

    A model that fits its training data can still be wrong on new data: with as many
    features as examples, least squares fits the noise too. In this lesson you will

    - split the data into **train / validation / test**, run gradient descent on the training
      loss and watch the three losses step by step (each step checked against its closed
      form in float64);
    - regularize twice: an **L2 penalty** `lam ||w||² / 2`, and **early stopping** (keep the
      step with the lowest validation loss, report the untouched test split);
    - **leak** the validation set into feature selection and measure, over several seeds,
      how much it inflates the validation score of a model that knows nothing.
    """)
    return


@app.cell
def _():
    train = FLAGS.control("train", ARGS, label="train n")
    val = FLAGS.control("val", ARGS, label="validation n")
    features = FLAGS.control("features", ARGS)
    noise = FLAGS.control("noise", ARGS)
    l2 = FLAGS.control("l2", ARGS, label="L2 lam")
    lr_fraction = FLAGS.control("lr_fraction", ARGS, label="lr / stability limit")
    steps = FLAGS.control("steps", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([train, val, features, noise], justify="start", wrap=True),
            mo.hstack([l2, lr_fraction, steps, seed], justify="start", wrap=True),
        ]
    )
    return features, l2, lr_fraction, noise, seed, steps, train, val


@app.cell
def _(features, l2, lr_fraction, noise, seed, steps, train, val):
    lab.guard(
        rv.problem(lr_fraction.value, l2.value, 1, 1),
        lab.table([{"L2 lam": l2.value, "lr / stability limit": lr_fraction.value}]),
        headline="Gradient descent cannot train here.",
    )
    splits, path, curves = rv.run_split(
        jax.random.key(seed.value),
        train.value,
        val.value,
        TEST_EXAMPLES,
        features.value,
        noise.value,
        l2.value,
        lr_fraction.value,
        steps.value,
    )
    lam = float(l2.value)
    limit = rv.stability_limit(*splits["train"], lam)
    lr = lr_fraction.value * limit
    stopped = rv.early_stopping(curves)
    mo.vstack(
        [
            mo.md(
                f"""
    ## Gradient descent on the training split

    {train.value} training rows, {features.value} features (only {rv.INFORMATIVE} matter),
    noise std {noise.value:g}. The training loss is quadratic with Hessian
    A = X^T X / n + lam I; the stability limit is 2 / lambda_max(A) = {limit:.4g}, and the
    step is {lr_fraction.value:g} of it: lr = {lr:.4g}.
    """
            ),
            lab.table(
                [
                    {
                        "": "at the end",
                        "step": steps.value,
                        "val MSE": stopped["val at end"],
                        "test MSE": stopped["test at end"],
                    },
                    {
                        "": "early stopped (lowest val)",
                        "step": stopped["best step"],
                        "val MSE": stopped["val at best"],
                        "test MSE": stopped["test at best"],
                    },
                ]
            ),
        ]
    )
    return curves, lam, lr, path, splits, stopped


@app.cell
def _(lam, lr, path, splits, steps):
    # Independent reference: the closed form w_t = V diag((1 - (1 - lr s)^t) / s) V^T b from
    # the eigendecomposition of A in NumPy float64, at every step.
    _reference = rv.closed_form_path(*splits["train"], lam, lr, steps.value)
    check = lab.Check(
        f"gradient descent (float32, {steps.value} steps) equals the closed-form ridge path "
        "(eigendecomposition, NumPy float64) at every step",
        {
            "weights at every step": numerics.scaled_max_error(path, _reference),
            "validation loss at every step": numerics.scaled_max_error(
                rv.mse(path, *splits["val"]), rv.mse(_reference, *splits["val"])
            ),
        },
        numerics.tolerance("float32"),
    )
    check
    return (check,)


@app.cell
def _(curves, splits, stopped):
    _every = max(1, len(curves["train"]) // 300)
    _rows = pd.DataFrame(
        [
            {"step": t, "split": name, "MSE": float(v)}
            for name, values in curves.items()
            for t, v in list(enumerate(values))[::_every]
        ]
    )
    _chart = (
        alt.Chart(_rows, title="Loss per step (log axes)")
        .mark_line()
        .encode(
            x=alt.X("step:Q", scale=alt.Scale(type="symlog")),
            y=alt.Y("MSE:Q", scale=alt.Scale(type="log")),
            color=alt.Color("split:N", scale=SPLIT_COLORS, title=None),
            tooltip=["split", "step", alt.Tooltip("MSE:Q", format=".4g")],
        )
        .properties(width=340, height=240)
    )
    _rule = (
        alt.Chart(pd.DataFrame({"step": [stopped["best step"]]}))
        .mark_rule(strokeDash=[4, 3], color="black")
        .encode(x="step:Q")
    )
    _lams = np.geomspace(1e-3, 10, 25)
    _ridge = pd.DataFrame(rv.ridge_sweep(splits, _lams))
    _ridge_chart = (
        alt.Chart(_ridge, title="Exact ridge solution vs L2 lam")
        .mark_line(point=True)
        .encode(
            x=alt.X("L2 lam:Q", scale=alt.Scale(type="log")),
            y=alt.Y("MSE:Q", scale=alt.Scale(type="log")),
            color=alt.Color("split:N", scale=SPLIT_COLORS, title=None),
            tooltip=[
                "split",
                alt.Tooltip("L2 lam:Q", format=".3g"),
                alt.Tooltip("MSE:Q", format=".4g"),
            ],
        )
        .properties(width=300, height=240)
    )
    mo.vstack(
        [
            mo.hstack([_chart + _rule, _ridge_chart], justify="start"),
            mo.md(
                "Left: the training loss keeps falling while validation and test turn up: the "
                "model starts fitting noise. The dashed line is the early-stopping step. Right: "
                "the same trade-off through the L2 strength (the exact solution A⁻¹ b for each "
                "lam): too little fits the noise, too much shrinks the real signal. Choosing "
                "the step or lam on the validation split makes *its* score optimistic; the test "
                "split, never looked at, is the honest number."
            ),
        ]
    )
    return


@app.cell
def _():
    leak_examples = FLAGS.control("leak_examples", ARGS, label="rows")
    noise_features = FLAGS.control("noise_features", ARGS, label="noise features")
    select_k = FLAGS.control("select_k", ARGS, label="select k")
    leak_seeds = FLAGS.control("leak_seeds", ARGS, label="seeds")
    mo.vstack(
        [
            mo.md(
                """
    ## Leakage: selecting features on the whole data set

    Labels are coin flips and every feature is noise: no model can beat 50% on new rows.
    Both pipelines pick the k features most correlated with the label, fit least squares on
    the training half and score sign(x · w) on the validation half. The **honest** one
    computes the correlations on the training half; the **leaky** one on every row.
    """
            ),
            mo.hstack(
                [leak_examples, noise_features, select_k, leak_seeds], justify="start", wrap=True
            ),
        ]
    )
    return leak_examples, leak_seeds, noise_features, select_k


@app.cell
def _(leak_examples, leak_seeds, noise_features, seed, select_k):
    lab.guard(
        rv.problem(0.5, 0.0, select_k.value, noise_features.value),
        lab.table([{"select k": select_k.value, "features": noise_features.value}]),
        headline="No selection possible.",
    )
    leak_seed_list = [seed.value * 100 + i for i in range(leak_seeds.value)]
    leak = rv.leak_summary(
        leak_seed_list, leak_examples.value, noise_features.value, select_k.value
    )
    _rows = pd.DataFrame(
        [
            {"seed": s, "pipeline": name, "validation accuracy": float(leak[name][i])}
            for i, s in enumerate(leak_seed_list)
            for name in ("honest", "leaky")
        ]
    )
    _chart = (
        alt.Chart(_rows, title="Validation accuracy of a model that knows nothing")
        .mark_bar()
        .encode(
            x=alt.X("seed:O"),
            xOffset="pipeline:N",
            y=alt.Y("validation accuracy:Q", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("pipeline:N", scale=alt.Scale(range=["#54a24b", "#e45756"])),
            tooltip=["seed", "pipeline", "validation accuracy"],
        )
        .properties(width=360, height=220)
    ) + alt.Chart(pd.DataFrame({"y": [0.5]})).mark_rule(strokeDash=[4, 3]).encode(y="y:Q")
    mo.vstack(
        [
            _chart,
            mo.md(
                f"Over {len(leak_seed_list)} seeds: honest {leak['honest'].mean():.1%}, leaky "
                f"{leak['leaky'].mean():.1%}; the leak inflates the validation score by "
                f"**{leak['inflation']:+.1%}** on average (leaky ahead on "
                f"{leak['leaky wins']:.0%} of the seeds). With {noise_features.value} noise "
                "features some correlate with the validation labels by chance, and the leaky "
                "selection finds exactly those."
            ),
        ]
    )
    return leak, leak_seed_list


@app.cell
def _(leak, leak_examples, leak_seed_list, noise_features, select_k):
    # Independent reference: the same pipelines in scikit-learn (SelectKBest(f_regression),
    # LinearRegression) on the same rows; accuracies are counts, so they must agree exactly.
    _sk = [
        rv.leak_trial_sklearn(s, leak_examples.value, noise_features.value, select_k.value)
        for s in leak_seed_list
    ]
    leak_check = lab.Check(
        "honest and leaky validation accuracies equal scikit-learn's SelectKBest + "
        f"LinearRegression on the same rows ({len(leak_seed_list)} seeds)",
        {
            name: numerics.max_abs_error(leak[name], np.array([t[name] for t in _sk]))
            for name in ("honest", "leaky")
        },
        0.0,
    )
    leak_check
    return (leak_check,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("regularization_validation")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_leak_check_passes(leak_check):
    leak_check.assert_passed()
    return


@app.cell
def test_claims_at_the_defaults(
    features,
    l2,
    leak,
    leak_examples,
    leak_seeds,
    lr_fraction,
    noise,
    noise_features,
    seed,
    select_k,
    steps,
    stopped,
    train,
    val,
):
    # The lesson's claims at its defaults; regularization_validation_test proves both over
    # more seeds with margin.
    _controls = dict(
        train=train,
        val=val,
        features=features,
        noise=noise,
        l2=l2,
        lr_fraction=lr_fraction,
        steps=steps,
        leak_examples=leak_examples,
        noise_features=noise_features,
        select_k=select_k,
        leak_seeds=leak_seeds,
        seed=seed,
    )
    if claims.at_defaults(FLAGS, {_n: _c.value for _n, _c in _controls.items()}):
        assert stopped["test at best"] * rv.EARLY_STOP_MARGIN <= stopped["test at end"]
        assert leak["inflation"] >= rv.LEAK_MIN_INFLATION
    return


if __name__ == "__main__":
    app.run()
