import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Branches with lax.cond")

with app.setup:
    import altair as alt
    import jax
    import jax.numpy as jnp
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lessons.control_flow import lax_cond

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag(
            "x", 1.5, "the point x for the trace-time vs run-time log", lo=-3.0, hi=3.0, step=0.1
        ),
        lab.Flag("x_min", -2.0, "left end of the grid", lo=-5.0, hi=0.0, step=0.5),
        lab.Flag("x_max", 3.0, "right end of the grid", lo=0.0, hi=5.0, step=0.5),
        lab.Flag(
            "points",
            101,
            "grid points (x = 0 is always one when the range contains it)",
            lo=2,
            hi=401,
        ),
        description=(
            "Branches with lax.cond: cond vs jnp.where vs lax.switch, tracing and gradients."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Branches with lax.cond
    {lab.phase_line("lax_cond")}

    Under `jit` a value is a *tracer* with a shape and a dtype but no number yet, so a Python
    `if x > 0:` cannot decide. JAX offers three ways to branch on data, and they differ in
    what gets traced, what runs and what gets differentiated. In this lesson you will

    - see that `lax.cond` **traces both branches** but **runs one**, that `jnp.where`
      **runs both**, and that `lax.switch` picks one of n;
    - meet the classic NaN: `grad(lambda x: jnp.where(x > 0, jnp.sqrt(x), 0.0))` at x ≤ 0,
      and fix it with a second `where` (or a `cond`);
    - differentiate through `cond` and `switch` and check every value and derivative
      against NumPy float64 and the closed-form derivative.
    """)
    return


@app.cell
def _():
    x = FLAGS.control("x", ARGS)
    x_min = FLAGS.control("x_min", ARGS, label="x min")
    x_max = FLAGS.control("x_max", ARGS, label="x max")
    points = FLAGS.control("points", ARGS)
    mo.hstack([x, x_min, x_max, points], justify="start", wrap=True)
    return points, x, x_max, x_min


@app.cell
def _():
    mo.md(f"""
    ## A Python `if` under `jit`

    ```python
    @jax.jit
    def relu_sqrt(x):
        if x > 0:
            return jnp.sqrt(x)
        return jnp.zeros_like(x)
    ```

    raises `{lax_cond.python_if_error()}`: the tracer has no truth value yet.
    The branch has to become part of the program.
    """)
    return


@app.cell
def _(x):
    logs = {construct: lax_cond.branch_log(construct, x.value) for construct in lax_cond.CONSTRUCTS}
    log_rows = [
        {
            "construct": f"`{c}`",
            "Python side effect (trace time, once)": ", ".join(log.traced),
            "jax.debug.callback (run time, this x)": ", ".join(sorted(log.ran)),
            "result at x": f"{log.value:.6g}",
        }
        for c, log in logs.items()
    ]
    mo.vstack(
        [
            mo.md(
                f"""
    ## What is traced, what runs (x = {x.value:g})

    Each branch below appends its name to a Python list when Python executes it (that is
    *tracing*: once, on the first call) and calls `jax.debug.callback` (that happens every
    time the compiled program *runs*):

    ```python
    def sqrt_branch(v):
        traced.append("sqrt branch")                           # trace time
        jax.debug.callback(lambda: ran.append("sqrt branch"))  # run time
        return jnp.sqrt(v)

    jax.lax.cond(v > 0, sqrt_branch, zero_branch, v)
    jnp.where(v > 0, sqrt_branch(v), zero_branch(v))
    jax.lax.switch(index(v), [sin_branch, square_branch, exp_branch], v)
    ```
    """
            ),
            lab.table(log_rows),
            mo.md(
                "`cond` and `switch` trace every branch (each must return the same shapes and "
                "dtypes) but run only the chosen one. `where` is plain arithmetic: both sides "
                "run, always. `vmap(cond)` over points on both sides of 0 has a *batched* "
                "predicate, and JAX turns the cond into a select: both branches run, as with "
                "`where`. Move **x**: the run-time column follows it, the trace-time column does "
                "not change, because `jit` reuses the compiled program for a new value of the "
                "same shape and dtype."
            ),
        ]
    )
    return (logs,)


@app.cell
def _():
    primitive_rows = [
        {
            "program": "`lax.cond(x > 0, jnp.sqrt, jnp.zeros_like, x)`",
            "top-level primitives": ", ".join(lax_cond.primitive_names(lax_cond.sqrt_cond, 1.0)),
        },
        {
            "program": "`jax.vmap(that)(xs)`",
            "top-level primitives": ", ".join(
                lax_cond.primitive_names(jax.vmap(lax_cond.sqrt_cond), jnp.ones(3))
            ),
        },
        {
            "program": "`jnp.where(x > 0, jnp.sqrt(x), 0.0)`",
            "top-level primitives": ", ".join(
                lax_cond.primitive_names(lax_cond.sqrt_where_naive, 1.0)
            ),
        },
        {
            "program": "`lax.switch(index(x), [sin, square, exp], x)`",
            "top-level primitives": ", ".join(
                lax_cond.primitive_names(lax_cond.piecewise_switch, 1.0)
            ),
        },
    ]
    mo.vstack(
        [
            mo.md(
                "The jaxprs say the same (`jax.make_jaxpr`): one `cond` equation holds the "
                "branches; under `vmap` it is gone, replaced by `select_n`."
            ),
            lab.table(primitive_rows),
        ]
    )
    return


@app.cell
def _(points, x_max, x_min):
    grid_problem = None
    try:
        xs_N = lax_cond.grid(x_min.value, x_max.value, points.value)
    except ValueError as error:
        xs_N, grid_problem = None, str(error)
    lab.guard(grid_problem, headline="No grid to evaluate: move x min or x max.")
    evaluations = lax_cond.evaluate(xs_N)
    mo.vstack(
        [
            mo.md(
                f"""
    ## Values and gradients on {points.value} points in [{x_min.value:g}, {x_max.value:g}]

    Every function is evaluated with `jax.vmap(f)` and differentiated with
    `jax.vmap(jax.grad(f))`, then compared with NumPy float64 and the closed-form derivative
    (½/√x for x > 0, else 0; cos x, 2x, eˣ⁻¹ on the three pieces).

    ```python
    def sqrt_where_safe(x):            # the double where
        positive = x > 0
        safe_x = jnp.where(positive, x, 1.0)          # sqrt never sees x <= 0
        return jnp.where(positive, jnp.sqrt(safe_x), 0.0)
    ```
    """
            ),
            lab.table(
                [
                    {
                        "function": name,
                        "value error": f"{e.value_error:.2e}",
                        "gradient error": "NaN" if e.nan_grads else f"{e.grad_error:.2e}",
                        "NaN gradients": e.nan_grads,
                    }
                    for name, e in evaluations.items()
                ]
            ),
        ]
    )
    return evaluations, xs_N


@app.cell
def _(evaluations, xs_N):
    # Independent references: NumPy float64 values and the closed-form derivatives.
    naive = evaluations["sqrt: where (naive)"]
    # The bug, detected: NaN gradients exactly at the points x <= 0, finite elsewhere.
    naive_nan_where_expected = bool(np.array_equal(~np.isfinite(naive.grad), xs_N <= 0))
    _errors = {}
    for _name, _e in evaluations.items():
        _errors[f"{_name}: values"] = _e.value_error
        if _e is not naive:  # its gradient is NaN at x <= 0: the bug the facts check
            _errors[f"{_name}: gradients"] = _e.grad_error
    check = lab.Check(
        "values and gradients of cond / double where / switch / nested cond / where vs NumPy "
        "float64 and the closed-form derivative; naive where's gradient is NaN at exactly the "
        f"{naive.nan_grads} points x <= 0",
        _errors,
        numerics.tolerance("float32"),
        facts={"naive where's gradient is NaN exactly at x <= 0": naive_nan_where_expected},
    )
    check
    return check, naive_nan_where_expected


@app.cell
def _(evaluations):
    def curves(names, field, title):
        x_N = evaluations[names[0]].x
        frame = pd.concat(
            [
                pd.DataFrame({"x": x_N, "value": getattr(evaluations[n], field), "version": n})
                for n in names
            ]
            + [
                pd.DataFrame(
                    {
                        "x": x_N,
                        "value": getattr(evaluations[names[0]], f"{field}_reference"),
                        "version": "closed form (float64)",
                    }
                )
            ]
        )
        # One line per smooth piece, so the jumps are not drawn as steep lines.
        frame["piece"] = np.tile(lax_cond.segment(names[0], x_N), len(names) + 1)
        frame["NaN"] = ~np.isfinite(frame["value"])
        lines = (
            alt.Chart(frame[~frame["NaN"]])
            .mark_line(point=alt.OverlayMarkDef(size=14))
            .encode(
                x="x:Q",
                y=alt.Y("value:Q", title=field),
                color=alt.Color("version:N"),
                detail="piece:N",
                strokeDash=alt.condition(
                    alt.datum.version == "closed form (float64)",
                    alt.value([4, 3]),
                    alt.value([1, 0]),
                ),
            )
        )
        nans = (
            alt.Chart(frame[frame["NaN"]].assign(value=0.0))
            .mark_point(shape="cross", size=80, color="#e45756")
            .encode(x="x:Q", y="value:Q", tooltip=["version", "x"])
        )
        return (lines + nans).properties(title=title, width=300, height=200)

    sqrt_names = ["sqrt: where (naive)", "sqrt: where (double where)", "sqrt: lax.cond"]
    piece_names = ["pieces: jnp.where", "pieces: nested lax.cond", "pieces: lax.switch"]
    mo.vstack(
        [
            mo.hstack(
                [
                    curves(sqrt_names, "grad", "d/dx sqrt-or-0: red crosses are NaN (naive where)"),
                    curves(piece_names, "grad", "d/dx of the three pieces"),
                ]
            ),
            mo.hstack(
                [
                    curves(sqrt_names, "value", "sqrt-or-0: all versions agree on values"),
                    curves(piece_names, "value", "three pieces: where = cond = switch"),
                ]
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("lax_cond")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_cond_traces_both_and_runs_one(logs, x):
    assert sorted(logs["cond"].traced) == ["sqrt branch", "zero branch"]
    assert logs["cond"].ran == (("sqrt branch",) if x.value > 0 else ("zero branch",))
    assert sorted(logs["where"].ran) == ["sqrt branch", "zero branch"]
    assert len(logs["switch"].ran) == 1 and len(logs["switch"].traced) == 3
    return


@app.cell
def test_naive_where_bug_is_detected(
    evaluations,
    naive_nan_where_expected,
    xs_N,
):
    assert (
        naive_nan_where_expected
        and evaluations["sqrt: where (naive)"].nan_grads == int(np.sum(xs_N <= 0)) > 0
    )
    assert evaluations["sqrt: where (double where)"].nan_grads == 0
    return


if __name__ == "__main__":
    app.run()
