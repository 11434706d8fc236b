import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="bfloat16, int8 precision, and XProf profiling on TPU",
)

with app.setup:
    import tempfile

    import altair as alt
    import jax
    import jax.numpy as jnp
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import text
    from core.lessons.tpu_systems import precision_xprof
    from core.perf import trace

    lab.use_cpu_devices()
    K_CHOICES = (256, 1024, 4096, 16384)
    FLAGS = lab.Flags(
        lab.Flag("rows", 16, "rows M of x (and columns N of w)", lo=1, hi=128),
        lab.Flag("k_max", 1024, "largest contraction size K in the sweep", choices=K_CHOICES),
        lab.Flag(
            "channel_spread",
            30.0,
            "largest / smallest column scale of w",
            lo=1.0,
            hi=1000.0,
            step=1.0,
        ),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag(
            "trace_size", 256, "matrix size of the profiled bf16 step", lo=16, hi=1024, step=16
        ),
        lab.Flag("trace_steps", 3, "profiled steps (after one warm-up)", lo=1, hi=10),
        description="bfloat16, int8 precision, and XProf profiling on TPU.",
    )
    ARGS = FLAGS.parse()
    MACHINE = f"this {jax.default_backend().upper()}"


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # bfloat16, int8 precision, and XProf profiling on TPU
    {lab.phase_line("precision_xprof")}

    TPUs multiply **bfloat16** natively (and int8 at twice the rate on v5e/v6e), accumulating
    in float32. Lower precision is faster and smaller, so you need to know what it costs. In
    this lesson you will

    - measure the relative error of bf16 and int8 matmuls against float32 and against NumPy
      float64 as the contraction size K grows;
    - see what a **float32** matmul gives on a TPU at each `lax.Precision` (DEFAULT is one
      bfloat16 pass, ~1e-3 off float64, where a CPU gives ~1e-7), emulated here and measured
      on a TPU v5e chip;
    - compare int8 **per-tensor** and **per-channel** symmetric quantization;
    - capture a **warmed-up** profiler trace (compilation excluded) with `jax.profiler.trace`,
      list what it writes, and learn the exact steps to open it in **XProf** on a TPU VM.
    """)
    return


@app.cell
def _():
    rows = FLAGS.control("rows", ARGS, label="M = N")
    k_max = FLAGS.control("k_max", ARGS, label="largest K")
    channel_spread = FLAGS.control("channel_spread", ARGS, label="column scale spread of w")
    seed = FLAGS.control("seed", ARGS)
    mo.hstack([rows, k_max, channel_spread, seed], justify="start", wrap=True)
    return channel_spread, k_max, rows, seed


@app.cell
def _(channel_spread, k_max, rows, seed):
    sweep_ks = [k for k in (16, 64, 256, 1024, 4096, 16384) if k <= int(k_max.value)]
    sweep = pd.DataFrame(
        precision_xprof.error_sweep(
            jax.random.key(seed.value),
            rows.value,
            rows.value,
            sweep_ks,
            channel_spread=channel_spread.value,
        )
    )
    _error_chart = (
        alt.Chart(sweep, title="relative error vs NumPy float64 as K grows")
        .mark_line(point=True)
        .encode(
            x=alt.X("K:Q", scale=alt.Scale(type="log", base=2), title="contraction size K"),
            y=alt.Y(
                "error vs float64:Q",
                scale=alt.Scale(type="log"),
                title="relative error (Frobenius)",
            ),
            color="kind:N",
            tooltip=[
                "K",
                "kind",
                alt.Tooltip("error vs float64:Q", format=".2e"),
                alt.Tooltip("error vs float32:Q", format=".2e"),
            ],
        )
        .properties(width=380, height=240)
    )
    _unit = pd.DataFrame(
        [
            {"level": "bf16 unit roundoff 2^-8", "error": 2.0**-8},
            {
                "level": "f32 unit roundoff 2^-24 x sqrt(K max)",
                "error": 2.0**-24 * np.sqrt(max(sweep_ks)),
            },
        ]
    )
    _levels = (
        alt.Chart(_unit)
        .mark_rule(strokeDash=[3, 3], color="gray")
        .encode(y="error:Q", tooltip=["level"])
    )
    _largest = sweep[sweep["K"] == max(sweep_ks)][
        ["kind", "error vs float64", "error vs float32", "worst column vs float64"]
    ]
    mo.vstack(
        [
            mo.md(
                f"## Error as the contraction grows\nx is ({rows.value}, K) ~ N(0, 1); w is "
                f"(K, {rows.value}) with column scales spread {channel_spread.value:g}x. Each "
                "product is compared with the same product in NumPy float64 (and with float32)."
            ),
            alt.layer(_error_chart, _levels),
            lab.table(
                [
                    {k: (f"{v:.2e}" if isinstance(v, float) else v) for k, v in row.items()}
                    for row in _largest.to_dict("records")
                ],
                caption=f"At K = {max(sweep_ks)}:",
            ),
            mo.md(
                """
    - **bf16 inputs, f32 accumulate** (what the TPU MXU does): the error is the rounding of
      the inputs, up to 2^-8 per element, and it does *not* grow with K.
    - **bf16 accumulate** (a running sum rounded to bf16 after every addition) loses more with
      every term: its error grows with K. This is why you ask for
      `preferred_element_type=jnp.float32`.
    - **int8**: 127 levels per sign; per-channel scales fit each column's range.
    - **fp8 e4m3** (`jnp.float8_e4m3fn`, scaled so the largest value maps to 448): 4
      significant bits, so each input is within 2^-4 of itself whatever its size, where
      int8's error is one step set by the largest value. Its products are exact in float32.
    - **float32** itself is ~1e-7 off float64, growing slowly with K.
    """
            ),
            lab.table(
                precision_xprof.fp8_support_rows(),
                "### Which TPUs multiply fp8 natively (published per-chip rates)",
            ),
        ]
    )
    return (sweep,)


@app.cell
def _(channel_spread, k_max, rows, seed):
    # A float32 matmul at each lax.Precision: on this backend, and as a TPU's MXU computes it
    # (core.perf.precision.mxu_matmul: bfloat16 passes accumulated in float32, emulated here).
    _k = int(k_max.value)
    _x, _w = precision_xprof.example_operands(
        jax.random.key(seed.value + 5), rows.value, _k, rows.value, channel_spread.value
    )
    _exact = np.asarray(_x, np.float64) @ np.asarray(_w, np.float64)
    _record = precision_xprof.tpu_float32_record()
    _rows, precision_ratios = [], {}
    for _level, _passes in precision_xprof.MXU_PASSES.items():
        _precision = jax.lax.Precision[_level]
        _here = jax.jit(lambda a, b, p=_precision: jax.lax.dot(a, b, precision=p))(_x, _w)
        _mxu = precision_xprof.mxu_matmul(_x, _w, _level)
        _unit = precision_xprof.MXU_UNIT_ROUNDOFF[_level]
        precision_ratios[f"{MACHINE}, {_level}: worst |error| / bound"] = (
            precision_xprof.bound_ratio(_here, _x, _w, _unit)
        )
        precision_ratios[f"MXU emulated, {_level}: worst |error| / bound"] = (
            precision_xprof.bound_ratio(_mxu, _x, _w, _unit)
        )
        _rows.append(
            {
                "lax.Precision": _level,
                "bfloat16 passes": len(_passes),
                f"{MACHINE} vs float64": numerics.scaled_max_error(_here, _exact),
                "MXU emulated vs float64": numerics.scaled_max_error(_mxu, _exact),
                "TPU measured vs float64": _record["figures"].get(f"matmul_{_level.lower()}"),
            }
        )
    _long = pd.DataFrame(_rows).melt(
        ["lax.Precision", "bfloat16 passes"], var_name="where", value_name="relative error"
    )
    _long = _long[_long["relative error"].notna() & (_long["relative error"] > 0)]
    _chart = (
        alt.Chart(_long, title="float32 x @ w vs NumPy float64 at each lax.Precision")
        .mark_point(filled=True, size=80)
        .encode(
            x=alt.X("lax.Precision:N", sort=list(precision_xprof.MXU_PASSES)),
            y=alt.Y("relative error:Q", scale=alt.Scale(type="log"), title="relative error"),
            color="where:N",
            shape="where:N",
            tooltip=["lax.Precision", "where", alt.Tooltip("relative error:Q", format=".2e")],
        )
        .properties(width=360, height=220)
    )
    precision_check = lab.Check(
        f"x @ w in float32 at K = {_k}, at each lax.Precision, on {MACHINE} and as a TPU's MXU "
        "computes it (its bfloat16 passes), within the rounding bound of that many passes vs "
        "NumPy float64",
        precision_ratios,
        dict.fromkeys(precision_ratios, precision_xprof.BOUND_RATIO_LIMIT),
    )
    mo.vstack(
        [
            mo.md(
                f"""
    ## A float32 matmul on a TPU: `lax.Precision`

    A TPU has no float32 multiplier: its MXU multiplies bfloat16. A float32 `x @ w` is split
    into bfloat16 terms and multiplied in **passes**: `DEFAULT` one pass (each operand rounded
    to bfloat16: about 4e-3 relative), `HIGH` three (`bf16_3x`), `HIGHEST` six (`bf16_6x`,
    float32 accuracy at about six times the MXU work). A CPU computes float32 whatever you ask.
    So the same float32 program is ~1e-7 off float64 on a CPU and ~1e-3 on a TPU unless it asks
    for more: `jax.lax.dot(..., precision="highest")` or
    `with jax.default_matmul_precision("highest"):`. This course's float32 checks on a TPU do
    that, or use `core.numerics.tolerance`, which states DEFAULT's tolerance and why.

    x is ({rows.value}, {_k}), w ({_k}, {rows.value}) with column scales spread
    {channel_spread.value:g}x. "MXU emulated" runs the passes with bfloat16 products on
    {MACHINE}; "TPU measured" is {_record["device"]} at 1024 x 1024 x 1024, worst of
    {_record["figures"].get("seeds", "?")} seeds ({_record["cite"]}).
    """
            ),
            _chart,
            lab.table(_rows, "Relative error (max |error| / max |float64|):"),
            precision_check,
        ]
    )
    return (precision_check,)


@app.cell
def _(channel_spread, rows, seed):
    _x, w_KN = precision_xprof.example_operands(
        jax.random.key(seed.value + 1), rows.value, 256, rows.value, channel_spread.value
    )
    schemes = {}
    for _scheme in precision_xprof.SCHEMES:
        _codes, _scale = precision_xprof.quantize(w_KN, _scheme, axis=0)
        schemes[_scheme] = (_codes, _scale)
    column_errors = precision_xprof.column_round_trip_errors(w_KN)
    per_channel_gain = precision_xprof.per_channel_gain(column_errors)
    per_column = pd.DataFrame(
        [
            {"column": j, "scheme": name, "relative error of the column": float(error)}
            for name, errors in column_errors.items()
            for j, error in enumerate(errors)
        ]
    )
    _chart = (
        alt.Chart(per_column, title="int8 round-trip error of each column of w")
        .mark_line(point=True)
        .encode(
            x=alt.X("column:O", title="column (scale grows to the right)"),
            y=alt.Y("relative error of the column:Q", scale=alt.Scale(type="log")),
            color="scheme:N",
            tooltip=[
                "column",
                "scheme",
                alt.Tooltip("relative error of the column:Q", format=".2e"),
            ],
        )
        .properties(width=420, height=200)
    )
    _per_tensor_scale = float(schemes["per-tensor"][1])
    _per_channel_scales = np.asarray(schemes["per-channel"][1]).ravel()
    _note = ""
    if w_KN.shape[1] == 1:
        _note = "With a single column the two schemes are the same scheme."
    elif channel_spread.value < precision_xprof.PER_CHANNEL_CLEAR_SPREAD:
        _note = (
            f"Columns this alike (spread below {precision_xprof.PER_CHANNEL_CLEAR_SPREAD:g}x) "
            "leave per-channel little to gain: raise the spread."
        )
    mo.vstack(
        [
            mo.md(
                f"""
    ## int8: one scale or one per channel
    Symmetric quantization: `scale = max|w| / 127`, `q = round(w / scale)` in [-127, 127],
    `w ~ q * scale`. **Per-tensor**: one scale {_per_tensor_scale:.3g} for the whole matrix,
    set by its largest value, so small columns use only a few of the 255 levels.
    **Per-channel**: one scale per output column, from {_per_channel_scales.min():.3g} to
    {_per_channel_scales.max():.3g}.
    Median column error: per-tensor {np.median(column_errors["per-tensor"]):.2e}, per-channel
    {np.median(column_errors["per-channel"]):.2e}, **{per_channel_gain:.2f}x** smaller.
    {_note}
    """
            ),
            _chart,
        ]
    )
    return column_errors, per_channel_gain, schemes, w_KN


@app.cell
def _():
    trace_size = FLAGS.control("trace_size", ARGS, label="profiled matmul size")
    trace_steps = FLAGS.control("trace_steps", ARGS, label="profiled steps")
    trace_button = mo.ui.run_button(label="Capture a trace")
    mo.vstack(
        [
            mo.md(
                "## Capture a warmed-up trace\nThe first call compiles; a trace that includes it "
                "shows compilation, not your step. So: call once (warm-up, blocked), then trace a "
                "few blocked steps inside `jax.profiler.trace(logdir)`."
            ),
            mo.hstack([trace_size, trace_steps, trace_button], justify="start"),
        ]
    )
    return trace_button, trace_size, trace_steps


@app.cell
def _(seed, trace_button, trace_size, trace_steps):
    mo.stop(
        lab.interactive() and not trace_button.value,
        mo.callout(mo.md("Press **Capture a trace** (a second or two)."), kind="info"),
    )
    _n = trace_size.value
    _a = jax.random.normal(jax.random.key(seed.value), (_n, _n), jnp.float32)

    @jax.jit
    def bf16_step(carry_NN):
        """A bf16 matmul with f32 accumulation, then a normalization: the profiled step."""
        product = jax.lax.dot(
            carry_NN.astype(jnp.bfloat16),
            _a.astype(jnp.bfloat16),
            preferred_element_type=jnp.float32,
        )
        return product / jnp.linalg.norm(product)

    logdir = tempfile.mkdtemp(prefix="jax-trace-")
    capture, _ = trace.capture(
        bf16_step, _a, logdir, steps=trace_steps.value, warmup=1, perfetto=True
    )
    trace_events = trace.xplane_op_events(capture.find(".xplane.pb"))
    top_ops = trace.op_table(trace_events, "jit_bf16_step")
    mo.vstack(
        [
            mo.md(f"Wrote to `{logdir}` (a temporary directory):"),
            lab.table(capture.file_rows()),
            lab.table(
                [
                    {
                        **r,
                        "total (us)": f"{r['total (us)']:.1f}",
                        "mean (us)": f"{r['mean (us)']:.1f}",
                        "share": f"{r['share']:.0%}",
                    }
                    for r in top_ops[:6]
                ],
                caption=(
                    f"Ops of `jit_bf16_step` in the trace ({trace_steps.value} steps, "
                    f"{MACHINE}; the lesson *Read an XProf trace* goes further):"
                ),
            ),
        ]
    )
    return capture, logdir, top_ops


@app.cell
def _(logdir):
    _commands = trace.xprof_commands("/tmp/jax-trace", tpu_name="my-tpu", zone="us-central2-b")
    mo.vstack([
        mo.md("""
    ## Open it in XProf on a TPU VM
    The same code on a TPU VM writes the same files, with TPU ops in them. To look at them:
    """),
        text.code_block(_commands, "bash", "xprof on a TPU VM"),
        mo.md(f"""
    This trace (`{logdir}`) opens the same way here: `pip install xprof`, then
    `xprof --logdir={logdir} --port=6006`, or drop its `perfetto_trace.json.gz` /
    `*.trace.json.gz` on https://ui.perfetto.dev (nothing in this lesson needs the network).
    """),
    ])  # fmt: skip
    return


@app.cell
def _(channel_spread, k_max, rows, schemes, seed, w_KN):
    # Independent references: NumPy float64 (int64 for the integer product) on the same values.
    _x, _ = precision_xprof.example_operands(
        jax.random.key(seed.value + 2), rows.value, 256, rows.value
    )
    _codes_x, _scale_x = precision_xprof.quantize(_x, "per-channel", axis=1)
    _codes_w, _scale_w = schemes["per-channel"]
    _integer_reference = (
        (np.asarray(_codes_x, np.int64) @ np.asarray(_codes_w, np.int64))
        * np.asarray(_scale_x, np.float64)
        * np.asarray(_scale_w, np.float64)
    )
    _int8 = precision_xprof.int8_matmul(_x, w_KN, "per-channel")
    int8_error = numerics.norm_relative_error(_int8, _integer_reference)
    # The float products at the largest K (the sweep's operands), entry by entry, against the
    # classical worst-case rounding bound (2u + u^2 + gamma_K (1 + u)^2) * (|x| @ |w|): unlike
    # a relative error it holds even where an entry of x @ w cancels to nearly zero.
    _m, _k = rows.value, int(k_max.value)
    _xs, _ws = precision_xprof.example_operands(
        jax.random.key(seed.value), _m, _k, _m, channel_spread.value
    )
    _units = {"float32": 0.0, "bf16 inputs, f32 accumulate": precision_xprof.BF16_UNIT_ROUNDOFF}
    bound_ratios = {
        kind: precision_xprof.bound_ratio(precision_xprof.matmul(kind, _xs, _ws), _xs, _ws, unit)
        for kind, unit in _units.items()
    }
    # fp8: the same bound with e4m3's 2^-4, plus its fixed step below the normal range
    _fp8 = "fp8 e4m3 inputs, f32 accumulate"
    bound_ratios[_fp8] = precision_xprof.fp8_bound_ratio(
        precision_xprof.matmul(_fp8, _xs, _ws), _xs, _ws
    )
    _int8_name = "int8 matmul vs NumPy int64 product of its codes (relative)"
    _ratio_names = {kind: f"{kind}: worst |error| / rounding bound" for kind in bound_ratios}
    check = lab.Check(
        f"int8 matmul = exact integer product of its codes (NumPy int64; error {int8_error:.2g}); "
        f"float32, bf16-input and fp8-input products at K = {_k} within their worst-case "
        f"rounding bounds vs NumPy float64 (worst |error| / bound: float32 "
        f"{bound_ratios['float32']:.2g}, bf16 inputs "
        f"{bound_ratios['bf16 inputs, f32 accumulate']:.2g}, fp8 inputs "
        f"{bound_ratios['fp8 e4m3 inputs, f32 accumulate']:.2g}; the limit is 1)",
        {_int8_name: int8_error} | {_ratio_names[kind]: r for kind, r in bound_ratios.items()},
        {_int8_name: precision_xprof.INT8_PRODUCT_TOLERANCE}
        | dict.fromkeys(_ratio_names.values(), precision_xprof.BOUND_RATIO_LIMIT),
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("precision_xprof")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_precision_check_passes(precision_check):
    precision_check.assert_passed()
    return


@app.cell
def test_per_channel_fits_columns_better(
    channel_spread, column_errors, per_channel_gain, schemes, w_KN
):
    # Always: each column's scale is at most the shared one (so is its error bound, scale / 2).
    assert np.all(np.asarray(schemes["per-channel"][1]) <= float(schemes["per-tensor"][1]))
    # Where the columns differ enough for it to matter, a clear gain (measured over seeds and
    # sizes in core/lessons/tpu_systems/precision_xprof_test.py); with one column the schemes
    # coincide.
    if w_KN.shape[1] > 1 and channel_spread.value >= precision_xprof.PER_CHANNEL_CLEAR_SPREAD:
        assert per_channel_gain >= precision_xprof.PER_CHANNEL_MIN_GAIN, column_errors
    return


@app.cell
def test_trace_holds_the_warmed_up_steps(capture, top_ops, trace_steps):
    assert any(p.name.endswith(".xplane.pb") for p in capture.files)
    assert top_ops and {r["count"] for r in top_ops} == {trace_steps.value}
    return


if __name__ == "__main__":
    app.run()
