import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Least squares, rank, and conditioning")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab
    from core.lessons.math_optimization import least_squares as ls

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("rows", 12, "equations M (rows of A)", lo=1, hi=64),
        lab.Flag("cols", 6, "unknowns K (columns of A)", lo=1, hi=16),
        lab.Flag("rank", 6, "rank of A (< K: rank deficient)", lo=1, hi=16),
        lab.Flag(
            "log10_condition",
            4.0,
            "log10 of the condition number s_max / s_min (nonzero ones)",
            lo=0.0,
            hi=12.0,
            step=0.5,
        ),
        lab.Flag("normal_equations", True, "also solve the normal equations A^T A x = A^T b"),
        lab.Flag("seed", 0, "PRNG seed (singular vectors and x)", lo=0, hi=9999),
        description="Least squares: lstsq vs the normal equations, conditioning, rank.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(rf"""
    # Least squares, rank, and conditioning
    {lab.phase_line("least_squares")}

    Fitting a linear model is solving $\min_x \lVert A x - b\rVert_2$: least squares. How
    accurately a computer can do it depends on the **condition number** $\kappa(A) =
    s_{{\max}}/s_{{\min}}$ (largest over smallest singular value): rounding errors of size
    $\varepsilon$ come out amplified by $\kappa$, or by $\kappa^2$ if you solve it the
    textbook way. In this lesson you will

    - choose $\kappa$ and solve with `jnp.linalg.lstsq` and with the **normal equations**
      $A^\top A x = A^\top b$, in float32 and float64;
    - see the **error amplification** chart: error against $\kappa$ on log-log axes, lines of
      slope 1 (lstsq) and 2 (normal equations), and where float32 gives up;
    - make $A$ **rank deficient** and meet the **minimum-norm solution**.
    """)
    return


@app.cell
def _():
    rows = FLAGS.control("rows", ARGS, label="rows M")
    cols = FLAGS.control("cols", ARGS, label="columns K")
    rank = FLAGS.control("rank", ARGS)
    log10_condition = FLAGS.control("log10_condition", ARGS, label="log10 condition number")
    normal_equations = FLAGS.control("normal_equations", ARGS, label="normal equations")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([rows, cols, rank, seed], justify="start", wrap=True),
            mo.hstack([log10_condition, normal_equations], justify="start"),
        ]
    )
    return cols, log10_condition, normal_equations, rank, rows, seed


@app.cell
def _(cols, log10_condition, rank, rows, seed):
    lab.guard(ls.problem(rows.value, cols.value, rank.value), headline="No such matrix.")
    condition = 10.0**log10_condition.value if rank.value > 1 else 1.0  # one s: κ = 1
    _a, _x, _b = ls.systems(
        jax.random.key(seed.value), rows.value, cols.value, rank.value, [condition]
    )
    a_MK, x_true, b_M = _a[0], _x[0], _b[0]
    deficient = rank.value < cols.value
    lstsq_x = {dtype: ls.solve(_a, _b, "lstsq", dtype)[0] for dtype in ls.DTYPES}
    _s = np.linalg.svd(a_MK, compute_uv=False)
    _note = (
        " (Rank 1: a single nonzero singular value, so κ = 1 whatever the slider says.)"
        if rank.value == 1
        else ""
    )
    _target = "the minimum-norm solution pinv(A) b" if deficient else "the true x"
    mo.md(
        f"""
    ## The system

    $A = U\\,\\mathrm{{diag}}(s)\\,V^\\top$ ({rows.value} x {cols.value}) with random orthogonal
    $U, V$ and singular values from 1 down to 1/κ = {1 / condition:.3g}
    {f"and {cols.value - rank.value} zeros (rank {rank.value})" if deficient else ""};
    $b = A x$ exactly, in float64, so a perfect solver would find x with zero residual.
    NumPy's SVD of A: largest {_s[0]:.4g}, smallest {_s[-1]:.3g}.{_note}

    ```python
    x = jnp.linalg.lstsq(a, b)[0]                  # SVD-based: error ~ κ ε
    x = jnp.linalg.solve(a.T @ a, a.T @ b)         # normal equations: error ~ κ² ε
    ```
    lstsq lands {ls.relative_errors(lstsq_x["float32"][None], x_true[None])[0]:.3g} (float32)
    and {ls.relative_errors(lstsq_x["float64"][None], x_true[None])[0]:.3g} (float64) from
    the true x, relative; it aims at {_target}.
    """
    )
    return a_MK, b_M, condition, deficient, lstsq_x, x_true


@app.cell
def _(a_MK, b_M, cols, condition, normal_equations, rank, x_true):
    mo.stop(
        not normal_equations.value,
        mo.md("*Normal equations switched off.*"),
    )
    lab.guard(
        ls.normal_equations_problem(rank.value, cols.value),
        headline="The normal equations cannot solve a rank-deficient system.",
    )
    _kappa_32 = 1 / np.sqrt(np.finfo(np.float32).eps)
    _rows = []
    for _dtype in ls.DTYPES:
        _x = ls.solve(a_MK[None], b_M[None], "normal equations", _dtype)
        _error = ls.relative_errors(_x, x_true[None])[0]
        _rows.append(
            {
                "dtype": _dtype,
                "relative error": _error if np.isfinite(_error) else "not finite",
                "κ² ε": condition**2 * float(np.finfo(_dtype).eps),
            }
        )
    mo.vstack(
        [
            mo.md(
                f"""
    ### The normal equations at κ = {condition:.3g}

    $A^\\top A$ has condition number κ² = {condition**2:.3g}: whatever precision solves it
    starts by rounding a matrix whose small eigenvalue is κ² times smaller than its large
    one. Once κ² ε passes 1, float32 keeps no correct digit (κ > {_kappa_32:.0f}).
    """
            ),
            lab.table(_rows),
        ]
    )
    return


@app.cell
def _(a_MK, b_M, condition, deficient, lstsq_x):
    # Independent reference: NumPy float64 np.linalg.lstsq (LAPACK gelsd; the minimum-norm
    # solution when rank deficient), within AMPLIFICATION_SLACK * κ * ε while that bound means
    # something; and the optimality A^T r ~ 0 (NumPy float64), which holds at any κ.
    _errors, _tolerances, _no_digits = ls.lstsq_check(a_MK, b_M, lstsq_x, condition)
    _what = f"lstsq in float32 and float64{lab.float64_note()} at κ = {condition:.3g}" + (
        " (rank deficient: the minimum-norm solution)" if deficient else ""
    )
    _what += ": residual optimal (A^T r ~ 0) in both; " + (
        "each within "
        if not _no_digits
        else " and ".join(sorted(set(ls.DTYPES) - set(_no_digits))) + " within "
    )
    _what += f"{ls.AMPLIFICATION_SLACK:g} κ ε of NumPy float64 lstsq" + (
        f"; {' and '.join(_no_digits)}: no correct digits expected at this conditioning "
        f"({ls.AMPLIFICATION_SLACK:g} κ ε >= {ls.MEANINGFUL_BOUND:g}), so not compared"
        if _no_digits
        else ""
    )
    check = lab.Check(_what, _errors, _tolerances)
    check
    return (check,)


@app.cell
def _(cols, condition, rows, seed):
    sweep_rows = ls.sweep(jax.random.key(seed.value), rows.value, cols.value)
    _data = pd.DataFrame(sweep_rows)
    _data["solver"] = _data["method"] + ", " + _data["dtype"]
    _data["shown error"] = _data["error"].clip(lower=1e-17, upper=10.0)
    _domain = [
        "lstsq, float32",
        "normal equations, float32",
        "lstsq, float64",
        "normal equations, float64",
    ]
    _colour = alt.Color(
        "solver:N",
        scale=alt.Scale(domain=_domain, range=["#f58518", "#e45756", "#4c78a8", "#54a24b"]),
        legend=alt.Legend(orient="bottom", columns=2, title=None),
    )
    _x = alt.X(
        "condition:Q",
        scale=alt.Scale(type="log"),
        title="condition number κ",
        axis=alt.Axis(format=".0e"),
    )
    _measured = (
        alt.Chart(_data)
        .mark_line(point=True)
        .encode(
            x=_x,
            y=alt.Y("shown error:Q", scale=alt.Scale(type="log"), title="relative error of x"),
            color=_colour,
            tooltip=[
                "solver",
                alt.Tooltip("condition:Q", format=".0e"),
                alt.Tooltip("error:Q", format=".2e"),
            ],
        )
    )
    _predicted = (
        alt.Chart(_data)
        .mark_line(strokeDash=[4, 3], opacity=0.6)
        .encode(x=_x, y="predicted:Q", color=_colour)
    )
    _now = (
        alt.Chart(pd.DataFrame({"condition": [condition]}))
        .mark_rule(color="#888")
        .encode(x="condition:Q")
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## Error amplification

    The same {rows.value} x {cols.value} system at every κ from 1 to 10¹² (full rank). Solid:
    measured $\\lVert \\hat x - x\\rVert / \\lVert x\\rVert$; dashed: κε and κ²ε (capped at 1);
    grey: your κ. On log-log axes a bound $C\\kappa^p\\varepsilon$ is a straight line of
    **slope p**: one decade of κ costs lstsq one digit, the normal equations two. float32
    (ε ≈ 1.2e-7) runs out of digits at κ ≈ 10⁷ with lstsq and κ ≈ 3·10³ with the normal
    equations; float64 (ε ≈ 2.2e-16) lasts to κ ≈ 10¹⁶ and 10⁸. Past that the error
    saturates near 1 (or worse): the answer is noise.
    """
            ),
            (_measured + _predicted + _now).properties(width=520, height=300),
        ]
    )
    return (sweep_rows,)


@app.cell
def _(a_MK, b_M, deficient, lstsq_x, x_true):
    if deficient:
        _family = pd.DataFrame(ls.solution_family(a_MK, b_M, lstsq_x["float64"]))
        _long = _family.melt("t", var_name="measure", value_name="value")
        _chart = (
            alt.Chart(_long, title="x_min + t v, v in the null space of A")
            .mark_line(point=True)
            .encode(
                x=alt.X("t:Q", title="t (distance along v)"),
                y="value:Q",
                color=alt.Color("measure:N", legend=alt.Legend(orient="bottom", title=None)),
                tooltip=["t", "measure", alt.Tooltip("value:Q", format=".3g")],
            )
            .properties(width=360, height=220)
        )
        _view = mo.vstack(
            [
                mo.md(
                    f"""
    ## Rank deficient: infinitely many solutions

    A sends {a_MK.shape[1] - np.linalg.matrix_rank(a_MK)} direction(s) v to zero ($A v = 0$):
    adding any multiple of v to a solution changes nothing in $Ax$. lstsq returns the one
    of **minimum norm**, $x_{{\\min}} = A^+ b$ (the pseudo-inverse: invert the nonzero singular
    values, drop the zero ones), which has no component in the null space. Its norm is
    {np.linalg.norm(lstsq_x["float64"]):.4g}; the true x had {np.linalg.norm(x_true):.4g}:
    the data cannot tell them apart, and the minimum-norm one is the choice that adds
    nothing the data did not ask for (what weight decay prefers too).
    """
                ),
                _chart,
            ]
        )
    else:
        _view = mo.md(
            "## Rank deficient?\n\nLower the **rank** below K to make columns of A linearly "
            "dependent: the least-squares solution is then not unique, and lstsq picks the one "
            "of minimum norm."
        )
    _view
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("least_squares")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_slopes_one_and_two(cols, sweep_rows):
    # Where the errors are neither at rounding level nor saturated, a decade of κ costs
    # lstsq about one digit and the normal equations about two.
    def _slope(method, dtype, lo, hi):
        _by = {
            r["condition"]: r["error"]
            for r in sweep_rows
            if (r["method"], r["dtype"]) == (method, dtype)
        }
        return np.log10(np.float64(_by[hi]) / _by[lo]) / np.log10(hi / lo)

    if cols.value >= 2:  # one column: a single singular value, every κ of the sweep is 1
        assert 0.5 <= _slope("lstsq", "float64", 1e2, 1e10) <= 1.5
        assert 1.5 <= _slope("normal equations", "float64", 1e1, 1e6) <= 2.5
    return


if __name__ == "__main__":
    app.run()
