import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Optimize with Optax")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lab import text
    from core.lessons.math_optimization import optax_basics as ob

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("learning_rate", 0.05, "learning rate lr", lo=-0.2, hi=0.5, step=0.01),
        lab.Flag(
            "momentum", 0.9, "beta of the lesson's momentum transform", lo=0.0, hi=0.95, step=0.05
        ),
        lab.Flag("weight_decay", 0.01, "add_decayed_weights strength", lo=0.0, hi=0.2, step=0.01),
        lab.Flag("clip_norm", 1.0, "clip_by_global_norm bound", lo=0.0, hi=10.0, step=0.1),
        lab.Flag("steps", 100, "optimizer steps", lo=10, hi=500, step=10),
        lab.Flag("features", 5, "features D of the linear model", lo=1, hi=32),
        lab.Flag("seed", 0, "PRNG seed (data and init)", lo=0, hi=9999),
        description="Optimize with Optax: transformations, chain, state pytrees, a custom one.",
    )
    ARGS = FLAGS.parse()
    EXAMPLES = 128


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Optimize with Optax
    {lab.phase_line("optax_basics")}

    Optax does not hand you a monolithic "optimizer object". It hands you **gradient
    transformations**: pairs of pure functions `init(params) -> state` and
    `update(updates, state, params) -> (updates, state)`, each doing one thing (clip, add
    momentum, add weight decay, scale by the learning rate), and `optax.chain` to stack them.
    In this lesson you will

    - write your own `GradientTransformation` (heavy-ball momentum) and chain it with optax's
      clipping, weight decay and learning-rate scaling into one optimizer;
    - check it against the same chain built from optax's own `optax.trace`, and against the
      whole update written out in NumPy float64;
    - print the optimizer **state** as the pytree it is, and count what it stores.
    """)
    return


@app.cell
def _():
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    momentum = FLAGS.control("momentum", ARGS, label="momentum beta")
    weight_decay = FLAGS.control("weight_decay", ARGS, label="weight decay")
    clip_norm = FLAGS.control("clip_norm", ARGS, label="clip norm")
    steps = FLAGS.control("steps", ARGS)
    features = FLAGS.control("features", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack(
                [learning_rate, momentum, weight_decay, clip_norm], justify="start", wrap=True
            ),
            mo.hstack([steps, features, seed], justify="start"),
        ]
    )
    return clip_norm, features, learning_rate, momentum, seed, steps, weight_decay


@app.cell(hide_code=True)
def _():
    mo.md("""
    ## A transformation of your own

    ```python
    class MomentumState(NamedTuple):
        velocity: optax.Updates                     # a pytree shaped like params

    def lesson_momentum(beta):
        def init_fn(params):
            return MomentumState(jax.tree.map(jnp.zeros_like, params))
        def update_fn(updates, state, params=None):
            velocity = jax.tree.map(lambda v, g: beta * v + g, state.velocity, updates)
            return velocity, MomentumState(velocity)
        return optax.GradientTransformation(init_fn, update_fn)

    tx = optax.chain(
        optax.clip_by_global_norm(clip_norm),     # g * min(1, c / ||g||)
        lesson_momentum(beta),                    # v = beta v + g
        optax.add_decayed_weights(weight_decay),  # v + wd * p
        optax.scale_by_learning_rate(lr),         # -lr * (...)
    )
    ```
    """)
    return


@app.cell
def _(clip_norm, features, learning_rate, momentum, seed, steps, weight_decay):
    lab.guard(
        ob.problem(learning_rate.value, clip_norm.value),
        lab.table([{"learning rate": learning_rate.value, "clip norm": clip_norm.value}]),
        headline="This optimizer cannot descend.",
    )
    hyper = (learning_rate.value, momentum.value, weight_decay.value, clip_norm.value)
    x_ND, y_N, params = ob.make_data(jax.random.key(seed.value), EXAMPLES, features.value)
    path, losses, state = ob.train(
        "composed (lesson momentum)", hyper, params, x_ND, y_N, steps.value
    )
    # the same chain with optax.trace as its momentum: the check's first reference
    builtin_path, _, builtin_state = ob.train(ob.TRACE_CHAIN, hyper, params, x_ND, y_N, steps.value)
    _rows = ob.state_rows(state)
    mo.vstack(
        [
            mo.md(
                f"""
    ## The optimizer state is a pytree

    After {steps.value} steps, `state` is a tuple with one entry per transformation of the
    chain. Its structure:
    """
            ),
            text.code_block(str(jax.tree_util.tree_structure(state)), "text", "state structure"),
            mo.md(
                f"""
    {len(_rows)} leaves, {sum(r["values"] for r in _rows)} numbers (params: {features.value + 1}).
    Clipping, weight decay and the learning-rate scale keep no state; the momentum keeps one
    velocity per parameter. optax's `trace` stores the same (its leaves:
    {sum(r["values"] for r in ob.state_rows(builtin_state))} numbers).
    """
            ),
            lab.table(_rows),
        ]
    )
    return builtin_path, hyper, losses, params, path, x_ND, y_N


@app.cell
def _(builtin_path, hyper, params, path, steps, x_ND, y_N):
    # Independent references: the same chain built from optax.trace, and the whole update
    # (clip, momentum, decay, step) in NumPy float64 with the closed-form gradient.
    _reference = ob.reference_training(params, x_ND, y_N, steps.value, *hyper)
    check = lab.Check(
        "the chain with the lesson's momentum transform vs the chain with optax.trace, and vs "
        f"the update in NumPy float64, params after each of {steps.value} steps",
        {
            "vs optax.trace chain": numerics.tree_scaled_max_error(path, builtin_path),
            "vs NumPy float64": numerics.tree_scaled_max_error(path, _reference),
        },
        {"vs optax.trace chain": 1e-6, "vs NumPy float64": numerics.tolerance("float32")},
    )
    check
    return (check,)


@app.cell
def _(clip_norm, learning_rate, losses, momentum, params, steps, weight_decay, x_ND, y_N):
    _curves = {"composed (lesson momentum)": losses}
    _hyper = (learning_rate.value, momentum.value, weight_decay.value, clip_norm.value)
    for _name in ("sgd", "adam"):
        _curves[_name] = ob.train(_name, _hyper, params, x_ND, y_N, steps.value)[1]
    _rows = pd.DataFrame(
        [
            {"optimizer": name, "step": t, "loss": max(float(v), 1e-12)}
            for name, values in _curves.items()
            for t, v in enumerate(values)
        ]
    )
    mo.vstack(
        [
            mo.md(
                "## Three optimizers, one interface\n`optax.sgd(lr)` and `optax.adam(lr)` "
                "are chains too; all three train the same model from the same start."
            ),
            alt.Chart(_rows, title="Training loss")
            .mark_line()
            .encode(
                x="step:Q",
                y=alt.Y("loss:Q", scale=alt.Scale(type="log")),
                color=alt.Color("optimizer:N", sort=list(ob.OPTIMIZERS)),
                tooltip=["optimizer", "step", alt.Tooltip("loss:Q", format=".4g")],
            )
            .properties(width=480, height=240),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("optax_basics")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_training_descends(losses):
    assert losses[-1] < losses[0]
    return


if __name__ == "__main__":
    app.run()
