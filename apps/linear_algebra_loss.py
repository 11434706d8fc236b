import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Linear algebra and loss intuition")

with app.setup:
    import altair as alt
    import jax
    import jax.numpy as jnp
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lessons.math_optimization import linear_algebra_loss as lal

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("std_1", 1.5, "standard deviation of feature 1", lo=0.0, hi=3.0, step=0.1),
        lab.Flag("std_2", 0.5, "standard deviation of feature 2", lo=0.0, hi=3.0, step=0.1),
        lab.Flag(
            "correlation", 0.3, "correlation of the two features", lo=-0.95, hi=0.95, step=0.05
        ),
        lab.Flag("points", 64, "data points P", lo=8, hi=512),
        lab.Flag("noise", 0.2, "noise std of the targets", lo=0.0, hi=1.0, step=0.05),
        lab.Flag("learning_rate", 0.3, "gradient-descent step size", lo=0.01, hi=2.0, step=0.01),
        lab.Flag("steps", 25, "gradient-descent steps drawn", lo=1, hi=100),
        lab.Flag("seed", 0, "PRNG seed (the data)", lo=0, hi=9999),
        description="Linear algebra and loss: contours, eigenvector axes, gradient steps.",
    )
    ARGS = FLAGS.parse()
    # w* and the path inherit cond(C) * eps32 from the solve: perturbation theory's bound
    # with the slack least squares measured (error / (cond * eps) below ~5; 50 for margin).
    CONDITIONED_SLACK = 50.0


@app.cell(hide_code=True)
def _():
    mo.md(rf"""
    # Linear algebra and loss intuition
    {lab.phase_line("linear_algebra_loss")}

    Fit $y \approx x \cdot w$ by least squares and the loss
    $L(w) = \frac{{1}}{{2P}}\lVert Xw - y\rVert^2$ is a bowl over the plane of the two weights.
    Its shape is pure linear algebra: the Hessian is the data's covariance
    $C = X^\top X / P$, the contours are ellipses along $C$'s **eigenvectors**, and the
    **eigenvalues** set how steep the bowl is along each. In this lesson you will

    - draw the loss surface's **contours** and its **eigenvector axes**;
    - stretch the bowl by changing the features' spread and correlation, and see the
      eigenvalues move;
    - draw **gradient-descent steps** on it: fast and zigzagging across the steep
      direction, slow along the flat one, divergent once $\eta > 2/\lambda_1$.
    """)
    return


@app.cell
def _():
    std_1 = FLAGS.control("std_1", ARGS, label="std of feature 1")
    std_2 = FLAGS.control("std_2", ARGS, label="std of feature 2")
    correlation = FLAGS.control("correlation", ARGS)
    points = FLAGS.control("points", ARGS, label="points P")
    noise = FLAGS.control("noise", ARGS)
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    steps = FLAGS.control("steps", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md("**The data**"),
            mo.hstack([std_1, std_2, correlation], justify="start", wrap=True),
            mo.hstack([points, noise, seed], justify="start", wrap=True),
            mo.md("**Gradient descent**"),
            mo.hstack([learning_rate, steps], justify="start"),
        ]
    )
    return correlation, learning_rate, noise, points, seed, std_1, std_2, steps


@app.cell
def _(correlation, noise, points, seed, std_1, std_2):
    lab.guard(lal.problem(std_1.value, std_2.value), headline="This loss has no unique minimum.")
    data = lal.make_data(
        jax.random.key(seed.value),
        points.value,
        std_1.value,
        std_2.value,
        correlation.value,
        noise.value,
    )
    c, eigenvalues, vectors, w_star, g = lal.geometry(data.x_P2, data.y_P)
    lam = np.asarray(eigenvalues, np.float64)
    _v = np.asarray(vectors, np.float64)
    mo.md(
        f"""
    ## The bowl's geometry

    {points.value} points from $N(0, \\Sigma)$ with
    $\\Sigma = \\begin{{pmatrix}} {data.sigma_22[0, 0]:.3g} & {data.sigma_22[0, 1]:.3g} \\\\
    {data.sigma_22[1, 0]:.3g} & {data.sigma_22[1, 1]:.3g} \\end{{pmatrix}}$, targets
    $y = x \\cdot (1, -1) + {noise.value:g}\\,\\epsilon$. The sample covariance (the Hessian)
    and its eigen-decomposition (`jnp.linalg.eigh`):

    | | value |
    |---|---|
    | $C = X^\\top X / P$ | {np.round(np.asarray(c), 3).tolist()} |
    | $\\lambda_1$, $v_1$ (steep) | {lam[0]:.4g}, ({_v[0, 0]:.3f}, {_v[1, 0]:.3f}) |
    | $\\lambda_2$, $v_2$ (flat) | {lam[1]:.4g}, ({_v[0, 1]:.3f}, {_v[1, 1]:.3f}) |
    | condition number $\\lambda_1/\\lambda_2$ | {lam[0] / lam[1]:.3g} |
    | minimum $w^* = C^{{-1}} X^\\top y / P$ | ({float(w_star[0]):.4f}, {float(w_star[1]):.4f}) |

    The contour $L(w) - L^* = c$ is the ellipse $\\sum_i \\lambda_i z_i^2 = 2c$ in the
    eigen-coordinates $z = V^\\top (w - w^*)$: its semi-axis along $v_i$ is
    $\\sqrt{{2c/\\lambda_i}}$, so the bowl is $\\sqrt{{\\lambda_1/\\lambda_2}}$ =
    {np.sqrt(lam[0] / lam[1]):.3g} times longer along the flat direction than across the
    steep one. Uncorrelated features of equal spread give a round bowl; correlation tilts the
    axes away from the coordinate axes.
    """
    )
    return c, data, eigenvalues, g, lam, vectors, w_star


@app.cell
def _(c, eigenvalues, g, lam, learning_rate, steps, w_star):
    w0 = w_star + jnp.asarray(lal.START_OFFSET, jnp.float32)
    path, stopped_at = lal.descend(c, g, w0, learning_rate.value, steps.value)
    grid_w, half_width = lal.grid(np.asarray(w_star), np.asarray(eigenvalues))
    _limit = 2 / lam[0]
    _factors = [abs(1 - learning_rate.value * v) for v in lam]
    if stopped_at is not None:
        _text = (
            f"**Diverged**: η = {learning_rate.value:g} > 2/λ₁ = {_limit:.3g}. Each step "
            f"multiplies the error along v₁ by 1 - ηλ₁ = {1 - learning_rate.value * lam[0]:.3g}:"
            f" the iterate passed {lal.OVERFLOW:.0e} at step {stopped_at}, and the path is cut "
            "there."
        )
        _kind = "danger"
    elif learning_rate.value > _limit:
        _text = (
            f"**Diverging**: η = {learning_rate.value:g} > 2/λ₁ = {_limit:.3g}, so "
            f"|1 - ηλ₁| = {_factors[0]:.3g} > 1: the zigzag across v₁ grows every step."
        )
        _kind = "warn"
    else:
        _text = (
            f"η = {learning_rate.value:g} < 2/λ₁ = {_limit:.3g}: per step the error shrinks by "
            f"|1 - ηλ₁| = {_factors[0]:.3g} along v₁ (it flips sign, a zigzag, when ηλ₁ > 1) "
            f"and by |1 - ηλ₂| = {_factors[1]:.3g} along v₂ (the slow, flat direction)."
        )
        _kind = "success" if _factors[0] < 1 else "warn"
    mo.vstack([mo.md("## Gradient descent"), mo.callout(mo.md(_text), kind=_kind)])
    return grid_w, half_width, path, stopped_at, w0


@app.cell
def _(c, data, eigenvalues, grid_w, lam, learning_rate, path, vectors, w0, w_star):
    # Independent references in NumPy float64, from the data: C = X^T X / P and its
    # eigenvalues (np.linalg.eigh), the loss at every grid point, w* by np.linalg.solve and
    # the gradient-descent path in closed form.
    ref = lal.reference(data.x_P2, data.y_P, grid_w, w0, learning_rate.value, len(path) - 1)
    _v = np.asarray(vectors, np.float64)
    _f32 = numerics.tolerance("float32")
    _conditioned = max(_f32, CONDITIONED_SLACK * lam[0] / lam[1] * np.finfo(np.float32).eps)
    check = lab.Check(
        f"the bowl's Hessian, eigen-decomposition, loss surface ({len(grid_w)} points), "
        f"minimum and a {len(path) - 1}-step path (float32) vs NumPy float64",
        {
            "C = X^T X / P": numerics.scaled_max_error(c, ref["c"]),
            "eigenvalues": numerics.scaled_max_error(eigenvalues, ref["eigenvalues"]),
            "V diag(λ) V^T rebuilds C": numerics.scaled_max_error(
                (_v * np.asarray(eigenvalues, np.float64)) @ _v.T, ref["c"]
            ),
            "loss on the grid": numerics.scaled_max_error(
                lal.loss_grid(data.x_P2, data.y_P, jnp.asarray(grid_w, jnp.float32)),
                ref["loss"],
            ),
            "minimum w*": numerics.scaled_max_error(w_star, ref["w_star"]),
            "gradient-descent path": numerics.scaled_max_error(path, ref["path"]),
        },
        {
            "C = X^T X / P": _f32,
            "eigenvalues": _f32,
            "V diag(λ) V^T rebuilds C": _f32,
            "loss on the grid": _f32,
            "minimum w*": _conditioned,
            "gradient-descent path": _conditioned + lal.PATH_ERROR_PER_STEP * len(path),
        },
    )
    check
    return (check,)


@app.cell
def _(eigenvalues, half_width, path, stopped_at, vectors, w_star):
    _ws = np.asarray(w_star, np.float64)
    _x_domain = [_ws[0] - half_width, _ws[0] + half_width]
    _y_domain = [_ws[1] - half_width, _ws[1] + half_width]
    _x = alt.X("w1:Q", scale=alt.Scale(domain=_x_domain), title="weight w1")
    _y = alt.Y("w2:Q", scale=alt.Scale(domain=_y_domain), title="weight w2")
    _contours = (
        alt.Chart(pd.DataFrame(lal.ellipse_rows(w_star, eigenvalues, vectors)))
        .mark_line(clip=True, strokeWidth=1)
        .encode(
            x=_x,
            y=_y,
            order="order:Q",
            detail="level:N",
            color=alt.Color(
                "level:O", scale=alt.Scale(scheme="blues"), title="L - L*", legend=None
            ),
        )
    )
    _axes = (
        alt.Chart(pd.DataFrame(lal.axis_rows(w_star, eigenvalues, vectors)))
        .mark_line(clip=True, strokeDash=[5, 3], strokeWidth=2)
        .encode(
            x=_x,
            y=_y,
            order="end:Q",
            color=alt.Color(
                "axis:N",
                scale=alt.Scale(range=["#e45756", "#54a24b"]),
                legend=alt.Legend(orient="bottom", title="eigenvector axes"),
            ),
        )
    )
    # Lines leaving the frame are clipped at its edge; steps far outside are not drawn.
    _near = np.max(np.abs(path - _ws), axis=1) <= 20 * half_width
    _shown = pd.DataFrame({"step": np.arange(len(path)), "w1": path[:, 0], "w2": path[:, 1]})
    _steps = (
        alt.Chart(_shown[_near])
        .mark_line(point=alt.OverlayMarkDef(color="#f58518"), color="#f58518", clip=True)
        .encode(x=_x, y=_y, order="step:Q", tooltip=["step", "w1", "w2"])
    )
    _title = "Contours of L(w), eigenvector axes, and gradient-descent steps (orange)"
    if stopped_at is not None:
        _title += f": cut at step {stopped_at}"
    elif not _near.all():
        _title += f": {int(np.sum(~_near))} steps far outside the frame"
    (
        (_contours + _axes + _steps)
        .resolve_scale(color="independent")
        .properties(width=420, height=420, title=_title)
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("linear_algebra_loss")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_the_path_descends_below_the_limit(c, g, lam, learning_rate, path):
    # Below 2/λ1 the loss never rises along the path (each mode shrinks every step).
    if learning_rate.value < 0.95 * 2 / lam[0]:
        _c, _g = np.asarray(c, np.float64), np.asarray(g, np.float64)
        _losses = [0.5 * w @ _c @ w - _g @ w for w in path]
        assert all(
            b <= a + 1e-5 * max(1.0, abs(a)) for a, b in zip(_losses[:-1], _losses[1:], strict=True)
        )
    return


if __name__ == "__main__":
    app.run()
