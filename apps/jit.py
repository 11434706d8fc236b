import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Compile a function with jit")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lessons.transformations import jit as lesson
    from core.perf import compilation

    lab.use_cpu_devices()
    SWEEP_MAXIMA = (32, 128, 512, 2048)  # the sweep runs sizes 8, 32, ... up to this
    FLAGS = lab.Flags(
        lab.Flag("function", "norm_gelu", "the function to compile", choices=compilation.JIT_NAMES),
        lab.Flag("size", 32, "x is size x size float32", lo=1, hi=1024),
        lab.Flag("repeats", 5, "timed repeats (the median is shown)", lo=1, hi=21),
        lab.Flag("sweep_max", 32, "largest size in the jit-vs-eager sweep", choices=SWEEP_MAXIMA),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        description=(
            "Compile a function with jit: compile time vs steady state, speed-up over eager, "
            "donation."
        ),
    )
    ARGS = FLAGS.parse()
    MACHINE = f"this {jax.default_backend().upper()}"


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Compile a function with jit
    {lab.phase_line("jit")}

    Without `jit`, JAX runs your function **eagerly**: every `jnp` operation is sent to the
    device on its own, with Python in between. `jax.jit(f)` instead **traces** `f` once
    per distinct call signature (each argument's shape and dtype, but also the pytree
    structure of the arguments, the values of static arguments, weak types of Python
    scalars, and the sharding) into a program (a jaxpr), hands the whole program to the XLA
    compiler, which fuses operations and plans memory, and then runs the compiled program
    with one dispatch. The compile costs time once; every later call is cheaper. In this
    lesson you will

    - time the stages separately: `jax.jit(f).lower(x)` (trace + lower), `.compile()` (XLA),
      and the steady-state call, and compare with eager execution;
    - see when compiling pays for itself, and how the speed-up changes with the input size
      and with what the function does (many small elementwise ops vs big matmuls);
    - see, call by call, which changes make `jit` trace again (a counter inside the traced
      function) and check them against the signature rule;
    - **donate** an input buffer (`donate_argnums`) so the output can reuse its memory, and
      see that the donated array is gone afterwards;
    - check that jit, eager and NumPy float64 agree.
    """)
    return


@app.cell
def _():
    function = FLAGS.control("function", ARGS)
    size = FLAGS.control("size", ARGS, label="size (x is size x size)")
    repeats = FLAGS.control("repeats", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.hstack([function, size, repeats, seed], justify="start", wrap=True)
    return function, repeats, seed, size


@app.cell
def _(function, repeats, seed, size):
    example = compilation.get_example(function.value)
    timing, outputs = compilation.timed_outputs(
        function.value, size.value, repeats.value, seed.value
    )
    stages = pd.DataFrame(
        [
            {"stage": "1. trace + lower: jit(f).lower(x)", "ms": 1e3 * timing["trace_lower_s"]},
            {"stage": "2. XLA compile: .compile()", "ms": 1e3 * timing["compile_s"]},
            {"stage": "3. first call of the compiled program", "ms": 1e3 * timing["first_call_s"]},
            {"stage": "4. steady-state jit call (median)", "ms": 1e3 * timing["jit_s"]},
            {"stage": "5. eager call, no jit (median)", "ms": 1e3 * timing["eager_s"]},
        ]
    )
    stages["floor"] = stages["ms"].min() / 3
    stage_chart = (
        alt.Chart(
            stages,
            title=f"{function.value}, x {size.value}x{size.value}: time per stage, {MACHINE}",
        )
        .mark_bar()
        .encode(
            y=alt.Y("stage:N", sort=None, title=None),
            x=alt.X("ms:Q", scale=alt.Scale(type="log"), title="milliseconds (log)"),
            x2="floor:Q",  # a log axis has no zero: bars start at the smallest time shown
            color=alt.Color("stage:N", legend=None),
            tooltip=["stage", alt.Tooltip("ms:Q", format=".4f")],
        )
        .properties(width=420, height=170)
    )
    break_even = timing["break_even_calls"]
    _pays_off = (
        f"Compiling pays for itself after about **{break_even:,.0f} calls**."
        if break_even is not None
        else "Here eager is as fast as jit: compiling never pays for itself at this size."
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## Compile once, call many times

    `{function.value}`: {example.description}.

    ```python
    lowered = jax.jit(f).lower(x)       # trace f with x's shape/dtype -> jaxpr -> StableHLO
    compiled = lowered.compile()        # XLA: fuse, schedule, generate code
    compiled(x).block_until_ready()     # the steady state: one dispatch, no Python per op
    ```
    The jaxpr has **{timing["jaxpr_ops"]}** operations (eager mode sends each one separately);
    XLA grouped them into **{timing["fusions"]}**
    {"fusion" if timing["fusions"] == 1 else "fusions"} (on this CPU, loops inside one
    compiled executable; on a TPU, each fusion is one program the chip runs). Steady state: jit
    **{1e3 * timing["jit_s"]:.4f} ms** vs eager **{1e3 * timing["eager_s"]:.4f} ms**, a
    **{timing["speedup"]:.1f}x** speed-up on {MACHINE}.
    {_pays_off}
    (Medians of {repeats.value}; every measurement compiles a fresh function, because JAX
    caches compiled programs and a second compile of the same function would be a cache hit.)
    """
            ),
            stage_chart,
        ]
    )
    return outputs, timing


@app.cell
def _():
    # One fresh jitted f(tree, scale, mode) whose body appends to a list: the append runs
    # only while JAX traces f, so the list's growth shows each retrace (a few ms a call).
    retrace_rows = lesson.retrace_table(len(jax.devices()))
    mo.vstack(
        [
            mo.md(
                f"""
    ## What traces again

    `f = jax.jit(f, static_argnames="mode")`, where `f` appends to a Python list each time
    it runs. The compiled program does not run Python, so the list grows only when JAX
    **traces** `f` again. The calls below run in order, each changing one thing; "traced
    again?" is what the list saw, "rule says" is the rule: a call traces again when its
    signature (pytree structure; each leaf's shape, dtype, weak type and sharding; the static
    arguments' values) was not seen before. A Python float is weakly typed, `jnp.float32(2.0)`
    is not; the value of either is an input, not part of the signature.
    {"" if len(jax.devices()) > 1 else "(One device here: the sharding call needs two.)"}
    """
            ),
            lab.table([{k: v for k, v in r.items() if k != "result error"} for r in retrace_rows]),
        ]
    )
    return (retrace_rows,)


@app.cell
def _(function, outputs, retrace_rows, size):
    # Independent references: the same formula in NumPy float64, on the input that was timed;
    # the signature rule (core/lessons/transformations/jit.py) for the retraces.
    _errors = {
        "jit vs NumPy float64 (relative)": numerics.scaled_max_error(
            outputs["jit"], outputs["numpy float64"]
        ),
        "eager vs NumPy float64 (relative)": numerics.scaled_max_error(
            outputs["eager"], outputs["numpy float64"]
        ),
        "jit vs eager (relative)": numerics.scaled_max_error(outputs["jit"], outputs["eager"]),
        "retrace calls vs NumPy float64 (relative)": max(r["result error"] for r in retrace_rows),
    }
    # float32 grown with sqrt(size): the rows are reductions of `size` terms
    _tolerances = dict.fromkeys(_errors, compilation.tolerance(size.value))
    _tolerances["retrace calls vs NumPy float64 (relative)"] = numerics.tolerance("float32")
    check = lab.Check(
        f"jit({function.value}) == eager == NumPy float64 on a {size.value}x{size.value} input; "
        "every call traced again exactly when the signature rule says",
        _errors,
        _tolerances,
        facts={
            "retraces observed == the signature rule's": all(
                r["traced again?"] == r["rule says"] for r in retrace_rows
            )
        },
    )
    check
    return (check,)


@app.cell
def _():
    sweep_max = FLAGS.control("sweep_max", ARGS, label="largest size")
    sweep_button = mo.ui.run_button(label="Measure jit vs eager")
    mo.vstack(
        [
            mo.md(
                "## As the input grows\n"
                "Sizes 8, 32, 128, ... (x is size x size), each compiled fresh, both functions. "
                "Small inputs: eager pays Python and dispatch per op, so jit wins by a lot. Large "
                "inputs: the arithmetic dominates; jit still saves memory traffic by fusing "
                "elementwise chains, but a matmul is a matmul either way."
            ),
            mo.hstack([sweep_max, sweep_button], justify="start"),
        ]
    )
    return sweep_button, sweep_max


@app.cell
def _(repeats, seed, sweep_button, sweep_max):
    mo.stop(
        lab.interactive() and not sweep_button.value,
        mo.callout(
            mo.md("Press **Measure jit vs eager** (seconds; longer for 2048)."), kind="info"
        ),
    )
    sweep_sizes = [s for s in (8, 32, 128, 512, 2048) if s <= int(sweep_max.value)]
    sweep_jobs = [(name, s) for name in compilation.JIT_NAMES for s in sweep_sizes]
    sweep = pd.DataFrame(
        [
            compilation.compile_and_steady(name, s, repeats.value, seed.value)
            for name, s in mo.status.progress_bar(
                sweep_jobs, title="compiling and timing", remove_on_exit=True
            )
        ]
    )
    speedup_chart = (
        alt.Chart(sweep, title=f"jit speed-up over eager (eager time / jit time), {MACHINE}")
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "size:Q",
                scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=sweep_sizes),
                title="size (x is size x size)",
            ),
            y=alt.Y("speedup:Q", scale=alt.Scale(type="log"), title="speed-up (log)"),
            color="function:N",
            tooltip=["function", "size", alt.Tooltip("speedup:Q", format=".1f")],
        )
        .properties(width=300, height=220)
    )
    long_times = sweep.rename(
        columns={"jit_s": "jit (steady)", "eager_s": "eager", "compile_s": "compile"}
    ).melt(
        id_vars=["function", "size"],
        value_vars=["jit (steady)", "eager", "compile"],
        var_name="measure",
        value_name="seconds",
    )
    times_chart = (
        alt.Chart(long_times, title="steady jit, eager, and compile time")
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "size:Q", scale=alt.Scale(type="log", base=2), axis=alt.Axis(values=sweep_sizes)
            ),
            y=alt.Y("seconds:Q", scale=alt.Scale(type="log"), title="seconds (log)"),
            color="measure:N",
            strokeDash="function:N",
            tooltip=["function", "size", "measure", alt.Tooltip("seconds:Q", format=".2e")],
        )
        .properties(width=300, height=220)
    )
    mo.vstack(
        [
            mo.hstack([speedup_chart, times_chart]),
            mo.md(f"All figures measured on {MACHINE} in this session; a TPU needs its own run."),
        ]
    )
    return (sweep,)


@app.cell
def _(seed):
    donation = compilation.donation_demo(8, seed.value)
    mo.vstack(
        [
            mo.md(
                """
    ## Donate a buffer you will not use again

    A training step takes the parameters and returns new ones of the same shape. With
    `jax.jit(step, donate_argnums=0)` you promise not to use the input again, so XLA may
    write the output into the input's memory: peak memory drops by one copy of the
    parameters (on a TPU, that can decide whether a model fits in HBM). The donated array
    is **deleted**: using it again is an error. The usual pattern rebinds the name:
    `params = step(params)`.
    """
            ),
            lab.table(
                [
                    {
                        "question": "x.is_deleted() after jit(step)(x)",
                        "answer": str(donation["kept_deleted"]),
                    },
                    {
                        "question": "x.is_deleted() after jit(step, donate_argnums=0)(x)",
                        "answer": str(donation["donated_deleted"]),
                    },
                    {
                        "question": "x + 1 after donating x",
                        "answer": donation["use_after_donation"]
                        or "(allowed: donation was not used)",
                    },
                    {
                        "question": "warnings",
                        "answer": "; ".join(donation["donation_warnings"]) or "none",
                    },
                    {
                        "question": "result vs NumPy float64 (relative error)",
                        "answer": f"{donation['result_error']:.2g}",
                    },
                ]
            ),
        ]
    )
    return (donation,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("jit")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_timing_has_every_stage(timing):
    assert all(timing[k] > 0 for k in ("trace_lower_s", "compile_s", "jit_s", "eager_s"))
    assert timing["fusions"] >= 1 and timing["jaxpr_ops"] >= 3
    return


@app.cell
def test_sweep_covers_both_functions(sweep, sweep_max):
    assert set(sweep["function"]) == set(compilation.JIT_NAMES)
    assert sweep["size"].max() <= int(sweep_max.value)
    return


@app.cell
def test_donated_input_is_deleted_and_result_correct(donation):
    assert donation["donated_deleted"] and not donation["kept_deleted"]
    assert donation["result_error"] <= 1e-6
    return


if __name__ == "__main__":
    app.run()
