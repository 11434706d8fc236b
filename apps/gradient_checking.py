import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Gradient checking and numerical accuracy")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import claims
    from core.lessons.math_optimization import gradient_checking
    from core.optim import gradcheck

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag(
            "function",
            gradient_checking.NAMES[0],
            "the scalar function of the step-size sweep",
            choices=gradient_checking.NAMES,
        ),
        lab.Flag("x0", 0.7, "the point where f' is approximated", lo=-2.0, hi=2.0, step=0.05),
        lab.Flag("hidden", 4, "hidden tanh units of the checked network", lo=1, hi=16),
        lab.Flag("bug", False, "plant a bug in the network's backward pass (custom_vjp)"),
        lab.Flag("seed", 0, "PRNG seed (network weights and data)", lo=0, hi=9999),
        description="Gradient checking: finite-difference step sizes, float32 vs float64.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(rf"""
    # Gradient checking and numerical accuracy
    {lab.phase_line("gradient_checking")}

    A gradient you wrote yourself (a custom VJP, a hand-derived formula, a kernel) needs a
    test, and the classic one is a **finite difference**: nudge one input by a small step h
    and see how the output moves. How small? Too large and the difference is not the
    derivative (truncation error); too small and the two function values agree in all their
    digits (rounding error). In this lesson you will

    - sweep the step h over 15 decades and see the **U-shaped error curve**, in float32 and
      float64, for the forward and the central difference;
    - predict the **best step from machine epsilon** alone: $h \approx \sqrt{{\varepsilon}}$
      (forward) and $h \approx \varepsilon^{{1/3}}$ (central), and the error left there;
    - use the course's **gradient checker** (`core.optim.gradcheck.check_gradient`, which
      later lessons' tests use) on a small network, and watch it catch a **planted bug** in
      a `custom_vjp`.
    """)
    return


@app.cell
def _():
    function = FLAGS.control("function", ARGS, label="f")
    x0 = FLAGS.control("x0", ARGS, label="x0")
    hidden = FLAGS.control("hidden", ARGS, label="hidden units")
    bug = FLAGS.control("bug", ARGS, label="plant a bug in tanh's backward pass")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md("**The step-size sweep**"),
            mo.hstack([function, x0], justify="start"),
            mo.md("**The gradient checker**"),
            mo.hstack([hidden, bug, seed], justify="start"),
        ]
    )
    return bug, function, hidden, seed, x0


@app.cell
def _(function, x0):
    lab.guard(
        gradient_checking.point_problem(function.value, x0.value),
        headline="No derivative there.",
    )
    chosen = gradient_checking.get(function.value)
    sweep_rows = gradient_checking.sweep(function.value, x0.value)
    summary = gradient_checking.step_summary(function.value, x0.value, sweep_rows)
    jax_derivative = gradient_checking.jax_derivative(function.value, x0.value)
    mo.vstack(
        [
            mo.md(
                f"""
    ## The step-size sweep

    $f(x) = {chosen.formula}$, $f'(x) = {chosen.derivative_formula}$, at $x_0 = {x0.value:g}$:
    $f'(x_0)$ = {gradient_checking.exact_derivative(function.value, x0.value):.10g}
    (closed form), `jax.grad` says {jax_derivative:.8g} (float32).

    - forward: $\\frac{{f(x+h) - f(x)}}{{h}}$, error $\\approx \\frac{{h}}{{2}}\\lvert f''\\rvert
      + \\frac{{\\varepsilon \\lvert f\\rvert}}{{h}}$, smallest near $h = \\sqrt{{\\varepsilon}}$;
    - central: $\\frac{{f(x+h) - f(x-h)}}{{2h}}$, error $\\approx \\frac{{h^2}}{{6}}\\lvert
      f'''\\rvert + \\frac{{\\varepsilon \\lvert f\\rvert}}{{h}}$, smallest near
      $h = \\varepsilon^{{1/3}}$.

    $\\varepsilon$ is machine epsilon: 1.2e-07 in float32, 2.2e-16 in float64. Each
    difference below is computed in that dtype's arithmetic; its error is measured against
    the closed form in float64, relative to $\\max(\\lvert f'(x_0)\\rvert, 1)$.
    """
            ),
            lab.table(summary),
        ]
    )
    return jax_derivative, summary, sweep_rows


@app.cell
def _(bug, hidden, seed):
    params, x_ND, y_N = gradient_checking.network_data(jax.random.key(seed.value), hidden.value)
    checked = gradcheck.check_gradient(
        lambda p: gradient_checking.network_loss(p, x_ND, y_N, bug=bug.value), params
    )
    _where = (
        " The bug sits in tanh's backward pass, so only the weights before the tanh (b1, w1)"
        " get wrong gradients; w2's are right: a checker that reports per element points at"
        " the layer to look at."
        if bug.value
        else ""
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## The gradient checker

    A network with {hidden.value} tanh units, {gradient_checking.EXAMPLES} examples, squared
    error; {len(checked.names)} parameters. The tanh is
    {
                    "a `custom_vjp` whose backward pass uses **1 - tanh** instead of 1 - tanh²"
                    if bug.value
                    else "`jnp.tanh`, differentiated by JAX"
                }.

    ```python
    result = gradcheck.check_gradient(loss, params)   # jax.grad vs float64 central differences
    assert result.passed, result.summary()
    ```
    `{checked.summary()}`. The checker evaluates the loss in float64 (inside
    `jax.enable_x64`), with the step $\\varepsilon_{{64}}^{{1/3}} \\max(1, \\lvert
    x_i\\rvert)$ for each parameter; each element's error is measured against the largest
    gradient entry.{_where} The worst elements:
    """
            ),
            lab.table(checked.rows(6)),
        ]
    )
    return checked, params, x_ND, y_N


@app.cell
def _(bug, checked, function, jax_derivative, params, x0, x_ND, y_N):
    # Independent references in NumPy float64: the closed-form f'(x0); a hand-written
    # backprop of the network (no JAX), for both the checker's finite differences and jax.grad.
    _backprop = gradient_checking.network_gradient_reference(params, x_ND, y_N)
    _grad_error = numerics.tree_normwise_max_error(checked.analytic_N, _backprop)
    _errors = {
        "jax.grad of f at x0 vs the closed form": numerics.scaled_max_error(
            jax_derivative, gradient_checking.exact_derivative(function.value, x0.value)
        ),
        "checker's finite differences vs NumPy backprop": numerics.tree_normwise_max_error(
            checked.numeric_N, _backprop
        ),
    }
    _tolerances = {
        "jax.grad of f at x0 vs the closed form": numerics.tolerance("float32"),
        "checker's finite differences vs NumPy backprop": gradcheck.FD_TOLERANCE,
    }
    if not bug.value:
        _errors["network jax.grad vs NumPy backprop"] = _grad_error
        _tolerances["network jax.grad vs NumPy backprop"] = numerics.tolerance("float32")
    check = lab.Check(
        f"finite differences, jax.grad and the gradient checker against closed forms in NumPy "
        f"float64{lab.float64_note()} "
        f"({'planted bug: the checker must reject it' if bug.value else 'no bug'})",
        _errors,
        _tolerances,
        facts={
            "the checker's verdict agrees with NumPy backprop": checked.passed
            == (_grad_error <= numerics.tolerance("float32")),
            "the verdict is the expected one": checked.passed != bug.value,
        },
    )
    check
    return (check,)


@app.cell
def _(summary, sweep_rows):
    _curves = pd.DataFrame(sweep_rows)
    _curves["error"] = _curves["error"].clip(lower=1e-18)  # exact hits would vanish on a log axis
    _curves["difference"] = _curves["dtype"] + ", " + _curves["method"]
    _rules = pd.DataFrame(
        [{"difference": f"{r['dtype']}, {r['method']}", "h": r["predicted h"]} for r in summary]
    )
    _colour = alt.Color(
        "difference:N",
        scale=alt.Scale(
            domain=[
                "float32, forward",
                "float32, central",
                "float64, forward",
                "float64, central",
            ],
            range=["#f58518", "#e45756", "#4c78a8", "#54a24b"],
        ),
        legend=alt.Legend(orient="bottom", columns=2, title=None),
    )
    _lines = (
        alt.Chart(_curves)
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=alt.X(
                "h:Q", scale=alt.Scale(type="log"), title="step h", axis=alt.Axis(format=".0e")
            ),
            y=alt.Y("error:Q", scale=alt.Scale(type="log"), title="relative error (log)"),
            color=_colour,
            tooltip=[
                "difference",
                alt.Tooltip("h:Q", format=".1e"),
                alt.Tooltip("error:Q", format=".2e"),
            ],
        )
    )
    _predicted = alt.Chart(_rules).mark_rule(strokeDash=[4, 3]).encode(x="h:Q", color=_colour)
    (_lines + _predicted).properties(
        width=520,
        height=300,
        title="Error of the finite difference vs step (dashed: the step machine epsilon predicts)",
    )
    return


@app.cell
def _(checked):
    _rows = pd.DataFrame(
        {
            "element": list(checked.names),
            "error": np.clip(checked.error_N, 1e-12, None),
            "index": np.arange(len(checked.names)),
        }
    )
    _bars = (
        alt.Chart(_rows)
        .mark_bar()
        .encode(
            x=alt.X(
                "index:O", title="parameter (b1, w1, w2 flattened)", axis=alt.Axis(labels=False)
            ),
            y=alt.Y(
                "error:Q",
                scale=alt.Scale(type="log", domainMin=1e-12),
                title="error (log; floor 1e-12)",
            ),
            y2=alt.datum(1e-12),  # bars on a log axis start at the floor, not at 0
            tooltip=["element", alt.Tooltip("error:Q", format=".2e")],
        )
    )
    _tolerance = (
        alt.Chart(pd.DataFrame({"tolerance": [checked.tolerance]}))
        .mark_rule(color="#e45756", strokeDash=[4, 3])
        .encode(y="tolerance:Q")
    )
    (_bars + _tolerance).properties(
        width=520, height=200, title="The checker's error per parameter (red: the tolerance)"
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("gradient_checking")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_rule_of_thumb_at_the_defaults(bug, function, hidden, seed, summary, x0):
    # The rule-of-thumb steps reach the predicted error within STEP_RULE_FACTOR at the
    # defaults (gradient_checking_test proves it for every function over a grid of x0).
    _values = dict(function=function, x0=x0, hidden=hidden, bug=bug, seed=seed)
    if claims.at_defaults(FLAGS, {_n: _c.value for _n, _c in _values.items()}):
        assert all(row["within the factor"] for row in summary), summary
    return


@app.cell
def test_float32_cannot_match_float64(summary):
    _best = {(r["dtype"], r["method"]): r["error at predicted h"] for r in summary}
    assert _best[("float32", "central")] > 1e3 * _best[("float64", "central")]
    return


if __name__ == "__main__":
    app.run()
