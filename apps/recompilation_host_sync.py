import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Diagnose recompilation and host synchronization",
)

with app.setup:
    import altair as alt
    import jax
    import jax.numpy as jnp
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lessons.performance import recompilation_host_sync
    from core.perf import machine

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("max_length", 8, "input lengths vary between 1 and this", lo=1, hi=32),
        lab.Flag("calls", 24, "calls with random lengths", lo=1, hi=100),
        lab.Flag("steps", 50, "training steps per timed loop", lo=5, hi=500),
        lab.Flag("repeats", 5, "timed runs of each loop", lo=1, hi=30),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        description="Diagnose recompilation and host synchronization.",
    )
    ARGS = FLAGS.parse()
    MACHINE = machine.machine_label()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Diagnose recompilation and host synchronization
    {lab.phase_line("recompilation_host_sync")}

    Two costs hide in a training loop that "works": **recompiling** because an input's
    signature keeps changing, and **waiting for the device** because Python asks for a value
    every step. In this lesson you will

    - count compiles as inputs change, with `jax.log_compiles()` (captured from the `jax`
      logger) and the jitted function's cache size;
    - catch an implicit transfer in a loop with `jax.transfer_guard("disallow")` and read the
      error it raises;
    - fix the loop and measure the difference (on this CPU).
    """)
    return


@app.cell
def _():
    _arguments = [
        jnp.ones(8),
        jnp.ones(8),
        np.ones(8, np.float32),
        jnp.ones(16),
        jnp.ones(8, jnp.int32),
        3.0,
        4.0,
        3,
        np.float32(2.0),
    ]
    scenario_arguments = _arguments
    scenario = recompilation_host_sync.count_compiles(lambda x: x * 2 + 1, _arguments)
    _rows = [
        {
            "call": i + 1,
            "argument": r.argument,
            "compiled": "**yes**" if r.compiled else "no",
            "cache entries": r.cache_size,
            "log": f"`{r.message}`" if r.message else "",
        }
        for i, r in enumerate(scenario)
    ]
    mo.vstack(
        [
            mo.md(
                "## What makes jit compile again\n`f = jax.jit(lambda x: x * 2 + 1)` called nine "
                "times. A compile happens when the **signature** is new: shape, dtype, and whether "
                "the value is *weakly typed* (a Python scalar adapts to the other operand's dtype, "
                "so `3.0` and `np.float32(2.0)` are different signatures; `3.0` and `4.0` are the "
                "same)."
            ),
            lab.table(_rows),
            mo.md(
                "The log lines come from `with jax.log_compiles(): ...` (JAX logs at WARNING on "
                "the `jax` logger; here a handler captures them). The **cache size** "
                "(`f._cache_size()`) can grow without a compile: a NumPy array and a `jax.Array` "
                "of the same signature take separate entries of the fast dispatch cache but share "
                "the compiled program."
            ),
        ]
    )
    return scenario, scenario_arguments


@app.cell
def _():
    max_length = FLAGS.control("max_length", ARGS, label="lengths 1..")
    calls = FLAGS.control("calls", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md(
                "## Compiles as lengths vary\nEach call gets a float32 vector of a random length."
            ),
            mo.hstack([max_length, calls, seed], justify="start"),
        ]
    )
    return calls, max_length, seed


@app.cell
def _(calls, max_length, seed):
    lengths = np.random.default_rng(seed.value).integers(1, max_length.value + 1, size=calls.value)
    length_arguments = [np.ones(int(n), np.float32) for n in lengths]
    length_records = recompilation_host_sync.count_compiles(
        lambda x: jnp.sum(x * x), length_arguments
    )
    _df = pd.DataFrame(
        {
            "call": np.arange(1, len(lengths) + 1),
            "length": lengths,
            "compiles so far": np.cumsum([r.compiled for r in length_records]),
        }
    )
    _chart = (
        alt.Chart(_df, title="cumulative compiles vs calls")
        .mark_line(point=True, interpolate="step-after")
        .encode(x="call:Q", y="compiles so far:Q", tooltip=["call", "length", "compiles so far"])
        .properties(width=420, height=180)
    )
    mo.vstack(
        [
            _chart,
            mo.md(
                f"{len(lengths)} calls, **{int(_df['compiles so far'].iloc[-1])} compiles**: "
                "one per distinct length. Every compile costs tens to hundreds of milliseconds "
                "(a large model: minutes), so varying shapes in a training loop are a bug. The "
                "fix, padding to a few bucket lengths, is in the lesson "
                "*Tracing, static arguments, and recompilation*."
            ),
        ]
    )
    return length_arguments, length_records


@app.cell
def _(seed):
    w0, x_data, y_data = recompilation_host_sync.regression_problem(jax.random.key(seed.value))
    guard_rows = []
    guard_messages = {}
    for _kind in recompilation_host_sync.LOOPS:
        _all = recompilation_host_sync.guarded(_kind, w0, x_data, y_data)
        _to_host = recompilation_host_sync.guarded(
            _kind, w0, x_data, y_data, guard="transfer_guard_device_to_host"
        )
        guard_messages[_kind] = _all
        guard_rows.append(
            {
                "loop": _kind,
                'jax.transfer_guard("disallow")': f"**caught**: `{_all}`" if _all else "ran clean",
                "device-to-host guard only": f"**caught**: `{_to_host}`"
                if _to_host
                else "ran clean",
            }
        )
    _backend = jax.default_backend().upper()
    _catches = {
        d: recompilation_host_sync.guard_catches(d) for d in ("device-to-host", "host-to-device")
    }
    mo.vstack(
        [
            mo.md(
                """
    ## Catch the hidden transfer
    Three versions of the same SGD loop on least squares:

    ```python
    # "python compare each step"           # "on device, fetch once"
    best = float("inf")                     best = jax.device_put(np.float32(np.inf))
    for _ in range(steps):                  for _ in range(steps):
        w, loss = sgd_step(w, x, y)             w, loss = sgd_step(w, x, y)
        if loss < best:  # <- syncs             best = jnp.minimum(best, loss)
            best = loss                     best = float(jax.device_get(best))  # once
    ```

    `loss < best` copies the Python float `best` to the device (**host-to-device**), and `if`
    needs the answer on the host, so Python waits for the step to finish (**device-to-host**):
    every iteration, the loop stalls. The third version, `float(loss)` each step (for
    logging), only waits. Each loop ran under the guards:
    """
            ),
            lab.table(guard_rows),
            mo.md(
                f"Measured on this **{_backend}** backend: the device-to-host guard fires "
                f"**{'yes' if _catches['device-to-host'] else 'no'}**, the host-to-device guard "
                f"**{'yes' if _catches['host-to-device'] else 'no'}**. A CPU device's memory "
                "*is* host memory, so reading an array is no transfer and there is nothing for "
                "the device-to-host guard to catch; on a TPU both directions raise "
                "(`Disallowed device-to-host transfer ...`), and `float(loss)` each step is "
                "caught too. Explicit `jax.device_put` / "
                '`jax.device_get` stay allowed: that is how the fixed loop says "yes, I mean it".'
            ),
        ]
    )
    return guard_messages, w0, x_data, y_data


@app.cell
def _():
    steps = FLAGS.control("steps", ARGS, label="steps per loop")
    repeats = FLAGS.control("repeats", ARGS)
    mo.hstack([steps, repeats], justify="start")
    return repeats, steps


@app.cell
def _(repeats, steps, w0, x_data, y_data):
    loop_samples = {
        kind: recompilation_host_sync.time_loop(
            kind, w0, x_data, y_data, steps.value, repeats.value
        )
        for kind in recompilation_host_sync.LOOPS
    }
    _df = pd.DataFrame(
        [
            {"loop": k, "run": i, "us per step": s / steps.value * 1e6}
            for k, v in loop_samples.items()
            for i, s in enumerate(v)
        ]
    )
    _medians = {k: float(np.median(v)) / steps.value for k, v in loop_samples.items()}
    _chart = (
        alt.Chart(_df, title=f"time per training step, {MACHINE}")
        .mark_tick(thickness=2, size=16)
        .encode(
            x=alt.X("us per step:Q", title="microseconds per step"),
            y=alt.Y("loop:N", title=None),
            color=alt.Color("loop:N", legend=None),
            tooltip=["loop", "run", alt.Tooltip("us per step:Q", format=".1f")],
        )
        .properties(width=480, height=120)
    )
    _fast = _medians["on device, fetch once"]
    mo.vstack(
        [
            mo.md(
                f"## The fix, measured\n{repeats.value} runs of {steps.value} steps each, "
                "after a warm-up run; ticks are runs."
            ),
            _chart,
            lab.table(
                [
                    {
                        "loop": k,
                        "median per step (us)": f"{v * 1e6:.1f}",
                        "vs on device": f"{v / _fast:.2f}x",
                    }
                    for k, v in _medians.items()
                ],
                caption=(
                    f"Measured on {MACHINE}. On a TPU each sync also waits out the device's "
                    "queue of dispatched work: measure there before you conclude anything about "
                    "TPU speed."
                ),
            ),
        ]
    )
    return (loop_samples,)


@app.cell
def _(
    length_arguments,
    length_records,
    scenario,
    scenario_arguments,
    w0,
    x_data,
    y_data,
):
    # Independent references: (1) the set of distinct (kind, shape, dtype, weak type)
    # signatures, counted in plain Python; (2) the SGD loop in NumPy float64.
    def _distinct(arguments):
        return len({recompilation_host_sync.signature(a) for a in arguments})

    _w, _x, _y = (np.asarray(a, np.float64) for a in (w0, x_data, y_data))
    _losses = []
    for _ in range(20):
        _residual = _x @ _w - _y
        _losses.append(np.mean(_residual**2))
        _w = _w - recompilation_host_sync.LEARNING_RATE * 2 * _x.T @ _residual / len(_y)
    _fixed_w, _fixed_best = recompilation_host_sync.run_loop(
        "on device, fetch once", w0, x_data, y_data, 20
    )
    _synced_w, _synced_best = recompilation_host_sync.run_loop(
        "python compare each step", w0, x_data, y_data, 20
    )
    _compiles = "compiles - distinct signatures (scenario)"
    _lengths = "compiles - distinct lengths"
    _best = "best loss, fixed loop vs NumPy float64 (relative)"
    _same = "weights, fixed vs synced loop (max abs)"
    _numpy = "weights vs NumPy float64 (max abs)"
    check = lab.Check(
        "compile counts = distinct signatures; the fixed loop trains exactly like the synced "
        "one and like NumPy float64",
        {
            _compiles: abs(sum(r.compiled for r in scenario) - _distinct(scenario_arguments)),
            _lengths: abs(sum(r.compiled for r in length_records) - _distinct(length_arguments)),
            _best: numerics.norm_relative_error(_fixed_best, min(_losses)),
            _same: numerics.max_abs_error(_fixed_w, _synced_w),
            _numpy: numerics.max_abs_error(_fixed_w, _w),
        },
        {
            # counts, and one compiled program on the same inputs: exact
            _compiles: 0.0,
            _lengths: 0.0,
            _same: 0.0,
            _best: recompilation_host_sync.BEST_LOSS_TOLERANCE,
            _numpy: numerics.tolerance("float32"),
        },
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("recompilation_host_sync")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_guard_catches_the_synced_loop_and_passes_the_fix(guard_messages):
    assert "Disallowed" in guard_messages["python compare each step"]
    assert guard_messages["on device, fetch once"] is None
    return


@app.cell
def test_each_loop_was_timed(loop_samples, repeats):
    assert set(loop_samples) == set(recompilation_host_sync.LOOPS)
    assert all(len(v) == repeats.value for v in loop_samples.values())
    return


if __name__ == "__main__":
    app.run()
