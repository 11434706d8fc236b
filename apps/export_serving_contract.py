import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Export a computation and verify its serving contract",
)

with app.setup:
    import os
    import tempfile

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import charts
    from core.lessons.deployment import export_serving_contract as lesson
    from core.serving.predict import export

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "PRNG seed (split, init, probe digits)", lo=0, hi=9999),
        lab.Flag("steps", 200, "full-batch training steps", lo=10, hi=2000, step=10),
        lab.Flag("dtype", "float32", "the weights' and inputs' dtype", choices=lesson.DTYPES),
        lab.Flag("max_batch", 32, "the contract's largest batch", lo=1, hi=256),
        lab.Flag(
            "batch_sizes", "1,7,32", "batch sizes to run through b", choices=lesson.BATCH_SETS
        ),
        lab.Flag(
            "violation",
            "wrong feature count",
            "the contract violation to try",
            choices=lesson.VIOLATIONS,
        ),
        description="jax.export with a symbolic batch, a fresh-process reload, the contract.",
    )
    ARGS = FLAGS.parse()
    WORKDIR = tempfile.TemporaryDirectory(prefix="export-serving-contract-")


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Export a computation and verify its serving contract
    {lab.phase_line("export_serving_contract")}

    A model you serve is not your Python code: it is an **artifact** another process loads,
    maybe another machine, maybe months later. `jax.export` turns a jitted function into
    serialized StableHLO with its **contract**: the shapes and dtypes of every input and
    output, the platforms it was lowered for and the calling-convention version. Here the
    function is the course's digits classifier (the one the model service serves), exported
    with a **symbolic batch dimension** `b` (`jax.export.symbolic_shape("b")`): one artifact
    serves every batch size, and the weights are an argument, not constants. An artifact
    loads only on a platform it was lowered for: on a TPU host the fresh process runs on the
    CPU (a chip serves one process), so there the artifact is exported for `("tpu", "cpu")`
    and the in-process model runs on the CPU too, for a bit-for-bit comparison on one backend.

    You will

    - export it and read the contract table (shapes with `b`, dtypes, platforms, calling
      convention, the sha256 of each file and of the manifest);
    - reload it in a **fresh process** (verified before anything is deserialized) and compare
      its outputs with the in-process model **bit for bit**, at each batch size you pick, and
      with NumPy float64 within the dtype's tolerance;
    - break the contract one way (a wrong feature count, dtype or rank, an oversize batch,
      NaN, a value outside [0, 16], a flipped bit in a file, an edited manifest) and read the
      refusal: a clear error that names the problem, never a silent wrong answer.
    """)
    return


@app.cell
def _():
    seed = FLAGS.control("seed", ARGS)
    steps = FLAGS.control("steps", ARGS)
    dtype = FLAGS.control("dtype", ARGS)
    max_batch = FLAGS.control("max_batch", ARGS, label="max batch")
    batch_sizes = FLAGS.control("batch_sizes", ARGS, label="batch sizes")
    violation = FLAGS.control("violation", ARGS)
    export_button = mo.ui.run_button(label="Export, then reload in a fresh process")
    mo.vstack(
        [
            mo.hstack([seed, steps, dtype], justify="start", wrap=True),
            mo.hstack([max_batch, batch_sizes], justify="start", wrap=True),
            export_button,
            violation,
        ]
    )
    return batch_sizes, dtype, export_button, max_batch, seed, steps, violation


@app.cell
def _(batch_sizes, max_batch):
    sizes = lesson.parse_batch_sizes(batch_sizes.value)
    lab.guard(
        lesson.batch_problem(sizes, max_batch.value),
        headline=f"Batch sizes {batch_sizes.value} do not fit the contract.",
    )
    return (sizes,)


@app.cell
def _(dtype, export_button, max_batch, seed, sizes, steps):
    mo.stop(
        lab.interactive() and not export_button.value,
        mo.callout(
            mo.md("Press **Export, then reload in a fresh process** to run the lesson."),
            kind="info",
        ),
    )
    lab.require("flatbuffers", why="jax.export serializes the model the service loads")
    _work = tempfile.mkdtemp(dir=WORKDIR.name)
    with mo.status.spinner(title="training, exporting, reloading in a fresh process"):
        result = lesson.run(seed.value, steps.value, dtype.value, max_batch.value, sizes, _work)
    return (result,)


@app.cell
def _(result):
    lab.report(
        "fresh-process reload (start + verify + compile + run)", result.reloaded.seconds, "s"
    )
    mo.vstack(
        [
            mo.md(
                f"## The contract\nModel `{result.manifest['model_version']}` (test accuracy "
                f"{result.test_accuracy:.1%}), exported in {result.export_seconds:.2f} s on "
                f"this CPU (shared, under load). The fresh process (pid "
                f"{result.reloaded.pid}, this one is {os.getpid()}) verified, deserialized and "
                f"ran it in {result.reloaded.seconds:.2f} s, Python start-up included."
            ),
            lab.table(
                lesson.contract_rows(result.manifest),
                caption="`b` is symbolic: the program is compiled per batch size when it is "
                "called (the service pads to the next power of two, so a few sizes suffice).",
            ),
        ]
    )
    return


@app.cell
def _(result, violation):
    refusal = lesson.try_violation(
        violation.value, result.artifacts, result.artifacts.directory.parent
    )
    mo.vstack(
        [
            mo.md(f"## A violation: {violation.value}"),
            lab.table(
                [
                    {
                        "violation": refusal.violation,
                        "sent": refusal.sent,
                        "refused": refusal.refused,
                        "error": refusal.error or "-",
                    }
                ]
            ),
            mo.callout(
                mo.md(f"**Refused ({refusal.error}).** {refusal.message}")
                if refusal.refused
                else mo.md(f"**Not refused.** {refusal.message}"),
                kind="success" if refusal.refused else "danger",
            ),
        ]
    )
    return (refusal,)


@app.cell
def _(dtype, refusal, result):
    # References: the in-process model (jax.jit of the exported function, this process) for
    # the fresh process's outputs, bit for bit; the same MLP in NumPy float64 (no jax).
    _weights = result.artifacts.numpy_weights()
    _bitwise = {}
    _reference = {}
    for _b, (_labels, _probs) in result.reloaded.outputs.items():
        _here_labels, _here_probs = result.here[_b]
        _bitwise[f"b={_b} vs in-process"] = max(
            numerics.max_abs_error(_probs, _here_probs),
            numerics.max_abs_error(_labels, _here_labels),
        )
        _reference[f"b={_b} vs NumPy float64"] = numerics.scaled_max_error(
            _probs, export.reference_forward(_weights, result.inputs[_b])[1]
        )
    check = lab.Check(
        f"{dtype.value} artifact reloaded in a fresh process: probabilities and labels vs the "
        f"in-process model (bit for bit){lesson.backends_note()} and vs NumPy float64 (dtype "
        "tolerance); the chosen violation refused",
        {**_bitwise, **_reference},
        {
            **dict.fromkeys(_bitwise, 0.0),
            **dict.fromkeys(_reference, numerics.tolerance(dtype.value)),
        },
        facts={
            "reloaded in another process": result.reloaded.pid != os.getpid(),
            "the violation was refused": refusal.refused,
        },
    )
    check
    return (check,)


@app.cell
def _(dtype, result):
    _weights = result.artifacts.numpy_weights()
    _rows = pd.DataFrame(
        [
            {
                "batch size": str(_b),
                "max |p - p_float64|": float(
                    np.max(
                        np.abs(
                            _probs.astype(np.float64)
                            - export.reference_forward(_weights, result.inputs[_b])[1]
                        )
                    )
                ),
            }
            for _b, (_labels, _probs) in result.reloaded.outputs.items()
        ]
    )
    _errors, _floored = charts.log_floor(_rows["max |p - p_float64|"], lesson.ERROR_FLOOR)
    _rows["max |p - p_float64|"] = _errors
    _tolerance = pd.DataFrame([{"tolerance": numerics.tolerance(dtype.value)}])
    _title = f"Fresh-process outputs vs NumPy float64 ({dtype.value})" + (
        f"; an error of 0 is drawn at {lesson.ERROR_FLOOR:g}" if _floored else ""
    )
    # points, not bars: a log axis has no zero for a bar to start from
    _low, _high = charts.log_domain([*_errors, numerics.tolerance(dtype.value)])
    (
        alt.Chart(_rows, title=_title)
        .mark_point(filled=True, size=90)
        .encode(
            x=alt.X("batch size:N", sort=None),
            y=alt.Y(
                "max |p - p_float64|:Q", scale=alt.Scale(type="log", domain=[_low / 10, _high])
            ),
        )
        + alt.Chart(_tolerance).mark_rule(color="red", strokeDash=[4, 4]).encode(y="tolerance:Q")
    ).properties(width=360, height=200)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("export_serving_contract")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_the_batch_is_symbolic_in_the_contract(result):
    _x = result.manifest["exported"]["inputs"][-1]
    assert _x["name"] == "x_BF" and _x["shape"] == ["b", 64]
    assert all(p.shape[0] == b for b, (_, p) in result.reloaded.outputs.items())
    return


@app.cell
def test_the_violation_names_its_problem(refusal):
    assert refusal.refused and refusal.error.endswith("Error") and refusal.message
    return


if __name__ == "__main__":
    app.run()
