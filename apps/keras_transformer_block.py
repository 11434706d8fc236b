import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium", app_title="Keras 3: a causal Transformer block under three backends"
)

with app.setup:
    import marimo as mo

    from core import lab
    from interop.keras_track import models, parity, runner, views

    FLAGS = lab.Flags(
        lab.Flag("backends", "jax,torch,tensorflow", "comma-separated Keras backends to run"),
        lab.Flag("width", 16, "model width D", lo=8, hi=64, step=8),
        lab.Flag("heads", 2, "attention heads H (must divide the width)", lo=1, hi=8),
        lab.Flag("seq_len", 8, "sequence length T", lo=2, hi=32),
        lab.Flag("batch", 4, "sequences per training step", lo=1, hi=32),
        lab.Flag("optimizer", "adam", "Keras optimizer", choices=("sgd", "adam")),
        lab.Flag("learning_rate", 0.01, "learning rate", lo=0.0001, hi=0.1, step=0.0001),
        lab.Flag("steps", 20, "training steps (one batch each)", lo=2, hi=200),
        lab.Flag("seed", 0, "seed of the weights and the data", lo=0, hi=9999),
        description="A pre-LN causal Transformer block in Keras 3 under jax, torch, tensorflow.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Keras 3: a causal Transformer block under three backends
    {lab.track_line("keras_transformer_block")}

    The lesson's pre-LayerNorm block, `x + Attention(LN(x))` then `x + MLP(LN(x))`, built from
    Keras's `MultiHeadAttention(use_causal_mask=True)`, `LayerNormalization(epsilon=1e-5)`
    (Keras's default is 1e-3) and `Dense(activation="gelu")` (exact GELU), and run under
    **jax**, **torch** and **tensorflow**, one process each, from the same weights.

    The check holds each backend's outputs and gradients against the block written out in
    NumPy float64 (attention with an explicit lower-triangular mask) and against each other,
    and shows that the mask is really on: every backend is far from the *unmasked* attention.
    The training task is learnable only by looking back: the target at position t is the
    input at t - 1.
    """)
    return


@app.cell
def _():
    backends = mo.ui.text(value=ARGS.backends, label="backends (comma-separated)")
    width = FLAGS.control("width", ARGS)
    heads = FLAGS.control("heads", ARGS)
    seq_len = FLAGS.control("seq_len", ARGS, label="sequence length")
    batch = FLAGS.control("batch", ARGS)
    optimizer = FLAGS.control("optimizer", ARGS)
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    steps = FLAGS.control("steps", ARGS)
    seed = FLAGS.control("seed", ARGS)
    run_button = mo.ui.run_button(label="Run under the chosen backends")
    mo.vstack(
        [
            backends,
            mo.hstack([width, heads, seq_len, batch], justify="start", wrap=True),
            mo.hstack([optimizer, learning_rate, steps, seed], justify="start", wrap=True),
            run_button,
        ]
    )
    return run_button, backends, batch, heads, learning_rate, optimizer, seed, seq_len, steps, width


@app.cell
def _(backends, heads, seq_len, width):
    chosen, _problem = runner.parse_backends(backends.value)
    spec = None
    if _problem is None:
        try:
            spec = models.TransformerSpec(width.value, heads.value, seq_len.value)
        except ValueError as _error:
            _problem = str(_error)
    lab.guard(_problem, headline="This block cannot be built.")
    lab.require(
        "keras",
        "safetensors",  # the weights travel to each backend's process as a safetensors file
        *[b for b in chosen if b != "jax"],
        why="Keras runs each chosen backend in its own process",
    )
    return chosen, spec


@app.cell
def _(batch, chosen, learning_rate, optimizer, run_button, seed, spec, steps):
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md(
            "Press **Run under the chosen backends**: one Keras process per backend, "
            "each importing its backend first (most of the wait; longer on a busy machine)."
        ),
    )
    _data = models.make_data(spec, seed.value, steps.value, batch.value)
    _training = runner.Training(optimizer.value, learning_rate.value, steps.value)
    with mo.status.spinner(f"running under {', '.join(chosen)} (one process each)"):
        comparison = views.compare(spec, chosen, seed.value, _data, _training)
    lab.table(
        parity.timing_rows(comparison.runs),
        "time per training step from this run: this machine's CPU, not a TPU",
    )
    return (comparison,)


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
    _mask = parity.mask_facts(spec, comparison.weights, comparison.data, comparison.runs)
    check = lab.Check(
        f"Keras Transformer block D={spec.width} H={spec.heads} T={spec.seq_len} under "
        f"{', '.join(comparison.runs)}: outputs and gradients vs NumPy float64 causal "
        "attention and pair by pair, loss curves pair by pair",
        comparison.table.errors(),
        comparison.table.tolerances(),
        facts=_mask,
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


@app.cell
def test_every_gradient_is_compared(comparison, spec):
    for _run in comparison.runs.values():
        assert sorted(_run.gradients) == sorted(models.weight_shapes(spec))
    return


if __name__ == "__main__":
    app.run()
