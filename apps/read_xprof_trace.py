import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Read an XProf trace")

with app.setup:
    import tempfile

    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import lab
    from core.lab import charts, text
    from core.lessons.performance import read_xprof_trace as faults
    from core.perf import allocator, machine, trace

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("batch", 64, "rows of the training batch", lo=1, hi=1024),
        lab.Flag("width", 256, "width of the MLP layers", lo=8, hi=1024, step=8),
        lab.Flag("depth", 2, "layers of the MLP", lo=1, hi=6),
        lab.Flag("steps", 3, "profiled training steps (after one warm-up)", lo=1, hi=10),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag("temp_mib", 32, "MiB of the fault demo's temporary buffer", lo=8, hi=256, step=8),
        lab.Flag("fault_steps", 5, "timed steps per allocator mode", lo=3, hi=20),
        description="Read an XProf trace: capture, parse, top ops, timeline, bottleneck.",
    )
    ARGS = FLAGS.parse()
    MACHINE = machine.machine_label()
    MODULE = "jit_train_step"


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Read an XProf trace
    {lab.phase_line("read_xprof_trace")}

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
                "(`/host:CPU`; on a TPU also `/device:TPU:0` ...), lines (threads), events. "
                "On a CPU an XLA op event sits on a host thread and carries an `hlo_op` stat "
                "(instruction or fusion name) and an `hlo_module` stat; on a TPU the ops are the "
                "events of the device plane's line `XLA Ops` (the op is the event's name) inside "
                "the line `XLA Modules`' runs (`core.perf.trace` reads both). Here the ops ran "
                f"on `{events[0].thread if events else 'nothing'}`; the programs: "
                f"{', '.join(f'`{p}`' for p in programs)}. "
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
            mo.md(
                "A caution about those `ynn_fusion` kernels: XLA:CPU's YNNPACK fusions have a "
                "known miscompile of one multiply-reduce pattern (a reduce over a broadcast "
                "operand fused with an add: `core/perf/xla_cpu.py` pins the example). The global "
                "cure, `XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=`, takes the YNN "
                "kernels from every matmul and costs 40-60% of the capstone's train step, so "
                "the project guards only the programs of the risky shape (a `jacrev`, a vmapped "
                "backward pass) with `xla_cpu.jit_without_ynn_fusion` and keeps the fast default "
                "everywhere else."
            ),
        ]
    )
    return bottleneck, definitions


@app.cell
def _(logdir):
    mo.vstack([
        mo.md(f"""
    ## Open the same trace in XProf or TensorBoard
    Here: `pip install xprof` (or `pip install tensorboard tensorboard-plugin-profile`), then
    `xprof --logdir={logdir} --port=6006` (or `tensorboard --logdir={logdir}`) and open
    http://localhost:6006, *Trace Viewer* for the timeline, *HLO Op Stats* for the top ops.
    The `perfetto_trace.json.gz` also opens at https://ui.perfetto.dev.

    On a TPU VM:
    """),
        text.code_block(trace.xprof_commands("/tmp/jax-trace"), "bash", "xprof on a TPU VM"),
    ])  # fmt: skip
    return


@app.cell
def _(capture, top_ops):
    # Independent reference: the trace-event JSON that JAX writes beside the xplane, read
    # with gzip + json (no jax.profiler): its per-op totals must match the xplane's to within
    # ProfileData's resolution (whole nanoseconds, truncated from the picoseconds the JSON
    # keeps) per event: not float arithmetic, so the dtype table does not apply.
    readers = trace.compare_readers(
        top_ops,
        trace.json_op_durations(trace.trace_json_events(capture.find(".trace.json.gz")), MODULE),
    )
    check = lab.Check(
        f"per-op totals of {readers.ops} ops: xplane (jax.profiler.ProfileData) vs "
        "trace.json.gz (gzip + json), per event within 1 ns (ProfileData truncates the "
        "xplane's picoseconds to whole nanoseconds; the JSON keeps them)",
        {"max |JSON - xplane| per event (us)": readers.gap_per_event_us},
        trace.PROFILE_DATA_RESOLUTION_US,
        facts={
            "the xplane has ops": bool(top_ops),
            "both name the same ops": readers.same_ops,
            "each op ran as often in both": readers.same_counts,
            "no op shorter in the JSON (truncation only shortens)": readers.json_never_shorter,
        },
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    ## The profile that misled
    A trace says where the time goes *among the ops*. It can still hide the cause. The course's
    flagship benchmark (issue 19: the byte Transformer capstone's JAX train step lost to its
    PyTorch twin) is the worked example of **measure, find the bottleneck, fix, measure again**.

    1. **The misleading profile.** Every op of the JAX step was slower than its torch
       counterpart, the matmuls too, and no op stood out. The cause was in none of them: XLA
       allocates each step's temporary buffers and frees them at the end of the step. With
       glibc's default `malloc` a block over the mmap threshold is `mmap`ped, page-faulted and
       zeroed by the kernel on first touch, then unmapped, *every step*. The faults land inside
       whichever op first writes the memory, so they inflate every op's time in the trace.
    2. **The two signals that did point at it.** Minor page faults and system CPU per step,
       from `resource.getrusage` around each blocked step (`allocator.page_faults()`): for the
       JAX step a fault for every page of its temporaries and a large share of the step in
       system time, next to none for torch's; and
       `jit(step).lower(...).compile().memory_analysis().temp_size_in_bytes`, the size of what
       is churned (hundreds of MiB for the capstone's default step): faults x 4 KiB pages ~
       temp bytes. The demo below measures both on this machine.
    3. **The fix.** Three glibc malloc tunables keep freed memory in the heap
       (`core/perf/allocator.py`): `{allocator.TUNABLES.replace(":", " ")}`: one arena shared
       by all threads, never `mmap` a block, never give the heap's top back to the kernel.
       With the faults gone, the op table told the truth again and the next bottlenecks could
       be read from it (the capstone then took a causal blocked attention core,
       `core/lm/causal_blocked.py`, and 16-bit dropout bits).
    4. **Measure again**, below, on a workload small enough to run here.

    `malloc` settings are fixed when a process starts, and this lab's own process may already
    run tuned (`make lab` exports `GLIBC_TUNABLES`), so the demo starts two **fresh child
    processes**, one with glibc's defaults (`GLIBC_TUNABLES` dropped,
    `{allocator.DISABLE_ENV}=1`) and one with `GLIBC_TUNABLES={allocator.TUNABLES}`. Each jits
    `sin(x @ w) @ w.T` with x `({faults.ROWS}, {faults.INNER})` and w `({faults.INNER}, N)`:
    the `({faults.ROWS}, N)` float32 intermediate feeds a second dot, so XLA cannot fuse it
    away; it is the step's temporary buffer. Each child warms up (the compile, then until
    {faults.SETTLE_STEPS} steps in a row are quiet, at most {faults.WARMUP_MAX} steps: a tuned
    heap grows for a few steps first, glibc's defaults never settle), then times its blocked
    steps with `getrusage` around each.
    """)
    return


@app.cell
def _():
    temp_mib = FLAGS.control("temp_mib", ARGS, label="temp buffer (MiB)")
    fault_steps = FLAGS.control("fault_steps", ARGS, label="timed steps per mode")
    fault_button = mo.ui.run_button(label="Run both allocator modes")
    mo.vstack([mo.hstack([temp_mib, fault_steps], justify="start", wrap=True), fault_button])
    return fault_button, fault_steps, temp_mib


@app.cell
def _(fault_button, fault_steps, temp_mib):
    mo.stop(
        lab.interactive() and not fault_button.value,
        mo.callout(
            mo.md("Press **Run both allocator modes** (two fresh processes, a few seconds)."),
            kind="info",
        ),
    )
    demo = faults.Demo(temp_mib.value, fault_steps.value)
    try:
        fault_results = faults.compare(demo)
        _problem = None
    except (RuntimeError, OSError, ValueError) as _error:
        fault_results, _problem = None, f"a child process did not report: {_error}"
    lab.guard(_problem, headline="The allocator demo could not run.")
    mo.vstack(
        [
            mo.md(
                f"### Measure again: {demo.temp_mib} MiB of temp, {demo.steps} timed steps "
                f"per mode ({MACHINE})"
            ),
            lab.table(faults.rows(fault_results)),
        ]
    )
    return demo, fault_results


@app.cell
def _(demo, fault_results):
    fault_verdict = faults.verdict(demo, fault_results)
    # Independent reference for the temp size: the closed-form bytes of the (M, N) float32
    # intermediate, M * N * 4, vs what XLA's buffer assignment reports (memory_analysis).
    fault_check = lab.Check(
        f"the page-fault storm and its fix: temp of memory_analysis vs the closed form "
        f"{faults.ROWS} x {demo.columns} x 4 bytes; faults per step, defaults vs tuned",
        fault_verdict["temp_error"],
        faults.TEMP_TOLERANCE,
        facts=fault_verdict["facts"],
    )
    fault_check
    return fault_check, fault_verdict


@app.cell
def _(fault_results, fault_verdict):
    _data = pd.DataFrame(faults.chart_rows(fault_results))
    _chart = (
        alt.Chart(_data)
        .mark_bar()
        .encode(
            x=alt.X("allocator:N", title=None),
            y=alt.Y("value:Q", title=None),
            color=alt.Color(
                "allocator:N",
                scale=alt.Scale(domain=list(faults.MODES), range=charts.distinct_colors(2)),
            ),
            tooltip=["allocator", "measure", alt.Tooltip("value:Q", format=",.1f")],
        )
        .properties(width=150, height=180)
        .facet(column=alt.Column("measure:N", title=None))
        .resolve_scale(y="independent")
        .properties(title=f"glibc defaults vs tuned malloc, {MACHINE}")
    )
    _defaults, _tuned = fault_results["glibc defaults"], fault_results["tuned"]
    _speedup = _defaults["median_step_s"] / _tuned["median_step_s"]
    _text = (
        f"With glibc's defaults each step faulted "
        f"**{_defaults['minor_faults_per_step']:,.0f}** times (the intermediate is "
        f"{fault_verdict['pages']:,.0f} pages) and spent "
        f"{_defaults['system_s_per_step'] * 1e3:.0f} ms in the kernel; tuned, "
        f"**{_tuned['refaults_per_step']:,.0f}** faults that heap growth does not explain "
        f"({_tuned['minor_faults_per_step']:,.0f} in all) and "
        f"{_tuned['system_s_per_step'] * 1e3:.0f} ms: the step ran **{_speedup:.2f}x** as fast "
        "(wall times move with the machine's load; so can the tuned heap's growth, which "
        "faults each new page once and keeps it, unlike the storm)."
        if fault_verdict["storm"]
        else f"glibc's defaults faulted only {_defaults['minor_faults_per_step']:,.0f} times "
        f"per step here ({faults.NO_STORM_REASONS}): no storm for the settings to remove. "
        "Try a temp buffer over 32 MiB."
    )
    mo.vstack([mo.md(_text), _chart])
    return


@app.cell(hide_code=True)
def _():
    _bench = faults.capstone_bench()
    _rows = faults.bench_rows(_bench) if _bench else []
    _capstone = (
        mo.vstack(
            [
                mo.md(
                    f"The capstone's own before/after, from `{_bench['path']}` (written "
                    f"{_bench['written']} on {_bench.get('machine', 'an unnamed machine')}):"
                ),
                lab.table(_rows),
            ]
        )
        if _rows
        else mo.md(
            "The capstone's own before/after (the whole train step, JAX vs its torch twin) is "
            "in the `allocator_comparison` of its `bench.json`; none is here yet: "
            "`make capstone` or `python -m capstones.byte_transformer bench` writes one."
        )
    )
    mo.vstack(
        [
            mo.md(
                """
    ### What the fix costs, and where the project applies it
    The price: a tuned process keeps its peak heap until it exits (RSS does not shrink after a
    large step), and its heap grows for a few steps before it settles, by whole step buffers
    when small allocations have split the freed ones (the **warm-up steps** and **peak RSS**
    columns above). For a training process that repeats one step shape, keeping the memory is
    the point; for a process that makes one large step and then idles, it is a cost.

    - **`make lab`, `make test`, `make capstone`**: the Makefile exports `GLIBC_TUNABLES`
      (read by the dynamic loader of every process they start; `make ... GLIBC_TUNABLES=`
      keeps glibc's defaults).
    - **The capstone's `__main__`**: `allocator.configure()` applies the same settings with
      `mallopt(3)` first thing, before JAX or torch start their threads, so
      `python -m capstones.byte_transformer` is tuned without the Makefile; its `bench.json`
      records which settings were in force.
    """
            ),
            _capstone,
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("read_xprof_trace")
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


@app.cell
def test_fault_check_passes_and_each_child_ran_its_mode(demo, fault_check, fault_results):
    # one test cell: under pytest each test cell reruns the cells it depends on (two children)
    fault_check.assert_passed()
    assert fault_results["glibc defaults"]["allocator"]["mechanism"] == "none"
    _tuned = "GLIBC_TUNABLES" if allocator.is_glibc() else "none"
    assert fault_results["tuned"]["allocator"]["mechanism"] == _tuned
    assert all(len(r["step_s"]) == demo.steps for r in fault_results.values())
    return


if __name__ == "__main__":
    app.run()
