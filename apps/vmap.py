import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Batch a function with vmap")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import charts, exercises, text
    from core.lessons.transformations import vmap

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("example", "affine", "the per-example function", choices=vmap.NAMES),
        lab.Flag("batch", 4, "examples in the batch (B)", lo=1, hi=64),
        lab.Flag("rows", 3, "rows R of each matrix (affine)", lo=1, hi=32),
        lab.Flag("cols", 5, "columns C (features)", lo=1, hi=32),
        lab.Flag(
            "in_axis_1",
            "0",
            "in_axes entry of the 1st argument (M or x)",
            choices=vmap.AXIS_CHOICES,
        ),
        lab.Flag(
            "in_axis_2",
            "0",
            "in_axes entry of the 2nd argument (v or y)",
            choices=vmap.AXIS_CHOICES,
        ),
        lab.Flag(
            "in_axis_3",
            "None",
            "in_axes entry of the 3rd argument (b or w)",
            choices=vmap.AXIS_CHOICES,
        ),
        lab.Flag(
            "out_axes",
            "0",
            "where the batch axis goes in the output",
            choices=vmap.OUT_AXIS_CHOICES,
        ),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag("timing_batch", 32, "largest batch for the loop-vs-vmap timing", lo=2, hi=2048),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description=(
            "Batch a function with vmap: in_axes/out_axes, vmap == a Python loop, and the speed-up."
        ),
    )
    ARGS = FLAGS.parse()
    MACHINE = f"this {jax.default_backend().upper()}"


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Batch a function with vmap
    {lab.phase_line("vmap")}

    Write a function for **one** example; `jax.vmap` turns it into a function for a
    **batch**, as if you had written the loop, but as one vectorized computation. You tell
    it where the batch axis is in each argument (`in_axes`; `None` = shared by every example)
    and where to put it in the result (`out_axes`). In this lesson you will

    - batch `M @ v + b` (a batch of matrices and vectors, one shared bias) or a squared error
      `(x · w - y)²` (a batch of inputs and targets, shared weights);
    - move `in_axes` and `out_axes` and predict the shapes; see the combinations that cannot
      work and why;
    - check that `vmap` equals a plain Python loop (NumPy float64, `np.stack`), and measure
      how much faster one vmapped call is than the loop.
    """)
    return


@app.cell
def _():
    example = FLAGS.control("example", ARGS, label="function")
    batch = FLAGS.control("batch", ARGS, label="batch B")
    rows = FLAGS.control("rows", ARGS, label="rows R")
    cols = FLAGS.control("cols", ARGS, label="cols C")
    out_axes = FLAGS.control("out_axes", ARGS, label="out_axes")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([example, seed], justify="start"),
            mo.hstack([batch, rows, cols], justify="start"),
        ]
    )
    return batch, cols, example, out_axes, rows, seed


@app.cell
def _(example, out_axes):
    chosen = vmap.get(example.value)
    # One dropdown per argument, labelled with its name: they reset when the function changes.
    # A mo.ui.array, which marimo tracks (a plain list of controls would re-run nothing).
    axis_controls = mo.ui.array(
        [
            FLAGS.control(f"in_axis_{i}", ARGS, label=f"in_axes for {arg}")
            for i, arg in enumerate(chosen.arg_names, start=1)
        ]
    )
    mo.vstack(
        [
            mo.md(
                f"`{chosen.formula}`, written for one example. Its data, batched on axis 0 (the "
                "shared argument unbatched):"
            ),
            mo.hstack([*axis_controls, out_axes], justify="start"),
        ]
    )
    return axis_controls, chosen


@app.cell
def _(axis_controls, batch, chosen, cols, example, out_axes, rows, seed):
    args = vmap.example_data(
        jax.random.key(seed.value), example.value, batch.value, rows.value, cols.value
    )
    in_axes = tuple(vmap.parse_axis(c.value) for c in axis_controls)
    out_axis = int(out_axes.value)
    shapes = [tuple(a.shape) for a in args]
    shape_rows = [
        {
            "argument": arg,
            "data shape": str(shape),
            "in_axes entry": str(axis),
            "one example sees": str(vmap.per_example_shape(shape, axis))
            if axis is None or axis < len(shape)
            else "-",
        }
        for arg, shape, axis in zip(chosen.arg_names, shapes, in_axes, strict=True)
    ]
    call_text = (
        f"jax.vmap(f, in_axes={in_axes}, out_axes={out_axis})({', '.join(chosen.arg_names)})"
    )
    problem = vmap.problem(example.value, shapes, in_axes, out_axis)
    _context = [lab.table(shape_rows)]
    if problem is not None:
        _jax_says = vmap.jax_error(example.value, args, in_axes, out_axis)
        _context.append(mo.md(f"JAX says: *{_jax_says}*"))
    lab.guard(problem, *_context, headline=f"`{call_text}` cannot work.")
    result = vmap.batched(example.value, in_axes, out_axis)(*args)
    mo.vstack(
        [
            lab.table(shape_rows),
            mo.md(
                f"""
    ```python
    {call_text}   # -> shape {tuple(result.shape)}
    ```
    One example's output has {text.plural(chosen.output_rank, "axis", "axes")};
    `out_axes={out_axis}` puts the batch of {result.shape[out_axis]} at position {out_axis}. If
    two axes happen to have the same size (try B = R with `in_axes` 1 for M), vmap cannot tell
    you mapped the wrong one: the shapes, not the meaning, are all it checks.
    """
            ),
        ]
    )
    return args, in_axes, out_axis, result


@app.cell
def _(args, example, in_axes, out_axis, result):
    # Independent reference: the loop vmap stands for, in NumPy float64: take example i of
    # every mapped argument, call the NumPy version of f, np.stack along out_axes.
    reference = vmap.loop_reference(example.value, args, in_axes, out_axis)
    check = lab.Check(
        f"vmap(in_axes={in_axes}, out_axes={out_axis}) of {example.value} (float32) equals "
        f"a Python loop + np.stack (NumPy float64), shape {tuple(reference.shape)}",
        numerics.scaled_max_error(result, reference),
        numerics.tolerance("float32"),
        facts={"shapes match": result.shape == reference.shape},
    )
    check
    return check, reference


@app.cell
def _(reference, result):
    _result_2d = np.atleast_2d(np.asarray(result, dtype=np.float64))
    _reference_2d = np.atleast_2d(reference)
    mo.hstack(
        [
            charts.heatmap(
                _result_2d,
                f"vmap output {tuple(result.shape)}",
                row_title="output axis 0",
                col_title="output axis 1",
            ),
            charts.heatmap(
                np.abs(_result_2d - _reference_2d),
                "|vmap - loop|",
                row_title="output axis 0",
                col_title="output axis 1",
                scheme="greys",
            ),
        ],
        justify="start",
    )
    return


@app.cell
def _():
    timing_batch = FLAGS.control("timing_batch", ARGS, label="largest timing batch")
    timing_button = mo.ui.run_button(label="Measure loop vs vmap")
    mo.vstack(
        [
            mo.md(
                f"""
    ## How much faster?

    The loop calls the compiled per-example function once per example, from Python; vmap
    makes **one** call on the whole batch. Both are compiled and warmed up first, then timed
    with `block_until_ready`, median of 7 repeats, on {MACHINE}, with `M @ v + b` of your R x C.
    """
            ),
            mo.hstack([timing_batch, timing_button], justify="start"),
        ]
    )
    return timing_batch, timing_button


@app.cell
def _(cols, rows, timing_batch, timing_button):
    mo.stop(
        lab.interactive() and not timing_button.value,
        mo.callout(
            mo.md("Press **Measure loop vs vmap** (a few seconds for large batches)."), kind="info"
        ),
    )
    timing_batches = sorted(
        {max(1, timing_batch.value // 16), max(1, timing_batch.value // 4), timing_batch.value}
    )
    timings = [
        vmap.loop_vs_vmap(batch=b, rows=rows.value, cols=cols.value, repeats=7)
        for b in mo.status.progress_bar(
            timing_batches, title="timing loop vs vmap", remove_on_exit=True
        )
    ]
    bars = pd.DataFrame(
        [
            {"batch": t["batch"], "method": method, "ms": 1e3 * t[key]}
            for t in timings
            for method, key in (("Python loop", "loop_s"), ("vmap (one call)", "vmap_s"))
        ]
    )
    timing_chart = (
        alt.Chart(bars, title=f"median time per batched call, {MACHINE}")
        .mark_bar()
        .encode(
            x=alt.X("batch:O", title="batch size B", axis=alt.Axis(labelAngle=0)),
            xOffset="method:N",
            y=alt.Y("ms:Q", title="milliseconds (lower is better)"),
            color=alt.Color("method:N", legend=alt.Legend(orient="bottom", title=None)),
            tooltip=["batch", "method", alt.Tooltip("ms:Q", format=".3f")],
        )
        .properties(width=260, height=220)
    )
    speedups = pd.DataFrame([{"batch": t["batch"], "speed-up": t["speedup"]} for t in timings])
    speedup_chart = (
        alt.Chart(speedups, title="vmap speed-up: loop time / vmap time")
        .mark_bar(color="#54a24b")
        .encode(
            x=alt.X("batch:O", title="batch size B", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("speed-up:Q", title="times faster"),
            tooltip=["batch", alt.Tooltip("speed-up:Q", format=".1f")],
        )
        .properties(width=200, height=220)
    ) + alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 3]).encode(y="y:Q")
    mo.vstack(
        [
            mo.hstack([timing_chart, speedup_chart], justify="start"),
            lab.table(
                [
                    {
                        "batch B": t["batch"],
                        "loop (ms)": f"{1e3 * t['loop_s']:.3f}",
                        "vmap (ms)": f"{1e3 * t['vmap_s']:.3f}",
                        "vmap speed-up": f"{t['speedup']:.1f}x",
                    }
                    for t in timings
                ],
                caption=f"Measured on {MACHINE}; a TPU run needs its own measurement.",
            ),
        ]
    )
    return (timings,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson("vmap", ARGS)
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("vmap")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_output_shape_follows_out_axes(args, in_axes, out_axis, result):
    batch_size = next(a.shape[ax] for a, ax in zip(args, in_axes, strict=True) if ax is not None)
    assert result.shape[out_axis] == batch_size
    return


@app.cell
def test_timing_measured_both_sides(timings):
    assert all(
        t["loop_s"] > 0 and t["vmap_s"] > 0 and t["max_abs_difference"] <= 1e-4 for t in timings
    )
    return


if __name__ == "__main__":
    app.run()
