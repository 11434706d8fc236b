import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Practice with four virtual CPU devices",
)

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.distributed import sharding
    from core.lab import charts, text

    lab.use_cpu_devices()
    # Only mesh sizes that divide the device count; the lesson's default is four devices.
    MESH_SIZES = tuple(sharding.valid_mesh_sizes(jax.device_count()))
    DEFAULT_MESH_SIZE = max(n for n in MESH_SIZES if n <= 4)
    MESH_SHAPE_NAMES = ("1-D",) + tuple(
        dict.fromkeys(
            sharding.mesh_shape_name(s) for n in MESH_SIZES for s in sharding.mesh_shapes(n)
        )
    )
    FLAGS = lab.Flags(
        lab.Flag(
            "mesh_size",
            DEFAULT_MESH_SIZE,
            "devices in the mesh (a divisor of the device count)",
            choices=MESH_SIZES,
        ),
        lab.Flag(
            "mesh_shape",
            "1-D",
            "mesh shape: 1-D (axis x) or AxB (axes x, y), A*B = mesh size",
            choices=MESH_SHAPE_NAMES,
        ),
        lab.Flag(
            "spec",
            "P('x')",
            "PartitionSpec of x",
            choices=tuple(sharding.valid_partition_specs(("x", "y"))),
        ),
        lab.Flag("rows", 8, "rows of x", lo=1, hi=64),
        lab.Flag("cols", 12, "columns of x", lo=1, hi=64),
        lab.Flag("hidden", 3, "columns of the replicated weights W", lo=1, hi=16),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        description="Practice with four virtual CPU devices: meshes, PartitionSpecs and shards.",
    )
    ARGS = FLAGS.parse()
    # One color per device id, the same in every picture, no two alike.
    DEVICE_COLOR = dict(
        zip(
            (d.id for d in jax.devices()),
            charts.distinct_colors(jax.device_count()),
            strict=True,
        )
    )


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Practice with four virtual CPU devices
    {lab.phase_line("virtual_devices")}

    A TPU slice is many chips; a laptop CPU can pretend to be several devices
    (`jax_num_cpu_devices`), which is enough to practise **sharding** before paying for a
    TPU. In this lesson you will

    - arrange devices in a **mesh** with named axes (`("x",)` or `("x", "y")`);
    - place an array on it with a **PartitionSpec** and *see* which device holds which block;
    - run `y = tanh(x) @ W` on the sharded array, read the sharding XLA chose for `y` and the
      communication it inserted, and check the result against NumPy in float64.
    """)
    return


@app.cell
def _():
    mesh_size = FLAGS.control("mesh_size", ARGS, label="mesh size (devices)")
    rows = FLAGS.control("rows", ARGS)
    cols = FLAGS.control("cols", ARGS)
    hidden = FLAGS.control("hidden", ARGS, label="hidden (columns of W)")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md(
                f"JAX sees **{jax.device_count()}** {jax.default_backend().upper()} devices: "
                f"`{jax.devices()}`. A mesh uses a divisor of that many: "
                f"{', '.join(map(str, MESH_SIZES))}."
            ),
            mo.hstack([mesh_size, rows, cols, hidden, seed], justify="start", wrap=True),
        ]
    )
    return cols, hidden, mesh_size, rows, seed


@app.cell
def _(mesh_size):
    # Offer only the factorizations of the chosen mesh size.
    shape_choices = {
        f"{sharding.mesh_shape_name(s)} · axes {sharding.axis_names_for(s)}": (
            sharding.mesh_shape_name(s)
        )
        for s in sharding.mesh_shapes(int(mesh_size.value))
    }
    wanted_shape = str(int(mesh_size.value)) if ARGS.mesh_shape == "1-D" else ARGS.mesh_shape
    shape_flag_problem = None
    if wanted_shape not in shape_choices.values():
        shape_flag_problem = (
            f"--mesh-shape {ARGS.mesh_shape} uses "
            f"{np.prod(sharding.parse_mesh_shape(ARGS.mesh_shape))} devices, not the mesh size "
            f"{mesh_size.value}: pick one of {', '.join(shape_choices.values())}."
        )
        wanted_shape = str(int(mesh_size.value))
    mesh_shape = mo.ui.dropdown(
        options=shape_choices,
        value=next(label for label, name in shape_choices.items() if name == wanted_shape),
        label="mesh shape",
    )
    mo.hstack(
        [mesh_shape]
        + ([mo.md(f"**flag ignored**: {shape_flag_problem}")] if shape_flag_problem else []),
        justify="start",
    )
    return mesh_shape, shape_flag_problem


@app.cell
def _(mesh_shape):
    mesh_axis_names = sharding.axis_names_for(sharding.parse_mesh_shape(mesh_shape.value))
    spec_choices = {
        f"{name} · {sharding.describe_spec(spec)}": name
        for name, spec in sharding.valid_partition_specs(mesh_axis_names).items()
    }
    spec_flag_problem = None
    wanted_spec = ARGS.spec
    if wanted_spec not in spec_choices.values():
        spec_flag_problem = (
            f"--spec \"{ARGS.spec}\" names mesh axis 'y', but the 1-D mesh "
            f"({mesh_shape.value},) has only axis 'x': pick a 2-D mesh shape or another spec."
        )
        wanted_spec = "P('x')"
    spec = mo.ui.dropdown(
        options=spec_choices,
        value=next(label for label, name in spec_choices.items() if name == wanted_spec),
        label="PartitionSpec of x",
    )
    mo.hstack(
        [spec] + ([mo.md(f"**flag ignored**: {spec_flag_problem}")] if spec_flag_problem else []),
        justify="start",
    )
    return spec, spec_flag_problem


@app.cell
def _(cols, mesh_shape, rows, shape_flag_problem, spec, spec_flag_problem):
    mesh = sharding.make_mesh(sharding.parse_mesh_shape(mesh_shape.value))
    partition_spec = sharding.valid_partition_specs(mesh.axis_names)[spec.value]
    # Flags that do not fit the mesh: the controls fall back in the UI, headless runs stop.
    flag_problem = None if lab.interactive() else shape_flag_problem or spec_flag_problem
    problem = flag_problem or sharding.divisibility_problem(
        (rows.value, cols.value), mesh, partition_spec
    )
    lab.guard(problem, headline="Can't shard this way.")

    # The device grid: mesh axis x down (2-D) or across (1-D), y across.
    row_axis, col_axis = mesh.axis_names if len(mesh.axis_names) == 2 else (None, "x")
    mesh_devices = pd.DataFrame(
        [
            {
                "row": at[0] if row_axis else 0,
                "col": at[-1],
                "device": str(device.id),
                "ink": charts.ink(DEVICE_COLOR[device.id]),  # readable on the device's colour
            }
            for at, device in np.ndenumerate(mesh.devices)
        ]
    )
    mesh_grid = alt.Chart(mesh_devices, title=f"mesh {dict(mesh.shape)}: device ids").encode(
        x=alt.X("col:O", title=f"mesh axis {col_axis}", axis=alt.Axis(labelAngle=0)),
        y=alt.Y(
            "row:O",
            title=f"mesh axis {row_axis}" if row_axis else None,
            axis=alt.Axis() if row_axis else None,
        ),
    )
    mesh_chart = (
        mesh_grid.mark_rect(stroke="white").encode(
            color=alt.Color(
                "device:N",
                legend=None,
                scale=alt.Scale(
                    domain=list(mesh_devices["device"]),
                    range=[DEVICE_COLOR[int(d)] for d in mesh_devices["device"]],
                ),
            )
        )
        + mesh_grid.mark_text(fontWeight="bold").encode(
            text="device:N", color=charts.ink_color()
        )
    ).properties(
        width=36 * mesh_devices["col"].nunique(), height=36 * mesh_devices["row"].nunique()
    )
    _make_mesh = (
        f"jax.make_mesh({tuple(mesh.devices.shape)}, {mesh.axis_names}, "
        f"devices=jax.devices()[:{mesh.size}], "
        f"axis_types=(AxisType.Auto,) * {len(mesh.axis_names)})"
    )
    mo.vstack(
        [
            mo.md(
                f"""
    `mesh = {_make_mesh}`

    `x = jax.device_put(x, NamedSharding(mesh, {spec.value}))`:
    {sharding.describe_spec(partition_spec)}.

    (`axis_types=Auto` lets XLA choose how to communicate; `jax.make_mesh` now defaults to
    *Explicit*, where contracting over a sharded dimension is an error unless you say how
    the result should be sharded.)
    """
            ),
            mesh_chart,
        ]
    )
    return mesh, partition_spec


@app.cell
def _(cols, hidden, mesh, partition_spec, rows, seed):
    x_RC, w_CH = sharding.example_inputs(
        jax.random.key(seed.value), rows.value, cols.value, hidden.value
    )
    run = sharding.run_sharded(x_RC, w_CH, mesh, partition_spec)
    x_layout = sharding.shard_layout(run.x_RC)
    y_layout = sharding.shard_layout(run.y_RH)
    w_layout = sharding.shard_layout(run.w_CH)

    def layout_table(layout, name):
        return pd.DataFrame(
            [
                {
                    "device": r.device,
                    "holds": r.index_text(name),
                    "shard shape": str(r.shape),
                    "bytes": r.nbytes,
                    "copy": r.replica,
                }
                for r in layout
            ]
        )

    mo.vstack(
        [
            mo.md(
                f"## Who holds what\n`x` is `{tuple(x_RC.shape)}` float32 = {x_RC.nbytes} "
                f"bytes; together the devices hold {sum(r.nbytes for r in x_layout)} bytes "
                f"({sum(r.nbytes for r in x_layout) // x_RC.nbytes}× the array: copy > 0 is a "
                "replica)."
            ),
            mo.ui.table(
                layout_table(x_layout, "x"), selection=None, label="x: device -> shard", page_size=8
            ),
        ]
    )
    return layout_table, run, w_CH, w_layout, x_RC, x_layout, y_layout


@app.cell
def _(x_RC, x_layout):
    def owner_map(layout, values, title):
        """One cell per element, colored by the device(s) holding it."""
        owners = pd.DataFrame(sharding.element_owners(layout))
        groups = sorted(set(owners["held by"]), key=lambda g: [int(d) for d in g.split(",")])
        owners["value"] = [
            float(values[r, c]) for r, c in zip(owners["row"], owners["col"], strict=True)
        ]
        size = max(4, min(24, 360 // max(values.shape)))
        return (
            alt.Chart(owners, title=title)
            .mark_rect(stroke="white", strokeWidth=0.5)
            .encode(
                x=alt.X("col:O", axis=alt.Axis(labelAngle=0)),
                y="row:O",
                # a group of devices takes the color of its first device
                color=alt.Color(
                    "held by:N",
                    title="held by devices",
                    scale=alt.Scale(
                        domain=groups, range=[DEVICE_COLOR[int(g.split(",")[0])] for g in groups]
                    ),
                ),
                tooltip=[
                    "row",
                    "col",
                    "held by",
                    "copies",
                    "block rows",
                    "block cols",
                    alt.Tooltip("value:Q", format=".4f"),
                ],
            )
            .properties(width=size * values.shape[1], height=size * values.shape[0])
        )

    def per_device(layout, shape, name, title):
        """One panel per device: the whole array in grey, the block that device holds in color."""
        blocks = pd.DataFrame(
            [
                {
                    "device": r.device,
                    "row0": r.index[0][0],
                    "row1": r.index[0][1],
                    "col0": r.index[1][0],
                    "col1": r.index[1][1],
                    "holds": r.index_text(name),
                }
                for r in layout
            ]
        )
        blocks["rows"], blocks["cols"] = shape
        x_scale = alt.Scale(domain=[0, shape[1]], nice=False)
        y_scale = alt.Scale(domain=[0, shape[0]], reverse=True, nice=False)
        whole = (
            alt.Chart()
            .mark_rect(color="#eeeeee", stroke="#999999")
            .encode(
                x=alt.X("zero:Q", scale=x_scale, title="col"),
                x2="cols:Q",
                y=alt.Y("zero:Q", scale=y_scale, title="row"),
                y2="rows:Q",
            )
            .transform_calculate(zero="0")
        )
        held = (
            alt.Chart()
            .mark_rect()
            .encode(
                x=alt.X("col0:Q", scale=x_scale),
                x2="col1:Q",
                y=alt.Y("row0:Q", scale=y_scale),
                y2="row1:Q",
                color=alt.Color(
                    "device:N",
                    legend=None,
                    scale=alt.Scale(
                        domain=[r.device for r in layout],
                        range=[DEVICE_COLOR[r.device] for r in layout],
                    ),
                ),
                tooltip=["device", "holds"],
            )
        )
        return (
            alt.layer(whole, held, data=blocks)
            .properties(
                width=max(24, 120 * shape[1] // max(shape)),
                height=max(24, 120 * shape[0] // max(shape)),
            )
            .facet(facet=alt.Facet("device:N", title=title), columns=4)
        )

    mo.vstack(
        [
            owner_map(
                x_layout,
                np.asarray(x_RC),
                "x: one cell per element, colored by the devices holding it",
            ),
            per_device(x_layout, tuple(x_RC.shape), "x", "x: what each device holds"),
        ]
    )
    return owner_map, per_device


@app.cell
def _(run, w_CH, w_layout, x_RC, y_layout):
    _y_spec = run.y_RH.sharding.spec
    _blocks = text.plural(len(sharding.holders_by_block(y_layout)), "distinct block")
    _collectives = (
        ", ".join(f"{n}× `{op}`" for op, n in run.collectives.items() if n)
        or "**none**: each device computes its block of y from the data it already holds"
    )
    mo.md(
        f"""
    ## The computation: `y = tanh(x) @ W`

    `W` is `{tuple(w_CH.shape)}`, replicated on all {len(w_layout)} devices (`P()`).
    `tanh` is elementwise: each device can apply it to its own block. The matmul sums over
    the columns of `x`: when the columns are split, no device holds a whole row, so XLA must
    communicate: add the devices' **partial sums** (`all-reduce`) or first gather the pieces
    (`all-gather`). When only rows are split, each device owns whole rows of `y`.

    - XLA chose `y`: `{tuple(run.y_RH.shape)}` as **{sharding.spec_name(_y_spec)}**
      ({sharding.describe_spec(_y_spec)}), {_blocks} on {text.plural(len(y_layout), "device")}.
    - Collectives in the compiled program: {_collectives}.
    - `x` was {x_RC.dtype}; so is `y`: `{run.y_RH.dtype}`.
    """
    )
    return


@app.cell
def _(run, w_CH, x_RC):
    # Independent references: NumPy float64 on the same inputs, and plain slicing of them.
    reference_RH = sharding.layer_reference(x_RC, w_CH)
    _float32 = numerics.tolerance("float32")
    check = lab.Check(
        "sharded tanh(x) @ W equals the unsharded result and NumPy float64; "
        "every shard equals its slice",
        {
            "sharded y vs NumPy float64 (relative)": numerics.scaled_max_error(
                run.y_RH, reference_RH
            ),
            "sharded y vs unsharded y (relative)": numerics.scaled_max_error(
                run.y_RH, run.y_unsharded_RH
            ),
            "each y shard vs its slice of NumPy y": sharding.max_shard_error(
                run.y_RH, reference_RH
            ),
            "each x shard vs its slice of x (exact)": sharding.max_shard_error(
                run.x_RC, np.asarray(x_RC)
            ),
        },
        {
            "sharded y vs NumPy float64 (relative)": _float32,
            "sharded y vs unsharded y (relative)": _float32,
            "each y shard vs its slice of NumPy y": _float32,
            "each x shard vs its slice of x (exact)": 0.0,
        },
    )
    check
    return check, reference_RH


@app.cell
def _(layout_table, owner_map, per_device, reference_RH, run, y_layout):
    mo.vstack(
        [
            owner_map(y_layout, reference_RH, "y = tanh(x) @ W: where XLA put the result"),
            per_device(y_layout, tuple(run.y_RH.shape), "y", "y: what each device holds"),
            mo.ui.table(
                layout_table(y_layout, "y"), selection=None, label="y: device -> shard", page_size=8
            ),
            mo.md(
                "Try: shard the **columns** (`P(None, 'x')`) and watch an `all-reduce` appear and "
                "`y` come back replicated; pick rows that the mesh axis does not divide to see why "
                "the lesson refuses; on a 2-D mesh, compare `P('x')` (each block on a row of the "
                "mesh) with `P(('x', 'y'))` (rows over every device)."
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("virtual_devices")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_every_element_is_held_by_equal_numbers_of_devices(
    mesh,
    x_RC,
    x_layout,
):
    owners = sharding.element_owners(x_layout)
    assert len(owners) == x_RC.size
    blocks = sharding.holders_by_block(x_layout)
    assert {r["copies"] for r in owners} == {mesh.size // len(blocks)}
    assert sorted(r.device for r in x_layout) == sorted(d.id for d in mesh.devices.flat)
    return


@app.cell
def test_weights_are_replicated(w_CH, w_layout):
    assert all(r.index == ((0, w_CH.shape[0]), (0, w_CH.shape[1])) for r in w_layout)
    return


@app.cell
def test_offered_choices_fit(mesh_size):
    assert jax.device_count() % int(mesh_size.value) == 0
    for _shape in sharding.mesh_shapes(int(mesh_size.value)):
        _axis_sizes = dict(zip(sharding.axis_names_for(_shape), _shape, strict=True))
        for _spec in sharding.valid_partition_specs(tuple(_axis_sizes)).values():
            assert sharding.divisibility_problem((64, 64), _axis_sizes, _spec) is None
    return


if __name__ == "__main__":
    app.run()
