import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Curvature, Hessians, and learning rates")

with app.setup:
    import altair as alt
    import jax
    import jax.numpy as jnp
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lessons.math_optimization import curvature_hessians as ch

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("dim", 8, "parameters N of the quadratic", lo=1, hi=32),
        lab.Flag("lam_min", 0.1, "smallest Hessian eigenvalue", lo=-1.0, hi=10.0, step=0.05),
        lab.Flag("lam_max", 4.0, "largest Hessian eigenvalue", lo=0.5, hi=10.0, step=0.1),
        lab.Flag("learning_rate", 0.3, "gradient-descent step size", lo=0.01, hi=1.0, step=0.01),
        lab.Flag("steps", 100, "gradient-descent steps", lo=10, hi=300, step=10),
        lab.Flag("hidden", 4, "hidden tanh units of the small network", lo=1, hi=8),
        lab.Flag("seed", 0, "PRNG seed (eigenvectors, start, network)", lo=0, hi=9999),
        description="Curvature: Hessians, HVPs, eigenvalues, and the 2/lambda_max limit.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(rf"""
    # Curvature, Hessians, and learning rates
    {lab.phase_line("curvature_hessians")}

    The gradient says which way is down; the **Hessian** (the matrix of second derivatives)
    says how fast the slope changes, direction by direction. Its eigenvalues are the
    curvatures along its eigenvectors, and the largest one sets the largest learning rate
    gradient descent survives. In this lesson you will

    - compute the Hessian of a quadratic and of a small network with `jax.hessian`, and again
      from **Hessian-vector products** (`jax.jvp` of `jax.grad`), which never form the matrix;
    - read the **eigenvalues**: a quadratic's are yours to choose, a network's can be negative;
    - run gradient descent and move the learning rate past $2/\lambda_{{\max}}$: every step
      multiplies the error along eigenvector $i$ by $1 - \eta\lambda_i$, and once
      $\lvert 1 - \eta\lambda_{{\max}}\rvert > 1$ the run **diverges**.
    """)
    return


@app.cell
def _():
    dim = FLAGS.control("dim", ARGS, label="parameters N")
    lam_min = FLAGS.control("lam_min", ARGS, label="lambda_min")
    lam_max = FLAGS.control("lam_max", ARGS, label="lambda_max")
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    steps = FLAGS.control("steps", ARGS)
    hidden = FLAGS.control("hidden", ARGS, label="hidden units")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md("**The quadratic** $f(w) = \\frac12 (w - w^*)^\\top H (w - w^*)$"),
            mo.hstack([dim, lam_min, lam_max, seed], justify="start", wrap=True),
            mo.md("**Gradient descent** $w \\leftarrow w - \\eta \\nabla f(w)$"),
            mo.hstack([learning_rate, steps], justify="start"),
            mo.md("**A small network**"),
            hidden,
        ]
    )
    return dim, hidden, lam_max, lam_min, learning_rate, seed, steps


@app.cell
def _(dim, lam_max, lam_min, seed):
    lab.guard(
        ch.spectrum_problem(lam_min.value, lam_max.value),
        headline="This quadratic has no minimum to descend to.",
    )
    _key_q, key_net = jax.random.split(jax.random.key(seed.value))
    quad = ch.quadratic(_key_q, dim.value, lam_min.value, lam_max.value)
    _h32, _star32, _w032 = (
        jnp.asarray(a, jnp.float32) for a in (quad.h_NN, quad.w_star_N, quad.w0_N)
    )
    quad_hessian, quad_hvp_hessian, _eig = ch.quadratic_hessians(_h32, _star32, _w032)
    quad_eigenvalues = np.asarray(_eig, np.float64)
    mo.md(
        f"""
    ## The quadratic's Hessian

    $H = Q\\,\\mathrm{{diag}}(\\lambda)\\,Q^\\top$ with a random orthogonal $Q$ and
    {dim.value} eigenvalues from {lam_max.value:g} down to {lam_min.value:g} (evenly spaced in
    log). A quadratic's Hessian is $H$ at every point; `jax.hessian(f)(w)` (forward over
    reverse: `jacfwd(jacrev(f))`) and the {dim.value} HVPs below both recover it.

    ```python
    def hvp(f, w, v):                     # H(w) @ v without forming H: one jvp of grad
        return jax.jvp(jax.grad(f), (w,), (v,))[1]
    hessian = jax.vmap(lambda v: hvp(f, w, v))(jnp.eye(n))
    ```
    `jnp.linalg.eigvalsh` of it: λ_max = {quad_eigenvalues[0]:.6g}, λ_min =
    {quad_eigenvalues[-1]:.6g}, condition number {quad_eigenvalues[0] / quad_eigenvalues[-1]:.3g}.
    The stability limit is $2/\\lambda_{{\\max}}$ = **{quad.limit:.4g}**.
    """
    )
    return key_net, quad, quad_eigenvalues, quad_hessian, quad_hvp_hessian


@app.cell
def _(learning_rate, quad, steps):
    descent = ch.descend(quad, learning_rate.value, steps.value)
    _ratio = learning_rate.value / quad.limit
    _growth = max(abs(1 - learning_rate.value * lam) for lam in quad.eigenvalues_N)
    if descent.stopped_at is not None:
        _status = mo.callout(
            mo.md(
                f"**Diverged.** η = {learning_rate.value:g} is {_ratio:.2f} × the limit "
                f"2/λ_max = {quad.limit:.4g}: the top mode grows by |1 - ηλ_max| = "
                f"{_growth:.3g} per step. The loss gap passed {ch.OVERFLOW:.0e} at step "
                f"{descent.stopped_at}, so the run is cut there (the next steps would be inf, "
                "then NaN)."
            ),
            kind="danger",
        )
    elif descent.diverged:
        _status = mo.callout(
            mo.md(
                f"**Diverging.** η = {learning_rate.value:g} is {_ratio:.2f} × the limit "
                f"{quad.limit:.4g}: the loss gap grew from {descent.gap_S[0]:.3g} to "
                f"{descent.gap_S[-1]:.3g} (|1 - ηλ_max| = {_growth:.3g} per step)."
            ),
            kind="warn",
        )
    elif _ratio > 1:
        _status = mo.callout(
            mo.md(
                f"η = {learning_rate.value:g} is just past the limit ({_ratio:.3f} ×): the top "
                f"mode grows by only {_growth:.4f} per step, slower than the others shrink: "
                "give it more steps."
            ),
            kind="warn",
        )
    else:
        _status = mo.callout(
            mo.md(
                f"**Converges.** η = {learning_rate.value:g} is {_ratio:.2f} × the limit "
                f"{quad.limit:.4g}; every mode shrinks, the slowest by |1 - ηλ| = "
                f"{_growth:.4f} per step (the flat directions, small λ, set the pace). Gap: "
                f"{descent.gap_S[0]:.3g} → {descent.gap_S[-1]:.3g}."
            ),
            kind="success",
        )
    mo.vstack([mo.md("## Gradient descent on the quadratic"), _status])
    return (descent,)


@app.cell
def _(hidden, key_net):
    _k_data, _k_power = jax.random.split(key_net)
    net_w, net_x, net_y = ch.network(_k_data, hidden.value)
    net_hessian, net_hvp_hessian, _eig, net_power = ch.network_hessians(
        net_w, net_x, net_y, _k_power
    )
    net_eigenvalues = np.asarray(_eig, np.float64)
    mo.md(
        f"""
    ## A small network's Hessian

    {ch.INPUTS} inputs → {hidden.value} tanh units → 1 output, squared error on
    {ch.EXAMPLES} points: {net_w.size} weights, a {net_w.size} x {net_w.size} Hessian at the
    random start. Its eigenvalues run from {net_eigenvalues[-1]:.4g} to
    {net_eigenvalues[0]:.4g}: {int(np.sum(net_eigenvalues < 0))} of them are negative, since a
    network's loss is not a bowl (here, directions curve down: saddle-like). Power iteration
    on HVPs alone ({ch.POWER_ITERATIONS} products, no matrix) finds the eigenvalue of largest
    magnitude: {float(net_power):.5g}. For a network of millions of weights that is the only
    way: the full Hessian would need (millions)² numbers, an HVP costs about two gradients.
    These Hessians are computed at HIGHEST matmul precision: on a TPU, DEFAULT runs each
    float32 matmul as one bfloat16 pass, and H[i, j] and H[j, i], reached through different
    products, then differ in their third digit.
    """
    )
    return net_eigenvalues, net_hessian, net_hvp_hessian, net_power, net_w, net_x, net_y


@app.cell
def _(
    descent,
    learning_rate,
    net_hessian,
    net_hvp_hessian,
    net_w,
    net_x,
    net_y,
    quad,
    quad_eigenvalues,
    quad_hessian,
    quad_hvp_hessian,
    steps,
):
    # Independent references, NumPy float64: H itself (built from the chosen eigenvalues);
    # the trajectory in closed form w* + Q (1 - lr lambda)^t Q^T (w0 - w*); the network's
    # Hessian by central differences of a hand-written NumPy gradient.
    net_reference = ch.network_hessian_reference(net_w, net_x, net_y)
    _kept = len(descent.w_SN)
    _path_reference = ch.descent_reference(quad, learning_rate.value, steps.value)[:_kept]
    _f32 = numerics.tolerance("float32")
    # the network's Hessians run at HIGHEST (ch.network_hessians): 1e-5 here, 5e-4 on a TPU
    _net = numerics.tolerance("float32", precision="HIGHEST")
    _path_tolerance = _f32 + ch.TRAJECTORY_ERROR_PER_STEP * _kept
    check = lab.Check(
        f"Hessians, eigenvalues and a {_kept - 1}-step gradient-descent run (float32) against "
        "NumPy float64 (H, the closed-form trajectory, central differences of a NumPy gradient)",
        {
            "quadratic: jax.hessian vs H": numerics.scaled_max_error(quad_hessian, quad.h_NN),
            "quadratic: Hessian from HVPs vs H": numerics.scaled_max_error(
                quad_hvp_hessian, quad.h_NN
            ),
            "quadratic: eigvalsh vs the chosen eigenvalues": numerics.scaled_max_error(
                quad_eigenvalues, quad.eigenvalues_N
            ),
            "gradient descent vs closed form": numerics.scaled_max_error(
                descent.w_SN, _path_reference
            ),
            "network: jax.hessian vs finite differences": numerics.scaled_max_error(
                net_hessian, net_reference
            ),
            "network: Hessian from HVPs vs finite differences": numerics.scaled_max_error(
                net_hvp_hessian, net_reference
            ),
            "network: H vs its transpose (np.allclose's measure)": ch.asymmetry(net_hessian),
        },
        {
            "quadratic: jax.hessian vs H": _f32,
            "quadratic: Hessian from HVPs vs H": _f32,
            "quadratic: eigvalsh vs the chosen eigenvalues": _f32,
            "gradient descent vs closed form": _path_tolerance,
            "network: jax.hessian vs finite differences": _net,
            "network: Hessian from HVPs vs finite differences": _net,
            "network: H vs its transpose (np.allclose's measure)": _net,
        },
    )
    check
    return check, net_reference


@app.cell
def _(descent, learning_rate, quad):
    _gap = pd.DataFrame(
        {"step": np.arange(len(descent.gap_S)), "f(w) - f*": np.clip(descent.gap_S, 1e-30, None)}
    )
    _gap_chart = (
        alt.Chart(_gap, title=f"Loss gap per step, η = {learning_rate.value:g}")
        .mark_line(point=alt.OverlayMarkDef(size=10))
        .encode(
            x="step:Q",
            y=alt.Y("f(w) - f*:Q", scale=alt.Scale(type="log"), title="f(w) - f* (log)"),
            tooltip=["step", alt.Tooltip("f(w) - f*:Q", format=".3g")],
        )
        .properties(width=300, height=240)
    )
    _modes = pd.DataFrame(ch.mode_factors(quad, learning_rate.value))
    _factor_chart = (
        alt.Chart(_modes, title="Per-step factor of each eigen-direction")
        .mark_point(filled=True, size=60)
        .encode(
            x=alt.X("eigenvalue:Q", title="eigenvalue λ"),
            y=alt.Y("|factor|:Q", title="|1 - ηλ|"),
            color=alt.Color(
                "grows:N",
                scale=alt.Scale(domain=[False, True], range=["#54a24b", "#e45756"]),
                legend=alt.Legend(orient="bottom", title="grows"),
            ),
            tooltip=["eigenvalue", "factor 1 - lr lambda"],
        )
    )
    _one = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 3]).encode(y="y:Q")
    mo.hstack(
        [_gap_chart, (_factor_chart + _one).properties(width=260, height=240)], justify="start"
    )
    return


@app.cell
def _(net_eigenvalues, quad, quad_eigenvalues):
    _rows = pd.DataFrame(
        [
            {"matrix": "quadratic (jax)", "rank": i + 1, "eigenvalue": float(v)}
            for i, v in enumerate(quad_eigenvalues)
        ]
        + [
            {"matrix": "quadratic (chosen)", "rank": i + 1, "eigenvalue": float(v)}
            for i, v in enumerate(quad.eigenvalues_N)
        ]
        + [
            {"matrix": "network", "rank": i + 1, "eigenvalue": float(v)}
            for i, v in enumerate(net_eigenvalues)
        ]
    )
    _colour = alt.Color(
        "matrix:N",
        scale=alt.Scale(
            domain=["network", "quadratic (chosen)", "quadratic (jax)"],
            range=["#4c78a8", "#bbbbbb", "#e45756"],
        ),
        legend=alt.Legend(orient="bottom", title=None),
    )
    _base = alt.Chart(_rows, title="Hessian eigenvalues, largest first").encode(
        x=alt.X("rank:Q", title="eigenvalue number"),
        y=alt.Y("eigenvalue:Q"),
        color=_colour,
        tooltip=["matrix", "rank", alt.Tooltip("eigenvalue:Q", format=".4g")],
    )
    # the chosen eigenvalues as a wide grey line, JAX's as points on it
    _lines = _base.transform_filter("datum.matrix != 'quadratic (jax)'").mark_line(
        point=True, strokeWidth=3
    )
    _points = _base.transform_filter("datum.matrix == 'quadratic (jax)'").mark_point(
        filled=True, size=50
    )
    (_lines + _points).properties(width=420, height=220)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("curvature_hessians")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_diverges_exactly_past_the_limit(descent, learning_rate, quad, steps):
    # The claim, where it is made (a margin from the limit, enough steps); the lesson's test
    # proves it over seeds, sizes and spectra.
    if ch.claim_applies(learning_rate.value, quad.limit, steps.value):
        assert descent.diverged == (learning_rate.value > quad.limit)
    return


@app.cell
def test_power_iteration_finds_the_largest_magnitude(net_power, net_reference):
    _top = np.max(np.abs(np.linalg.eigvalsh(net_reference)))
    assert abs(abs(float(net_power)) - _top) <= 1e-2 * _top
    return


if __name__ == "__main__":
    app.run()
