import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Model and state with Flax NNX")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd
    from flax import nnx

    from core import lab, numerics
    from core.nn import mlp, nnx_models

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("hidden", 16, "units per hidden layer", lo=2, hi=64),
        lab.Flag("depth", 2, "hidden layers", lo=1, hi=4),
        lab.Flag("classes", 3, "output logits", lo=2, hi=8),
        lab.Flag("activation", "relu", "hidden activation", choices=mlp.ACTIVATIONS),
        lab.Flag(
            "dropout_rate",
            0.3,
            "dropout rate after every hidden layer (training mode)",
            lo=0.0,
            hi=0.9,
            step=0.05,
        ),
        lab.Flag("batch", 6, "rows in the example batch", lo=2, hi=64),
        lab.Flag("params_seed", 0, "seed of the 'params' RNG stream", lo=0, hi=9999),
        lab.Flag("dropout_seed", 1, "seed of the 'dropout' RNG stream", lo=0, hi=9999),
        description=(
            "Model and state with Flax NNX: modules, split/merge, state pytrees, RNG streams."
        ),
    )
    ARGS = FLAGS.parse()
    # Tighter than the float32 table (1e-5): the NNX module and core.nn.mlp.forward are two
    # float32 programs of the same ops on the same weights; only op order could differ.
    SAME_PROGRAM_TOLERANCE = 1e-6

    @nnx.jit
    def apply(model, x):
        """Call the module, compiled; nnx.jit carries the dropout stream's state out."""
        return model(x)


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Model and state with Flax NNX
    {lab.phase_line("flax_nnx")}

    The previous lesson kept the MLP's weights in a list of dicts and passed them to a pure
    function. **Flax NNX** puts them back inside Python objects: an `nnx.Module` *holds*
    its parameters as `nnx.Param` variables, and its random streams as `nnx.RngState`.
    JAX transformations still need pytrees, so NNX converts both ways. In this lesson you will

    - write the same MLP as an `nnx.Module` and read its **state**: every variable's path,
      type and shape;
    - take a module apart with `nnx.split` (a static **GraphDef** + a **State** pytree) and
      put it back with `nnx.merge`, which is how NNX code enters `jax.jit`;
    - use two **RNG streams**: `params` draws the weights once, `dropout` draws a fresh mask
      on every call (and counts its draws);
    - copy the hand-written weights into the module and check that the outputs match.
    """)
    return


@app.cell
def _():
    hidden = FLAGS.control("hidden", ARGS)
    depth = FLAGS.control("depth", ARGS)
    classes = FLAGS.control("classes", ARGS)
    activation = FLAGS.control("activation", ARGS)
    dropout_rate = FLAGS.control("dropout_rate", ARGS, label="dropout rate")
    batch = FLAGS.control("batch", ARGS)
    params_seed = FLAGS.control("params_seed", ARGS, label="params seed")
    dropout_seed = FLAGS.control("dropout_seed", ARGS, label="dropout seed")
    mo.vstack(
        [
            mo.hstack(
                [hidden, depth, classes, activation, dropout_rate], justify="start", wrap=True
            ),
            mo.hstack([batch, params_seed, dropout_seed], justify="start"),
        ]
    )
    return (
        activation,
        batch,
        classes,
        depth,
        dropout_rate,
        dropout_seed,
        hidden,
        params_seed,
    )


@app.cell
def _(
    activation,
    batch,
    classes,
    depth,
    dropout_rate,
    dropout_seed,
    hidden,
    params_seed,
):
    sizes = mlp.layer_sizes(2, hidden.value, depth.value, classes.value)

    # Built inside nnx.jit: one compiled program draws all the weights (run eagerly, every
    # initializer would compile on its own). The stream keys are arguments, so building
    # again with other seeds reuses the program.
    @nnx.jit
    def build_mlp(params_key, dropout_key):
        return nnx_models.MLP(
            sizes,
            rngs=nnx.Rngs(params=params_key, dropout=dropout_key),
            activation=activation.value,
            dropout_rate=dropout_rate.value,
        )

    model = build_mlp(jax.random.key(params_seed.value), jax.random.key(dropout_seed.value))
    x_BD, _labels = mlp.make_dataset(jax.random.key(params_seed.value + 1), "blobs", batch.value)
    graphdef, state = nnx.split(model)
    state_rows = nnx_models.state_rows(state)
    mo.vstack(
        [
            mo.md(
                f"""
    ## The module and its state

    ```python
    model = MLP({sizes}, rngs=nnx.Rngs(params={params_seed.value}, dropout={dropout_seed.value}),
                activation="{activation.value}", dropout_rate={dropout_rate.value})
    graphdef, state = nnx.split(model)
    ```

    `state` is a pytree of **{len(state_rows)} variables**; {nnx_models.count_params(model)}
    numbers are trainable `Param`s. The dropout layer keeps its own stream (`key`, and a
    `count` of draws so far); the `params` stream was only needed to build the weights.
    """
            ),
            lab.table(state_rows),
        ]
    )
    return build_mlp, graphdef, model, sizes, state_rows, x_BD


@app.cell
def _(graphdef, model, x_BD):
    # nnx.split -> pure function of a pytree -> jax.jit; nnx.merge rebuilds the module inside.
    model.eval()  # dropout off: deterministic outputs to compare
    _eval_graphdef, eval_state = nnx.split(model)
    direct_logits = np.asarray(apply(model, x_BD))

    @jax.jit
    def forward_from_state(state, x):
        return nnx.merge(_eval_graphdef, state)(x)

    merged_logits = np.asarray(forward_from_state(eval_state, x_BD))
    # A State is a pytree: tree.map over it makes a new state without touching the module.
    params_state, rest_state = nnx.split(model, nnx.Param, ...)[1:]
    doubled = jax.tree.map(lambda p: 2 * np.asarray(p), params_state)
    doubled_logits = np.asarray(forward_from_state(nnx.merge_state(doubled, rest_state), x_BD))
    model.train()
    split_error = numerics.scaled_max_error(merged_logits, direct_logits)
    mo.md(
        f"""
    ## Split, transform, merge

    `jax.jit(lambda state, x: nnx.merge(graphdef, state)(x))` gives the same logits as
    calling the module: max relative difference **{split_error:.1e}**.
    `nnx.split(model, nnx.Param, ...)` separates the {len(jax.tree.leaves(params_state))}
    `Param` leaves from the {len(jax.tree.leaves(rest_state))} other leaves (the RNG state);
    doubling every parameter with `jax.tree.map` and merging gives a second model whose first
    logit is {float(doubled_logits[0, 0]):.4f} (the original: {float(direct_logits[0, 0]):.4f}),
    while the original module keeps its weights. The GraphDef is static structure only:
    `{type(graphdef).__name__}` with no arrays.
    """
    )
    return direct_logits, merged_logits, split_error


@app.cell
def _(build_mlp, dropout_rate, dropout_seed, model, params_seed, x_BD):
    # Dropout draws from the 'dropout' stream on every call in training mode.
    draws_before = sum(nnx_models.rng_counts(model).values())
    first_call = np.asarray(apply(model, x_BD))
    draws_between = sum(nnx_models.rng_counts(model).values())
    second_call = np.asarray(apply(model, x_BD))
    draws_after = sum(nnx_models.rng_counts(model).values())
    model.eval()
    eval_calls = [np.asarray(apply(model, x_BD)) for _ in range(2)]
    draws_in_eval = sum(nnx_models.rng_counts(model).values()) - draws_after
    model.train()
    # The same params seed with another dropout seed: the same weights, other masks.
    twin = build_mlp(jax.random.key(params_seed.value), jax.random.key(dropout_seed.value + 1))
    twin_weight_difference = max(
        float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
        for a, b in zip(
            jax.tree.leaves(nnx.state(model, nnx.Param)),
            jax.tree.leaves(nnx.state(twin, nnx.Param)),
            strict=True,
        )
    )
    twin_call = np.asarray(apply(twin, x_BD))
    calls = {
        "train call 1": first_call,
        "train call 2": second_call,
        "eval call 1": eval_calls[0],
        "eval call 2": eval_calls[1],
        f"twin (dropout seed {dropout_seed.value + 1})": twin_call,
    }
    call_rows = pd.DataFrame(
        [
            {"call": name, "class": c, "logit": float(logits[0, c])}
            for name, logits in calls.items()
            for c in range(logits.shape[1])
        ]
    )
    calls_chart = (
        alt.Chart(call_rows, title="Logits of row 0, call after call")
        .mark_bar()
        .encode(
            x=alt.X("class:O"),
            xOffset="call:N",
            y="logit:Q",
            color=alt.Color("call:N", sort=list(calls)),
            tooltip=["call", "class", "logit"],
        )
        .properties(width=360, height=200)
    )
    _no_stream_note = (
        " (dropout rate 0: the model holds no dropout stream at all, and the calls agree)"
        if dropout_rate.value == 0
        else ""
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## RNG streams: `params` once, `dropout` on every call

    In training mode each call draws one mask per hidden layer from the `dropout` stream:
    its count went {draws_before} → {draws_between} → {draws_after}, and the two calls differ
    by up to {np.max(np.abs(first_call - second_call)):.3g}{_no_stream_note}.
    `model.eval()` switches
    dropout off: two calls agree exactly and draw {draws_in_eval} times. A twin built with the
    same `params` seed but another `dropout` seed has identical weights (max |difference|
    {twin_weight_difference:.1g}) and different masks: separate streams make weight init and
    dropout reproducible independently.
    """
            ),
            calls_chart,
        ]
    )
    return (
        draws_after,
        draws_before,
        draws_between,
        draws_in_eval,
        eval_calls,
        first_call,
        second_call,
        twin_weight_difference,
    )


@app.cell
def _(activation, model, params_seed, sizes, x_BD):
    # Independent reference: the hand-written jnp MLP of the previous lesson (core.nn.mlp) and
    # its NumPy float64 twin, with the same weights copied into a clone of the module.
    hand_params = mlp.init_params(jax.random.key(params_seed.value), sizes, "he")
    clone = nnx_models.load_hand_params(nnx.clone(model), hand_params)
    clone.eval()
    nnx_logits = apply(clone, x_BD)
    hand_logits = mlp.forward(hand_params, x_BD, activation.value)
    numpy_logits = mlp.forward_reference(hand_params, x_BD, activation.value)
    # float32 vs float64 grows with depth and width: the NumPy comparison gets the float32
    # table's bound; the weights must come back exactly.
    check = lab.Check(
        "NNX MLP (eval mode) with the hand-written weights copied in vs core.nn.mlp.forward "
        "and NumPy float64",
        {
            "NNX module vs core.nn.mlp.forward (jnp)": numerics.scaled_max_error(
                nnx_logits, hand_logits
            ),
            "NNX module vs NumPy float64": numerics.scaled_max_error(nnx_logits, numpy_logits),
            "weights read back vs weights copied in": numerics.tree_scaled_max_error(
                nnx_models.to_hand_params(clone), hand_params
            ),
        },
        {
            "NNX module vs core.nn.mlp.forward (jnp)": SAME_PROGRAM_TOLERANCE,
            "NNX module vs NumPy float64": numerics.tolerance("float32"),
            "weights read back vs weights copied in": 0.0,
        },
    )
    check
    return check, clone, hand_params


@app.cell
def _(state_rows):
    sizes_by_path = pd.DataFrame(state_rows)
    state_chart = (
        alt.Chart(sizes_by_path, title="Where the numbers live: elements per variable")
        .mark_bar()
        .encode(
            y=alt.Y("path:N", sort=None, title=None),
            x=alt.X("elements:Q", scale=alt.Scale(type="symlog")),
            color="type:N",
            tooltip=["path", "type", "shape", "dtype", "elements"],
        )
        .properties(width=360)
    )
    mo.vstack(
        [
            state_chart,
            mo.md(
                "Try: raise **depth** and watch new `layers.N` paths appear; set the **dropout "
                "rate** to 0 and the two training calls agree; change the **dropout seed** only "
                "and the weights stay the same while the masks change."
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("flax_nnx")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_split_merge_round_trip(direct_logits, merged_logits, split_error):
    assert split_error <= 1e-6
    np.testing.assert_allclose(merged_logits, direct_logits, rtol=1e-6, atol=1e-6)
    return


@app.cell
def test_state_lists_every_variable(model, sizes, state_rows):
    _paths = {row["path"] for row in state_rows}
    assert {f"layers.{i}.kernel" for i in range(len(sizes) - 1)} <= _paths
    assert sum(
        row["elements"] for row in state_rows if row["type"] == "Param"
    ) == nnx_models.count_params(model)
    return


@app.cell
def test_streams_behave(
    activation,
    batch,
    depth,
    draws_after,
    draws_before,
    draws_between,
    draws_in_eval,
    dropout_rate,
    eval_calls,
    first_call,
    hidden,
    second_call,
    sizes,
    twin_weight_difference,
):
    # one mask per hidden layer per training call; no stream at all without dropout
    _draws_per_call = len(sizes) - 2 if dropout_rate.value > 0 else 0
    assert (
        draws_between - draws_before == _draws_per_call
        and draws_after - draws_between == _draws_per_call
    )
    assert draws_in_eval == 0
    np.testing.assert_array_equal(eval_calls[0], eval_calls[1])
    assert twin_weight_difference == 0.0
    # "the two calls differ": claimed only where two masks agree by chance < 1e-6 (a tiny
    # batch at a low rate can repeat its mask; nnx_models_test checks the boundary)
    if nnx_models.training_calls_surely_differ(
        dropout_rate.value, batch.value, hidden.value, depth.value, activation.value
    ):
        assert not np.allclose(first_call, second_call)
    return


@app.cell
def test_clone_left_the_model_alone(clone, hand_params, model):
    _copied = nnx_models.to_hand_params(clone)
    assert numerics.tree_scaled_max_error(_copied, hand_params) == 0.0
    assert not np.allclose(model.layers[0].kernel[...], clone.layers[0].kernel[...])
    return


if __name__ == "__main__":
    app.run()
