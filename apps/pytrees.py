import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Pytrees and structured parameters")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lab import text
    from core.lessons.control_flow import pytrees

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("inputs", 4, "input features", lo=1, hi=256),
        lab.Flag("width", 16, "units of the first hidden layer", lo=1, hi=512),
        lab.Flag("depth", 3, "Dense layers (hidden layers + the output layer)", lo=1, hi=8),
        lab.Flag("outputs", 2, "output features", lo=1, hi=64),
        lab.Flag(
            "taper",
            "constant",
            "hidden widths: all equal, or halving layer by layer",
            choices=pytrees.TAPERS,
        ),
        lab.Flag("dtype", "float32", "parameter dtype (a tree_map cast)", choices=pytrees.DTYPES),
        lab.Flag("batch", 4, "rows of the input for the forward pass", lo=1, hi=64),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        description=(
            "Pytrees and structured parameters: tree_map, flatten/unflatten, custom nodes, paths."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Pytrees and structured parameters
    {lab.phase_line("pytrees")}

    A model's parameters are not one array but a structure: layers, each with weights and
    biases. JAX calls any nesting of lists, tuples, dicts and registered classes a
    **pytree**, and `grad`, `jit` and `tree_map` take and return whole pytrees. In this
    lesson you will

    - build the parameters of an MLP as a pytree whose layers are a **custom node** (a frozen
      dataclass registered with `jax.tree_util.register_dataclass`);
    - read every leaf with its **path** (`tree_flatten_with_path`, `keystr`), shape, dtype and
      bytes;
    - transform whole trees with `tree_map` (a dtype cast, an SGD step) and take them apart and
      back together with `tree_flatten` / `tree_unflatten`;
    - check the parameter count and bytes against the closed form Σ (in·out + out).
    """)
    return


@app.cell
def _():
    inputs = FLAGS.control("inputs", ARGS)
    width = FLAGS.control("width", ARGS)
    depth = FLAGS.control("depth", ARGS)
    outputs = FLAGS.control("outputs", ARGS)
    taper = FLAGS.control("taper", ARGS)
    dtype = FLAGS.control("dtype", ARGS)
    batch = FLAGS.control("batch", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([inputs, width, depth, outputs], justify="start", wrap=True),
            mo.hstack([taper, dtype, batch, seed], justify="start", wrap=True),
        ]
    )
    return batch, depth, dtype, inputs, outputs, seed, taper, width


@app.cell
def _(depth, inputs, outputs, taper, width):
    try:
        widths = pytrees.layer_widths(
            inputs.value, width.value, depth.value, outputs.value, taper.value
        )
        widths_problem = None
    except ValueError as error:
        widths, widths_problem = None, str(error)
    lab.guard(widths_problem, headline="These widths do not make an MLP.")
    mo.md(
        f"""
    ## The network: widths `{widths}`

    {text.plural(len(widths) - 1, "Dense layer")}; layer *k* maps {" → ".join(map(str, widths))}.
    """
    )
    return (widths,)


@app.cell
def _(dtype, seed, widths):
    params = pytrees.init_mlp(jax.random.key(seed.value), widths, dtype.value)
    treedef = jax.tree_util.tree_structure(params)
    mo.vstack(
        [
            mo.md(
                """
    ## The parameter pytree

    ```python
    @functools.partial(
        jax.tree_util.register_dataclass, data_fields=["w", "b"], meta_fields=["activation"]
    )
    @dataclasses.dataclass(frozen=True)
    class Dense:
        w: jax.Array          # (in, out): a leaf
        b: jax.Array          # (out,):    a leaf
        activation: str       # metadata: part of the structure, not a leaf

    params = {"layers": [Dense(w0, b0, "tanh"), ..., Dense(wL, bL, "identity")]}
    ```

    The tree, as `tree_flatten_with_path` walks it (each line: the path entry, then the
    node or the leaf's `dtype[shape]` and bytes):
    """
            ),
            text.code_block(pytrees.tree_outline(params), "text", "tree outline"),
            mo.md("Its structure, `jax.tree_util.tree_structure(params)` (leaves are `*`):"),
            text.code_block(pytrees.treedef_text(treedef), "text", "treedef"),
        ]
    )
    return params, treedef


@app.cell
def _(params):
    leaves_info = pytrees.leaf_infos(params)
    leaf_frame = pd.DataFrame(
        [
            {
                "path": i.path,
                "kind": "weights" if i.path.endswith(".w") else "biases",
                "shape": str(i.shape),
                "dtype": i.dtype,
                "elements": i.size,
                "bytes": i.nbytes,
            }
            for i in leaves_info
        ]
    )
    bytes_chart = (
        alt.Chart(leaf_frame, title="bytes per leaf")
        .mark_bar()
        .encode(
            x=alt.X("bytes:Q"),
            y=alt.Y("path:N", sort=None, title=None),
            color=alt.Color("kind:N"),
            tooltip=["path", "shape", "dtype", "elements", "bytes"],
        )
        .properties(width=360, height=max(60, 22 * len(leaf_frame)))
    )
    mo.vstack(
        [
            mo.md(
                "## Every leaf, by path\n`for path, leaf in "
                "jax.tree_util.tree_flatten_with_path(params)[0]: keystr(path), leaf.shape, "
                "leaf.dtype, leaf.nbytes`"
            ),
            mo.hstack(
                [lab.table(leaf_frame.to_dict("records")), bytes_chart],
                justify="start",
                align="start",
            ),
        ]
    )
    return (leaves_info,)


@app.cell
def _(batch, params, seed, widths):
    x_BI, y_BO = pytrees.example_batch(
        jax.random.key(seed.value), widths[0], widths[-1], batch.value
    )
    learning_rate = 0.1
    # grad returns a pytree shaped exactly like params; tree_map pairs their leaves up.
    tree_map_step = pytrees.tree_map_demo(params, x_BI, y_BO, learning_rate)
    cast_dtype = pytrees.other_dtype(params["layers"][0].w.dtype.name)
    recast = pytrees.cast(cast_dtype, params)
    _structure = jax.tree_util.tree_structure
    _same_structure = _structure(tree_map_step.grads) == _structure(params)
    mo.md(
        f"""
    ## tree_map: one function, every leaf

    - `jax.grad(loss)(params, x, y)` returns gradients with the **same structure** as `params`
      (same treedef: **{_same_structure}**).
    - An SGD step is one line over two trees:
      `jax.tree.map(lambda p, g: p - {learning_rate} * g, params, grads)`: the loss on this batch
      went from {tree_map_step.loss_before:.4f} to {tree_map_step.loss_after:.4f}.
    - A dtype cast is one line too: `jax.tree.map(lambda p: p.astype("{cast_dtype}"), params)`
      turns {sum(i.nbytes for i in pytrees.leaf_infos(params))} bytes into
      {sum(i.nbytes for i in pytrees.leaf_infos(recast))} bytes; the structure is unchanged
      (**{jax.tree_util.tree_structure(recast) == jax.tree_util.tree_structure(params)}**).
    - A global gradient norm reads all leaves:
      `sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grads)))` =
      {tree_map_step.grad_norm:.4f}.
    """
    )
    return x_BI, y_BO


@app.cell
def _(widths):
    registered_leaves, plain_leaves = pytrees.opaque_leaf_count(widths)
    mo.md(
        f"""
    ## Why register the dataclass?

    JAX only looks inside containers it knows. The same {len(widths) - 1} layers as an
    unregistered dataclass (`PlainDense`, same fields) are **{plain_leaves}** opaque leaves,
    one per layer, and `jax.grad` refuses them:
    `{pytrees.unregistered_grad_error()}`
    Registered, they are **{registered_leaves}** array leaves (`w` and `b` of each layer). The
    `activation` string is *metadata*: it sits in the treedef (`Dense[('tanh',)]` above),
    so `jit` treats it as static and a change of activation is a change of structure.
    """
    )
    return plain_leaves, registered_leaves


@app.cell
def _(params, treedef):
    flat_leaves, flat_treedef, rebuilt = pytrees.round_trip(params)
    round_trip_equal = pytrees.trees_equal(params, rebuilt)
    mo.md(
        f"""
    ## Flatten and unflatten

    `leaves, treedef = jax.tree_util.tree_flatten(params)` gives a list of
    **{len(flat_leaves)}** arrays (in the order of the table above) and the structure;
    `jax.tree_util.tree_unflatten(treedef, leaves)` puts them back. Optimizers and
    checkpointers work this way: act on a flat list, rebuild the tree. Same structure and
    bit-identical leaves after the round trip: **{round_trip_equal}** (treedef unchanged:
    {flat_treedef == treedef}).
    """
    )
    return (round_trip_equal,)


@app.cell
def _(dtype, leaves_info, params, round_trip_equal, widths, x_BI):
    # Independent references: the closed form sum(in*out + out) from the widths alone, and the
    # forward pass in numpy float64 reading the layers by hand.
    expected_count = pytrees.param_count_closed_form(widths)
    expected_bytes = pytrees.param_bytes_closed_form(widths, dtype.value)
    counted = sum(i.size for i in leaves_info)
    counted_bytes = sum(i.nbytes for i in leaves_info)
    forward_reference = pytrees.mlp_reference(params, x_BI)
    forward_error = numerics.scaled_max_error(pytrees.mlp_apply(params, x_BI), forward_reference)
    check = lab.Check(
        f"{counted} parameters / {counted_bytes} bytes in the leaves vs the closed form "
        f"Σ(in·out + out) = {expected_count} / {expected_bytes} bytes; flatten/unflatten round "
        f"trip equal: {round_trip_equal}; forward pass in {dtype.value} vs NumPy float64",
        {f"forward pass in {dtype.value} vs NumPy float64": forward_error},
        # the dtype's tolerance once per layer: each layer's output is rounded again
        pytrees.forward_tolerance(widths, dtype.value),
        facts={
            "parameter count equals the closed form": counted == expected_count,
            "bytes equal the closed form": counted_bytes == expected_bytes,
            "flatten/unflatten round trip is equal": round_trip_equal,
        },
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("pytrees")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_leaves_are_the_layers(leaves_info, widths):
    assert len(leaves_info) == 2 * (len(widths) - 1)
    assert [i.shape for i in leaves_info[0::2]] == list(zip(widths[:-1], widths[1:], strict=True))
    return


@app.cell
def test_registration_matters(plain_leaves, registered_leaves, widths):
    assert (registered_leaves, plain_leaves) == (2 * (len(widths) - 1), len(widths) - 1)
    return


@app.cell
def test_forward_shape(params, widths, x_BI, y_BO):
    assert pytrees.mlp_apply(params, x_BI).shape == y_BO.shape == (x_BI.shape[0], widths[-1])
    return


if __name__ == "__main__":
    app.run()
