import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Keras 3: a compiled train and eval step per backend")

with app.setup:
    import marimo as mo

    from core import lab
    from interop.keras_track import models, parity, runner, views

    FLAGS = lab.Flags(
        lab.Flag("backends", "jax,torch,tensorflow", "comma-separated Keras backends to run"),
        lab.Flag(
            "jit_compile",
            "auto",
            "model.compile(jit_compile=...): auto (XLA under jax, graph under tf), on, off",
            choices=("auto", "on", "off"),
        ),
        lab.Flag("optimizer", "adam", "Keras optimizer", choices=("sgd", "adam")),
        lab.Flag("learning_rate", 0.01, "learning rate", lo=0.0001, hi=1.0, step=0.0001),
        lab.Flag("batch_size", 32, "examples per training step", choices=(8, 16, 32, 64, 128)),
        lab.Flag("steps", 60, "training steps", lo=10, hi=2000, step=10),
        lab.Flag("eval_every", 10, "evaluate on the test set every this many steps", lo=5, hi=200),
        lab.Flag("hidden", 32, "units per hidden layer", lo=4, hi=128),
        lab.Flag("seed", 0, "seed of the weights, the data and the batch order", lo=0, hi=9999),
        description="train_eval_step in Keras 3: compiled train and eval steps per backend.",
    )
    ARGS = FLAGS.parse()
    TRAIN_POINTS = 512


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Keras 3: a compiled train and eval step per backend
    {lab.track_line("keras_train_eval_step")}

    In the JAX lesson a train step is a pure function compiled once with `nnx.jit`, and the
    eval step another. Keras builds both for you: `model.compile(optimizer, loss,
    jit_compile=...)` makes `train_on_batch` (forward, loss, gradients, optimizer update)
    and `test_on_batch` (forward and loss, no update) into compiled functions of the
    backend: an XLA program under **jax** (`jax.jit`), a `tf.function` graph under
    **tensorflow** (XLA too when `jit_compile` is on), and eager PyTorch under **torch**
    (its compiled form is `torch.compile`).

    The first step pays for the compile; the table shows it beside the steady median.
    Train and eval losses are compared across the backends step by step. Where training is
    chaotic (a learning rate near 1.0, Adam on small batches), float32 rounding differences
    grow every step and the curves part ways: the table names the step where they part and
    holds only the first steps.
    """)
    return


@app.cell
def _():
    backends = mo.ui.text(value=ARGS.backends, label="backends (comma-separated)")
    jit_compile = FLAGS.control("jit_compile", ARGS, label="jit_compile")
    optimizer = FLAGS.control("optimizer", ARGS)
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    batch_size = FLAGS.control("batch_size", ARGS, label="batch size")
    steps = FLAGS.control("steps", ARGS)
    eval_every = FLAGS.control("eval_every", ARGS, label="eval every")
    hidden = FLAGS.control("hidden", ARGS)
    seed = FLAGS.control("seed", ARGS)
    run_button = mo.ui.run_button(label="Run under the chosen backends")
    mo.vstack(
        [
            mo.hstack([backends, jit_compile], justify="start", wrap=True),
            mo.hstack([optimizer, learning_rate, batch_size], justify="start", wrap=True),
            mo.hstack([steps, eval_every, hidden, seed], justify="start", wrap=True),
            run_button,
        ]
    )
    return (
        run_button,
        backends,
        batch_size,
        eval_every,
        hidden,
        jit_compile,
        learning_rate,
        optimizer,
        seed,
        steps,
    )


@app.cell
def _(backends, jit_compile):
    chosen, _problem = runner.parse_backends(backends.value)
    if _problem is None and jit_compile.value == "on" and "torch" in chosen:
        _problem = (
            "jit_compile on under torch means torch.compile, which this app does not run: "
            "it builds the first step with a C++ compiler, which on a CPU takes far longer than "
            "the app's few-seconds budget; choose auto or off, or leave torch out"
        )
    lab.guard(_problem, headline="This combination is not run here.")
    lab.require(
        "keras",
        "safetensors",  # the weights travel to each backend's process as a safetensors file
        *[b for b in chosen if b != "jax"],
        why="Keras runs each chosen backend in its own process",
    )
    return (chosen,)


@app.cell
def _(
    batch_size,
    chosen,
    eval_every,
    hidden,
    jit_compile,
    learning_rate,
    optimizer,
    run_button,
    seed,
    steps,
):
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md(
            "Press **Run under the chosen backends**: one Keras process per backend, "
            "each importing its backend first (most of the wait; longer on a busy machine)."
        ),
    )
    spec = models.MLPSpec(hidden=hidden.value, depth=2, activation="relu")
    _data = models.make_data(spec, seed.value, steps.value, int(batch_size.value), TRAIN_POINTS)
    _training = runner.Training(
        optimizer.value,
        learning_rate.value,
        steps.value,
        jit_compile=jit_compile.value,
        eval_every=eval_every.value,
    )
    with mo.status.spinner(f"training under {', '.join(chosen)} (one process each)"):
        comparison = views.compare(spec, chosen, seed.value, _data, _training)
    _losses = [
        {
            "backend": b,
            "final train loss": float(r.train_loss[-1]),
            "final eval loss": float(r.eval_loss[-1]),
        }
        for b, r in comparison.runs.items()
    ]
    mo.vstack(
        [
            lab.table(_losses, "train and eval loss per backend"),
            lab.table(
                parity.timing_rows(comparison.runs),
                "time per step from this run (first step: the compile): this machine's CPU, "
                "not a TPU",
            ),
        ]
    )
    return comparison, spec


@app.cell
def _(comparison):
    mo.vstack(
        [
            mo.md("## Parity: every pair, and each backend against NumPy float64"),
            lab.table(comparison.table.dicts(), words={"check": ("PASS", "FAIL")}),
        ]
    )
    return


@app.cell
def _(comparison, jit_compile, spec):
    check = lab.Check(
        f"Keras MLP 2x{spec.hidden} (jit_compile {jit_compile.value}) under "
        f"{', '.join(comparison.runs)}: outputs and gradients vs NumPy float64 and pair by "
        "pair, train and eval loss curves pair by pair"
        f"{comparison.table.curve_note}",
        comparison.table.errors(),
        comparison.table.tolerances(),
    )
    check
    return (check,)


@app.cell
def _(comparison):
    _rows = [{**r, "run": "train"} for r in parity.curve_rows(comparison.runs)]
    _rows += [{**r, "run": "eval"} for r in parity.curve_rows(comparison.runs, "eval")]
    views.loss_chart(_rows, "train (solid) and eval (dashed) loss, one colour per backend")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_eval_is_compared(comparison):
    assert any(r.quantity.startswith("eval loss") for r in comparison.table.rows) or (
        len(comparison.runs) == 1
    )
    return


if __name__ == "__main__":
    app.run()
