import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Probability, likelihood, and stable losses")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lessons.math_optimization import stable_losses as sl

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag(
            "log10_scale",
            2.5,
            "log10 of the largest |logit| (float32 max is 3.4e38)",
            lo=-1.0,
            hi=38.5,
            step=0.1,
        ),
        lab.Flag(
            "temperature", 1.0, "softmax temperature T (logits / T)", lo=-2.0, hi=5.0, step=0.1
        ),
        lab.Flag("examples", 8, "examples N in the batch", lo=1, hi=64),
        lab.Flag("classes", 10, "classes C", lo=2, hi=64),
        lab.Flag(
            "label_smoothing",
            0.1,
            "label smoothing eps of the cross-entropy",
            lo=0.0,
            hi=0.5,
            step=0.05,
        ),
        lab.Flag("seed", 0, "PRNG seed (logits and targets)", lo=0, hi=9999),
        description="Softmax and log-sum-exp, naive vs stable, NLL and cross-entropy vs scipy.",
    )
    ARGS = FLAGS.parse()
    SWEEP_SCALES = np.arange(-1.0, 38.01, 1.0)
    FORM_COLORS = alt.Scale(domain=["naive", "stable"], range=["#e45756", "#4c78a8"])


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Probability, likelihood, and stable losses
    {lab.phase_line("stable_losses")}

    A classifier outputs **logits** x; softmax turns them into probabilities
    `p_i = exp(x_i) / sum_j exp(x_j)`, and training maximizes the **likelihood** of the
    right labels, i.e. minimizes the **negative log-likelihood** `-mean log p[y]`. In this
    lesson you will

    - push the logits up to float32's limit and watch the textbook softmax and log-sum-exp
      **overflow** (exp(89) is already inf in float32) or **underflow** (log 0 = -inf);
    - write the **stable** forms, which subtract the largest logit first, and check them
      against `scipy.special` (`logsumexp`, `softmax`, `log_softmax`) in float64;
    - compute the NLL and the **cross-entropy** with label smoothing from the stable
      `log_softmax`, never from `log(softmax)`.
    """)
    return


@app.cell
def _():
    log10_scale = FLAGS.control("log10_scale", ARGS, label="log10 largest |logit|")
    temperature = FLAGS.control("temperature", ARGS)
    examples = FLAGS.control("examples", ARGS)
    classes = FLAGS.control("classes", ARGS)
    label_smoothing = FLAGS.control("label_smoothing", ARGS, label="label smoothing")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([log10_scale, temperature], justify="start", wrap=True),
            mo.hstack([examples, classes, label_smoothing, seed], justify="start", wrap=True),
        ]
    )
    return classes, examples, label_smoothing, log10_scale, seed, temperature


@app.cell
def _(classes, examples, label_smoothing, log10_scale, seed, temperature):
    _inputs = [
        {
            "largest |logit|": f"1e{log10_scale.value:g}",
            "temperature T": temperature.value,
            "float32 max": f"{sl.FLOAT32_MAX:.4g}",
        }
    ]
    lab.guard(
        sl.problem(log10_scale.value, temperature.value),
        lab.table(_inputs),
        headline="No float32 loss can be computed here.",
    )
    logits, targets = sl.make_batch(
        jax.random.key(seed.value),
        examples.value,
        classes.value,
        log10_scale.value,
        temperature.value,
    )
    smoothing = float(label_smoothing.value)
    with np.errstate(all="ignore"):
        naive_out = {k: np.asarray(v) for k, v in sl.naive(logits, targets, smoothing).items()}
    stable_out = {k: np.asarray(v) for k, v in sl.stable(logits, targets, smoothing).items()}
    reference = sl.scipy_reference(logits, targets, smoothing)
    _largest = float(np.max(np.asarray(logits)))
    mo.md(
        f"""
    ## The batch

    {examples.value} x {classes.value} float32 logits, largest |logit| 1e{log10_scale.value:g}
    / T = {float(np.abs(np.asarray(logits)).max()):.4g}; the largest logit is {_largest:.4g}
    (exp overflows float32 past {sl.OVERFLOW_LOGIT:.2f}). Targets drawn uniformly.

    ```python
    m = x.max(-1, keepdims=True)                       # shift: every exponent <= 0
    log_softmax = (x - m) - log(sum(exp(x - m), -1))   # the sum lies in [1, C]
    nll = -mean(log_softmax[n, y[n]])
    q = (1 - eps) * onehot(y) + eps / C;  cross_entropy = -mean(sum(q * log_softmax, -1))
    ```
    """
    )
    return naive_out, reference, stable_out


@app.cell
def _(naive_out, reference, stable_out):
    def _show(value):
        return (
            "inf"
            if np.isposinf(value)
            else "-inf"
            if np.isneginf(value)
            else ("nan" if np.isnan(value) else f"{value:.7g}")
        )

    _rows = []
    for _form in sl.FORMS:
        _n, _s, _r = (np.ravel(v[_form]) for v in (naive_out, stable_out, reference))
        _rows.append(
            {
                "quantity": _form,
                "naive (first entry)": _show(_n[0]),
                "stable (first entry)": _show(_s[0]),
                "scipy float64 (first entry)": _show(_r[0]),
                "naive entries not finite": f"{int(np.sum(~np.isfinite(_n)))} of {_n.size}",
                "naive error": _show(numerics.scaled_max_error(_n, _r)),
            }
        )
    lab.table(_rows, caption="Naive vs stable vs scipy (errors: scaled max, whole arrays)")
    return


@app.cell
def _(reference, stable_out):
    # Independent reference: scipy.special in float64 on the same float32 logits.
    check = lab.Check(
        "stable logsumexp, softmax, log_softmax, NLL and cross-entropy (float32) equal "
        "scipy.special in float64",
        {form: numerics.scaled_max_error(stable_out[form], reference[form]) for form in sl.FORMS},
        numerics.tolerance("float32"),
        facts={
            "every stable value is finite": all(
                bool(np.all(np.isfinite(v))) for v in stable_out.values()
            )
        },
    )
    check
    return (check,)


@app.cell
def _(classes, log10_scale, seed):
    with np.errstate(all="ignore"):
        _rows = sl.sweep(
            jax.random.key(seed.value), classes.value, SWEEP_SCALES, numerics.scaled_max_error
        )
    _frame = pd.DataFrame(_rows)
    _frame["overflowed"] = ~np.isfinite(_frame["error"])
    _frame["shown error"] = np.where(_frame["overflowed"], 1.0, np.maximum(_frame["error"], 1e-10))

    def _panel(quantity):
        _points = (
            alt.Chart(_frame[_frame.quantity == quantity], title=quantity)
            .mark_point(filled=True, size=50)
            .encode(
                x=alt.X("log10 largest |logit|:Q"),
                y=alt.Y(
                    "shown error:Q",
                    scale=alt.Scale(type="log", domain=[1e-10, 1]),
                    title="error vs scipy (top row: inf or nan)",
                ),
                color=alt.Color("form:N", scale=FORM_COLORS, title=None),
                shape=alt.Shape("overflowed:N", title="not finite"),
                tooltip=["form", "quantity", "log10 largest |logit|", "error"],
            )
        )
        _rule = (
            alt.Chart(
                pd.DataFrame(
                    {
                        "x": [np.log10(sl.OVERFLOW_LOGIT), log10_scale.value],
                        "what": ["exp overflows", "your setting"],
                    }
                )
            )
            .mark_rule(strokeDash=[4, 3], color="grey")
            .encode(x="x:Q", tooltip=["what"])
        )
        return (_points + _rule).properties(width=240, height=220)

    mo.vstack(
        [
            mo.md("## From 0.1 to 1e38: where the naive forms break"),
            alt.hconcat(_panel("logsumexp"), _panel("nll")),
            mo.md(
                "The naive NLL breaks first, near |logit| ~ 50: the probability of a target "
                "far below the largest logit underflows to 0, and log 0 = -inf. Log-sum-exp "
                f"follows at {sl.OVERFLOW_LOGIT:.1f} (log of float32 max), where exp gives inf. "
                "The stable forms stay at float32 rounding all the way up."
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("stable_losses")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_naive_is_fine_for_small_logits_and_stable_always(log10_scale, naive_out, stable_out):
    _largest_possible = 10**log10_scale.value
    if _largest_possible < 50:  # far from both overflow and underflow: naive is fine too
        assert np.all(np.isfinite(naive_out["nll"]))
    assert np.all(np.isfinite(stable_out["logsumexp"]))
    return


if __name__ == "__main__":
    app.run()
