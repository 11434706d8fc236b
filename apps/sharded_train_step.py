import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="A sharded training step")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import distributed, lab, numerics
    from core.distributed import sharding
    from core.lab import exercises

    lab.use_cpu_devices()
    MESH_SIZES = tuple(sharding.valid_mesh_sizes(jax.device_count()))
    FLAGS = lab.Flags(
        lab.Flag(
            "mesh_size", max(MESH_SIZES), "devices in the 1-D mesh (axis x)", choices=MESH_SIZES
        ),
        lab.Flag("optimizer", "adam", "optax optimizer", choices=distributed.OPTIMIZERS),
        lab.Flag("batch", 16, "examples per step", lo=1, hi=64),
        lab.Flag("features", 8, "input features F", lo=1, hi=64),
        lab.Flag("hidden", 16, "hidden units H", lo=1, hi=128),
        lab.Flag("classes", 4, "classes C", lo=2, hi=16),
        lab.Flag("learning_rate", 0.01, "learning rate", lo=0.001, hi=0.5, step=0.001),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description="A sharded training step: data parallel, FSDP and tensor parallel on one mesh.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # A sharded training step
    {lab.phase_line("sharded_train_step")}

    One training step of a small MLP (`tanh(x @ w1 + b1) @ w2 + b2`, softmax cross-entropy,
    an optax optimizer), laid out three ways on the same mesh. The program is the same
    `jax.jit(step)`; only the **shardings** of parameters, optimizer state and batch change,
    and XLA inserts the communication. In this lesson you will

    - run the step **data parallel** (batch split, parameters replicated), **FSDP** (batch
      split, parameters and optimizer state split too) and **tensor parallel** (hidden units
      split across devices);
    - check that each gives the single-device step's loss and new parameters;
    - count the bytes each device holds for parameters and optimizer state.
    """)
    return


@app.cell
def _():
    mesh_size = FLAGS.control("mesh_size", ARGS, label="mesh size (devices)")
    optimizer = FLAGS.control("optimizer", ARGS)
    batch = FLAGS.control("batch", ARGS)
    features = FLAGS.control("features", ARGS)
    hidden = FLAGS.control("hidden", ARGS)
    classes = FLAGS.control("classes", ARGS)
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([mesh_size, optimizer, learning_rate, seed], justify="start", wrap=True),
            mo.hstack([batch, features, hidden, classes], justify="start", wrap=True),
            lab.table(
                [
                    {
                        "strategy": s,
                        "what is split": distributed.STRATEGY_WORDS[s],
                        "parameter specs": ", ".join(
                            f"{k}: `{sharding.spec_name(v)}`"
                            for k, v in distributed.param_specs(s).items()
                        ),
                    }
                    for s in distributed.STRATEGIES
                ]
            ),
        ]
    )
    return (
        batch,
        classes,
        features,
        hidden,
        learning_rate,
        mesh_size,
        optimizer,
        seed,
    )


@app.cell
def _(
    batch,
    classes,
    features,
    hidden,
    learning_rate,
    mesh_size,
    optimizer,
    seed,
):
    _shapes = (int(mesh_size.value), batch.value, features.value, hidden.value)
    _problems = [
        p for s in distributed.STRATEGIES if (p := distributed.strategy_problem(s, *_shapes))
    ]
    problem = " ".join(_problems) or None
    lab.guard(problem, headline="The mesh does not divide these shapes.")
    mesh = sharding.make_mesh((int(mesh_size.value),), ("x",))
    params = distributed.init_mlp(
        jax.random.key(seed.value), features.value, hidden.value, classes.value
    )
    data = distributed.example_batch(
        jax.random.fold_in(jax.random.key(seed.value), 1),
        batch.value,
        features.value,
        classes.value,
    )
    tx = distributed.make_optimizer(optimizer.value, learning_rate.value)
    single = distributed.sharded_step(params, data, None, "data", tx)
    results = {}
    for _strategy in mo.status.progress_bar(
        distributed.STRATEGIES, title="one step per strategy", remove_on_exit=True
    ):
        results[_strategy] = distributed.sharded_step(params, data, mesh, _strategy, tx)
    return data, mesh, params, results, single


@app.cell
def _(data, learning_rate, optimizer, params, results, single):
    # Independent references: the single-device step, and NumPy float64 backprop (+ SGD).
    reference_loss, reference_grads = distributed.reference_loss_and_grads(params, data)
    _errors = {}  # all absolute: max |a - b|
    for _name, _result in results.items():
        _errors[f"{_name}: |loss - single device|"] = numerics.max_abs_error(
            _result.loss, single.loss
        )
        _errors[f"{_name}: max |params - single device|"] = distributed.max_tree_error(
            _result.params, single.params
        )
        _errors[f"{_name}: |loss - NumPy f64|"] = numerics.max_abs_error(
            _result.loss, reference_loss
        )
        if optimizer.value == "sgd":
            _expected = {
                k: np.asarray(params[k], np.float64) - learning_rate.value * reference_grads[k]
                for k in params
            }
            _errors[f"{_name}: max |params - NumPy f64 SGD|"] = distributed.max_tree_error(
                _result.params, _expected
            )
    check = lab.Check(
        "data parallel, FSDP and tensor parallel steps equal the single-device step and "
        f"NumPy float64 ({optimizer.value})",
        _errors,
        numerics.tolerance("float32"),
    )
    check
    return (check,)


@app.cell
def _(mesh, results):
    bytes_rows = []
    for _name, _result in results.items():
        _params = distributed.device_bytes(_result.params)
        _opt = distributed.device_bytes(_result.opt_state)
        bytes_rows.append(
            {
                "strategy": _name,
                "parameter bytes / device": max(_params.values()),
                "optimizer bytes / device": max(_opt.values(), default=0),
                "total on all devices": sum(_params.values()) + sum(_opt.values()),
                "collectives in the step": ", ".join(
                    f"{n}× {op}" for op, n in _result.collectives.items()
                )
                or "none",
            }
        )
    _long = pd.DataFrame(bytes_rows).melt(
        id_vars="strategy",
        value_vars=["parameter bytes / device", "optimizer bytes / device"],
        var_name="what",
        value_name="bytes",
    )
    mo.vstack(
        [
            mo.md(
                f"## Memory per device ({mesh.size} devices)\nRead from each array's "
                "`addressable_shards`: the largest device's share."
            ),
            lab.table(bytes_rows),
            alt.Chart(_long, title="bytes each device holds")
            .mark_bar()
            .encode(
                x=alt.X("bytes:Q"),
                y=alt.Y("strategy:N", title=None),
                color="what:N",
                yOffset="what:N",
                tooltip=["strategy", "what", "bytes"],
            ),
            mo.md(
                "FSDP and tensor parallel keep a slice of the weights (and of Adam's two moments) "
                "on each device; data parallel keeps a full copy everywhere and pays only one "
                "`all-reduce` of the gradients. FSDP pays `all-gather`s to rebuild the weights "
                "before using them."
            ),
        ]
    )
    return (bytes_rows,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "sharded_train_step", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("sharded_train_step")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_fsdp_holds_less_than_data_parallel(bytes_rows, mesh):
    _by = {r["strategy"]: r for r in bytes_rows}
    if mesh.size > 1:
        assert _by["fsdp"]["parameter bytes / device"] < _by["data"]["parameter bytes / device"]
        assert _by["fsdp"]["optimizer bytes / device"] <= _by["data"]["optimizer bytes / device"]
    return


@app.cell
def test_parameters_keep_their_specs(results):
    for _name, _result in results.items():
        for _k, _spec in distributed.param_specs(_name).items():
            assert _result.params[_k].sharding.spec == _spec
    return


if __name__ == "__main__":
    app.run()
