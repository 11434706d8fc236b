import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Compiled loops with lax.scan")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import text
    from core.lessons.control_flow import lax_scan

    lab.use_cpu_devices()
    SWEEP_MAX_LENGTHS = (8, 16, 32, 64, 128, 256)
    FLAGS = lab.Flags(
        lab.Flag("length", 16, "steps T of the recurrence for the equality check", lo=1, hi=64),
        lab.Flag("hidden", 8, "hidden units H", lo=1, hi=64),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag(
            "max_length",
            16,
            "longest sequence in the compile-time sweep (lengths 4, 8, ... up to it)",
            choices=SWEEP_MAX_LENGTHS,
        ),
        description="Compiled loops with lax.scan: scan vs fori_loop vs an unrolled Python loop.",
    )
    ARGS = FLAGS.parse()
    LOOP_COLORS = alt.Scale(
        domain=list(lax_scan.IMPLEMENTATIONS), range=["#4c78a8", "#54a24b", "#e45756"]
    )


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Compiled loops with lax.scan
    {lab.phase_line("lax_scan")}

    `jit` compiles what tracing records. A Python `for` loop runs *during tracing*, so under
    `jit` it is **unrolled**: a loop of T steps becomes T copies of its body in the program,
    and the compiler's work grows with T. `lax.scan` and `lax.fori_loop` record the body once
    and keep the loop in the compiled program. In this lesson you will

    - write one recurrence, a tiny RNN `h = tanh(W h + x_t)`, three ways and check all three
      against a NumPy float64 loop;
    - count the equations in each version's jaxpr as T grows;
    - time compilation and execution as T grows: the unrolled loop's compile time climbs,
      scan's stays flat.
    """)
    return


@app.cell
def _():
    length = FLAGS.control("length", ARGS, label="length T")
    hidden = FLAGS.control("hidden", ARGS, label="hidden H")
    seed = FLAGS.control("seed", ARGS)
    mo.hstack([length, hidden, seed], justify="start")
    return hidden, length, seed


@app.cell
def _():
    mo.md(r"""
    ## One recurrence, three loops

    ```python
    def rnn_scan(W, h0, xs):                      # lax.scan: carry h, emit h each step
        def step(h, x):
            h = jnp.tanh(W @ h + x)
            return h, h
        return jax.lax.scan(step, h0, xs)         # (h_T, hs)

    def rnn_fori(W, h0, xs):                      # lax.fori_loop: carry (h, output buffer)
        def body(t, carry):
            h, hs = carry
            h = jnp.tanh(W @ h + xs[t])
            return h, hs.at[t].set(h)
        return jax.lax.fori_loop(0, xs.shape[0], body, (h0, jnp.zeros_like(xs)))

    def rnn_python(W, h0, xs):                    # a Python loop: unrolled by tracing
        h, hs = h0, []
        for t in range(xs.shape[0]):
            h = jnp.tanh(W @ h + xs[t])
            hs.append(h)
        return h, jnp.stack(hs)
    ```

    `scan` is the idiom when each step emits an output; `fori_loop` when it only updates a
    carry (here it has to carry the output buffer itself).
    """)
    return


@app.cell
def _(hidden, length, seed):
    w_HH, h0_H, xs_TH = lax_scan.example_inputs(
        jax.random.key(seed.value), length.value, hidden.value
    )
    reference = lax_scan.rnn_reference(w_HH, h0_H, xs_TH)
    results = {name: fn(w_HH, h0_H, xs_TH) for name, fn in lax_scan.JITTED.items()}
    # (h_T, hs) against the reference pair; |h| <= 1 (tanh), so this is the absolute error
    errors = {
        name: numerics.tree_scaled_max_error(result, reference) for name, result in results.items()
    }
    equations = {
        name: lax_scan.jaxpr_equation_count(fn, w_HH, h0_H, xs_TH)
        for name, fn in lax_scan.IMPLEMENTATIONS.items()
    }
    mo.vstack(
        [
            mo.md(f"## Same numbers, different programs (T = {length.value}, H = {hidden.value})"),
            lab.table(
                [
                    {
                        "loop": name,
                        "max abs difference from NumPy float64": f"{errors[name]:.2e}",
                        "jaxpr equations": equations[name],
                    }
                    for name in lax_scan.IMPLEMENTATIONS
                ]
            ),
        ]
    )
    return equations, errors, h0_H, results, w_HH, xs_TH


@app.cell
def _(errors, length):
    # Independent reference: the recurrence stepped in NumPy float64 (lax_scan.rnn_reference).
    check = lab.Check(
        "lax.scan, lax.fori_loop and the unrolled Python loop "
        f"(T = {length.value}) vs a NumPy float64 loop",
        errors,
        numerics.tolerance("float32"),
    )
    check
    return (check,)


@app.cell
def _(hidden, results):
    scan_hs_TH = np.asarray(results["lax.scan"][1])
    units = min(3, hidden.value)
    trajectory = pd.DataFrame(
        [
            {"t": t + 1, "unit": f"h[{u}]", "value": float(scan_hs_TH[t, u])}
            for t in range(scan_hs_TH.shape[0])
            for u in range(units)
        ]
    )
    _title = f"the first {text.plural(units, 'hidden unit')}" if units > 1 else "hidden unit h[0]"
    alt.Chart(trajectory, title=f"{_title} over time (lax.scan)").mark_line(point=True).encode(
        x=alt.X("t:Q", title="step t"), y=alt.Y("value:Q", title="h_t"), color="unit:N"
    ).properties(width=480, height=180)
    return


@app.cell
def _(h0_H, w_HH, xs_TH):
    short_xs = np.asarray(xs_TH)[: min(2, xs_TH.shape[0])]  # sliced on the host: no compile
    mo.vstack(
        [
            mo.md(
                f"""
    ## What tracing records

    `jax.make_jaxpr(rnn_python)` at T = {short_xs.shape[0]}: every step is written out.
    """
            ),
            text.code_block(
                str(jax.make_jaxpr(lax_scan.rnn_python)(w_HH, h0_H, short_xs)), "text", "jaxpr"
            ),
            mo.md(
                "`jax.make_jaxpr(rnn_scan)` at any T: one `scan` equation holding the body once."
            ),
            text.code_block(
                str(jax.make_jaxpr(lax_scan.rnn_scan)(w_HH, h0_H, xs_TH)), "text", "scan jaxpr"
            ),
        ]
    )
    return


@app.cell
def _():
    max_length = FLAGS.control("max_length", ARGS, label="longest T in the sweep")
    sweep_button = mo.ui.run_button(label="Measure compile and run times")
    mo.vstack(
        [
            mo.md(
                """
    ## Compile time as T grows

    Equations in the jaxpr are a deterministic stand-in for the compiler's work; the sweep
    below also *measures* it: for each T, a fresh function is traced, lowered and compiled,
    then run (median of 5). An unrolled loop of 128 steps takes XLA:CPU several seconds to
    compile and 256 steps far longer: that is the point, and why the sweep waits for the button.
    """
            ),
            mo.hstack([max_length, sweep_button], justify="start"),
        ]
    )
    return max_length, sweep_button


@app.cell
def _(h0_H, max_length, w_HH):
    sweep = lax_scan.sweep_lengths(int(max_length.value))
    equation_rows = pd.DataFrame(
        [
            {
                "length T": n,
                "loop": name,
                "equations": lax_scan.jaxpr_equation_count(
                    fn, w_HH, h0_H, np.zeros((n, w_HH.shape[0]), np.float32)
                ),
            }
            for n in sweep
            for name, fn in lax_scan.IMPLEMENTATIONS.items()
        ]
    )
    alt.Chart(equation_rows, title="equations in the jaxpr (deterministic)").mark_line(
        point=True
    ).encode(
        # ticks at the swept lengths only (a log2 axis labels every integer: 4, 5, 6, ...)
        x=alt.X("length T:Q", scale=alt.Scale(type="log", base=2), axis=alt.Axis(values=sweep)),
        y=alt.Y("equations:Q", scale=alt.Scale(type="log")),
        color=alt.Color("loop:N", scale=LOOP_COLORS),
        tooltip=["length T", "loop", "equations"],
    ).properties(width=420, height=200)
    return equation_rows, sweep


@app.cell
def _(hidden, seed, sweep, sweep_button):
    mo.stop(
        lab.interactive() and not sweep_button.value,
        mo.callout(
            mo.md(
                f"Press **Measure compile and run times** to time T = {', '.join(map(str, sweep))}."
            ),
            kind="info",
        ),
    )
    timings = []
    for sweep_args in mo.status.progress_bar(
        lax_scan.sweep_inputs(jax.random.key(seed.value), sweep, hidden.value),
        title="compiling",
        subtitle="three loops per length",
        remove_on_exit=True,
    ):
        timings += [lax_scan.measure(name, *sweep_args) for name in lax_scan.IMPLEMENTATIONS]
    timing_frame = pd.DataFrame(
        [
            {
                "length T": t.length,
                "loop": t.implementation,
                "compile s": t.total_compile_s,
                "run µs": t.run_s * 1e6,
                "equations": t.equations,
            }
            for t in timings
        ]
    )
    _sweep_ticks = alt.Axis(values=sweep, format="d")
    timing_chart = alt.hconcat(
        *(
            alt.Chart(timing_frame, title=title)
            .mark_line(point=True)
            .encode(
                x=alt.X("length T:Q", scale=alt.Scale(type="log", base=2), axis=_sweep_ticks),
                y=alt.Y(f"{column}:Q", scale=alt.Scale(type="log")),
                color=alt.Color("loop:N", scale=LOOP_COLORS),
                tooltip=[
                    "length T",
                    "loop",
                    alt.Tooltip("compile s:Q", format=".3f"),
                    alt.Tooltip("run µs:Q", format=".1f"),
                    "equations",
                ],
            )
            .properties(width=300, height=200)
            for column, title in (
                ("compile s", "trace + lower + compile (s)"),
                ("run µs", "one call, compiled (µs, median)"),
            )
        )
    )
    mo.vstack(
        [
            timing_chart,
            mo.md(
                f"Measured on this machine ({jax.default_backend().upper()}, "
                f"{jax.device_count()} devices): compare the lines with each other. Running time "
                "grows with T for every loop (T steps of work); only the unrolled loop's "
                "*compile* time does."
            ),
            lab.table(
                [
                    {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in row.items()}
                    for row in timing_frame.to_dict("records")
                ]
            ),
        ]
    )
    return (timings,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("lax_scan")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_loops_agree_with_each_other(results):
    scan_h, scan_hs = results["lax.scan"]
    for h_T, hs_TH in results.values():
        np.testing.assert_allclose(np.asarray(hs_TH), np.asarray(scan_hs), atol=1e-6)
        np.testing.assert_allclose(np.asarray(h_T), np.asarray(scan_h), atol=1e-6)
    return


@app.cell
def test_unrolled_grows_and_scan_does_not(equation_rows):
    by_loop = {
        name: list(group.sort_values("length T")["equations"])
        for name, group in equation_rows.groupby("loop")
    }
    assert len(set(by_loop["lax.scan"])) == 1 and len(set(by_loop["lax.fori_loop"])) == 1
    unrolled = by_loop["Python loop (unrolled)"]
    assert all(later > earlier for earlier, later in zip(unrolled, unrolled[1:], strict=False))
    return


@app.cell
def test_sweep_measured_every_length(sweep, timings):
    assert sorted({t.length for t in timings}) == sweep
    assert all(t.compile_s > 0 and t.run_s > 0 for t in timings)
    return


@app.cell
def test_equation_counts_match_the_table(equations, length):
    assert equations["lax.scan"] == 1
    assert equations["Python loop (unrolled)"] > length.value
    return


if __name__ == "__main__":
    app.run()
