import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Shapes, broadcasting, and dtypes")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lessons.arrays import shapes_broadcasting

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag(
            "shape_a",
            "8, 1, 6, 1",
            f"shape of a: comma-separated sizes (at most {shapes_broadcasting.MAX_RANK} axes, "
            f"each 0..{shapes_broadcasting.MAX_SIZE})",
        ),
        lab.Flag("shape_b", "7, 1, 5", "shape of b, same format"),
        lab.Flag(
            "dtype_a",
            "int32",
            "dtype of a, for the promotion example",
            choices=shapes_broadcasting.PROMOTION_DTYPES,
        ),
        lab.Flag(
            "dtype_b",
            "float16",
            "dtype of b (or a Python scalar)",
            choices=shapes_broadcasting.PROMOTION_DTYPES + shapes_broadcasting.PYTHON_SCALARS,
        ),
        lab.Flag(
            "examples",
            8,
            "N, examples in the MSE mistake (and the N x N centering example)",
            lo=2,
            hi=64,
        ),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        description=(
            "Shapes, broadcasting, and dtypes: the rule, the promotion table, and silent mistakes."
        ),
    )
    ARGS = FLAGS.parse()
    SHORT = {
        "bool": "bool",
        "int8": "i8",
        "uint8": "u8",
        "int16": "i16",
        "int32": "i32",
        "int64": "i64",
        "float16": "f16",
        "bfloat16": "bf16",
        "float32": "f32",
        "float64": "f64",
        shapes_broadcasting.NUMPY_MISSING: "n/a",
    }


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Shapes, broadcasting, and dtypes
    {lab.phase_line("shapes_broadcasting")}

    Every axis of an array is part of a contract. Broadcasting and type promotion make
    code short, and they also let a wrong shape or a wrong dtype run without an error. In
    this lesson you will

    - apply the **broadcasting rule** to two shapes of your choice and read *which axis*
      fails and why, checked against `np.broadcast_shapes`;
    - compare **dtype promotion** in `jax.numpy` and NumPy: where JAX keeps 16- and 32-bit
      types that NumPy widens to 64 bits, and how Python scalars are *weakly typed*;
    - reproduce two mistakes that return **plausible numbers** (an MSE over an N x N matrix,
      row-centering without `keepdims`) and catch them with a shape contract and
      `jax.numpy_rank_promotion("raise")`.
    """)
    return


@app.cell
def _():
    shape_a = mo.ui.text(value=ARGS.shape_a, label="shape of a")
    shape_b = mo.ui.text(value=ARGS.shape_b, label="shape of b")
    mo.vstack(
        [
            mo.md(
                "## The broadcasting rule\nType two shapes (`8, 1, 6, 1`; `()` is a scalar). "
                "Align them on the **right**; two sizes fit if they are equal or one of them is "
                "1 (it is stretched); a shorter shape gets size-1 axes on the left."
            ),
            mo.hstack([shape_a, shape_b], justify="start"),
        ]
    )
    return shape_a, shape_b


@app.cell
def _(shape_a, shape_b):
    try:
        a_shape, b_shape = (
            shapes_broadcasting.parse_shape(shape_a.value),
            shapes_broadcasting.parse_shape(shape_b.value),
        )
        shape_problem = None
    except ValueError as _error:
        a_shape = b_shape = None
        shape_problem = str(_error)
    lab.guard(shape_problem, headline="Not a shape.")

    result = shapes_broadcasting.broadcast(a_shape, b_shape)
    numpy_shape, numpy_message = shapes_broadcasting.numpy_broadcast(a_shape, b_shape)
    jax_shape, jax_message = shapes_broadcasting.jax_broadcast(a_shape, b_shape)
    if result.shape is not None:
        _verdict = mo.callout(
            mo.md(
                f"`a{a_shape} + b{b_shape}` → shape **`{result.shape}`** (`np.broadcast_shapes` "
                f"says `{numpy_shape}`, `jnp.add` makes `{jax_shape}`)."
            ),
            kind="success",
        )
    else:
        _verdict = mo.callout(
            mo.md(
                f"**`a{a_shape}` and `b{b_shape}` do not broadcast.** {result.reason}\n\n"
                f"NumPy agrees: *{numpy_message}*  \nJAX agrees: *{jax_message}*"
            ),
            kind="warn",
        )
    _verdict
    return jax_shape, numpy_shape, result


@app.cell
def _(result):
    _cells = []
    for _ax in result.axes:
        for _operand in ("a", "b", "result"):
            _size = _ax[_operand]
            _cells.append(
                {
                    "axis": str(_ax["axis"]),
                    "operand": _operand,
                    "size": "–" if _size is None else str(_size),
                    "what happens": _ax["what"],
                }
            )
    _grid = pd.DataFrame(_cells)
    _colors = alt.Scale(
        domain=[
            "match",
            "a stretched",
            "b stretched",
            "a gets a new axis",
            "b gets a new axis",
            "clash",
        ],
        range=["#54a24b", "#4c78a8", "#f58518", "#9ecae9", "#ffbf79", "#e45756"],
    )
    _base = alt.Chart(_grid, title="shapes aligned on the right: one column per axis").encode(
        x=alt.X(
            "axis:O",
            sort=[str(a["axis"]) for a in result.axes],
            axis=alt.Axis(labelAngle=0, title="axis (from the right)"),
        ),
        y=alt.Y("operand:N", sort=["a", "b", "result"], title=None),
    )
    (
        _base.mark_rect(stroke="white", strokeWidth=2).encode(
            color=alt.Color("what happens:N", scale=_colors),
            tooltip=["axis", "operand", "size", "what happens"],
        )
        + _base.mark_text(fontWeight="bold", color="black").encode(text="size:N")
    ).properties(width=70 * max(1, len(result.axes)), height=120)
    return


@app.cell
def _():
    dtype_a = FLAGS.control("dtype_a", ARGS, label="dtype of a")
    dtype_b = FLAGS.control("dtype_b", ARGS, label="dtype of b")
    mo.vstack(
        [
            mo.md(
                """
    ## Dtype promotion: jax.numpy vs NumPy

    When two arrays of different dtypes meet, the result's dtype comes from a **promotion
    table**. JAX's table is a lattice chosen so that results do not silently widen to 64 bits
    (slow or absent on accelerators), and so that `bfloat16` fits in. Python numbers are
    **weakly typed**: `x + 1.0` keeps `x`'s dtype if `x` is already a float. The table
    below computes every cell with `jnp.promote_types` / `np.promote_types` (and
    `result_type` for Python scalars); red cells are where the two libraries disagree.
    """
            ),
            mo.hstack([dtype_a, dtype_b], justify="start"),
        ]
    )
    return dtype_a, dtype_b


@app.cell
def _(dtype_a, dtype_b):
    promotions = shapes_broadcasting.promotion_table()
    # Vega reads a dot in a field name as a nested field: rename "jax.numpy" for the chart.
    _frame = pd.DataFrame(promotions).rename(columns={"jax.numpy": "jnp"})
    _frame["agreement"] = np.where(
        _frame["numpy"] == shapes_broadcasting.NUMPY_MISSING,
        "no bfloat16 in NumPy",
        np.where(_frame["differs"], "differs", "same"),
    )
    _frame["label"] = [
        SHORT[j] if not d else f"{SHORT[j]} | {SHORT[n]}"
        for j, n, d in zip(_frame["jnp"], _frame["numpy"], _frame["differs"], strict=True)
    ]
    _frame["selected"] = (_frame["a"] == dtype_a.value) & (_frame["b"] == dtype_b.value)
    _order_b = list(shapes_broadcasting.PROMOTION_DTYPES + shapes_broadcasting.PYTHON_SCALARS)
    _base = alt.Chart(
        _frame, title="a + b: result dtype (jax.numpy | NumPy where they differ)"
    ).encode(
        x=alt.X("b:N", sort=_order_b, axis=alt.Axis(orient="top", labelAngle=0)),
        y=alt.Y("a:N", sort=list(shapes_broadcasting.PROMOTION_DTYPES)),
        tooltip=[
            "a",
            "b",
            alt.Tooltip("jnp:N", title="jax.numpy"),
            "numpy",
            alt.Tooltip("lattice:N", title="JAX lattice"),
        ],
    )
    _heatmap = (
        _base.mark_rect(stroke="white").encode(
            color=alt.Color(
                "agreement:N",
                scale=alt.Scale(
                    domain=["same", "differs", "no bfloat16 in NumPy"],
                    range=["#e8f1e4", "#f4a6a3", "#e6e6e6"],
                ),
            )
        )
        + _base.mark_rect(fill=None, stroke="black", strokeWidth=3).transform_filter(
            "datum.selected"
        )
        + _base.mark_text(fontSize=11).encode(text="label:N")
    ).properties(width=66 * len(_order_b), height=30 * len(shapes_broadcasting.PROMOTION_DTYPES))
    _pair = next(r for r in promotions if r["a"] == dtype_a.value and r["b"] == dtype_b.value)
    _b_text = {"python int": "1", "python float": "1.0"}.get(
        dtype_b.value, f"np.ones(2, {dtype_b.value})"
    )
    mo.vstack(
        [
            _heatmap,
            mo.md(
                f"Your pair: `jnp.ones(2, {dtype_a.value}) + {_b_text.replace('np.', 'jnp.')}` "
                f"is **{_pair['jax.numpy']}**; NumPy gives **{_pair['numpy']}**; JAX's lattice "
                f"says **{_pair['lattice']}**. Most disagreements are NumPy widening to "
                "float64/int64 (an int32 array plus a float16 array is float64 in NumPy, "
                "float16 in JAX)."
            ),
        ]
    )
    return (promotions,)


@app.cell
def _():
    examples = FLAGS.control("examples", ARGS, label="N examples")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md(
                """
    ## Mistakes that still return plausible numbers

    A data loader hands you targets as a column `(N, 1)`; your model predicts a vector
    `(N,)`. `mean((prediction - target) ** 2)` runs without complaint: `(N,) - (N, 1)`
    broadcasts to `(N, N)`, the squared error of **every prediction against every target**,
    and the mean of that is a believable, wrong loss that training will happily minimize.
    """
            ),
            mo.hstack([examples, seed], justify="start"),
        ]
    )
    return examples, seed


@app.cell
def _(examples, seed):
    prediction_N, target_N1 = shapes_broadcasting.example_regression(
        jax.random.key(seed.value), examples.value
    )
    mse_case = shapes_broadcasting.mse_mistake(prediction_N, target_N1)
    _numbers = pd.DataFrame(
        [
            {
                "loss": f"mean over {mse_case.intermediate_shape} (broadcast)",
                "value": mse_case.wrong,
            },
            {"loss": f"mean over ({examples.value},) (shapes match)", "value": mse_case.right},
        ]
    )
    _bars = (
        alt.Chart(_numbers, title="the same 'MSE', two shapes")
        .mark_bar()
        .encode(
            y=alt.Y("loss:N", title=None, sort=None),
            x="value:Q",
            color=alt.Color("loss:N", legend=None),
            tooltip=["loss", alt.Tooltip("value:Q", format=".4f")],
        )
        .properties(width=360, height=70)
    )
    mo.vstack(
        [
            mo.md(
                f"`prediction` is `{tuple(prediction_N.shape)}`, `target` is "
                f"`{tuple(target_N1.shape)}`. Broadcast MSE = **{mse_case.wrong:.4f}**; the real "
                f"MSE = **{mse_case.right:.4f}**."
            ),
            _bars,
            mo.md(
                "**Catch it.** An explicit shape contract at the top of the loss "
                "(`shapes_broadcasting.require_same_shape`) names both shapes:"
            ),
            mo.callout(mo.md(f"`ValueError`: {mse_case.contract_error}"), kind="warn"),
            mo.md(
                "...or ask JAX to refuse implicit rank promotion inside a block: `with "
                'jax.numpy_rank_promotion("raise"): loss(prediction, target)`'
            ),
            mo.callout(mo.md(f"`ValueError`: {mse_case.rank_promotion_error}"), kind="warn"),
        ]
    )
    return mse_case, prediction_N, target_N1


@app.cell
def _(examples, seed):
    x_NN = shapes_broadcasting.example_square(jax.random.key(seed.value + 1), examples.value)
    centering_case = shapes_broadcasting.centering_mistake(x_NN)
    mo.vstack(
        [
            mo.md(
                f"""
    The second classic: center each row of a square `{tuple(x_NN.shape)}` matrix with
    `x - x.mean(axis=1)`. The means have shape `({examples.value},)`, which broadcasts as a
    **row** and is subtracted from every row: column j loses row j's mean. Same shape out,
    no error. After the mistaken centering the largest |row mean| is
    **{centering_case.wrong:.3f}**; with `keepdims=True` it is **{centering_case.right:.1e}**.
    Rank promotion (`(N, N)` with `(N,)`) is what happened, so the same context manager catches it:
    """
            ),
            mo.callout(mo.md(f"`ValueError`: {centering_case.rank_promotion_error}"), kind="warn"),
        ]
    )
    return (centering_case,)


@app.cell
def _(
    centering_case,
    jax_shape,
    mse_case,
    numpy_shape,
    prediction_N,
    promotions,
    result,
    target_N1,
):
    # Independent references: np.broadcast_shapes, JAX's documented promotion lattice, and
    # float64 closed forms of both MSE numbers (each a scalar: norm_relative_error is
    # |mse - reference| / |reference|).
    _lattice_mismatches = [(r["a"], r["b"]) for r in promotions if r["lattice"] != r["jax.numpy"]]
    _wrong_reference = shapes_broadcasting.broadcast_mse_closed_form(prediction_N, target_N1)
    _right_reference = shapes_broadcasting.mse_reference(prediction_N, target_N1)
    check = lab.Check(
        f"broadcast of {result.a} and {result.b} agrees with np.broadcast_shapes; all "
        f"{len(promotions)} jax.numpy promotions follow the documented lattice; both MSE "
        "numbers match float64",
        {
            "broadcast MSE vs float64 closed form (relative)": numerics.norm_relative_error(
                mse_case.wrong, _wrong_reference
            ),
            "matched-shape MSE vs NumPy float64 (relative)": numerics.norm_relative_error(
                mse_case.right, _right_reference
            ),
        },
        numerics.tolerance("float32"),
        facts={
            "broadcast rule agrees with np.broadcast_shapes and jnp.add": (
                result.shape == numpy_shape == jax_shape
            ),
            "every jnp.promote_types cell follows the lattice": not _lattice_mismatches,
            "rank_promotion('raise') refuses the MSE mistake": (
                mse_case.rank_promotion_error is not None
            ),
            "rank_promotion('raise') refuses the centering mistake": (
                centering_case.rank_promotion_error is not None
            ),
        },
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("shapes_broadcasting")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_shapes_broadcast_like_numpy(result):
    assert result.shape == shapes_broadcasting.numpy_broadcast(result.a, result.b)[0]
    assert (result.reason is None) == (result.shape is not None)
    if result.shape is not None:
        assert (np.zeros(result.a) + np.zeros(result.b)).shape == result.shape
    return


@app.cell
def test_promotion_differences_are_the_documented_ones(promotions):
    _rows = {(r["a"], r["b"]): r for r in promotions}
    assert _rows[("int32", "float16")]["jax.numpy"] == "float16"
    assert _rows[("int32", "float16")]["numpy"] == "float64"
    assert all(
        r["numpy"] == str(np.promote_types(r["a"], r["b"]))
        for r in promotions
        if "bfloat16" not in (r["a"], r["b"]) and r["b"] not in shapes_broadcasting.PYTHON_SCALARS
    )
    return


@app.cell
def test_mistakes_are_caught(centering_case, examples, mse_case):
    assert mse_case.intermediate_shape == (examples.value, examples.value)
    assert "rank_promotion" in mse_case.rank_promotion_error
    assert str((examples.value, 1)) in mse_case.contract_error
    assert centering_case.right < 1e-4 < centering_case.wrong
    return


if __name__ == "__main__":
    app.run()
