import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Read an XProf trace")

with app.setup:
    import tempfile

    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lab import charts
    from core.perf import machine, trace

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("batch", 64, "rows of the training batch", lo=1, hi=1024),
        lab.Flag("width", 256, "width of the MLP layers", lo=8, hi=1024, step=8),
        lab.Flag("depth", 2, "layers of the MLP", lo=1, hi=6),
        lab.Flag("steps", 3, "profiled training steps (after one warm-up)", lo=1, hi=10),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        description="Read an XProf trace: capture, parse, top ops, timeline, bottleneck.",
    )
    ARGS = FLAGS.parse()
    MACHINE = machine.machine_label()
    MODULE = "jit_train_step"
    # xplane vs trace.json.gz: two exports of one capture (the JSON holds durations in
    # microseconds converted from the xplane's picoseconds), so they agree up to that
    # conversion, not float arithmetic: the dtype table does not apply (measured: 0).
    TRACE_TOLERANCE = 1e-3


@app.cell(hide_code=True)
def _():
    mo.md("""
    # Read an XProf trace
    *Phase 15 · Performance diagnosis*

    A profiler trace is the ground truth of where a step's time goes. In this lesson you will

    - capture a trace of a small training step with `jax.profiler.trace` (warm-up first, so
      compilation stays out);
    - parse what JAX 0.10.2 writes: the **XSpace** protobuf (`*.xplane.pb`, what XProf and
      TensorBoard read) with `jax.profiler.ProfileData`, and the **trace-event JSON**
      (`*.trace.json.gz`) with gzip + json, and check that the two agree;
    - build a **top-ops table** and a **timeline**, name the **bottleneck op** and find what
      it computes in the compiled HLO;
    - open the same trace in XProf / TensorBoard.

    The trace here is of this CPU; on a TPU VM the same steps show TPU ops.
    """)
    return


@app.cell
def _():
    batch = FLAGS.control("batch", ARGS)
    width = FLAGS.control("width", ARGS)
    depth = FLAGS.control("depth", ARGS)
    steps = FLAGS.control("steps", ARGS, label="profiled steps")
    seed = FLAGS.control("seed", ARGS)
    capture_button = mo.ui.run_button(label="Capture a trace")
    mo.vstack(
        [
            mo.md(
                "`train_step(params)`: one SGD step of a GELU MLP on a mean-squared-error loss, "
                "jitted."
            ),
            mo.hstack([batch, width, depth, steps, seed], justify="start", wrap=True),
            capture_button,
        ]
    )
    return batch, capture_button, depth, seed, steps, width


@app.cell
def _(batch, capture_button, depth, seed, steps, width):
    mo.stop(
        lab.interactive() and not capture_button.value,
        mo.callout(mo.md("Press **Capture a trace** (a second or two)."), kind="info"),
    )
    train_step, params = trace.example_training_step(
        jax.random.key(seed.value), batch.value, width.value, depth.value
    )
    logdir = tempfile.mkdtemp(prefix="jax-trace-")
    capture, _ = trace.capture(
        train_step, params, logdir, steps=steps.value, warmup=1, perfetto=True
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ```python
    jax.block_until_ready(train_step(params))          # warm-up: compile outside the trace
    with jax.profiler.trace("{logdir}", create_perfetto_trace=True):
        for i in range({steps.value}):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                params = jax.block_until_ready(train_step(params))
    ```
    It wrote:
    """
            ),
            lab.table(capture.file_rows()),
        ]
    )
    return capture, logdir, params, train_step


@app.cell
def _(capture):
    events = trace.xplane_op_events(capture.find(".xplane.pb"))
    programs = trace.modules(events)
    top_ops = trace.op_table(events, MODULE)
    _shown = [
        {
            "op": f"`{r['op']}`",
            "count": r["count"],
            "total (us)": f"{r['total (us)']:.1f}",
            "mean (us)": f"{r['mean (us)']:.1f}",
            "share": f"{r['share']:.1%}",
        }
        for r in top_ops[:12]
    ]
    mo.vstack(
        [
            mo.md(
                f"## Top ops\n`jax.profiler.ProfileData.from_file(...)` reads the xplane: planes "
                "(here `/host:CPU`; on a TPU also `/device:TPU:0` ...), lines (threads), events. "
                "An XLA op event carries an `hlo_op` stat (instruction or fusion name) and an "
                f"`hlo_module` stat (the program: {', '.join(f'`{p}`' for p in programs)}). "
                f"Summed over the {capture.steps} steps of `{MODULE}`:"
            ),
            lab.table(_shown),
        ]
    )
    return events, top_ops


@app.cell
def _(events):
    timeline = pd.DataFrame(trace.timeline_rows([e for e in events if e.module == MODULE]))
    # One colour per op while the palette's easily told-apart colours last (Vega's default
    # repeats after 10); past that, one per kind of op (`ynn_fusion.2` -> `ynn_fusion`).
    timeline["kind"] = timeline["op"].str.replace(r"\.\d+$", "", regex=True)
    _by = "op" if timeline["op"].nunique() <= len(charts.PALETTE) else "kind"
    _names = sorted(timeline[_by].unique())
    _chart = (
        alt.Chart(timeline, title=f"timeline of {MODULE} ops, {MACHINE}")
        .mark_bar(height=14)
        .encode(
            x=alt.X("start (us):Q", title="microseconds since the first op"),
            x2="end (us):Q",
            y=alt.Y("thread:N", title="thread"),
            color=alt.Color(
                f"{_by}:N",
                title="op" if _by == "op" else "kind of op",
                scale=alt.Scale(domain=_names, range=charts.distinct_colors(len(_names))),
                legend=alt.Legend(columns=2, symbolLimit=len(_names), labelLimit=220),
            ),
            tooltip=[
                "op",
                "thread",
                alt.Tooltip("duration (us):Q", format=".1f"),
                alt.Tooltip("start (us):Q", format=".1f"),
            ],
        )
        .properties(width=560, height=160)
    )
    _colour = (
        "one colour per op"
        if _by == "op"
        else f"{timeline['op'].nunique()} ops, too many to colour apart: one colour per kind of "
        "op (the name without its `.N`), the name in each bar's tooltip"
    )
    _text = (
        f"## Timeline\nOne bar per op execution, on the thread that ran it ({_colour}); the gaps "
        "between steps are Python, dispatch and `block_until_ready`."
    )
    mo.vstack([mo.md(_text), _chart])
    return


@app.cell
def _(params, top_ops, train_step):
    hlo_text = train_step.lower(params).compile().as_text()
    definitions = trace.hlo_definitions(hlo_text, [r["op"] for r in top_ops[:3]])
    bottleneck = top_ops[0]
    mo.vstack(
        [
            mo.md(
                f"""
    ## The bottleneck
    **`{bottleneck["op"]}`** takes **{bottleneck["share"]:.0%}** of the op time
    ({bottleneck["total (us)"] / bottleneck["count"]:.0f} us per step). Profiler names are HLO
    instruction names, so the compiled program (`train_step.lower(params).compile().as_text()`)
    says what each one computes:
    """
            ),
            lab.table(
                [
                    {
                        "op": f"`{r['op']}`",
                        "share": f"{r['share']:.0%}",
                        "HLO instruction": f"`{definitions[r['op']][0]}`",
                        "from JAX operation": f"`{definitions[r['op']][1]}`",
                    }
                    for r in top_ops[:3]
                    if r["op"] in definitions
                ]
            ),
            mo.md(
                "`jvp(...)` marks the forward pass and `transpose(jvp(...))` the backward pass. "
                "The weight gradients `x.T @ dy` contract over the **batch** dimension "
                "(`lhs_contracting_dims={0}`): the same FLOPs as a forward matmul of the layer, in "
                "a different layout, and often a different time. Compare them in the top-ops table."
            ),
            mo.md(
                "On this CPU the matmuls (`dot`, or `ynn_fusion` / `fusion` kernels wrapping a "
                "dot) usually dominate; elementwise work (GELU, the update) is fused into few "
                "kernels. Grow **width** and the dots take a larger share; shrink it and per-op "
                "overhead and small fusions show up."
            ),
        ]
    )
    return bottleneck, definitions


@app.cell
def _(logdir):
    mo.md(f"""
    ## Open the same trace in XProf or TensorBoard
    Here: `pip install xprof` (or `pip install tensorboard tensorboard-plugin-profile`), then
    `xprof --logdir={logdir} --port=6006` (or `tensorboard --logdir={logdir}`) and open
    http://localhost:6006, *Trace Viewer* for the timeline, *HLO Op Stats* for the top ops.
    The `perfetto_trace.json.gz` also opens at https://ui.perfetto.dev.

    On a TPU VM:

    ```bash
    {trace.xprof_commands("/tmp/jax-trace")}
    ```
    """)
    return


@app.cell
def _(capture, top_ops):
    # Independent reference: the trace-event JSON that JAX writes beside the xplane, read
    # with gzip + json (no jax.profiler): its per-op totals must match the xplane's.
    json_totals = trace.json_op_totals(
        trace.trace_json_events(capture.find(".trace.json.gz")), MODULE
    )
    # Per op, |json - xplane| / max(xplane, 1): relative for totals of 1 us and more.
    check = lab.Check(
        f"per-op totals of {len(top_ops)} ops: xplane (jax.profiler.ProfileData) vs "
        "trace.json.gz (gzip + json)",
        numerics.elementwise_relative_error(
            [json_totals.get(r["op"], 0.0) for r in top_ops], [r["total (us)"] for r in top_ops]
        ),
        TRACE_TOLERANCE,
        facts={
            "the xplane has ops": bool(top_ops),
            "both name the same ops": set(json_totals) == {r["op"] for r in top_ops},
        },
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    lab.tpu_results("read_xprof_trace")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_each_op_ran_once_per_profiled_step(capture, top_ops):
    assert {r["count"] for r in top_ops} == {capture.steps}
    return


@app.cell
def test_bottleneck_is_defined_in_the_hlo(bottleneck, definitions):
    assert bottleneck["op"] in definitions
    return


if __name__ == "__main__":
    app.run()
