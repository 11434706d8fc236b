import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Keras 3: a tiny MLP under three backends")

with app.setup:
    import marimo as mo

    from core import lab, numerics
    from interop.keras_track import models, parity, runner, views

    FLAGS = lab.Flags(
        lab.Flag("backends", "jax,torch,tensorflow", "comma-separated Keras backends to run"),
        lab.Flag("points", 200, "training points (two moons)", lo=20, hi=1000, step=10),
        lab.Flag("noise", 0.1, "std of the jitter added to every point", lo=0.0, hi=0.5, step=0.01),
        lab.Flag("hidden", 16, "units per hidden layer", lo=2, hi=64),
        lab.Flag("depth", 2, "hidden layers", lo=1, hi=4),
        lab.Flag("activation", "tanh", "hidden activation", choices=models.ACTIVATIONS),
        lab.Flag("learning_rate", 0.3, "SGD step size", lo=0.001, hi=1.0, step=0.001),
        lab.Flag("steps", 60, "full-batch training steps", lo=2, hi=1000, step=2),
        lab.Flag("seed", 0, "seed of the weights and the data", lo=0, hi=9999),
        description="tiny_mlp's MLP in Keras 3 under jax, torch and tensorflow.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Keras 3: a tiny MLP under three backends
    {lab.track_line("keras_tiny_mlp")}

    The lesson built a multilayer perceptron by hand in `jax.numpy`; here it is a stack of
    Keras `Dense` layers, and the same code runs under **jax**, **torch** and **tensorflow**
    (one process each: Keras fixes its backend at first import). The weights are drawn once
    in NumPy and loaded by every backend from one verified safetensors file; each trains
    full-batch on the same two moons with Keras's `SGD` through `model.compile` and
    `train_on_batch`.

    The check compares each backend's logits with the MLP written out in NumPy float64, its
    gradients with hand-written backpropagation in float64 (every weight), and the backends
    with each other, including the loss after every training step. Where training is chaotic
    (a learning rate near 1.0), float32 rounding differences grow every step and the curves
    part ways: the table names the step where they part and holds only the first steps.
    """)
    return


@app.cell
def _():
    backends = mo.ui.text(value=ARGS.backends, label="backends (comma-separated)")
    points = FLAGS.control("points", ARGS)
    noise = FLAGS.control("noise", ARGS)
    hidden = FLAGS.control("hidden", ARGS)
    depth = FLAGS.control("depth", ARGS)
    activation = FLAGS.control("activation", ARGS)
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    steps = FLAGS.control("steps", ARGS)
    seed = FLAGS.control("seed", ARGS)
    run_button = mo.ui.run_button(label="Run under the chosen backends")
    mo.vstack(
        [
            backends,
            mo.hstack([points, noise], justify="start", wrap=True),
            mo.hstack([hidden, depth, activation], justify="start", wrap=True),
            mo.hstack([learning_rate, steps, seed], justify="start", wrap=True),
            run_button,
        ]
    )
    return (
        run_button,
        activation,
        backends,
        depth,
        hidden,
        learning_rate,
        noise,
        points,
        seed,
        steps,
    )


@app.cell
def _(backends):
    chosen, _problem = runner.parse_backends(backends.value)
    lab.guard(_problem, headline="These backends cannot be run.")
    lab.require(
        "keras",
        "safetensors",  # the weights travel to each backend's process as a safetensors file
        *[b for b in chosen if b != "jax"],
        why="Keras runs each chosen backend in its own process",
    )
    return (chosen,)


@app.cell
def _(activation, chosen, depth, hidden, learning_rate, noise, points, run_button, seed, steps):
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md(
            "Press **Run under the chosen backends**: one Keras process per backend, "
            "each importing its backend first (most of the wait; longer on a busy machine)."
        ),
    )
    spec = models.MLPSpec(hidden=hidden.value, depth=depth.value, activation=activation.value)
    _data = models.make_data(spec, seed.value, steps.value, points.value, points.value, noise.value)
    _training = runner.Training("sgd", learning_rate.value, steps.value)
    with mo.status.spinner(f"training under {', '.join(chosen)} (one process each)"):
        comparison = views.compare(spec, chosen, seed.value, _data, _training)
    mo.vstack(
        [
            lab.table(comparison.accuracy_rows(), "accuracy on fresh moons after training"),
            lab.table(
                parity.timing_rows(comparison.runs),
                "time per training step from this run: this machine's CPU, not a TPU",
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
def _(comparison, spec):
    _exact = models.mlp_gradient_reference(
        spec, comparison.weights, comparison.data["x_probe"], comparison.data["y_probe"]
    )
    _errors, _bounds = comparison.table.errors(), comparison.table.tolerances()
    for _name, _run in comparison.runs.items():
        _key = f"gradients: {_name} vs NumPy float64 backprop (every weight)"
        _errors[_key] = max(numerics.scaled_max_error(_run.gradients[n], _exact[n]) for n in _exact)
        _bounds[_key] = parity.FLOAT32  # the worker computed on the CPU, as the table's rows
    check = lab.Check(
        f"Keras MLP {spec.depth}x{spec.hidden} {spec.activation} under "
        f"{', '.join(comparison.runs)}: logits and gradients vs NumPy float64 and pair by "
        "pair, loss curves pair by pair"
        f"{comparison.table.curve_note}",
        _errors,
        _bounds,
    )
    check
    return (check,)


@app.cell
def _(comparison):
    views.loss_chart(
        parity.curve_rows(comparison.runs), "training loss per step, one colour per backend"
    )
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


if __name__ == "__main__":
    app.run()
