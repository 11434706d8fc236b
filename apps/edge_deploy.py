import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium", app_title="Deploy at the edge: conversion, budgets and device checks"
)

with app.setup:
    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lessons.deployment import edge_deploy as lesson
    from interop import tflite

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("channels1", 8, "channels of the first 3x3 convolution", lo=4, hi=32, step=4),
        lab.Flag("channels2", 16, "channels of the second 3x3 convolution", lo=4, hi=64, step=4),
        lab.Flag("epochs", 6, "passes over the training digits", lo=1, hi=20),
        lab.Flag("seed", 0, "PRNG seed (split, init, batch order)", lo=0, hi=9999),
        lab.Flag(
            "calibration",
            lesson.RIGHT_CALIBRATION,
            "the representative inputs int8 quantization is calibrated on",
            choices=lesson.CALIBRATIONS,
        ),
        lab.Flag("repeats", 100, "timed inferences per variant (median)", lo=10, hi=1000),
        lab.Flag("max_kb", 16.0, "budget: largest model file, KB", lo=1.0, hi=200.0, step=1.0),
        lab.Flag(
            "max_latency_ms",
            1.0,
            "budget: slowest inference (batch of one), ms",
            lo=0.01,
            hi=10.0,
            step=0.01,
        ),
        lab.Flag(
            "min_accuracy",
            0.95,
            "budget: lowest held-out accuracy",
            lo=0.5,
            hi=1.0,
            step=0.005,
        ),
        description=(
            "Digits CNN -> LiteRT float and int8: size, latency, accuracy and parity against "
            "a budget."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Deploy at the edge: conversion, budgets and device checks
    {lab.phase_line("edge_deploy")}

    A phone or a microcontroller does not run JAX. It runs a **LiteRT** (TensorFlow Lite)
    flatbuffer: a file of weights and builtin operators that a small interpreter executes.
    The device sets a **budget**: how many kilobytes of flash the model may take, how many
    milliseconds an inference may last, and the accuracy the product needs. In this lesson you
    will

    - train the course's small digits CNN and convert it, JAX → TensorFlow SavedModel
      (`jax2tf`, any batch size) → LiteRT **float32** and **int8** (full-integer
      post-training quantization calibrated on a representative set);
    - measure each variant here: file size, latency per inference, held-out accuracy and
      its error against JAX, and read which operators it needs (builtin only?);
    - set the budget and read the **verdict**: which variants fit the device;
    - run the **device check**: the LiteRT interpreter's outputs against JAX's, float within
      float32 rounding, int8 within its stated bound; then pick a wrong calibration set and
      watch the check catch it.
    """)
    return


@app.cell
def _():
    channels1 = FLAGS.control("channels1", ARGS, label="conv1 channels")
    channels2 = FLAGS.control("channels2", ARGS, label="conv2 channels")
    epochs = FLAGS.control("epochs", ARGS)
    seed = FLAGS.control("seed", ARGS)
    calibration = FLAGS.control("calibration", ARGS, label="int8 calibration set")
    repeats = FLAGS.control("repeats", ARGS, label="timed inferences")
    max_kb = FLAGS.control("max_kb", ARGS, label="max size (KB)")
    max_latency_ms = FLAGS.control("max_latency_ms", ARGS, label="max latency (ms)")
    min_accuracy = FLAGS.control("min_accuracy", ARGS, label="min accuracy")
    convert_button = mo.ui.run_button(label="Train, convert and measure")
    mo.vstack(
        [
            mo.md("**Model**"),
            mo.hstack([channels1, channels2, epochs, seed], justify="start", wrap=True),
            mo.md("**Conversion and measurement**"),
            mo.hstack([calibration, repeats, convert_button], justify="start", wrap=True),
            mo.md("**The device's budget**"),
            mo.hstack([max_kb, max_latency_ms, min_accuracy], justify="start", wrap=True),
        ]
    )
    return (
        calibration,
        channels1,
        channels2,
        convert_button,
        epochs,
        max_kb,
        max_latency_ms,
        min_accuracy,
        repeats,
        seed,
    )


@app.cell
def _(channels1, channels2, convert_button, epochs, seed):
    mo.stop(
        lab.interactive() and not convert_button.value,
        mo.callout(
            mo.md(
                "Press **Train, convert and measure**: it trains the CNN with these settings "
                "(a few seconds; weights trained before load from the verified cache), "
                "converts it (TensorFlow loads in several seconds the first time; a "
                "conversion seen before comes from the verified cache) and times each "
                "variant. A new model or calibration set waits for the button again; the "
                "budget sliders re-judge at once."
            ),
            kind="info",
        ),
    )
    split, model, weights_origin = lesson.train(
        (channels1.value, channels2.value),
        epochs.value,
        seed.value,
        progress=lambda it: mo.status.progress_bar(
            it, title="Training the CNN", subtitle=f"{epochs.value} epochs", show_eta=True
        ),
    )
    fn, params = tflite.nnx_function(model)
    mo.md(
        f"## The model\nThe CNN of the CNN lesson (3×3 conv {channels1.value} → ReLU → 2×2 "
        f"max-pool → 3×3 conv {channels2.value} → ReLU → dense 10), {epochs.value} epochs of "
        f"Adam on {split.sizes()[0]} training digits; weights {weights_origin}. "
        f"{len(params)} arrays, {lesson.weights_bytes(model):,} bytes in float32. "
        f"{split.sizes()[1]} digits are held out."
    )
    return fn, model, params, split


@app.cell
def _(calibration, split):
    lab.guard(
        lesson.calibration_problem(calibration.value),
        headline="This calibration set cannot be used.",
    )
    representative = lesson.calibration_inputs(split, calibration.value)
    return (representative,)


@app.cell
def _(calibration, channels1, channels2, convert_button, fn, params, representative):
    mo.stop(
        lab.interactive() and not convert_button.value,
        mo.callout(
            mo.md("Press **Train, convert and measure** to convert with this calibration set."),
            kind="info",
        ),
    )
    lab.require(
        "tensorflow",
        "ai_edge_litert",
        "flatbuffers",  # TensorFlow's own dependency, which a .tflite file is written in
        why="the model is converted with jax2tf and TensorFlow's converter and run by LiteRT",
    )
    _spec = {
        "model": f"core.nn.nnx_models.CNN{(channels1.value, channels2.value)}",
        "weights_sha256": tflite.arrays_sha256(params),
        "calibration": calibration.value,
        "representative_sha256": tflite.arrays_sha256([representative]),
        "variants": list(tflite.QUANTIZATIONS),
    }
    with mo.status.spinner(title="Converting: jax2tf -> SavedModel -> LiteRT float and int8"):
        variants, conversion_origin = tflite.cached_tflite(
            _spec,
            lambda: tflite.convert(fn, params, (8, 8, 1), representative=representative),
            sources=(*tflite.CACHE_SOURCES, *lesson.CACHE_SOURCES),
        )
    mo.md(
        f"## Converted\nLiteRT float32 {len(variants['float']):,} bytes, int8 "
        f"{len(variants['int8']):,} bytes ({conversion_origin}; calibration: "
        f"{calibration.value}, {len(representative)} images)."
    )
    return (variants,)


@app.cell
def _(model, repeats, split, variants):
    jax_figures, jax_logits = lesson.jax_row(model, split.x_test, split.y_test, repeats.value)
    figures = []
    for _name, _label in (("float", "LiteRT float32"), ("int8", "LiteRT int8 (int8 I/O)")):
        _row = tflite.measure(
            variants[_name], split.x_test, split.y_test, jax_logits, repeats.value
        )
        figures.append({"variant": _label, **_row})
    _ops = {}
    for _name in ("float", "int8"):
        for _op in tflite.ops(variants[_name]):
            _entry = _ops.setdefault(_op["op"], {"op": _op["op"], "builtin": _op["builtin"]})
            _entry[f"{_name} count"] = _op["count"]
    op_rows = sorted(_ops.values(), key=lambda r: r["op"])
    io_rows = [
        {"variant": _name, "tensor": _side, **tflite.io_details(variants[_name])[_side]}
        for _name in ("float", "int8")
        for _side in ("input", "output")
    ]
    _types = {_name: tflite.tensor_types(variants[_name]) for _name in ("float", "int8")}
    _kinds = sorted({_kind for _counts in _types.values() for _kind in _counts})
    type_rows = [
        {"variant": _name, **{_kind: _counts.get(_kind, 0) for _kind in _kinds}}
        for _name, _counts in _types.items()
    ]
    lab.report("int8 file size / float file size", len(variants["int8"]) / len(variants["float"]))
    mo.vstack(
        [
            mo.md(
                f"## Measured on this CPU\nLatency: median of {repeats.value} inferences on a "
                "batch of one after a warm-up, one interpreter thread for LiteRT; this "
                "machine's CPU (maybe shared), not the device's: the device check on real "
                "hardware is the same measurement run there. Errors are against JAX's logits "
                "on the held-out digits."
            ),
            lab.table([jax_figures, *figures], "Each variant on the held-out digits"),
            mo.md(
                "**Operators** (read from the flatbuffer): every one builtin means the stock "
                "LiteRT runtime runs the model with no custom kernel linked in. The int8 "
                "model's SHAPE/SLICE/CONCATENATION ops are the polymorphic batch's "
                "bookkeeping (int32). int8 always saves bytes (weights 4x smaller); whether "
                "it saves time depends on the kernels the device has: a desktop CPU's float "
                "kernels (XNNPACK) are fast, a microcontroller or an NPU may have int8 only. "
                "Not every model quantizes: exact (erf) GELU converts to float but its int8 "
                "model fails to run (interop/tflite.py says why); this CNN uses ReLU."
            ),
            lab.table(op_rows, "Operators per variant"),
            lab.table(io_rows, "Input and output tensors: int8 I/O carries a scale and zero point"),
            lab.table(type_rows, "Tensors by element type"),
        ]
    )
    return figures, jax_figures, jax_logits


@app.cell
def _(figures, max_kb, max_latency_ms, min_accuracy, split):
    # Reads `split` (bound by the training cell after its run-button wait) as well as
    # `figures`: marimo holds a cell as "ancestor stopped" only when a def it misses comes
    # from the stopped cell itself, so a budget slider moved before the button would
    # otherwise run this cell without `figures` (NameError; marimo issue #7293).
    budget = lesson.Budget(max_kb.value, max_latency_ms.value, min_accuracy.value)
    verdict_rows = lesson.verdicts(figures, budget)
    lab.report("variants meeting the budget", sum(r["meets budget"] for r in verdict_rows))
    mo.vstack(
        [
            mo.md(
                f"## The verdict\nOn the {split.sizes()[1]} held-out digits, against the "
                f"budget: at most **{budget.max_kb:g} KB**, at most "
                f"**{budget.max_latency_ms:g} ms** per inference (on this CPU), at least "
                f"**{budget.min_accuracy:.1%}** held-out accuracy."
            ),
            lab.table(verdict_rows, "Which variants fit the device"),
        ]
    )
    return budget, verdict_rows


@app.cell
def _(jax_figures, jax_logits, split, variants):
    # The device check: LiteRT's interpreter (an independent runtime, its own kernels) runs
    # each flatbuffer on the held-out digits; JAX's logits are the reference. Float must
    # agree to float32 rounding; int8 within its stated bound (a fraction of the output
    # range: tflite.INT8_OUTPUT_BOUND, with its reason there) and without losing accuracy.
    _float = tflite.run(variants["float"], split.x_test)
    _int8 = tflite.run(variants["int8"], split.x_test)
    _drop = jax_figures["accuracy"] - tflite.accuracy(_int8, split.y_test)
    _names = {
        "float": "LiteRT float32 vs JAX logits (relative)",
        "int8": "LiteRT int8 vs JAX logits (over the output range)",
        "drop": "accuracy lost, JAX -> int8",
    }
    check = lab.Check(
        f"LiteRT float32 and int8 vs JAX on {len(split.y_test)} held-out digits",
        {
            _names["float"]: numerics.scaled_max_error(_float, jax_logits),
            _names["int8"]: tflite.range_scaled_error(_int8, jax_logits),
            _names["drop"]: max(_drop, 0.0),
        },
        {
            _names["float"]: numerics.tolerance("float32"),
            _names["int8"]: tflite.INT8_OUTPUT_BOUND,
            _names["drop"]: tflite.INT8_ACCURACY_DROP,
        },
        facts={
            "every operator is builtin": all(
                _op["builtin"] for _v in variants.values() for _op in tflite.ops(_v)
            ),
            "the int8 model holds no float32 tensor": (
                "float32" not in tflite.tensor_types(variants["int8"])
            ),
        },
    )
    int8_check_name = _names["int8"]
    check
    return check, int8_check_name


@app.cell
def _(budget, figures, verdict_rows):
    _meets = {r["variant"]: r["meets budget"] for r in verdict_rows}
    _frame = pd.DataFrame(
        [
            {
                "variant": r["variant"],
                "meets budget": "yes" if _meets[r["variant"]] else "no",
                "figure": _figure,
                "value": _value,
                "budget": _limit,
            }
            for r in figures
            for _figure, _value, _limit in (
                ("size (KB)", r["size (bytes)"] / 1000.0, budget.max_kb),
                ("latency (ms)", r["latency (ms)"], budget.max_latency_ms),
                ("accuracy", r["accuracy"], budget.min_accuracy),
            )
        ]
    )
    _charts = []
    for _figure in ("size (KB)", "latency (ms)", "accuracy"):
        _part = _frame[_frame["figure"] == _figure]
        _bars = (
            alt.Chart(_part, title=_figure)
            .mark_bar()
            .encode(
                x=alt.X("variant:N", title=None, axis=alt.Axis(labelAngle=-30)),
                y=alt.Y("value:Q", title=_figure),
                color=alt.Color(
                    "meets budget:N",
                    scale=alt.Scale(domain=["yes", "no"], range=["#4c9a2a", "#c0392b"]),
                ),
                tooltip=["variant", "figure", alt.Tooltip("value:Q", format=".4g")],
            )
        )
        _rule = (
            alt.Chart(_part.head(1))
            .mark_rule(strokeDash=[6, 3], color="black")
            .encode(y="budget:Q", tooltip=[alt.Tooltip("budget:Q", title="budget")])
        )
        _charts.append((_bars + _rule).properties(width=170, height=220))
    budget_chart = alt.hconcat(*_charts).properties(
        title="Each variant against the budget (dashed: the limit; colour: all three met?)"
    )
    mo.vstack(
        [
            budget_chart,
            mo.md(
                "Try: lower **max size** until only int8 fits, then widen conv2 and see "
                "whether it still does; calibration **200 training images** or **training "
                "split x 0.1** and read the check (int8 clips what calibration never saw); "
                "calibration **test split** (refused: it leaks the held-out digits); 1 or 2 "
                "epochs against the accuracy budget."
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("edge_deploy")
    return


@app.cell
def test_check_passes_or_catches_the_wrong_calibration(calibration, check, int8_check_name):
    if calibration.value == lesson.RIGHT_CALIBRATION:
        check.assert_passed()
    elif calibration.value == lesson.DIM_CALIBRATION:
        # the planted mistake: inputs a tenth as bright calibrate ranges that real digits
        # overflow (about 57% of the output range, far above the bound, for every model
        # tried). "200 training images" misses by less and depends on which 200: no claim.
        assert int8_check_name in check.failed, check.line()
    return


@app.cell
def test_verdicts_follow_the_budget(budget, figures, verdict_rows):
    for _row, _verdict in zip(figures, verdict_rows, strict=True):
        _fits = (
            _row["size (bytes)"] <= budget.max_kb * 1000
            and _row["latency (ms)"] <= budget.max_latency_ms
            and _row["accuracy"] >= budget.min_accuracy
        )
        assert _verdict["meets budget"] == _fits, (_row, _verdict)
    return


@app.cell
def test_int8_is_smaller(figures):
    assert figures[1]["size (bytes)"] < figures[0]["size (bytes)"]
    return


if __name__ == "__main__":
    app.run()
