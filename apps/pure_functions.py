import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Pure functions and explicit inputs",
)

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import text
    from core.lessons.arrays import pure_functions

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("calls", 5, "how many times the jitted function is called", lo=1, hi=20),
        lab.Flag(
            "distinct_shapes",
            1,
            "how many different input shapes the calls cycle through",
            lo=1,
            hi=3,
        ),
        lab.Flag("size", 4, "length N of the vector x", lo=2, hi=16),
        lab.Flag(
            "old_scale",
            2.0,
            "value of the global SCALE when the function is first traced",
            lo=-3.0,
            hi=3.0,
            step=0.5,
        ),
        lab.Flag(
            "new_scale",
            3.0,
            "value the global SCALE is changed to afterwards",
            lo=-3.0,
            hi=3.0,
            step=0.5,
        ),
        lab.Flag("seed", 0, "PRNG seed (jax.random and the numpy generator)", lo=0, hi=9999),
        description="Pure functions and explicit inputs: side effects and globals under jit.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Pure functions and explicit inputs
    {lab.phase_line("pure_functions")}

    `jax.jit` does not run your Python function every time you call it. It runs it **once per
    new input shape and dtype**, with abstract *tracers* instead of numbers, records the
    array operations, compiles them, and from then on replays the compiled program. Anything
    your function does that is not an array operation on its arguments happens only during
    that trace. In this lesson you will

    - count a Python `print` (once per trace) against `jax.debug.print` (every call), and see
      a `numpy.random` draw frozen into the compiled program;
    - change a **global** that a jitted function reads and watch it keep returning the old
      value, until a new input shape makes it retrace;
    - rewrite it as a **pure function** (everything it depends on is an argument) and check
      it against NumPy in float64.
    """)
    return


@app.cell
def _():
    calls = FLAGS.control("calls", ARGS)
    distinct_shapes = FLAGS.control("distinct_shapes", ARGS, label="shapes")
    size = FLAGS.control("size", ARGS, label="N")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md(
                """
    ## Side effects run at trace time

    ```python
    rng = np.random.default_rng(seed)

    @jax.jit
    def step(x, key):
        print(f"python print: tracing step for x of shape {x.shape}")          # Python
        jax.debug.print("jax.debug.print: running step, sum(x) = {s}", s=jnp.sum(x))  # staged
        numpy_noise = rng.normal()           # a Python float: becomes a constant
        jax_noise = jax.random.normal(key)   # computed from an argument
        return numpy_noise, jax_noise

    for call in range(calls):
        key, subkey = jax.random.split(key)
        step(jnp.ones(shape_of(call)), subkey)
    ```
    """
            ),
            mo.hstack([calls, distinct_shapes, size, seed], justify="start", wrap=True),
        ]
    )
    return calls, distinct_shapes, seed, size


@app.cell
def _(calls, distinct_shapes, seed, size):
    effects = pure_functions.side_effects_demo(
        calls.value, distinct_shapes.value, size.value, seed.value
    )
    _counts = pd.DataFrame(
        [
            {
                "call": c.call,
                "printed by": pure_functions.PYTHON_PRINT + " (trace time)",
                "lines so far": c.python_prints,
            }
            for c in effects.calls
        ]
        + [
            {
                "call": c.call,
                "printed by": pure_functions.DEBUG_PRINT + " (every call)",
                "lines so far": c.debug_prints,
            }
            for c in effects.calls
        ]
    )
    _calls = text.plural(calls.value, "call")
    _counter_chart = (
        alt.Chart(_counts, title=f"{_calls}, {text.plural(effects.traces, 'trace')}: what ran when")
        .mark_line(point=True)
        .encode(
            x=alt.X("call:O", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("lines so far:Q", title="lines printed so far"),
            color=alt.Color("printed by:N", legend=alt.Legend(orient="bottom")),
            tooltip=["call", "printed by", "lines so far"],
        )
        .properties(width=380, height=200)
    )
    _noise = pd.DataFrame(
        [
            {"call": c.call, "source": "numpy.random inside jit", "value": c.numpy_noise}
            for c in effects.calls
        ]
        + [
            {"call": c.call, "source": "jax.random.normal(key)", "value": c.jax_noise}
            for c in effects.calls
        ]
    )
    _noise_chart = (
        alt.Chart(_noise, title="the 'random' number each call returned")
        .mark_line(point=True)
        .encode(
            x=alt.X("call:O", axis=alt.Axis(labelAngle=0)),
            y="value:Q",
            color=alt.Color("source:N", legend=alt.Legend(orient="bottom")),
            tooltip=["call", "source", alt.Tooltip("value:Q", format=".4f")],
        )
        .properties(width=300, height=200)
    )
    mo.vstack(
        [
            mo.hstack([_counter_chart, _noise_chart], justify="start"),
            mo.md(
                f"Python's `print` ran **{effects.traces}** "
                f"{'time' if effects.traces == 1 else 'times'}, once per trace (the jit cache "
                f"holds **{effects.compiled}** compiled "
                f"{'program' if effects.compiled == 1 else 'programs'}); `jax.debug.print` ran "
                f"**{effects.calls[-1].debug_prints}** times, once per call, because it is an "
                "operation *in* the compiled program. The numpy draw became a constant: every "
                "call with the same shape returns the same number. Everything printed:"
            ),
            mo.plain_text(effects.printed.strip()),
        ]
    )
    return (effects,)


@app.cell
def _():
    old_scale = FLAGS.control("old_scale", ARGS, label="SCALE when traced")
    new_scale = FLAGS.control("new_scale", ARGS, label="SCALE changed to")
    mo.vstack(
        [
            mo.md(
                """
    ## A global, frozen at trace time

    ```python
    SCALE = old_scale

    @jax.jit
    def scaled_tanh(x):
        return SCALE * jnp.tanh(x)      # reads the global while tracing

    scaled_tanh(x)        # traces: SCALE = old_scale is baked in
    SCALE = new_scale
    scaled_tanh(x)        # same shape: replays the old program -> old_scale * tanh(x)
    scaled_tanh(x[:-1])   # new shape: retraces, reads SCALE again -> new_scale * tanh(x[:-1])
    ```

    The pure rewrite takes the scale as an argument; a new value is a new input, not a new
    program:

    ```python
    @jax.jit
    def scaled_tanh_pure(x, scale):
        return scale * jnp.tanh(x)
    ```
    """
            ),
            mo.hstack([old_scale, new_scale], justify="start"),
        ]
    )
    return new_scale, old_scale


@app.cell
def _(new_scale, old_scale, seed, size):
    _problem = None
    if old_scale.value == new_scale.value:
        _problem = (
            f"--old-scale and --new-scale are both {old_scale.value}: a value that never "
            "changes cannot go stale"
        )
    lab.guard(_problem, headline="Nothing to see: pick two different values.")
    x_N = pure_functions.example_vector(jax.random.key(seed.value), size.value)
    stale = pure_functions.stale_global_demo(x_N, float(old_scale.value), float(new_scale.value))
    _series = {
        "jit, SCALE = old": stale.first,
        "jit, after SCALE = new (stale!)": stale.after_change,
        "no jit, after SCALE = new": stale.eager_after_change,
        "pure jit, scale = new": stale.pure_new,
    }
    _values = pd.DataFrame(
        [
            {"element": i, "computed as": k, "value": float(v[i])}
            for k, v in _series.items()
            for i in range(size.value)
        ]
    )
    _chart = (
        alt.Chart(_values, title="SCALE * tanh(x), element by element")
        .mark_bar()
        .encode(
            x=alt.X("element:O", axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("computed as:N", sort=list(_series)),
            y="value:Q",
            color=alt.Color(
                "computed as:N", sort=list(_series), legend=alt.Legend(orient="bottom", columns=2)
            ),
            tooltip=["element", "computed as", alt.Tooltip("value:Q", format=".4f")],
        )
        .properties(width=max(240, 60 * size.value), height=220)
    )
    mo.vstack(
        [
            _chart,
            mo.md(
                f"After `SCALE = {stale.new_scale}` the jitted function still returns "
                f"`{stale.old_scale} * tanh(x)` (first element {stale.after_change[0]:.4f}, not "
                f"{stale.eager_after_change[0]:.4f}); called on `x[:-1]`, a new shape, it "
                f"retraces and uses {stale.new_scale} (first element "
                f"{stale.new_shape_after_change[0]:.4f}). Two shapes, two different scales, one "
                f"function: `scaled_tanh` traced **{stale.impure_traces}** times. The pure "
                f"version traced **{stale.pure_traces}** time for both scales. On a TPU "
                "these values agree with NumPy's float64 to about 5 digits, not 7: no matmul "
                "runs here, but a TPU computes float32 tanh by an approximation."
            ),
        ]
    )
    return stale, x_N


@app.cell
def _(calls, distinct_shapes, effects, stale, x_N):
    # Independent reference: numpy float64 scale * tanh(x); counts worked out from the call list.
    _reference = pure_functions.scaled_tanh_reference
    _expected_traces = min(calls.value, distinct_shapes.value)
    _frozen = all(
        len({c.numpy_noise for c in effects.calls if c.shape == s}) == 1
        for s in {c.shape for c in effects.calls}
    )
    check = lab.Check(
        "pure `scale * tanh(x)` matches NumPy float64; the impure one returns the stale "
        f"`SCALE = {stale.old_scale}`; {text.plural(_expected_traces, 'trace')} in "
        f"{text.plural(calls.value, 'call')}",
        {
            "pure jit(x, new) vs NumPy float64 new * tanh(x)": numerics.scaled_max_error(
                stale.pure_new, _reference(x_N, stale.new_scale)
            ),
            "impure jit after the change vs NumPy float64 OLD * tanh(x)": (
                numerics.scaled_max_error(stale.after_change, _reference(x_N, stale.old_scale))
            ),
            "impure jit on a new shape vs NumPy float64 new * tanh(x[:-1])": (
                numerics.scaled_max_error(
                    stale.new_shape_after_change, _reference(x_N[:-1], stale.new_scale)
                )
            ),
        },
        numerics.tolerance("float32"),
        facts={
            f"Python print ran {_expected_traces}x in {calls.value} calls (once per new signature: "
            "here only the shape changes)": (
                effects.traces == _expected_traces == effects.compiled
            ),
            f"jax.debug.print ran {calls.value}x": effects.calls[-1].debug_prints == calls.value,
            "numpy.random returned one frozen value per shape": _frozen,
            "pure function traced once for two scales": stale.pure_traces == 1,
        },
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("pure_functions")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_trace_count_is_one_per_shape(calls, distinct_shapes, effects):
    assert [c.python_prints for c in effects.calls][-1] == min(calls.value, distinct_shapes.value)
    assert [c.debug_prints for c in effects.calls] == list(range(1, calls.value + 1))
    return


@app.cell
def test_stale_value_is_the_old_global(stale, x_N):
    np.testing.assert_allclose(stale.after_change, stale.first, rtol=0)
    _rtol, _atol, _why = pure_functions.tanh_tolerances(jax.default_backend())
    np.testing.assert_allclose(
        stale.after_change,
        pure_functions.scaled_tanh_reference(x_N, stale.old_scale),
        rtol=_rtol,
        atol=_atol,
        err_msg=_why,
    )
    assert not np.allclose(stale.after_change, stale.pure_new)
    return


if __name__ == "__main__":
    app.run()
