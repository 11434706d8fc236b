import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Keras + JAX: a custom loop with Optax vs model.fit")

with app.setup:
    import tempfile

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from interop.keras_track import child
    from interop.keras_track import custom_loop as loop

    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "seed of the weights and of the digits chosen", lo=0, hi=9999),
        lab.Flag("optimizer", "sgd", "Keras optimizer and its Optax twin", choices=loop.OPTIMIZERS),
        lab.Flag("learning_rate", 0.1, "learning rate", lo=0.001, hi=1.0, step=0.001),
        lab.Flag("examples", 128, "digits trained on", lo=8, hi=512),
        lab.Flag("batch", 32, "batch size (must divide the examples)", lo=1, hi=128),
        lab.Flag("epochs", 3, "passes over the examples", lo=1, hi=20),
        lab.Flag("hidden", 32, "hidden units", lo=1, hi=128),
        description=(
            "model.fit and a jax.jit loop around model.stateless_call with Optax, from the "
            "same weights: losses and parameters compared."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Keras + JAX: a custom loop with Optax vs `model.fit`
    {lab.track_line("keras_custom_loop")}

    On the jax backend a Keras model is also a pure function:
    `model.stateless_call(trainable, non_trainable, x)` takes the weights as arguments and
    returns the output and the new non-trainable state, so it goes inside `jax.jit` and
    `jax.value_and_grad` like the course's own models, with an Optax optimizer doing the
    update. This app trains one MLP on digits both ways, from the same weights on the same
    batches in the same order, and compares every step's loss and every parameter at the end.

    The optimizers must mean the same thing. SGD does. Adam does not: Keras's `epsilon` is
    the paper's "epsilon hat" (added to sqrt(v) before the bias correction, which is folded
    into the step size), optax.adam's `eps` is Algorithm 1's (added to the bias-corrected
    sqrt(v_hat)). So the loop's Adam is Keras's formula as an Optax transformation, and
    optax.adam with the same eps is run beside it to show how far apart they drift.

    Keras fixes its backend at its first import, once per process. Both trainings run in
    one `KERAS_BACKEND=jax` subprocess: setting the variable in this notebook would work only
    if nothing here had imported Keras first, and a server running several notebooks shares
    one process, so the notebook never imports Keras.

    You will learn:

    - the custom-loop pattern: `stateless_call` inside `jax.jit` with Optax;
    - why "Adam" with the same eps is two different optimizers in Keras and Optax;
    - to recover per-step losses from Keras's running-mean logs.
    """)
    return


@app.cell
def _():
    seed = FLAGS.control("seed", ARGS)
    optimizer = FLAGS.control("optimizer", ARGS)
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    examples = FLAGS.control("examples", ARGS)
    batch = FLAGS.control("batch", ARGS)
    epochs = FLAGS.control("epochs", ARGS)
    hidden = FLAGS.control("hidden", ARGS)
    run_button = mo.ui.run_button(label="Train both ways (Keras jax subprocess)")
    mo.vstack(
        [
            mo.hstack([seed, optimizer, learning_rate], justify="start", wrap=True),
            mo.hstack([examples, batch, epochs, hidden], justify="start", wrap=True),
            run_button,
        ]
    )
    return batch, epochs, examples, hidden, learning_rate, optimizer, run_button, seed


@app.cell
def _(batch, epochs, examples, hidden, learning_rate, optimizer, seed):
    request = loop.Request(
        seed=seed.value,
        examples=examples.value,
        batch=batch.value,
        epochs=epochs.value,
        hidden=hidden.value,
        optimizer=optimizer.value,
        learning_rate=float(learning_rate.value),
    )
    lab.guard(loop.problem(request), headline="These settings cannot be compared step by step.")
    lab.require("keras", why="the Keras model runs in a subprocess (jax backend)")
    return (request,)


@app.cell
def _(request, run_button):
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md("Press **Train both ways**."),
    )
    with tempfile.TemporaryDirectory(prefix="keras_custom_loop_") as _tmp:
        try:
            result = loop.run(request, _tmp)
            _failure = None
        except loop.child.WorkerError as _error:
            result, _failure = None, str(_error)
    lab.guard(_failure, headline="The Keras subprocess failed.")
    lab.report("model.fit", result.fit_s, "s")
    lab.report("custom loop (jit + optax)", result.loop_s, "s")
    mo.md(
        f"Keras {result.keras_version}, jax backend: {request.steps} steps each; model.fit "
        f"{result.fit_s:.2f} s, the custom loop {result.loop_s:.2f} s (compilation included); "
        f"the subprocess {result.seconds:.1f} s with imports."
    )
    return (result,)


@app.cell
def _(result):
    _rows = [
        {
            "weight": path,
            "shape": str(fitted.shape),
            "loop vs fit": numerics.scaled_max_error(result.loop_weights[path], fitted),
            "moved from init": numerics.scaled_max_error(result.initial[path], fitted),
            **(
                {
                    "optax.adam (same eps) vs fit": numerics.scaled_max_error(
                        result.optax_adam_weights[path], fitted
                    )
                }
                if result.optax_adam_weights
                else {}
            ),
        }
        for path, fitted in result.fit_weights.items()
    ]
    mo.vstack(
        [
            mo.md("## Parameters after training (scaled max error)"),
            lab.table(_rows, "every trainable weight"),
        ]
    )
    return


@app.cell
def _(request, result):
    # model.fit is the reference (Keras's own trainer and optimizer); the loop shares only
    # the model's forward with it. Equal within float32 tolerance at every step and weight:
    # the CPU's, where the child computed both (child.FLOAT32), on a TPU host too.
    _tol = child.FLOAT32
    _errors = {
        f"{path} (loop vs fit)": numerics.scaled_max_error(result.loop_weights[path], fitted)
        for path, fitted in result.fit_weights.items()
    }
    _errors["loss at every step"] = numerics.scaled_max_error(result.loop_losses, result.fit_losses)
    _errors["loss per epoch (history)"] = numerics.scaled_max_error(
        result.loop_epoch_losses, result.fit_epoch_losses
    )
    # A dead unit's weights (a ReLU that never fires, a tiny step) need not move, so the guard
    # against comparing two untouched copies is that training moved some weight past float32
    # rounding; the table above shows how far each one moved.
    _moved = max(
        numerics.scaled_max_error(result.initial[p], w) for p, w in result.fit_weights.items()
    )
    check = lab.Check(
        f"stateless_call + {request.optimizer} (Optax, jax.jit) equals model.fit over "
        f"{request.steps} steps",
        _errors,
        _tol,
        facts={
            f"one loss per step ({request.steps})": len(result.loop_losses) == request.steps,
            "training moved the weights (the comparison is not of two untouched copies)": (
                _moved > _tol
            ),
        },
    )
    check
    return (check,)


@app.cell
def _(request, result):
    _frame = pd.concat(
        [
            pd.DataFrame(
                {"step": range(1, request.steps + 1), "loss": result.fit_losses, "run": "fit"}
            ),
            pd.DataFrame(
                {
                    "step": range(1, request.steps + 1),
                    "loss": result.loop_losses,
                    "run": "custom loop",
                }
            ),
        ]
    )
    _chart = (
        alt.Chart(_frame)
        .mark_line(point=True)
        .encode(
            x="step:Q",
            y=alt.Y("loss:Q", scale=alt.Scale(zero=False)),
            color="run:N",
            strokeDash="run:N",
        )
        .properties(
            width=520,
            height=260,
            title=f"{request.optimizer}: the two loss curves lie on each other",
        )
    )
    _chart
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_optax_adam_differs(request, result):
    if request.optimizer == "adam":
        _worst = max(
            numerics.scaled_max_error(result.optax_adam_weights[p], w)
            for p, w in result.fit_weights.items()
        )
        assert _worst > child.FLOAT32
    return


if __name__ == "__main__":
    app.run()
