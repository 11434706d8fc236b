import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Benchmark asynchronous work correctly",
)

with app.setup:
    import altair as alt
    import jax
    import jax.numpy as jnp
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import exercises
    from core.perf import machine, timing

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("size", 256, "n: the step multiplies n x n matrices", lo=16, hi=2048, step=16),
        lab.Flag("repeats", 20, "timed calls per method", lo=3, hi=200),
        lab.Flag("warmup", 1, "untimed calls before timing", lo=0, hi=10),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description=(
            "Benchmark asynchronous work correctly: block, warm up, repeat, report medians."
        ),
    )
    ARGS = FLAGS.parse()
    MACHINE = machine.machine_label()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Benchmark asynchronous work correctly
    {lab.phase_line("async_benchmarking")}

    `y = f(x)` in JAX returns as soon as the work is **queued**, not when it is done; and
    the first call of a jitted function **compiles** first. Time it naively and you measure
    the wrong thing. In this lesson you will

    - time the same step three wrong ways and the right way, side by side;
    - separate **dispatch** (until the call returns) from **completion** (until
      `block_until_ready`), and compile time from step time;
    - report the **median and spread** of many repeats, and see why one sample lies.

    All times are measured on this machine; they say nothing about a TPU.
    """)
    return


@app.cell
def _():
    size = FLAGS.control("size", ARGS, label="matrix size n")
    repeats = FLAGS.control("repeats", ARGS)
    warmup = FLAGS.control("warmup", ARGS, label="warm-up calls")
    seed = FLAGS.control("seed", ARGS)
    _controls = mo.hstack([size, repeats, warmup, seed], justify="start", wrap=True)
    mo.vstack([_controls, mo.md(f"Machine: **{MACHINE}**")])
    return repeats, seed, size, warmup


@app.function
def make_step():
    """A fresh jitted step (its own compile cache): y = tanh(x @ x) @ x / n."""
    return jax.jit(lambda x_NN: jnp.tanh(x_NN @ x_NN) @ x_NN / x_NN.shape[0])


@app.cell
def _(repeats, seed, size, warmup):
    x_NN = jax.random.normal(jax.random.key(seed.value), (size.value, size.value), jnp.float32)
    jax.block_until_ready(x_NN)
    # Wrong 1: the first call of a fresh function, blocked: compile + run.
    first_call_s = timing.time_first_call(make_step(), x_NN)
    # Wrong 2: the first call, not blocked: compile + dispatch, the run is not even finished.
    first_unblocked_s = timing.time_first_call(make_step(), x_NN, block=False)
    step = make_step()
    compile_parts = timing.time_compile(step, x_NN)
    # Wrong 3: warmed up but not blocked: measures dispatch only.
    not_blocked = timing.time_calls(
        step,
        x_NN,
        repeats=repeats.value,
        warmup=max(warmup.value, 1),
        block=False,
        label="warm, not blocked (wrong)",
    )
    # Right: warmed up and blocked.
    blocked = timing.time_calls(
        step,
        x_NN,
        repeats=repeats.value,
        warmup=warmup.value,
        block=True,
        label="warm, blocked (right)",
    )
    _rows = [
        {
            "timing": "first call, blocked (wrong: includes compile)",
            "median (ms)": f"{first_call_s * 1e3:.3g}",
            "p10-p90 (ms)": "1 sample",
            "min (ms)": "",
            "samples": 1,
        },
        {
            "timing": "first call, not blocked (wrong twice)",
            "median (ms)": f"{first_unblocked_s * 1e3:.3g}",
            "p10-p90 (ms)": "1 sample",
            "min (ms)": "",
            "samples": 1,
        },
        not_blocked.summary.row(not_blocked.label),
        blocked.summary.row(blocked.label),
    ]
    mo.vstack(
        [
            mo.md(
                f"## Four ways to time one step\n`step(x) = tanh(x @ x) @ x / n` on a "
                f"{size.value}x{size.value} float32 matrix. Trace + lower took "
                f"{compile_parts['trace + lower (s)'] * 1e3:.3g} ms and XLA compile "
                f"{compile_parts['compile (s)'] * 1e3:.3g} ms, measured apart with "
                "`jax.jit(f).lower(x).compile()`."
            ),
            lab.table(_rows, caption=f"Measured on {MACHINE}:"),
        ]
    )
    return blocked, first_call_s, not_blocked, step, x_NN


@app.cell
def _(blocked, first_call_s, not_blocked):
    _samples = pd.DataFrame(timing.samples_rows([not_blocked, blocked]))
    _first = pd.DataFrame(
        [{"timing": "first call (compile included)", "repeat": 0, "ms": first_call_s * 1e3}]
    )
    _all = pd.concat([_samples, _first])
    _y = alt.Y(
        "timing:N",
        title=None,
        sort=["first call (compile included)", not_blocked.label, blocked.label],
    )
    _x = alt.X("ms:Q", scale=alt.Scale(type="log"), title="milliseconds (log)")
    _box = alt.Chart(_samples).mark_boxplot(extent="min-max", opacity=0.35).encode(x=_x, y=_y)
    _strip = (
        alt.Chart(_all)
        .mark_tick(thickness=2, size=14)
        .encode(
            x=_x,
            y=_y,
            color=alt.Color("timing:N", legend=None),
            tooltip=["timing", "repeat", alt.Tooltip("ms:Q", format=".3f")],
        )
    )
    _ratio = blocked.summary.median / max(not_blocked.summary.median, 1e-12)
    mo.vstack(
        [
            alt.layer(_box, _strip).properties(
                width=520, height=140, title=f"every sample, {MACHINE}"
            ),
            mo.md(
                f"The unblocked timings measure how long it takes to *queue* the work: the "
                f"blocked median is **{_ratio:.1f}x** larger. The first call is dominated by "
                f"compilation. Boxes span min-max with the median line; ticks are samples."
            ),
        ]
    )
    return


@app.cell
def _(seed, size, step, x_NN):
    _tiny = jax.random.normal(jax.random.key(seed.value), (16, 16), jnp.float32)
    dispatch = {
        "n = 16": timing.dispatch_and_compute(step, _tiny, repeats=20),
        f"n = {size.value}": timing.dispatch_and_compute(step, x_NN, repeats=20),
    }
    _rows = [
        {
            "input": name,
            "returns after (us)": f"{parts['dispatch (returned)'].median * 1e6:.0f}",
            "result ready after (us)": f"{parts['total (ready)'].median * 1e6:.0f}",
        }
        for name, parts in dispatch.items()
    ]
    mo.vstack(
        [
            mo.md(
                "## Dispatch overhead\nThe time until the call *returns* is Python + JAX "
                "bookkeeping + enqueueing: roughly constant, whatever the size. The time until the "
                "result is *ready* grows with the work. For tiny steps the overhead dominates, "
                "which is why you jit whole training steps rather than single ops."
            ),
            lab.table(_rows, caption=f"Medians of 20 calls, {MACHINE}:"),
        ]
    )
    return (dispatch,)


@app.cell
def _(x_NN):
    _cold = make_step()
    _sequence = [timing.time_first_call(_cold, x_NN) for _ in range(8)]
    _df = pd.DataFrame({"call": np.arange(1, 9), "ms": np.array(_sequence) * 1e3})
    _chart = (
        alt.Chart(_df, title=f"blocked time of calls 1..8 of a fresh jitted step, {MACHINE}")
        .mark_line(point=True)
        .encode(
            x=alt.X("call:O"),
            y=alt.Y("ms:Q", scale=alt.Scale(type="log"), title="ms (log)"),
            tooltip=["call", alt.Tooltip("ms:Q", format=".3f")],
        )
        .properties(width=420, height=180)
    )
    mo.vstack(
        [
            mo.md(
                "## Warm-up\nCall 1 compiles; later calls may still be slower while caches and "
                "thread pools warm up. Drop them: time only after warm-up."
            ),
            _chart,
        ]
    )
    return


@app.cell
def _(blocked, step, x_NN):
    # Independent references: the step in NumPy float64; the statistics with numpy.percentile.
    _x = np.asarray(x_NN, np.float64)
    _reference = np.tanh(_x @ _x) @ _x / _x.shape[0]
    _result = np.asarray(step(x_NN), np.float64)
    _samples = np.asarray(blocked.samples)
    _summary = blocked.summary
    # The step runs in float32; the statistics are float64 arithmetic on the same samples,
    # each judged relative to itself (times are far below 1 s, so no floor at 1).
    check = lab.Check(
        "the timed step computes tanh(x@x)@x/n like NumPy float64; median and p90 agree with numpy",
        {
            "step vs NumPy float64 (relative)": numerics.scaled_max_error(_result, _reference),
            "median vs numpy.median (relative)": numerics.norm_relative_error(
                _summary.median, np.median(_samples)
            ),
            "p90 vs numpy.percentile (relative)": numerics.norm_relative_error(
                _summary.p90, np.percentile(_samples, 90)
            ),
        },
        {
            "step vs NumPy float64 (relative)": numerics.tolerance("float32"),
            "median vs numpy.median (relative)": numerics.tolerance("float64", backend="cpu"),
            "p90 vs numpy.percentile (relative)": numerics.tolerance("float64", backend="cpu"),
        },
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "async_benchmarking", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("async_benchmarking")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_every_method_has_its_samples(blocked, dispatch, not_blocked, repeats):
    assert len(blocked.samples) == len(not_blocked.samples) == repeats.value
    assert all(s > 0 for s in blocked.samples)
    for parts in dispatch.values():
        # per call, "ready" is read after "returned": true by construction, not a speed claim
        assert parts["total (ready)"].maximum >= parts["dispatch (returned)"].minimum
    return


if __name__ == "__main__":
    app.run()
