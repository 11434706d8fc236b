import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Choose weight, activation and accumulation precision",
)

with app.setup:
    import altair as alt

    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lessons.deployment import precision_policy as lesson
    from core.nn import nnx_models

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("weight_bits", 8, "bits of the integer weights (stored in int8)", lo=2, hi=8),
        lab.Flag(
            "activation_bits", 8, "bits of the integer activations (stored in int8)", lo=2, hi=8
        ),
        lab.Flag(
            "granularity",
            "per channel",
            "one weight scale per output channel, or one per tensor",
            choices=lesson.GRANULARITIES,
        ),
        lab.Flag(
            "accumulator",
            "int32",
            "accumulator of the integer matmuls (preferred_element_type)",
            choices=lesson.ACCUMULATORS,
        ),
        lab.Flag(
            "calibration_images",
            256,
            "training images that set the activation scales",
            lo=16,
            hi=1024,
            step=16,
        ),
        lab.Flag("seed", 0, "PRNG seed of the CNN (split, init, batch order)", lo=0, hi=9999),
        description="f32 / bf16 / int8 / fp8 policies on the digits CNN: accuracy, bytes, error.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Choose weight, activation and accumulation precision
    {lab.phase_line("precision_policy")}

    A deployed model rarely runs in float32. Its **weights** can be stored in bfloat16, int8
    or fp8, its **activations** quantized on the way into each matmul, and each matmul's
    **accumulator** chosen apart from its inputs: `jnp.dot(x, w, preferred_element_type=...)`.
    The digits CNN of the lesson "Train a CNN on a small dataset" (trained once and cached)
    runs here under five policies, its convolutions written as matmuls of 3×3 patches so that
    every matmul can be looked at. In this lesson you will

    - compare **test accuracy**, **stored weight bytes** (counted) and the **logit error**
      against float32, per policy, as a table and a chart;
    - quantize weights symmetrically, per output channel or per tensor, with 2 to 8 bits,
      and activations with scales calibrated on training images;
    - check **every matmul** of every policy against NumPy on the *same* quantized operands
      (float64, or exact int64 for integers), with the accumulator's tolerance;
    - see why an integer matmul needs a wide accumulator: without `preferred_element_type`,
      int8 × int8 sums in int8 and wraps around; int16 is refused where a sum could overflow.

    fp8 (`float8_e4m3fn`) runs on a CPU, which has no fp8 arithmetic: the compiled program
    converts the fp8 operands to float32 before the dot. Its numbers are fp8's, its speed is
    not: it is labelled **emulated** (the fp8 table below says what this backend's compiled
    program does, and the label follows it).
    """)
    return


@app.cell
def _():
    weight_bits = FLAGS.control("weight_bits", ARGS, label="weight bits")
    activation_bits = FLAGS.control("activation_bits", ARGS, label="activation bits")
    granularity = FLAGS.control("granularity", ARGS, label="weight scales")
    accumulator = FLAGS.control("accumulator", ARGS, label="integer accumulator")
    calibration_images = FLAGS.control("calibration_images", ARGS, label="calibration images")
    seed = FLAGS.control("seed", ARGS)
    train_button = mo.ui.run_button(label="Train (or load) the CNN")
    mo.vstack(
        [
            mo.hstack([weight_bits, activation_bits, granularity], justify="start", wrap=True),
            mo.hstack([accumulator, calibration_images, seed], justify="start", wrap=True),
            train_button,
        ]
    )
    return (
        accumulator,
        activation_bits,
        calibration_images,
        granularity,
        seed,
        train_button,
        weight_bits,
    )


@app.cell
def _(seed, train_button):
    mo.stop(
        lab.interactive() and not train_button.value,
        mo.callout(
            mo.md(
                "Press **Train (or load) the CNN**: a few seconds the first time for a seed, "
                "then loaded from the on-disk cache."
            ),
            kind="info",
        ),
    )
    with mo.status.spinner(title="training (or loading) the digits CNN"):
        params, origin = lesson.train_cnn(seed.value)
    split = lesson.data(seed.value)
    mo.md(
        f"The CNN ({origin}): "
        + ", ".join(
            f"{n} {params[n]['kernel'].shape[:-1]} → {params[n]['kernel'].shape[-1]}"
            for n in lesson.LAYERS
        )
        + f"; {len(split.y_test)} test images."
    )
    return params, split


@app.cell
def _(
    accumulator,
    activation_bits,
    calibration_images,
    granularity,
    params,
    split,
    weight_bits,
):
    settings = lesson.Settings(
        weight_bits.value, activation_bits.value, granularity.value, accumulator.value
    )
    lab.guard(
        lesson.accumulator_problem(settings, lesson.largest_inputs(params)),
        headline=f"An {accumulator.value} accumulator is refused here.",
    )
    with mo.status.spinner(title="running the five policies"):
        runs = lesson.run_policies(params, split, settings, calibration_images.value)
        fp8 = lesson.fp8_support()
    fp8_emulated = lesson.fp8_emulated(fp8)
    lab.report(
        "int8 weights: bytes vs float32",
        runs["int8 weights"].weight_bytes / runs["float32"].weight_bytes,
        "ratio",
    )
    mo.vstack(
        [
            mo.md("## Five policies"),
            lab.table(
                lesson.rows(runs, settings, fp8_emulated),
                caption=(
                    "Logit errors are against the float32 policy on the same test images; "
                    "bytes count the stored kernels, their scales and the biases."
                ),
            ),
            lab.table(
                [{"fp8 on this backend": k, "found": v} for k, v in fp8.items()],
                caption=(
                    "How fp8 support was tested: a jitted float8_e4m3fn dot with "
                    "preferred_element_type=float32, compared with float64, and its compiled "
                    "HLO read for a conversion of the operands to f32."
                ),
            ),
        ]
    )
    return fp8, fp8_emulated, runs, settings


@app.cell
def _(fp8, fp8_emulated, params, runs, settings, split):
    # References: each matmul recomputed in NumPy from the operands the policy fed it
    # (float64, or int64 for integer operands: exact); the float32 network vs the float64
    # loop convolution of core.nn.nnx_models; the stored bytes vs the closed form from the
    # layer shapes; the planted int8 accumulator must differ.
    _errors, _tolerances = {}, {}
    for _policy, _run in runs.items():
        for _m in _run.matmuls:
            _label = lesson.label(_policy, settings, fp8_emulated)
            _name = f"{_label}: {_m.layer} ({_m.accumulator} sum)"
            _errors[_name] = lesson.matmul_error(_m)
            _tolerances[_name] = lesson.matmul_tolerance(_m)
    _reference = nnx_models.cnn_reference(
        {n: (params[n]["kernel"], params[n]["bias"]) for n in lesson.LAYERS}, split.x_test
    )
    _errors["float32 network vs float64 loop convolution"] = numerics.scaled_max_error(
        runs["float32"].logits, _reference
    )
    _tolerances["float32 network vs float64 loop convolution"] = numerics.tolerance("float32")
    for _policy, _run in runs.items():
        _name = f"{lesson.label(_policy, settings, fp8_emulated)}: stored bytes vs closed form"
        _errors[_name] = numerics.max_abs_error(
            _run.weight_bytes, lesson.bytes_closed_form(params, _policy, settings.granularity)
        )
        _tolerances[_name] = 0.0
    # Planted where its sums reach furthest; it can do harm only where an exact sum leaves
    # int8's range (at 2-bit operands none may), and the check says which case this is.
    planted = lesson.plant_int8_accumulator(runs["int8 weights + activations"].matmuls)
    wrong_error = planted.error
    _planted_fact = (
        f"an int8 accumulator (no preferred_element_type) is caught: {planted.outside:,} of "
        f"its sums in {planted.matmul.layer} leave int8"
        if planted.outside
        else f"an int8 accumulator is harmless here and equals the exact sum: every sum in "
        f"{planted.matmul.layer} fits in int8 (largest |sum| {planted.largest})"
    )
    check = lab.Check(
        "every matmul of every policy vs NumPy on the same quantized operands (float32 "
        "accumulation within the float32 tolerance, integer accumulation exact); the float32 "
        "CNN vs a float64 loop convolution; stored bytes vs the closed form",
        _errors,
        _tolerances,
        facts={
            _planted_fact: planted.caught,
            "fp8 dots run on this backend": bool(fp8["runs"]),
        },
    )
    mo.vstack(
        [
            check,
            mo.md(
                f"The planted mistake: {planted.matmul.layer}'s {planted.matmul.lhs.shape[1]} "
                "int8 × int8 products summed without `preferred_element_type` stay int8 and "
                f"wrap; their largest error against the exact sum is **{wrong_error:,.0f}** "
                f"(exact: 0). The largest exact sum is {planted.largest:,}"
                + (
                    f" and {planted.outside:,} sums leave int8's range [-128, 127]."
                    if planted.outside
                    else ": every sum fits in int8, so at these bit widths the mistake does "
                    "no harm."
                )
            ),
        ]
    )
    return check, planted, wrong_error


@app.cell
def _(fp8_emulated, runs, settings):
    _points = pd.DataFrame(
        [
            {
                "policy": lesson.label(p, settings, fp8_emulated),
                "weight bytes": r.weight_bytes,
                "max |logit error|": r.max_error,
                "mean |logit error|": r.mean_error,
                "test accuracy": r.accuracy,
            }
            for p, r in runs.items()
        ]
    )
    _color = alt.Color("policy:N", legend=alt.Legend(orient="bottom", title=None, columns=2))
    _base = alt.Chart(_points).encode(
        x=alt.X("weight bytes:Q", scale=alt.Scale(type="log")),
        color=_color,
        tooltip=list(_points.columns),
    )
    _chart = (
        _base.mark_point(size=120, filled=True).encode(
            y=alt.Y("max |logit error|:Q", scale=alt.Scale(type="symlog"))
        )
        + _base.mark_point(size=80, shape="diamond").encode(y="mean |logit error|:Q")
    ).properties(
        width=420,
        height=240,
        title="Logit error vs stored bytes (filled: max, diamond: mean)",
    )
    _chart
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("precision_policy")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_integer_matmuls_are_exact_and_the_wrong_accumulator_is_not(planted, runs, wrong_error):
    for _m in runs["int8 weights + activations"].matmuls:
        assert np.array_equal(np.asarray(_m.product, np.int64), lesson.matmul_reference(_m)), (
            _m.layer
        )
    # wrong wherever a sum leaves int8 (at 2-bit operands there may be none)
    assert (wrong_error > 0) == (planted.outside > 0)
    return


if __name__ == "__main__":
    app.run()
