import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Arrays, meshes, and sharding")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import distributed, lab, numerics
    from core.distributed import sharding
    from core.lab import charts, exercises

    lab.use_cpu_devices()
    MESH_SIZES = tuple(sharding.valid_mesh_sizes(jax.device_count()))
    MESH_SHAPE_NAMES = ("1-D",) + tuple(
        dict.fromkeys(
            sharding.mesh_shape_name(s) for n in MESH_SIZES for s in sharding.mesh_shapes(n)
        )
    )
    SPEC_NAMES = tuple(sharding.valid_partition_specs(("x", "y")))
    FLAGS = lab.Flags(
        lab.Flag(
            "mesh_size",
            max(MESH_SIZES),
            "devices in the mesh (a divisor of the device count)",
            choices=MESH_SIZES,
        ),
        lab.Flag(
            "mesh_shape",
            "1-D",
            "mesh shape: 1-D (axis x) or AxB (axes x, y), A*B = mesh size",
            choices=MESH_SHAPE_NAMES,
        ),
        lab.Flag("x_spec", "P('x')", "PartitionSpec of x (batch, features)", choices=SPEC_NAMES),
        lab.Flag("w_spec", "P()", "PartitionSpec of W (features, hidden)", choices=SPEC_NAMES),
        lab.Flag("batch", 16, "rows of x", lo=1, hi=64),
        lab.Flag("features", 8, "columns of x = rows of W", lo=1, hi=64),
        lab.Flag("hidden", 4, "columns of W", lo=1, hi=32),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description="Arrays, meshes, and sharding: PartitionSpecs and how shardings propagate.",
    )
    ARGS = FLAGS.parse()
    # One colour per device, no two alike.
    DEVICE_COLORS = charts.distinct_colors(jax.device_count())


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Arrays, meshes, and sharding
    {lab.phase_line("meshes_sharding")}

    Distributed training starts with one idea: a `jax.Array` can live on many devices at
    once. A **mesh** names a grid of devices; a **PartitionSpec** says which mesh axis splits
    which dimension of an array. In this lesson you will

    - build a mesh on the 8 virtual CPU devices and shard `x` and `W` with the specs you pick
      (only specs that divide the shapes evenly go through);
    - see each device's shard;
    - follow the sharding through `y = x @ W` and `sum(y)`, as the compiled program reports
      it (`compiled.output_shardings`), and check the numbers against NumPy float64.
    """)
    return


@app.cell
def _():
    mesh_size = FLAGS.control("mesh_size", ARGS, label="mesh size (devices)")
    batch = FLAGS.control("batch", ARGS, label="batch (rows of x)")
    features = FLAGS.control("features", ARGS)
    hidden = FLAGS.control("hidden", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md(
                f"JAX sees **{jax.device_count()}** devices; a mesh uses a divisor of that many: "
                f"{', '.join(map(str, MESH_SIZES))}."
            ),
            mo.hstack([mesh_size, batch, features, hidden, seed], justify="start", wrap=True),
        ]
    )
    return batch, features, hidden, mesh_size, seed


@app.cell
def _(mesh_size):
    # Only the factorizations of the chosen mesh size, and only specs that name its axes.
    _shapes = {sharding.mesh_shape_name(s): s for s in sharding.mesh_shapes(int(mesh_size.value))}
    wanted_shape = str(int(mesh_size.value)) if ARGS.mesh_shape == "1-D" else ARGS.mesh_shape
    flag_problems = []
    if wanted_shape not in _shapes:
        flag_problems.append(
            f"--mesh-shape {ARGS.mesh_shape} does not use {mesh_size.value} devices: "
            f"pick one of {', '.join(_shapes)}."
        )
        wanted_shape = str(int(mesh_size.value))
    mesh_shape = mo.ui.dropdown(options=list(_shapes), value=wanted_shape, label="mesh shape")
    mesh_shape
    return flag_problems, mesh_shape


@app.cell
def _(flag_problems, mesh_shape):
    _axes = sharding.axis_names_for(sharding.parse_mesh_shape(mesh_shape.value))
    _specs = list(sharding.valid_partition_specs(_axes))
    spec_problems = list(flag_problems)
    _chosen = {}
    for _name in ("x_spec", "w_spec"):
        _chosen[_name] = getattr(ARGS, _name)
        if _chosen[_name] not in _specs:
            spec_problems.append(
                f"--{_name.replace('_', '-')} \"{_chosen[_name]}\" names axis 'y', but mesh "
                f"{mesh_shape.value} has only axis 'x'."
            )
            _chosen[_name] = "P()"
    x_spec = mo.ui.dropdown(options=_specs, value=_chosen["x_spec"], label="x spec")
    w_spec = mo.ui.dropdown(options=_specs, value=_chosen["w_spec"], label="W spec")
    mo.hstack([x_spec, w_spec], justify="start")
    return spec_problems, w_spec, x_spec


@app.cell
def _(
    batch,
    features,
    hidden,
    mesh_shape,
    seed,
    spec_problems,
    w_spec,
    x_spec,
):
    mesh = sharding.make_mesh(sharding.parse_mesh_shape(mesh_shape.value))
    _specs = sharding.valid_partition_specs(mesh.axis_names)
    x_partition, w_partition = _specs[x_spec.value], _specs[w_spec.value]
    problem = (None if lab.interactive() else " ".join(spec_problems) or None) or (
        sharding.divisibility_problem((batch.value, features.value), mesh, x_partition)
        or sharding.divisibility_problem((features.value, hidden.value), mesh, w_partition)
    )
    lab.guard(problem, headline="Can't shard this way.")
    x_BF, w_FH = sharding.example_inputs(
        jax.random.key(seed.value), batch.value, features.value, hidden.value
    )
    # HIGHEST: this lesson checks where the blocks go, not the MXU's precision. At a TPU's
    # DEFAULT (one bfloat16 pass) sum(x @ W) was 2.2e-2 off NumPy float64 on a v5e chip.
    with jax.default_matmul_precision("highest"):
        steps = distributed.propagation_steps(x_BF, w_FH, mesh, x_partition, w_partition)
    _make_mesh = (
        f"jax.make_mesh({tuple(mesh.devices.shape)}, {mesh.axis_names}, "
        f"axis_types=(AxisType.Auto,) * {len(mesh.axis_names)})"
    )
    _w_text = (
        sharding.describe_spec(w_partition).replace("rows", "features").replace("cols", "hidden")
    )
    mo.md(
        f"""
    `mesh = {_make_mesh}`
    (Auto lets XLA choose the communication; `jax.make_mesh` defaults to Explicit).
    The matmuls run at `jax.default_matmul_precision("highest")`: on a TPU the default is one
    bfloat16 pass (about 4e-3 relative per product), and this lesson is about placement.

    `x`: {sharding.describe_spec(x_partition)}. `W`: {_w_text}.
    """
    )
    return mesh, steps, w_FH, x_BF


@app.cell
def _(mesh, steps):
    _rows = []
    for _step in steps:
        _layout = sharding.shard_layout(_step["result"])
        _rows.append(
            {
                "value": _step["value"],
                "shape": _step["shape"],
                "sharding": f"`{_step['spec']}`",
                "distinct blocks": len(sharding.holders_by_block(_layout)),
                "bytes per device": _layout[0].nbytes,
                "bytes on all devices": sum(r.nbytes for r in _layout),
            }
        )
    _hlo = distributed.compiled_hlo(
        lambda x, w: (x @ w).sum(), steps[0]["result"], steps[1]["result"]
    )
    _ops = distributed.hlo_collectives(_hlo)
    _collectives = ", ".join(f"`{r['op']}` of {r['shape']} ({r['bytes']} B)" for r in _ops)
    mo.vstack(
        [
            mo.md(
                "## Sharding propagation\nXLA decides the sharding of every intermediate from "
                "the inputs' shardings:"
            ),
            lab.table(_rows),
            mo.md(
                f"Collectives XLA inserted for `sum(x @ W)` on {mesh.size} devices: "
                + (_collectives or "**none**")
                + ". Splitting the contracting dimension (features) leaves each device a partial "
                "sum: an `all-reduce` appears."
            ),
        ]
    )
    return


@app.cell
def _(steps):
    def _blocks(step):
        layout = sharding.shard_layout(step["result"])
        shape = step["shape"] if len(step["shape"]) == 2 else (1, 1)
        rows = []
        for r in layout:
            (r0, r1), (c0, c1) = r.index if len(r.index) == 2 else ((0, 1), (0, 1))
            rows.append(
                {
                    "value": step["value"],
                    "device": r.device,
                    "row0": r0,
                    "row1": r1,
                    "col0": c0,
                    "col1": c1,
                    "rows": shape[0],
                    "cols": shape[1],
                    "holds": r.index_text("a"),
                }
            )
        return rows

    _frame = pd.DataFrame([row for step in steps[:3] for row in _blocks(step)])
    _whole = (
        alt.Chart()
        .mark_rect(color="#eeeeee", stroke="#999999")
        .encode(
            x=alt.X("zero:Q", title="col"),
            x2="cols:Q",
            y=alt.Y("zero:Q", title="row", scale=alt.Scale(reverse=True)),
            y2="rows:Q",
        )
        .transform_calculate(zero="0")
    )
    _held = (
        alt.Chart()
        .mark_rect()
        .encode(
            x="col0:Q",
            x2="col1:Q",
            y="row0:Q",
            y2="row1:Q",
            color=alt.Color(
                "device:N",
                legend=None,
                scale=alt.Scale(domain=list(range(jax.device_count())), range=DEVICE_COLORS),
            ),
            tooltip=["value", "device", "holds"],
        )
    )
    mo.vstack(
        [
            mo.md(
                "## What each device holds\nOne panel per device and value: the whole array in "
                "grey, that device's block in color."
            ),
            alt.layer(_whole, _held, data=_frame)
            .properties(width=70, height=70)
            .facet(row=alt.Row("value:N", title=None), column=alt.Column("device:N"))
            .resolve_scale(x="independent", y="independent"),
        ]
    )
    return


@app.cell
def _(steps, w_FH, x_BF):
    # Independent reference: NumPy float64 on the same inputs.
    reference_BH = np.asarray(x_BF, np.float64) @ np.asarray(w_FH, np.float64)
    _float32 = numerics.tolerance("float32", precision="highest")  # the steps ran at HIGHEST
    check = lab.Check(
        "sharded x @ W and sum(x @ W) equal NumPy float64; every shard equals its slice",
        {
            "y vs NumPy float64 (max abs)": numerics.max_abs_error(
                steps[2]["result"], reference_BH
            ),
            "each y shard vs its slice of NumPy y": sharding.max_shard_error(
                steps[2]["result"], reference_BH
            ),
            "sum(y) vs NumPy float64 (relative)": numerics.scaled_max_error(
                steps[3]["result"], reference_BH.sum()
            ),
            "each x shard vs its slice of x (exact)": sharding.max_shard_error(
                steps[0]["result"], np.asarray(x_BF)
            ),
        },
        {
            "y vs NumPy float64 (max abs)": _float32,
            "each y shard vs its slice of NumPy y": _float32,
            "sum(y) vs NumPy float64 (relative)": _float32,
            "each x shard vs its slice of x (exact)": 0.0,
        },
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "meshes_sharding", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("meshes_sharding")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_input_shardings_are_the_chosen_specs(steps, w_spec, x_spec):
    assert steps[0]["spec"] == x_spec.value and steps[1]["spec"] == w_spec.value
    assert steps[3]["spec"] == "P()"  # a scalar is always replicated
    return


@app.cell
def test_offered_choices_fit(mesh_size):
    assert jax.device_count() % int(mesh_size.value) == 0
    for _shape in sharding.mesh_shapes(int(mesh_size.value)):
        for _spec in sharding.valid_partition_specs(sharding.axis_names_for(_shape)).values():
            assert (
                sharding.divisibility_problem(
                    (64, 64), dict(zip(sharding.axis_names_for(_shape), _shape, strict=True)), _spec
                )
                is None
            )
    return


if __name__ == "__main__":
    app.run()
