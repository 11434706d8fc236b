import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Meet your arrays and devices")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import charts
    from core.lessons.setup import arrays_devices

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("rows", 6, "rows of the array", lo=1, hi=64),
        lab.Flag("cols", 10, "columns of the array", lo=1, hi=64),
        lab.Flag("dtype", "float32", "element type", choices=arrays_devices.DTYPES),
        lab.Flag("device_a", 1, "device index to commit the array to", lo=0, hi=63),
        lab.Flag("device_b", 0, "a second device index, for the clash", lo=0, hi=63),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        description="Meet your arrays and devices: jax.Array, dtype, shape and placement.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Meet your arrays and devices
    {lab.phase_line("arrays_devices")}

    A `jax.Array` is a value **and** a placement: a shape, a dtype, and the device (or
    devices) that hold its bytes. In this lesson you will

    - read shape, dtype, byte size, sharding and devices off an array;
    - see the difference between an **uncommitted** array (JAX may move it) and a
      **committed** one (`jax.device_put` pinned it), and where a computation on them runs;
    - compute row statistics in JAX and check them against NumPy in float64.
    """)
    return


@app.cell
def _():
    device_count = jax.device_count()
    rows = FLAGS.control("rows", ARGS)
    cols = FLAGS.control("cols", ARGS)
    dtype = FLAGS.control("dtype", ARGS)
    seed = FLAGS.control("seed", ARGS)
    device_a = mo.ui.slider(
        0,
        device_count - 1,
        value=min(ARGS.device_a, device_count - 1),
        label="device a",
        show_value=True,
    )
    device_b = mo.ui.slider(
        0,
        device_count - 1,
        value=min(ARGS.device_b, device_count - 1),
        label="device b",
        show_value=True,
    )
    mo.vstack(
        [
            mo.md(
                f"JAX sees **{device_count}** {jax.default_backend().upper()} devices: "
                f"`{jax.devices()}`"
            ),
            mo.hstack([rows, cols, dtype, seed], justify="start", wrap=True),
            mo.hstack([device_a, device_b], justify="start"),
        ]
    )
    return cols, device_a, device_b, dtype, rows, seed


@app.cell
def _(cols, dtype, rows, seed):
    x = arrays_devices.example_matrix(
        jax.random.key(seed.value), rows.value, cols.value, dtype.value
    )
    info = arrays_devices.describe(x)
    stats = arrays_devices.row_stats_RC(x)
    mo.vstack(
        [
            mo.md(f"## The array `x`: `{info.shape}` of `{info.dtype}`, {info.nbytes} bytes"),
            lab.table(info.rows()),
        ]
    )
    return info, stats, x


@app.cell
def _(device_a, device_b, x):
    steps = arrays_devices.placement_walkthrough(x, device_a.value, device_b.value)
    placement_rows = [
        {
            "step": step.description,
            "devices": ", ".join(step.info.devices) if step.info else "-",
            "committed": str(step.info.committed) if step.info else "-",
            "JAX says": step.error or "ok",
        }
        for step in steps
    ]
    mo.vstack(
        [
            mo.md(
                "## Where arrays live\n"
                "Operations on committed arrays run on their device; JAX refuses to guess "
                "when two committed arrays live on different devices."
            ),
            lab.table(placement_rows),
        ]
    )
    return (steps,)


@app.cell
def _(dtype, stats, x):
    # Independent reference: the same statistics in NumPy float64 on the same values.
    reference = arrays_devices.row_stats_reference(np.asarray(x.astype("float32")))
    check = lab.Check(
        f"row sum-of-squares and mean in {dtype.value} vs NumPy float64",
        numerics.scaled_max_error(stats, reference),
        arrays_devices.check_tolerance(dtype.value, x.shape[1]),
    )
    check
    return check, reference


@app.cell
def _(reference, stats, x):
    heatmap = charts.heatmap(np.asarray(x.astype("float32")), "x: values", "row", "col")
    errors = pd.DataFrame(
        {
            "row": np.arange(reference.shape[0]),
            "abs error, sum of squares": np.abs(
                np.asarray(stats[:, 0], dtype=np.float64) - reference[:, 0]
            ),
        }
    )
    error_bars = (
        alt.Chart(errors, title="|JAX - NumPy float64| per row")
        .mark_bar()
        .encode(x="row:O", y="abs error, sum of squares:Q")
    )
    mo.hstack([heatmap, error_bars])
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("arrays_devices")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_committed_array_stays_on_its_device(device_a, steps):
    assert steps[1].info.committed
    assert steps[1].info.devices == (str(jax.devices()[device_a.value]),)
    assert steps[2].info.devices == steps[1].info.devices
    return


@app.cell
def test_properties_match_numpy(info, x):
    host = np.asarray(x)
    assert info.shape == host.shape and info.nbytes == host.nbytes
    return


if __name__ == "__main__":
    app.run()
