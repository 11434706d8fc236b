import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Minibatches, expectation, and gradient noise")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lessons.math_optimization import minibatch_noise as mn

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("examples", 512, "examples N in the data set", lo=16, hi=1024, step=16),
        lab.Flag("features", 8, "features D (the gradient's length)", lo=1, hi=16),
        lab.Flag("noise", 0.5, "label noise std", lo=0.0, hi=2.0, step=0.1),
        lab.Flag("draws", 500, "minibatches drawn per batch size", lo=200, hi=2000, step=100),
        lab.Flag("batch", 32, "batch size B of the epoch demo", lo=1, hi=1024),
        lab.Flag("seed", 0, "PRNG seed (data and sampling)", lo=0, hi=9999),
        description="Minibatch gradient noise vs batch size, unbiasedness, replacement.",
    )
    ARGS = FLAGS.parse()
    SAMPLING_COLORS = alt.Scale(
        domain=["with replacement", "without replacement"], range=["#4c78a8", "#e45756"]
    )


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Minibatches, expectation, and gradient noise
    {lab.phase_line("minibatch_noise")}

    The loss of a data set is an average over examples, so its gradient is an average of
    per-example gradients. A **minibatch** averages only B of them: a random estimate of the
    full gradient. In this lesson you will

    - compute per-example gradients with `vmap(grad)` and check the full-batch gradient
      against the closed form `X^T (X w - y) / N` (NumPy float64);
    - see that the minibatch gradient is **unbiased** (its expectation is the full
      gradient) and that one shuffled epoch averages to it exactly;
    - measure its **variance** against B: `sigma² / B` with replacement, times the
      finite-population factor `(N - B) / (N - 1)` without, reaching 0 at B = N.
    """)
    return


@app.cell
def _():
    examples = FLAGS.control("examples", ARGS, label="examples N")
    features = FLAGS.control("features", ARGS, label="features D")
    noise = FLAGS.control("noise", ARGS, label="label noise")
    draws = FLAGS.control("draws", ARGS)
    batch = FLAGS.control("batch", ARGS, label="epoch batch B")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([examples, features, noise], justify="start", wrap=True),
            mo.hstack([draws, batch, seed], justify="start", wrap=True),
        ]
    )
    return batch, draws, examples, features, noise, seed


@app.cell
def _(examples, features, noise, seed):
    _data_key, sample_key = jax.random.split(jax.random.key(seed.value))
    x_ND, y_N, w_D = mn.make_problem(_data_key, examples.value, features.value, noise.value)
    g_ND = mn.per_example_gradients(x_ND, y_N, w_D)
    full_reference = mn.full_gradient_reference(x_ND, y_N, w_D)
    _g = np.asarray(g_ND, np.float64)
    sigma2 = float(np.mean(np.sum((_g - _g.mean(0)) ** 2, axis=1)))
    mo.md(
        f"""
    ## Per-example gradients

    Least squares on N = {examples.value} examples of D = {features.value} features,
    `loss_n(w) = (x_n · w - y_n)² / 2`, at a point w away from the solution:

    ```python
    g_ND = jax.vmap(jax.grad(loss_one), in_axes=(None, 0, 0))(w, x, y)   # (N, D)
    g = g_ND.mean(0)                                                    # full batch
    ```
    The per-example spread is sigma² = mean ||g_n - g||² = {sigma2:.4g}; the full gradient has
    ||g||² = {float(np.sum(full_reference**2)):.4g}.
    """
    )
    return full_reference, g_ND, sample_key, sigma2, x_ND, y_N, w_D


@app.cell
def _(draws, g_ND, sample_key):
    rows = mn.noise_table(sample_key, g_ND, draws.value)
    return (rows,)


@app.cell
def _(batch, examples, g_ND, sample_key):
    lab.guard(
        mn.problem(examples.value, batch.value),
        lab.table([{"N": examples.value, "B": batch.value}]),
        headline="No epoch of equal batches here.",
    )
    epoch = np.asarray(mn.epoch_means(jax.random.fold_in(sample_key, 3), g_ND, batch.value))
    return (epoch,)


@app.cell
def _(draws, epoch, full_reference, g_ND, rows):
    # Independent references: the closed-form gradient X^T (X w - y) / N in NumPy float64, and
    # the closed-form variances sigma^2 / B (x (N - B) / (N - 1) without replacement).
    _z = max(mn.variance_z(r) for r in rows)
    check = lab.Check(
        "full-batch gradient (vmap of grad, float32) and one epoch's mean of batch gradients vs "
        "X^T (X w - y) / N in NumPy float64; minibatch variance vs sigma² / B "
        f"(standard errors over {draws.value} draws)",
        {
            "full gradient vs closed form": numerics.scaled_max_error(
                np.asarray(g_ND).mean(0), full_reference
            ),
            "epoch mean of batch means vs closed form": numerics.scaled_max_error(
                epoch.mean(0), full_reference
            ),
            "variance vs closed form (standard errors)": _z,
        },
        {
            "full gradient vs closed form": numerics.tolerance("float32"),
            "epoch mean of batch means vs closed form": numerics.tolerance("float32"),
            "variance vs closed form (standard errors)": mn.Z_BOUND,
        },
        facts={
            f"mean of the draws within {mn.MEAN_SIGMAS:g} standard errors of g (every B)": all(
                mn.mean_within_bound(r, draws.value) for r in rows
            )
        },
    )
    check
    return (check,)


@app.cell
def _(examples, rows, sigma2):
    _frame = pd.DataFrame(rows)
    _frame["shown"] = np.maximum(_frame["measured variance"], 1e-8)
    _points = (
        alt.Chart(_frame)
        .mark_point(filled=True, size=60)
        .encode(
            x=alt.X("B:Q", scale=alt.Scale(type="log", base=2), title="batch size B"),
            y=alt.Y("shown:Q", scale=alt.Scale(type="log"), title="E ||g_B - g||²"),
            color=alt.Color("sampling:N", scale=SAMPLING_COLORS, title=None),
            tooltip=[
                "sampling",
                "B",
                alt.Tooltip("measured variance:Q", format=".4g"),
                alt.Tooltip("theory:Q", format=".4g"),
            ],
        )
    )
    _b = np.unique(np.geomspace(1, examples.value, 60).round().astype(int))
    _lines = pd.DataFrame(
        [{"B": int(b), "curve": "sigma² / B", "value": sigma2 / b} for b in _b]
        + [
            {
                "B": int(b),
                "curve": "sigma² / B x (N - B) / (N - 1)",
                "value": max(sigma2 / b * (examples.value - b) / (examples.value - 1), 1e-8),
            }
            for b in _b
        ]
    )
    _curves = (
        alt.Chart(_lines)
        .mark_line(strokeDash=[4, 3])
        .encode(
            x="B:Q",
            y="value:Q",
            detail="curve:N",
            color=alt.Color(
                "curve:N", scale=alt.Scale(range=["#4c78a8", "#e45756"]), title="closed form"
            ),
        )
    )
    mo.vstack(
        [
            mo.md("## Noise against batch size"),
            (_curves + _points)
            .resolve_scale(color="independent")
            .properties(
                width=480, height=280, title="Minibatch gradient variance (points: measured)"
            ),
            mo.md(
                "On log axes sigma² / B is a line of slope -1: doubling the batch halves the "
                "variance, so the *standard deviation* only falls by sqrt(2). Without "
                "replacement the points bend down as B nears N: the batch becomes the data set "
                "and the noise vanishes (the last red point is exactly g)."
            ),
            lab.table(
                [
                    {
                        k: r[k]
                        for k in ("sampling", "B", "measured variance", "theory", "standard error")
                    }
                    for r in rows
                ],
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("minibatch_noise")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_noise_shrinks_with_the_batch(rows):
    for _sampling in ("with replacement", "without replacement"):
        _v = [r["measured variance"] for r in rows if r["sampling"] == _sampling]
        assert _v[-1] < _v[0]
    return


if __name__ == "__main__":
    app.run()
