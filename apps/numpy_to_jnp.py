import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="From NumPy to jax.numpy")

with app.setup:
    import altair as alt
    import jax
    import jax.numpy as jnp
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import charts
    from core.lessons.arrays import numpy_to_jnp

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("rows", 4, "rows of x", lo=1, hi=64),
        lab.Flag("cols", 8, "columns of x (the normalized axis)", lo=1, hi=64),
        lab.Flag("kind", "softmax", "row normalization", choices=numpy_to_jnp.NORMALIZATIONS),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag(
            "matmul_size",
            256,
            "N of the N x N work timed for async dispatch",
            choices=(64, 128, 256, 512),
        ),
        description="From NumPy to jax.numpy: the same code, and where the two libraries differ.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # From NumPy to jax.numpy
    {lab.phase_line("numpy_to_jnp")}

    `jax.numpy` copies the NumPy API on purpose: most NumPy code runs unchanged with
    `import jax.numpy as jnp`. In this lesson you will

    - run **the same normalization code** (softmax or standardize each row) with `xp=np` and
      `xp=jnp` and check the JAX result against NumPy in float64;
    - meet the three places where the libraries part ways: JAX arrays are **immutable**,
      JAX computes in **float32 by default** (NumPy in float64), and JAX **dispatches
      asynchronously** (a call returns before the work is done).
    """)
    return


@app.cell
def _():
    rows = FLAGS.control("rows", ARGS)
    cols = FLAGS.control("cols", ARGS)
    kind = FLAGS.control("kind", ARGS, label="normalization")
    seed = FLAGS.control("seed", ARGS)
    matmul_size = FLAGS.control("matmul_size", ARGS, label="timed matmul size N")
    mo.hstack([rows, cols, kind, seed], justify="start", wrap=True)
    return cols, kind, matmul_size, rows, seed


@app.cell
def _(cols, kind, rows, seed):
    x_RC = numpy_to_jnp.example_rows(jax.random.key(seed.value), rows.value, cols.value)
    side = numpy_to_jnp.side_by_side(x_RC, kind.value)
    mo.vstack(
        [
            mo.md(
                f"""
    ## One function, two libraries

    `x` is a `{x_RC.shape}` float32 array of N(0, 1) values. The function below takes the
    array module as an argument; nothing in it knows which library it is running on:

    ```python
    def normalize_rows(xp, x_RC, kind):
        if kind == "softmax":
            shifted = x_RC - xp.max(x_RC, axis=1, keepdims=True)
            exps = xp.exp(shifted)
            return exps / xp.sum(exps, axis=1, keepdims=True)
        centered = x_RC - xp.mean(x_RC, axis=1, keepdims=True)      # standardize
        variance = xp.mean(centered * centered, axis=1, keepdims=True)
        return centered / xp.sqrt(variance + 1e-6)

    normalize_rows(np, x, "{kind.value}")                # NumPy
    jax.jit(normalize_rows, static_argnums=(0, 2))(jnp, x, "{kind.value}")   # jax.numpy, compiled
    ```

    Each row below is compared with an independent NumPy float64 reference (log-sum-exp /
    `np.std`). Both float32 results sit at float32's rounding level; float64 inputs give
    float64 results in NumPy, and in JAX only inside `jax.enable_x64()`.
    """
            ),
            lab.table(side.rows()),
        ]
    )
    return side, x_RC


@app.cell
def _(kind, side):
    # Independent reference: numpy float64 (log-sum-exp softmax / np.std standardize).
    # float64 runs where it exists: this CPU, or the host's CPU beside a TPU (lab.enable_float64)
    _tol64 = numerics.tolerance("float64", backend="cpu")
    check = lab.Check(
        f"{kind.value} of each row in jax.numpy (float32, and float64 in enable_x64 to "
        f"{_tol64:.0e}{lab.float64_note()}) vs NumPy float64",
        {
            "jax.numpy float32 vs NumPy float64": side.errors["jax.numpy (default float32)"],
            "jax.numpy in enable_x64 vs NumPy float64": side.errors[
                "jax.numpy inside jax.enable_x64()"
            ],
        },
        {
            "jax.numpy float32 vs NumPy float64": numerics.tolerance("float32"),
            "jax.numpy in enable_x64 vs NumPy float64": _tol64,
        },
        facts={
            "jax.numpy computes in float32": side.dtypes["jax.numpy (default float32)"]
            == "float32",
            "enable_x64 computes in float64": side.dtypes["jax.numpy inside jax.enable_x64()"]
            == "float64",
        },
    )
    check
    return (check,)


@app.cell
def _(kind, side, x_RC):
    _jnp_result = side.results["jax.numpy (default float32)"]
    _heatmap = charts.heatmap(
        _jnp_result,
        f"{kind.value}(x) per row, jax.numpy",
        row_title="row",
        col_title="col",
        # softmax is a probability (>= 0); standardize is centred on 0
        scheme="viridis" if kind.value == "softmax" else "redblue",
    )
    _row_errors = pd.DataFrame(
        {
            "row": np.arange(x_RC.shape[0]),
            "max abs error": np.abs(_jnp_result.astype(np.float64) - side.reference).max(axis=1),
        }
    )
    _bars = (
        alt.Chart(_row_errors, title="|jnp float32 - NumPy float64| per row")
        .mark_bar()
        .encode(
            x=alt.X("row:O", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("max abs error:Q", axis=alt.Axis(format=".1e")),
            tooltip=["row", alt.Tooltip("max abs error:Q", format=".3g")],
        )
        .properties(width=max(120, 24 * x_RC.shape[0]), height=160)
    )
    mo.hstack([_heatmap, _bars], justify="start", gap=3)
    return


@app.cell
def _(x_RC):
    inplace = numpy_to_jnp.inplace_assignment(x_RC, 0, 0, 100.0)
    mo.vstack(
        [
            mo.md(
                """
    ## Difference 1: JAX arrays are immutable

    In NumPy, `x[0, 0] = 100.0` changes `x` where it lives. A JAX array may live on an
    accelerator, be shared by other arrays, or be a tracer inside `jit`, so JAX refuses the
    statement and asks for the functional form, which returns a **new** array:
    """
            ),
            mo.hstack(
                [
                    mo.md(
                        "**NumPy** `x[0, 0] = 100.0` → `x[0, 0]` is now "
                        f"`{inplace.numpy_after[0, 0]}`"
                    ),
                    mo.md(
                        "**jax.numpy** `y = x.at[0, 0].set(100.0)` → `y[0, 0]` is "
                        f"`{inplace.jax_at_result[0, 0]}`; `x` unchanged: "
                        f"**{inplace.jax_original_unchanged}**"
                    ),
                ],
                justify="start",
                gap=2,
            ),
            mo.callout(
                mo.md(f"**jax.numpy `x[0, 0] = 100.0` raises `TypeError`:** {inplace.jax_error}"),
                kind="info",
            ),
            mo.md(
                "Inside `jit`, XLA turns `x.at[...].set(...)` into an in-place update when `x` "
                "is not used afterwards, so the functional form costs no copy there. The lesson "
                "*Immutable updates and indexing* goes further."
            ),
        ]
    )
    return (inplace,)


@app.cell
def _(cols, kind, rows, seed):
    dtype_rows = numpy_to_jnp.default_dtypes()
    lost = numpy_to_jnp.lost_increment()
    sweep = pd.DataFrame(
        numpy_to_jnp.precision_sweep(jax.random.key(seed.value), rows.value, cols.value, kind.value)
    )
    sweep["offset"] = sweep["offset"].map(lambda v: f"{v:g}")
    sweep["error (floored at 1e-17)"] = sweep["error"].clip(lower=1e-17)
    _sweep_chart = (
        alt.Chart(sweep, title=f"{kind.value} of N(offset, 1) rows: error vs NumPy float64")
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "offset:O",
                sort=None,
                title="offset added to every element",
                axis=alt.Axis(labelAngle=0),
            ),
            y=alt.Y(
                "error (floored at 1e-17):Q",
                scale=alt.Scale(type="log"),
                title="max relative error",
            ),
            color="computed with:N",
            tooltip=["offset", "computed with", alt.Tooltip("error:Q", format=".3g")],
        )
        .properties(width=420, height=220)
    )
    mo.vstack(
        [
            mo.md(
                """
    ## Difference 2: float32 by default

    NumPy builds float64 (and int64) arrays from Python numbers; JAX builds float32 (and
    int32), the types accelerators are fast at, and even turns a float64 NumPy array into
    float32 on the way in. `jax.enable_x64()` is a **context manager**: inside it JAX
    computes in 64 bits, outside it nothing changed (this lesson never flips the global
    `jax_enable_x64` config, which would leak into every other computation in the process).
    A TPU has no float64 hardware at all: there the course runs its float64 work on the
    host's CPU backend (`jax.devices("cpu")`, via `lab.enable_float64()`) and says so.
    """
            ),
            lab.table(dtype_rows),
            lab.table(
                [{"`(array(1e8) + 1) - 1e8`": k, "value": v} for k, v in lost.items()],
                caption=(
                    "float32 has 24 bits of mantissa: next to 1e8, the spacing between floats is "
                    "8, so the + 1 vanishes."
                ),
            ),
            _sweep_chart,
            mo.md(
                "Add a large offset to every row: **standardize** subtracts a mean of big "
                "numbers and float32 loses the digits that matter (at offset 1e6 the float32 "
                "spacing is 0.0625); **softmax** subtracts the row max first, an exact float32 "
                "subtraction, and stays accurate."
            ),
        ]
    )
    return dtype_rows, lost


@app.cell
def _(matmul_size, seed):
    with mo.status.spinner(title=f"timing {matmul_size.value} x {matmul_size.value} matmuls"):
        timing = numpy_to_jnp.dispatch_timing(jax.random.key(seed.value), int(matmul_size.value))
    _bars = pd.DataFrame(timing.rows())
    _bars["label"] = _bars["ms"].map(lambda v: f"{v:.3f} ms")
    _timing_base = alt.Chart(
        _bars,
        title=(
            f"tanh(a @ a) @ a, N = {timing.size}: median of 5 calls on this machine's "
            f"{jax.default_backend().upper()}"
        ),
    ).encode(
        y=alt.Y("what:N", sort=None, title=None),
        x=alt.X("ms:Q", title="milliseconds after the call started"),
    )
    _timing_chart = (
        _timing_base.mark_bar().encode(
            color=alt.Color("what:N", legend=None),
            tooltip=["what", alt.Tooltip("ms:Q", format=".3f")],
        )
        + _timing_base.mark_text(align="left", dx=4).encode(text="label:N")
    ).properties(width=420, height=110)
    mo.vstack(
        [
            mo.md(
                f"""
    ## Difference 3: asynchronous dispatch

    A jitted call **queues** the work on the device and returns a `jax.Array` at once; the
    value is computed in the background, and only reading it (printing, `np.asarray`,
    `.block_until_ready()`) waits. NumPy returns when the work is done. So a timer around a
    bare JAX call measures the queueing, not the computation: always time with
    `.block_until_ready()`, after a first call that compiled (here {timing.compile_s * 1e3:.1f} ms).
    """
            ),
            matmul_size,
            _timing_chart,
            mo.md(
                f"The call returned after **{timing.jax_return_s * 1e3:.3f} ms**; the result was "
                f"ready after **{timing.jax_ready_s * 1e3:.3f} ms**. (NumPy here: float32, one "
                "process's BLAS; numbers vary with load. The result agrees with NumPy float64 "
                f"to {numerics.scaled_max_error(timing.jax_result, timing.reference):.2g} "
                "relative.)"
            ),
        ]
    )
    return (timing,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("numpy_to_jnp")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_jax_refuses_inplace_assignment(inplace):
    assert "immutable" in inplace.jax_error
    assert inplace.jax_original_unchanged
    np.testing.assert_array_equal(inplace.jax_at_result, inplace.numpy_after)
    return


@app.cell
def test_x64_stays_inside_its_context(dtype_rows, lost):
    assert jnp.ones(1).dtype == jnp.float32 and not jax.config.jax_enable_x64
    assert dtype_rows[0]["jax.numpy in enable_x64"] == "float64"
    assert lost["jax.numpy (float32)"] == 0.0 and lost["numpy (float64)"] == 1.0
    return


@app.cell
def test_timed_work_matches_numpy_float64(timing):
    error = numerics.scaled_max_error(timing.jax_result, timing.reference)
    assert error <= numerics.tolerance("float32")
    assert 0 < timing.jax_return_s <= timing.jax_ready_s
    return


if __name__ == "__main__":
    app.run()
