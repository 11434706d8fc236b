import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="The chain rule, Jacobians, and directions")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import charts
    from core.lessons.math_optimization import chain_rule_jacobians as crj

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("inputs", 4, "inputs N of f: R^N -> R^M", lo=1, hi=64),
        lab.Flag("outputs", 3, "outputs M of f", lo=1, hi=64),
        lab.Flag("seed", 0, "PRNG seed (weights, x, the directions v and u)", lo=0, hi=9999),
        lab.Flag("timing_outputs", 16, "outputs M held fixed in the cost sweep", lo=1, hi=256),
        lab.Flag("timing_max", 64, "largest input size N of the cost sweep", lo=4, hi=1024),
        description="The chain rule: jacfwd vs jacrev and their cost, jvp and vjp.",
    )
    ARGS = FLAGS.parse()
    MACHINE = f"this {jax.default_backend().upper()}"


@app.cell(hide_code=True)
def _():
    mo.md(rf"""
    # The chain rule, Jacobians, and directions
    {lab.phase_line("chain_rule_jacobians")}

    For $f: \mathbb{{R}}^N \to \mathbb{{R}}^M$ the **Jacobian** $J$ ($M \times N$) holds every
    partial derivative $\partial f_i / \partial x_j$, and the chain rule makes the Jacobian
    of a composition the product of the pieces' Jacobians. JAX never forms those products
    as matrices: it pushes **vectors** through them, forward ($J v$, a JVP) or backward
    ($u^\top J$, a VJP). In this lesson you will

    - build $J$ with `jax.jacfwd` (N JVPs, a column each) and `jax.jacrev` (M VJPs, a row
      each) and check both against float64 finite differences;
    - read `jax.jvp` as the **directional derivative** along v and `jax.vjp` as the
      gradient of $u \cdot f$;
    - **measure** both as N and M change, and see where forward and reverse mode cross.
    """)
    return


@app.cell
def _():
    inputs = FLAGS.control("inputs", ARGS, label="inputs N")
    outputs = FLAGS.control("outputs", ARGS, label="outputs M")
    seed = FLAGS.control("seed", ARGS)
    mo.hstack([inputs, outputs, seed], justify="start")
    return inputs, outputs, seed


@app.cell
def _(inputs, outputs, seed):
    params, x, v, u = crj.problem_data(jax.random.key(seed.value), inputs.value, outputs.value)
    jac_fwd, jac_rev, jv, uj = crj.derivatives(params, x, v, u)
    mo.md(
        f"""
    ## One Jacobian, two ways

    $f(x) = W_2 \\tanh(W_1 x + b)$ with {crj.HIDDEN} hidden units, from
    $\\mathbb{{R}}^{{{inputs.value}}}$ to $\\mathbb{{R}}^{{{outputs.value}}}$. The chain rule
    gives $J = W_2\\, \\mathrm{{diag}}(1 - \\tanh^2(W_1 x + b))\\, W_1$
    ({outputs.value} x {crj.HIDDEN} times {crj.HIDDEN} x {crj.HIDDEN} times {crj.HIDDEN} x
    {inputs.value}).

    ```python
    jax.jacfwd(f)(x)     # vmap of jvp over the N basis vectors e_j: column j = J e_j
    jax.jacrev(f)(x)     # vmap of vjp over the M basis vectors e_i: row i = e_i^T J
    jax.jvp(f, (x,), (v,))      # (f(x), J v): how fast f changes moving x along v
    jax.vjp(f, x)[1](u)         # u^T J: the gradient of u . f(x), one backward pass
    ```
    Both give a {jac_fwd.shape[0]} x {jac_fwd.shape[1]} matrix; they differ by at most
    {float(np.max(np.abs(np.asarray(jac_fwd) - np.asarray(jac_rev)))):.2g} (float32 rounding,
    summed in another order). `jacfwd` needs {
            crj.predicted_products("jacfwd", inputs.value, outputs.value)
        } JVPs, `jacrev` {crj.predicted_products("jacrev", inputs.value, outputs.value)} VJPs.
    """
    )
    return jac_fwd, jac_rev, jv, params, u, uj, v, x


@app.cell
def _(jac_fwd, jac_rev, jv, params, u, uj, v, x):
    # Independent references in NumPy float64: central differences of a NumPy twin of f,
    # column by column (J) and along v (J v); u^T J from those finite-difference columns.
    reference_jacobian = crj.jacobian_reference(params, x)
    _u = np.asarray(u, np.float64)
    check = lab.Check(
        f"jacfwd, jacrev, jvp and vjp (float32) vs NumPy float64 central differences, "
        f"J of shape {tuple(jac_fwd.shape)}",
        {
            "jacfwd vs finite differences": numerics.scaled_max_error(jac_fwd, reference_jacobian),
            "jacrev vs finite differences": numerics.scaled_max_error(jac_rev, reference_jacobian),
            "jvp J v vs (f(x+hv) - f(x-hv)) / 2h": numerics.scaled_max_error(
                jv, crj.directional_reference(params, x, v)
            ),
            "vjp u^T J vs u^T (finite-difference J)": numerics.scaled_max_error(
                uj, _u @ reference_jacobian
            ),
        },
        numerics.tolerance("float32"),
        facts={"J is M x N": tuple(jac_fwd.shape) == (u.size, x.size) == tuple(jac_rev.shape)},
    )
    check
    return (check,)


@app.cell
def _(jac_fwd):
    charts.heatmap(np.asarray(jac_fwd, np.float64), "J = jacfwd(f)(x)", "output i", "input j")
    return


@app.cell
def _():
    timing_outputs = FLAGS.control("timing_outputs", ARGS, label="outputs M (held)")
    timing_max = FLAGS.control("timing_max", ARGS, label="largest inputs N")
    timing_button = mo.ui.run_button(label="Measure jacfwd vs jacrev")
    mo.vstack(
        [
            mo.md(
                f"""
    ## Which is cheaper?

    Each JVP or VJP costs a small multiple of one evaluation of f, so `jacfwd` costs about
    N evaluations and `jacrev` about M. Below, a wider f ({crj.TIMING_HIDDEN} hidden units)
    with M held fixed and N growing: each Jacobian is compiled (its FLOPs read from the
    compiler's `cost_analysis()`), warmed up, then timed with `block_until_ready`, median of
    5, on {MACHINE}.
    """
            ),
            mo.hstack([timing_outputs, timing_max, timing_button], justify="start"),
        ]
    )
    return timing_button, timing_max, timing_outputs


@app.cell
def _(timing_button, timing_max, timing_outputs):
    mo.stop(
        lab.interactive() and not timing_button.value,
        mo.callout(mo.md("Press **Measure jacfwd vs jacrev** (a few seconds)."), kind="info"),
    )
    _sizes = [4**k for k in range(6) if 4**k <= timing_max.value]
    cost_rows = crj.cost_sweep(
        timing_outputs.value,
        sizes=_sizes,
        progress=lambda items: mo.status.progress_bar(
            items, title="compiling and timing", remove_on_exit=True
        ),
    )
    _data = pd.DataFrame(cost_rows)
    _data["ms"] = 1e3 * _data["median_s"]
    _colour = alt.Color("mode:N", legend=alt.Legend(orient="bottom", title=None))
    _x = alt.X("inputs:Q", scale=alt.Scale(type="log", base=2), title="inputs N (log)")
    _rule = (
        alt.Chart(pd.DataFrame({"inputs": [timing_outputs.value]}))
        .mark_rule(strokeDash=[4, 3], color="#888")
        .encode(x="inputs:Q")
    )
    _time_chart = (
        alt.Chart(_data, title=f"Median time per Jacobian, M = {timing_outputs.value}")
        .mark_line(point=True)
        .encode(
            x=_x,
            y=alt.Y("ms:Q", scale=alt.Scale(type="log"), title="milliseconds (log)"),
            color=_colour,
            tooltip=["mode", "inputs", alt.Tooltip("ms:Q", format=".3f")],
        )
    )
    _flop_chart = (
        alt.Chart(_data, title="FLOPs (the compiler's count)")
        .mark_line(point=True)
        .encode(
            x=_x,
            y=alt.Y("flops:Q", scale=alt.Scale(type="log"), title="FLOPs (log)"),
            color=_colour,
            tooltip=["mode", "inputs", alt.Tooltip("flops:Q", format=".3s")],
        )
    )
    mo.vstack(
        [
            mo.hstack(
                [
                    (_time_chart + _rule).properties(width=280, height=220),
                    (_flop_chart + _rule).properties(width=280, height=220),
                ],
                justify="start",
            ),
            mo.md(
                f"The dashed line is N = M = {timing_outputs.value}: left of it `jacfwd` does "
                "fewer products, right of it `jacrev`. The FLOPs cross there exactly; measured "
                f"times on {MACHINE} follow once the work outweighs the fixed cost of a call "
                "(at small sizes both are a few microseconds of overhead). A loss has M = 1: "
                "reverse mode gets the whole gradient for the price of about one evaluation, "
                "which is why training uses it."
            ),
        ]
    )
    return (cost_rows,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("chain_rule_jacobians")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_flops_cross_where_n_equals_m(cost_rows):
    # The FLOP reasoning, from the compiler's count (never the measured times): forward mode
    # costs grow with N, reverse mode's do not; jacfwd is cheaper below M, jacrev above.
    _flops = {(r["mode"], r["inputs"]): r["flops"] for r in cost_rows}
    _m = cost_rows[0]["outputs"]
    for (_mode, _n), _value in _flops.items():
        _other = _flops[("jacrev" if _mode == "jacfwd" else "jacfwd", _n)]
        if _n < _m:
            assert _flops[("jacfwd", _n)] < _flops[("jacrev", _n)]
        elif _n > _m:
            assert _flops[("jacfwd", _n)] > _flops[("jacrev", _n)]
        assert _value > 0 and _other > 0
    return


if __name__ == "__main__":
    app.run()
