import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Vectors, norms, and projections")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lessons.math_optimization import vectors_norms
    from core.optim import linalg

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("x", "1, 2", "the vector x (comma-separated entries)"),
        lab.Flag("a", "3, 1", "the direction a to project x onto"),
        lab.Flag("dim", 6, "dimension N of the random subspace part", lo=1, hi=64),
        lab.Flag("rank", 2, "rank K of the random subspace (K columns)", lo=1, hi=8),
        lab.Flag("seed", 0, "PRNG seed (the random subspace and vector)", lo=0, hi=9999),
        description="Vectors, norms, and projections: L1/L2/inf, projections, residuals.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Vectors, norms, and projections
    {lab.phase_line("vectors_norms")}

    A norm measures the size of a vector; a projection finds the closest point of a line or
    a subspace. Both are everywhere in training: gradient norms are clipped, weights are
    decayed towards 0, least squares projects targets onto what a linear model can reach.
    In this lesson you will

    - compute the **L1, L2 and inf norms** of a vector and see their **unit balls** (a
      diamond, a circle, a square);
    - **project** a vector onto another vector, then onto a random **subspace**;
    - check that the **residual** (what is left) is **orthogonal** to what you projected
      onto, and compare everything with NumPy float64.
    """)
    return


@app.cell
def _():
    x_text = mo.ui.text(value=ARGS.x, label="x")
    a_text = mo.ui.text(value=ARGS.a, label="a")
    dim = FLAGS.control("dim", ARGS, label="dimension N")
    rank = FLAGS.control("rank", ARGS, label="subspace rank K")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md("**Typed vectors** (2 entries draw a picture)"),
            mo.hstack([x_text, a_text], justify="start"),
            mo.md("**A random subspace**"),
            mo.hstack([dim, rank, seed], justify="start"),
        ]
    )
    return a_text, dim, rank, seed, x_text


@app.cell
def _(a_text, x_text):
    x_np, _x_problem = vectors_norms.parse_vector(x_text.value)
    a_np, _a_problem = vectors_norms.parse_vector(a_text.value)
    _problem = _x_problem or _a_problem
    if _problem is None:
        _problem = vectors_norms.line_problem(x_np, a_np)
    lab.guard(_problem, headline="x cannot be projected onto a.")
    x = vectors_norms.to_jnp(x_np)
    a = vectors_norms.to_jnp(a_np)
    x_norms = {name: float(value) for name, value in linalg.norms(x).items()}
    line_projection, line_residual = linalg.project_onto_vector(x, a)
    mo.md(
        f"""
    ## Norms and the projection onto a line

    | norm | formula | of x |
    |---|---|---|
    | L1 | $\\sum_i \\lvert x_i\\rvert$ | {x_norms["L1"]:.4g} |
    | L2 | $\\sqrt{{\\sum_i x_i^2}}$ | {x_norms["L2"]:.4g} |
    | inf | $\\max_i \\lvert x_i\\rvert$ | {x_norms["inf"]:.4g} |

    Always $\\lVert x\\rVert_\\infty \\le \\lVert x\\rVert_2 \\le \\lVert x\\rVert_1$: the L1
    norm adds every entry, the inf norm keeps only the largest.

    The projection of x onto the line through a is
    $p = \\frac{{x \\cdot a}}{{a \\cdot a}}\\, a$ = `{np.round(np.asarray(line_projection), 4)}`;
    the residual $r = x - p$ = `{np.round(np.asarray(line_residual), 4)}` is what no
    multiple of a can explain, and $r \\cdot a = 0$: p is the closest point of the line.
    """
    )
    return a, line_projection, line_residual, x, x_np, x_norms


@app.cell
def _(dim, rank, seed):
    lab.guard(
        vectors_norms.subspace_problem(dim.value, rank.value),
        headline="No such subspace.",
    )
    sub_x, sub_a = vectors_norms.subspace_data(jax.random.key(seed.value), dim.value, rank.value)
    sub_projection, sub_residual = linalg.project_onto_subspace(sub_x, sub_a)
    _kept = np.linalg.norm(np.asarray(sub_projection)) / np.linalg.norm(np.asarray(sub_x))
    _all = " (all of it: K = N spans everything)" if rank.value == dim.value else ""
    mo.md(
        f"""
    ## The projection onto a subspace

    {rank.value} random Gaussian columns $A$ ({dim.value} x {rank.value}) span a
    {rank.value}-dimensional subspace of $\\mathbb{{R}}^{{{dim.value}}}$. The closest point to
    x in it is $A\\,c$ with $c$ the least-squares coefficients; the lesson gets it from an
    orthonormal basis, $Q R = A$ (QR), $p = Q(Q^\\top x)$:

    ```python
    q, _ = jnp.linalg.qr(a, mode="reduced")   # orthonormal columns, same span
    p = q @ (q.T @ x);  r = x - p               # A.T @ r == 0
    ```
    x keeps {_kept:.1%} of its length in the subspace{_all}.
    """
    )
    return sub_a, sub_projection, sub_residual, sub_x


@app.cell
def _(
    a,
    line_projection,
    line_residual,
    sub_a,
    sub_projection,
    sub_residual,
    sub_x,
    x,
    x_norms,
):
    # Independent references in NumPy float64: np.linalg.norm; a (a.x)/(a.a) for the line;
    # np.linalg.lstsq (not QR) for the subspace. Orthogonality: |a_k . r| / (|a_k| |x|).
    _reference_norms = vectors_norms.norms_reference(x)
    check = lab.Check(
        f"norms and projections in JAX float32 equal NumPy float64 (x in R^{x.size}, "
        f"a {sub_a.shape[1]}-dimensional subspace of R^{sub_a.shape[0]}); residuals orthogonal",
        {
            "L1, L2, inf norms of x": numerics.scaled_max_error(
                list(x_norms.values()), list(_reference_norms.values())
            ),
            "projection onto a": numerics.scaled_max_error(
                line_projection, vectors_norms.line_reference(x, a)
            ),
            "projection onto span(A)": numerics.scaled_max_error(
                sub_projection, vectors_norms.subspace_reference(sub_x, sub_a)
            ),
            "residual . a (cosine)": vectors_norms.orthogonality(line_residual, a, x),
            "A.T @ residual (cosine)": vectors_norms.orthogonality(sub_residual, sub_a, sub_x),
        },
        numerics.tolerance("float32"),
    )
    check
    return (check,)


@app.cell
def _(a, line_projection, x, x_np):
    _balls = alt.Chart(
        pd.DataFrame(vectors_norms.ball_rows(x_np)), title="Unit balls ||u|| = 1 (and x / ||x||)"
    )
    _lines = (
        _balls.transform_filter("datum.kind == 'unit ball'")
        .mark_line()
        .encode(
            x=alt.X("u1:Q", scale=alt.Scale(domain=[-1.5, 1.5]), title="coordinate 1"),
            y=alt.Y("u2:Q", scale=alt.Scale(domain=[-1.5, 1.5]), title="coordinate 2"),
            order="order:Q",
            color=alt.Color("norm:N", legend=alt.Legend(orient="bottom")),
        )
    )
    _points = (
        _balls.transform_filter("datum.kind != 'unit ball'")
        .mark_point(filled=True, size=70)
        .encode(x="u1:Q", y="u2:Q", color="norm:N", tooltip=["norm", "u1", "u2"])
    )
    ball_chart = (_lines + _points).properties(width=260, height=260)
    if x.size == 2:
        _p = np.asarray(line_projection, np.float64)
        _x, _a = np.asarray(x, np.float64), np.asarray(a, np.float64)
        _reach = 1.3 * max(np.abs(np.concatenate([_x, _a, _p])).max(), 1e-9)
        _t = _reach / max(np.abs(_a).max(), 1e-300)
        _segments = pd.DataFrame(
            [
                {"what": w, "step": i, "u1": float(u[0]), "u2": float(u[1])}
                for w, path in (
                    ("line through a", [-_t * _a, _t * _a]),
                    ("a", [0 * _a, _a]),
                    ("x", [0 * _x, _x]),
                    ("projection p", [0 * _p, _p]),
                    ("residual x - p", [_p, _x]),
                )
                for i, u in enumerate(path)
            ]
        )
        _domain = [-_reach, _reach]
        projection_chart = (
            alt.Chart(_segments, title="x, a, the projection p and the residual (at right angles)")
            .mark_line(point=True)
            .encode(
                x=alt.X("u1:Q", scale=alt.Scale(domain=_domain), title="coordinate 1"),
                y=alt.Y("u2:Q", scale=alt.Scale(domain=_domain), title="coordinate 2"),
                detail="what:N",
                order="step:Q",
                color=alt.Color("what:N", legend=alt.Legend(orient="bottom", columns=3)),
                strokeDash=alt.condition(
                    "datum.what == 'line through a'", alt.value([4, 3]), alt.value([1, 0])
                ),
            )
            .properties(width=260, height=260)
        )
        _view = mo.hstack([ball_chart, projection_chart], justify="start")
    else:
        _view = mo.vstack(
            [
                ball_chart,
                mo.md(f"x has {x.size} entries: type 2 to see the projection drawn."),
            ]
        )
    _view
    return


@app.cell
def _(sub_a, sub_residual, sub_x):
    _a = np.asarray(sub_a, np.float64)
    _rows = pd.DataFrame(
        [
            {"column": f"a{k + 1}", "of": who, "leak": float(value)}
            for who, v in (("x", sub_x), ("residual r", sub_residual))
            for k, value in enumerate(
                np.abs(_a.T @ np.asarray(v, np.float64)) / np.linalg.norm(_a, axis=0)
            )
        ]
    )
    _rows["leak"] = _rows["leak"].clip(lower=1e-12)
    (
        alt.Chart(_rows, title="How much of x, and of the residual, points along each column")
        .mark_bar()
        .encode(
            x=alt.X("column:N", axis=alt.Axis(labelAngle=0)),
            xOffset="of:N",
            y=alt.Y(
                "leak:Q",
                scale=alt.Scale(type="log", domainMin=1e-12),
                title="|a_k . v| / |a_k| (log; floor 1e-12)",
            ),
            y2=alt.datum(1e-12),  # bars on a log axis start at the floor, not at 0
            color=alt.Color("of:N", legend=alt.Legend(orient="bottom", title=None)),
            tooltip=["column", "of", alt.Tooltip("leak:Q", format=".3g")],
        )
        .properties(width=320, height=220)
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("vectors_norms")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_norms_are_ordered(x_norms):
    assert x_norms["inf"] <= x_norms["L2"] * (1 + 1e-6) <= x_norms["L1"] * (1 + 1e-6) ** 2
    return


@app.cell
def test_projection_is_closest(a, line_projection, x):
    # Any other point t*a of the line is at least as far from x as the projection.
    _x, _a, _p = (np.asarray(v, np.float64) for v in (x, a, line_projection))
    _best = np.linalg.norm(_x - _p)
    _slack = 1e-5 * max(1.0, float(np.linalg.norm(_x)))
    assert all(np.linalg.norm(_x - t * _a) >= _best - _slack for t in np.linspace(-3, 3, 61))
    return


if __name__ == "__main__":
    app.run()
