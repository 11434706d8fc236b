import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Move models between JAX, Keras, TensorFlow and PyTorch")

with app.setup:
    import marimo as mo
    import numpy as np

    from core import lab
    from core.lab import charts
    from core.lessons.deployment import framework_interop as lesson
    from interop import keras_bridge, parity, torch_flax, twins

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "seed of DigitsNet's weights and of the input batch", lo=0, hi=9999),
        lab.Flag("batch", 16, "digits images in the input batch", lo=1, hi=256),
        lab.Flag(
            "formats",
            ",".join(parity.CHEAP),
            "comma-separated formats to compare: " + ", ".join(parity.FORMATS),
        ),
        lab.Flag(
            "mistake",
            "none",
            "a conversion mistake to plant in one format's model",
            choices=tuple(torch_flax.MISTAKES),
        ),
        lab.Flag(
            "mistake_in",
            "onnx",
            "the format whose model gets the mistake",
            choices=parity.FORMATS,
        ),
        description=(
            "One DigitsNet in JAX, PyTorch, ONNX Runtime, TensorFlow, LiteRT and Keras's three "
            "backends: the error of every pair against its dtype's bound."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Move models between JAX, Keras, TensorFlow and PyTorch
    {lab.phase_line("framework_interop")}

    A model trained in one framework is served, quantized or fine-tuned in another. Each move
    re-lays the weights (PyTorch keeps a Linear's kernel as (out, in), Flax and Keras as
    (in, out); convolutions OIHW vs HWIO), renames them (BatchNorm's running statistics are
    `running_mean` / `mean` / `moving_mean`) and rebuilds what is not a weight at all: the
    epsilons, each GELU's approximation, the padding, the flatten order. A move that gets one
    of these wrong usually still runs: only numbers can tell.

    So the course keeps one reference model, **DigitsNet** (two 3×3 convolutions, BatchNorm,
    LayerNorm, exact and tanh GELU, on 8×8 digits), and runs it with the same weights on the
    same batch in every framework and format it can reach: JAX/Flax NNX, PyTorch, ONNX Runtime,
    a TensorFlow SavedModel (jax2tf), LiteRT float and int8, and the Keras 3 twin under its
    jax, torch and tensorflow backends (each Keras backend in its own process: Keras picks its
    backend once per process). Then it compares **every pair**, not only each against JAX.

    You will learn:

    - the layout rules that move weights between frameworks, and where each one bites;
    - how large float32 disagreement between correct implementations is (a few 1e-7), and
      why an int8 model is judged on another scale;
    - how a planted mistake (a missing transpose, a wrong epsilon, forgotten statistics)
      lights up exactly the row and column of the format that carries it.
    """)
    return


@app.cell(hide_code=True)
def _():
    mo.vstack(
        [
            mo.md("## The layout rules, PyTorch -> NNX -> Keras"),
            lab.table(torch_flax.layout_table(), "PyTorch state dict -> Flax NNX"),
            lab.table(keras_bridge.layout_table(), "Flax NNX -> Keras 3 (same layouts)"),
        ]
    )
    return


@app.cell
def _():
    seed = FLAGS.control("seed", ARGS)
    batch = FLAGS.control("batch", ARGS)
    formats = mo.ui.multiselect(
        options=list(parity.FORMATS),
        value=[f for f in ARGS.formats.split(",") if f in parity.FORMATS],
        label="formats",
    )
    mistake = FLAGS.control("mistake", ARGS, label="planted mistake")
    mistake_in = FLAGS.control("mistake_in", ARGS, label="planted in")
    full_button = mo.ui.run_button(label="Run the chosen Keras, TensorFlow and LiteRT formats")
    mo.vstack(
        [
            mo.hstack([seed, batch], justify="start", wrap=True),
            formats,
            mo.hstack([mistake, mistake_in], justify="start", wrap=True),
            full_button,
            mo.md(
                "JAX, PyTorch and ONNX Runtime run as you move the controls; the Keras "
                "backends (a subprocess each), TensorFlow and LiteRT take tens of seconds and "
                "wait for the button."
            ),
        ]
    )
    return batch, formats, full_button, mistake, mistake_in, seed


@app.cell
def _(batch, formats, full_button, mistake, mistake_in):
    # Headless, the --formats flag decides (all of them run); in the UI the slow formats
    # wait for the button.
    chosen = ARGS.formats.split(",") if not lab.interactive() else list(formats.value)
    waiting = [f for f in chosen if f not in parity.CHEAP]
    if lab.interactive() and not full_button.value:
        running = [f for f in chosen if f in parity.CHEAP]
    else:
        running, waiting = chosen, []
    try:
        running = list(parity.check_request(running, batch.value, mistake.value, mistake_in.value))
        problem = None
    except ValueError as error:
        problem = str(error)
    if problem is None and mistake.value != "none" and len(running) < 3:
        problem = (
            f"planting a mistake in {mistake_in.value} needs at least two other formats that "
            "run, so that some pair is compared without it"
        )
    lab.guard(problem, headline="This matrix cannot be run.")
    lab.require(
        *dict.fromkeys(m for f in running for m in parity.MODULES[f]),
        why=f"the formats {', '.join(running)} run in their own frameworks",
    )
    return running, waiting


@app.cell
def _(batch, mistake, mistake_in, running, seed, waiting):
    with mo.status.progress_bar(
        total=len(running), title="running DigitsNet in each format"
    ) as _bar:
        matrix = parity.parity_matrix(
            running,
            seed=seed.value,
            batch=batch.value,
            mistake=mistake.value,
            mistake_in=mistake_in.value if mistake.value != "none" else None,
            progress=lambda name: _bar.update(subtitle=name),
        )
    _notes = []
    if waiting:
        _notes.append(
            mo.callout(
                mo.md(f"Waiting for the button: {', '.join(waiting)}."),
                kind="info",
            )
        )
    mo.vstack(
        [
            mo.md("## Each format's run"),
            lab.table(matrix.run_rows(), "the same weights and the same batch everywhere"),
            *_notes,
        ]
    )
    return (matrix,)


@app.cell
def _(matrix):
    mo.vstack(
        [
            mo.md(
                "## Every pair\nThe relative error is max |a - b| / max(max |b|, 1) (b the "
                "pair's first format); float32 pairs are judged on it against float32's "
                "tolerance, pairs with the int8 model on max |a - b| over the float logits' "
                f"range against {parity.INT8_BOUND:g} (parity.INT8_BOUND: an int8 tensor's "
                "error is a fraction of its calibrated range)."
            ),
            lab.table(matrix.rows(), "every pair of formats that was chosen"),
        ]
    )
    return


@app.cell
def _(matrix):
    # The verdict under test, against two kinds of reference: DigitsNet written out in NumPy
    # float64 from the same torch-layout weights (core/lessons/deployment/framework_interop.py),
    # and every other format (torch, ONNX Runtime, TensorFlow, Keras are implementations
    # independent of JAX). Every format and pair without the planted mistake is within its
    # bound; every pair with the planted format is flagged.
    _planted = matrix.mistake_in
    _reference = lesson.logits_float64(
        twins.seeded_weights(matrix.seed), twins.digits_batch(matrix.batch, matrix.seed)
    )
    _judged = {
        f"{name} vs NumPy float64": pair
        for name, pair in parity.against_reference(matrix, _reference).items()
        if name != _planted
    }
    _errors = {k: e for k, (e, _) in _judged.items()}
    _bounds = {k: b for k, (_, b) in _judged.items()}
    for _name, _error in matrix.errors().items():
        if _planted is None or _planted not in _name.split():
            _errors[_name] = _error
            _bounds[_name] = matrix.bounds()[_name]
    _facts = {"every chosen format ran": not matrix.not_run()}
    if _planted is not None:
        _flagged = [p for p in matrix.pairs if _planted in (p.a, p.b) and p.error is not None]
        _facts[f"every pair with {_planted} ({matrix.mistake}) is flagged"] = bool(_flagged) and (
            all(p.within is False for p in _flagged)
        )
    _but = "" if _planted is None else f" but {_planted}'s planted {matrix.mistake}"
    check = lab.Check(
        f"DigitsNet (seed {matrix.seed}, batch {matrix.batch}) in {len(matrix.formats)} "
        f"formats vs NumPy float64 and pair by pair: all within their dtype's bound{_but}",
        _errors,
        _bounds,
        facts=_facts,
    )
    check
    return (check,)


@app.cell
def _(matrix):
    _ratios = matrix.ratio_matrix()
    _hidden = np.isnan(_ratios)
    # bound / error: redblue draws low values red, so a flagged pair (error > bound) is red
    _log = np.where(_hidden, 0.0, -np.log10(np.maximum(np.nan_to_num(_ratios), 1e-6)))
    lab.report("worst judged error over bound", float(np.nanmax(_ratios)), "x bound")
    mo.vstack(
        [
            charts.heatmap(
                _log,
                "log10(bound / error) per pair: above 0 (blue) within, below 0 (red) flagged",
                row_title="format #",
                col_title="format #",
                hidden=_hidden,
            ),
            mo.md(
                "Format numbers: "
                + ", ".join(f"{i} {f}" for i, f in enumerate(matrix.formats))
                + ". Grey: the diagonal and formats that did not run."
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("framework_interop")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_every_pair_is_compared(matrix):
    _n = len(matrix.formats)
    assert len(matrix.pairs) == _n * (_n - 1) // 2
    assert all(p.error is not None or p.status.startswith("not run") for p in matrix.pairs)
    return


if __name__ == "__main__":
    app.run()
