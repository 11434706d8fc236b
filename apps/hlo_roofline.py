import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Reason with HLO and the roofline model",
)

with app.setup:
    import altair as alt
    import jax
    import jax.numpy as jnp
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lab import charts, exercises
    from core.perf import machine, roofline, timing
    from core.tpu import specs, topology_compile, vpu

    lab.use_cpu_devices()
    SIZES = tuple(2**i for i in range(3, 12))
    ELEMENTS = tuple(2**i for i in range(10, 25, 2))
    FLAGS = lab.Flags(
        lab.Flag("kernel", "matmul", "which kernel to analyse", choices=("matmul", "elementwise")),
        lab.Flag("m", 256, "matmul rows M", choices=SIZES),
        lab.Flag("n", 256, "matmul columns N", choices=SIZES),
        lab.Flag("k", 256, "matmul contraction K", choices=SIZES),
        lab.Flag("elements", 2**20, "elements of the elementwise input", choices=ELEMENTS),
        lab.Flag("op", "add", "elementwise op", choices=roofline.ELEMENTWISE_OPS),
        lab.Flag("dtype", "float32", "element type", choices=("float32", "bfloat16")),
        lab.Flag("repeats", 10, "timed runs", lo=3, hi=100),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description="Reason with HLO and the roofline model.",
    )
    ARGS = FLAGS.parse()
    MACHINE = machine.machine_label()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Reason with HLO and the roofline model
    {lab.phase_line("hlo_roofline")}

    A kernel that does F FLOPs while moving B bytes cannot finish faster than
    `max(F / peak FLOP/s, B / memory bandwidth)`. Its **arithmetic intensity** F / B decides
    which limit binds. In this lesson you will

    - read F and B off the compiler (`compiled.cost_analysis()`) and check them against the
      closed forms (2MNK for a matmul, one op per element for elementwise);
    - place the kernel on a **log-log roofline** of this machine (peak FLOP/s and bandwidth
      measured here) beside the TPU rooflines: a matmul under the matrix unit's (MXU) roof of
      v5e, v5p, v6e and TPU7x, an elementwise kernel under the vector unit's (VPU) roof, some
      30x lower, derived from its published parts where a source gives them (v5e, v5p);
    - predict the run time from the roofline and compare it with the measured time on this CPU.
    """)
    return


@app.cell
def _():
    saved = machine.load()
    if saved is None:
        # no benchmarks/results/machine.json: a quick, small (noisier) measurement now
        machine_report = machine.measure(quick=True, bf16=False)
        _origin = (
            "measured just now (quick); run `python benchmarks/machine.py` for steadier figures"
        )
    else:
        machine_report = saved
        _origin = (
            f"from `benchmarks/results/machine.json` ({saved.get('measured_at', 'unknown time')})"
        )
    peak_flops = machine_report["peak_flop_per_s"]
    bandwidth = machine_report["bytes_per_s"]
    mo.vstack(
        [
            mo.md(f"## This machine\n{machine_report['machine']}: figures {_origin}."),
            lab.table(machine.report_rows(machine_report)),
            mo.md(
                f"Peak = f32 matmul {peak_flops / 1e9:.3g} GFLOP/s, "
                f"bandwidth = copy {bandwidth / 1e9:.3g} GB/s, "
                f"ridge point **{peak_flops / bandwidth:.1f} FLOP/byte** (TPU bf16: "
                + ", ".join(f"{g} {specs.chip(g).ridge_point:.0f}" for g in specs.GENERATIONS)
                + ")."
            ),
        ]
    )
    return bandwidth, machine_report, peak_flops


@app.cell
def _():
    kernel = FLAGS.control("kernel", ARGS)
    m = FLAGS.control("m", ARGS, label="M")
    n = FLAGS.control("n", ARGS, label="N")
    k = FLAGS.control("k", ARGS, label="K")
    elements = FLAGS.control("elements", ARGS)
    op = FLAGS.control("op", ARGS)
    dtype = FLAGS.control("dtype", ARGS)
    repeats = FLAGS.control("repeats", ARGS)
    mo.vstack(
        [
            mo.md("## The kernel"),
            mo.hstack([kernel, dtype, repeats], justify="start"),
            mo.hstack([mo.md("matmul (M, K) @ (K, N):"), m, k, n], justify="start"),
            mo.hstack([mo.md("elementwise:"), op, elements], justify="start"),
        ]
    )
    return dtype, elements, k, kernel, m, n, op, repeats


@app.cell
def _(dtype, elements, k, kernel, m, n, op):
    itemsize = jnp.dtype(dtype.value).itemsize
    # This CPU's roofline: compiled (and below measured) on the host's CPU, on a TPU host too.
    _cpu = lab.cpu_device()
    if kernel.value == "matmul":
        _m, _n, _k = int(m.value), int(n.value), int(k.value)
        compiled = roofline.compile_matmul(_m, _n, _k, dtype.value, _cpu)
        closed = roofline.matmul_cost(_m, _n, _k, itemsize)
        check_closed = roofline.matmul_cost(_m, _n, _k, 4)
        kernel_text = f"({_m}, {_k}) @ ({_k}, {_n}) {dtype.value}"
    else:
        _count = int(elements.value)
        compiled = roofline.compile_elementwise(op.value, _count, dtype.value, _cpu)
        closed = roofline.elementwise_cost(op.value, _count, itemsize)
        check_closed = roofline.elementwise_cost(op.value, _count, 4)
        kernel_text = f"{op.value} on {_count:,} {dtype.value} elements"
    cost = roofline.cost_from_compiled(compiled)
    tpu_cost = None
    if topology_compile.libtpu_problem() is None:
        _device = topology_compile.topology_devices("v5e:2x2")[0]
        if kernel.value == "matmul":
            _tpu = roofline.compile_matmul(
                int(m.value), int(n.value), int(k.value), dtype.value, _device
            )
        else:
            _tpu = roofline.compile_elementwise(op.value, int(elements.value), dtype.value, _device)
        tpu_cost = (
            roofline.cost_from_compiled(_tpu),
            topology_compile.cost_dict(_tpu).get("optimal_seconds"),
        )
    _rows = [
        {
            "source": "closed form",
            "FLOPs": f"{closed.flops:,.0f}",
            "transcendentals": f"{closed.transcendentals:,.0f}",
            "bytes": f"{closed.bytes:,.0f}",
            "intensity (FLOP/byte)": f"{closed.intensity:.3g}",
        },
        {
            "source": "cost_analysis(), this CPU",
            "FLOPs": f"{cost.flops:,.0f}",
            "transcendentals": f"{cost.transcendentals:,.0f}",
            "bytes": f"{cost.bytes:,.0f}",
            "intensity (FLOP/byte)": f"{cost.intensity:.3g}",
        },
    ]
    if tpu_cost is not None:
        _rows.append(
            {
                "source": "cost_analysis(), TPU v5e compiler",
                "FLOPs": f"{tpu_cost[0].flops:,.0f}",
                "transcendentals": f"{tpu_cost[0].transcendentals:,.0f}",
                "bytes": f"{tpu_cost[0].bytes:,.0f}",
                "intensity (FLOP/byte)": f"{tpu_cost[0].intensity:.3g}",
            }
        )
    _hlo = next(
        (
            line.strip()[:150]
            for line in compiled.as_text().splitlines()
            if line.strip().startswith("ROOT")
        ),
        "",
    )
    mo.vstack(
        [
            mo.md(f"### {kernel_text}\nThe compiled HLO's result: `{_hlo}`"),
            lab.table(_rows),
            mo.md(
                """
    - In **float32** the CPU compiler's numbers equal the closed form.
    - In **bfloat16** this CPU has no bf16 matmul unit: XLA converts to f32 and back, and
      those conversions show up as extra FLOPs and bytes. The TPU compiler multiplies bf16
      natively and counts exactly 2MNK.
    - The TPU compiler's **bytes** are shown beside the closed form but not checked: the
      check holds its FLOPs to 2MNK only.
    """
            ),
        ]
    )
    return check_closed, closed, cost, kernel_text, tpu_cost


@app.cell
def _(
    bandwidth,
    closed,
    cost,
    dtype,
    elements,
    k,
    kernel,
    m,
    n,
    op,
    peak_flops,
    repeats,
):
    # Measured time on this CPU (warm, blocked, median) vs the roofline prediction: the operands
    # committed to the host's CPU, so a TPU host measures its CPU too.
    _cpu = lab.cpu_device()
    if kernel.value == "matmul":
        _a = jax.device_put(jnp.ones((int(m.value), int(k.value)), dtype.value), _cpu)
        _b = jax.device_put(jnp.ones((int(k.value), int(n.value)), dtype.value), _cpu)
        measured = timing.time_calls(jax.jit(jnp.matmul), _a, _b, repeats=repeats.value)
    else:
        _x = jax.device_put(jnp.ones((int(elements.value),), dtype.value), _cpu)
        measured = timing.time_calls(
            jax.jit(roofline.elementwise_fn(op.value)), _x, repeats=repeats.value
        )
    predicted_s = roofline.roofline_seconds(closed, peak_flops, bandwidth)
    measured_s = measured.summary.median
    _bound = roofline.bound(closed.intensity, peak_flops, bandwidth)
    if predicted_s > measured_s:
        _reading = (
            'Above 100%: the roof is not a hard limit here. This machine\'s "peak" is its '
            "*sustained* 2048-matmul and large-copy rate (measured at another moment, under "
            "another load); a kernel that fits in cache can beat the copy bandwidth."
        )
    else:
        _reading = (
            "Small kernels fall short: dispatch overhead and cache effects are not in the model."
        )
    mo.vstack(
        [
            mo.md(
                f"""
    ### Predicted vs measured, {MACHINE}
    Roofline prediction from the closed form: **{predicted_s * 1e6:.1f} us** ({_bound} here:
    intensity {closed.intensity:.3g} vs ridge {peak_flops / bandwidth:.1f}). Measured median of
    {repeats.value} warm, blocked runs: **{measured_s * 1e6:.1f} us**
    (p10-p90 {measured.summary.p10 * 1e6:.1f}-{measured.summary.p90 * 1e6:.1f} us), so the kernel
    reaches **{predicted_s / measured_s:.0%}** of its roofline. {_reading} The compiler counted
    {cost.flops + cost.transcendentals:,.0f} operations and {cost.bytes:,.0f} bytes.
    """
            )
        ]
    )
    return measured_s, predicted_s


@app.cell
def _(bandwidth, closed, kernel, kernel_text, measured_s, peak_flops):
    _roofs = [
        {**r, "unit": "this CPU"}
        for r in roofline.roof_rows("this CPU (measured)", peak_flops, bandwidth, lo=0.01, hi=1e4)
    ]
    # Each TPU chip has two compute roofs over one memory roof: the MXU's (matmuls, bf16) and
    # the VPU's (elementwise work, f32), the latter only where its parts are published.
    _tpu_roofs = {}  # (generation, unit) -> peak FLOP/s
    for _g in specs.GENERATIONS:
        _tpu_roofs[(_g, "MXU")] = specs.chip(_g).bf16_flops.value
        if vpu.peak(_g) is not None:
            _tpu_roofs[(_g, "VPU")] = vpu.peak(_g)
    for (_g, _unit), _peak in _tpu_roofs.items():
        _roofs += [
            {**r, "unit": _unit}
            for r in roofline.roof_rows(
                f"TPU {_g} {_unit}", _peak, specs.chip(_g).hbm_bandwidth.value, lo=0.01, hi=1e4
            )
        ]
    _roof_df = pd.DataFrame(_roofs)
    # The kernel on each TPU, under the roof of the unit that runs it: MXU for a matmul, VPU
    # for elementwise work (no VPU roof, no point: v6e and TPU7x publish no VPU parts).
    _unit_of_kernel = "MXU" if kernel.value == "matmul" else "VPU"
    tpu_points = [
        {
            "what": f"on TPU {_g} ({_unit})",
            "intensity": closed.intensity,
            "FLOP/s": roofline.attainable_flops(
                closed.intensity, _peak, specs.chip(_g).hbm_bandwidth.value
            ),
        }
        for (_g, _unit), _peak in _tpu_roofs.items()
        if _unit == _unit_of_kernel
    ]
    # the square matmuls and elementwise kernels as sizes change (closed form intensity)
    _family = (
        [
            {"kernel": f"matmul {s}^3", "intensity": roofline.matmul_cost(s, s, s, 4).intensity}
            for s in SIZES
        ]
        if kernel.value == "matmul"
        else [
            {
                "kernel": f"{o} (any size)",
                "intensity": roofline.elementwise_cost(o, 1024, 4).intensity,
            }
            for o in roofline.ELEMENTWISE_OPS
        ]
    )
    _family_df = pd.DataFrame(_family)
    _family_df["FLOP/s"] = [
        roofline.attainable_flops(i, peak_flops, bandwidth) for i in _family_df["intensity"]
    ]
    _point = pd.DataFrame(
        [
            {
                "what": "roofline bound",
                "intensity": closed.intensity,
                "FLOP/s": roofline.attainable_flops(closed.intensity, peak_flops, bandwidth),
            },
            {
                "what": "measured here",
                "intensity": closed.intensity,
                "FLOP/s": (closed.flops + closed.transcendentals) / measured_s,
            },
            *tpu_points,
        ]
    )
    _ridges = pd.DataFrame(
        [
            {
                "ridge": f"{g} ridge {specs.chip(g).ridge_point:.0f}",
                "intensity": specs.chip(g).ridge_point,
            }
            for g in specs.GENERATIONS
        ]
        + [
            {
                "ridge": f"this CPU ridge {peak_flops / bandwidth:.1f}",
                "intensity": peak_flops / bandwidth,
            }
        ]
    )
    _x = alt.X(
        "intensity:Q",
        scale=alt.Scale(type="log"),
        title="arithmetic intensity (FLOP per byte, log)",
    )
    # Whole decades with headroom: the highest roof (v6e) is not drawn on the top edge.
    _y_domain = charts.log_domain([*_roof_df["FLOP/s"], *_family_df["FLOP/s"], *_point["FLOP/s"]])
    _y_scale = alt.Scale(type="log", domain=_y_domain, nice=False)
    _y = alt.Y("FLOP/s:Q", scale=_y_scale, axis=alt.Axis(format=".0e"), title="attainable FLOP/s")
    _legend = dict(titleLimit=360, labelLimit=300)  # the kernel is a legend title: unclipped
    _machine = alt.Color("machine:N", title="roofline", legend=alt.Legend(**_legend))
    _dash = alt.StrokeDash(
        "unit:N",
        title="compute roof",
        scale=alt.Scale(domain=["this CPU", "MXU", "VPU"], range=[[1, 0], [1, 0], [6, 3]]),
    )
    _lines = alt.Chart(_roof_df).mark_line().encode(x=_x, y=_y, color=_machine, strokeDash=_dash)
    _ridge_rules = (
        alt.Chart(_ridges)
        .mark_rule(strokeDash=[2, 3], color="gray")
        .encode(x="intensity:Q", tooltip=["ridge"])
    )
    _fam = (
        alt.Chart(_family_df)
        .mark_point(color="black", opacity=0.5)
        .encode(x=_x, y=_y, tooltip=["kernel", alt.Tooltip("intensity:Q", format=".3g")])
    )
    _what = alt.Shape("what:N", title=kernel_text, legend=alt.Legend(**_legend))
    _pts = (
        alt.Chart(_point)
        .mark_point(size=160, filled=True, color="black")
        .encode(x=_x, y=_y, shape=_what, tooltip=["what", alt.Tooltip("FLOP/s:Q", format=".3g")])
    )
    _placed = "; ".join(f"{p['what']}: {p['FLOP/s']:.3g} FLOP/s" for p in tpu_points)
    mo.vstack(
        [
            mo.md(
                "## The roofline\nEach line: FLOP/s = min(peak, intensity x bandwidth). Dashed: "
                "ridge points. Grey points: the same kind of kernel at other sizes (a square "
                "matmul's intensity grows like n/6 in f32; a unary elementwise op stays at 1/8 "
                "FLOP/byte in f32 (1/4 in bf16), memory-bound, on every chip). Filled: your "
                "kernel, bound and measured here, and its bound on each TPU under the roof "
                "of the unit that runs it (a matmul: the MXU; elementwise: the VPU, whose "
                "roof is dashed; ridge points are the MXU's). A VPU roof counts one f32 op "
                "per ALU per cycle: a transcendental (tanh, exp) takes more than one, so its "
                f"real roof is lower still. Placed: {_placed}."
            ),
            alt.layer(_lines, _ridge_rules, _fam, _pts).properties(
                width=560,
                height=340,
                title=f"roofline: {MACHINE}, measured; TPU MXU (solid), VPU (dashed), published",
            ),
            mo.md(
                "### The vector unit's roof, from its parts\nVPU FLOP/s per chip = sublanes x "
                "lanes x ALUs per (lane, sublane) x TensorCores x clock, one f32 op per ALU per "
                "cycle (the scaling book's appendix works it out for v5p: about 1.4e13, "
                "[jax-ml.github.io/scaling-book/tpus](https://jax-ml.github.io/scaling-book/"
                "tpus/#appendix-a-more-on-tpu-internals)). No source gives v6e's or TPU7x's "
                "ALU count or clock, so they get no VPU roof."
            ),
            lab.table(vpu.rows()),
        ]
    )
    return (tpu_points,)


@app.cell
def _(check_closed, dtype, elements, k, kernel, m, n, op, tpu_cost):
    # Independent reference: the closed forms (2MNK; one op per element), against the
    # compiler's cost_analysis() in float32 on the host's CPU (whatever the default backend:
    # the closed form's bytes are XLA:CPU's) and, with libtpu, the FLOPs on the TPU compiler.
    check_errors = roofline.cpu_float32_errors(
        "matmul" if kernel.value == "matmul" else "elementwise",
        *(int(m.value), int(n.value), int(k.value)),
        op=op.value,
        elements=int(elements.value),
    )
    if tpu_cost is not None and kernel.value == "matmul":
        check_errors[f"TPU v5e {dtype.value} FLOPs vs 2MNK"] = numerics.norm_relative_error(
            tpu_cost[0].flops, check_closed.flops
        )
    check = lab.Check(
        "compiler cost_analysis() equals the closed form (f32 FLOPs and bytes on this CPU; "
        "2MNK on the TPU compiler)",
        check_errors,
        0.0,  # exact: integer counts, held exactly by float64
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson("hlo_roofline", ARGS)
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("hlo_roofline")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_prediction_is_positive_and_machine_labelled(
    machine_report,
    predicted_s,
):
    assert predicted_s > 0
    assert machine_report["machine"].endswith("(this CPU)")
    return


@app.cell
def test_roofline_prediction_follows_the_closed_form(
    bandwidth,
    closed,
    peak_flops,
    predicted_s,
):
    compute_s = (closed.flops + closed.transcendentals) / peak_flops
    memory_s = closed.bytes / bandwidth
    assert predicted_s == max(compute_s, memory_s)
    return


@app.cell
def test_each_kernel_sits_under_the_roof_of_its_unit(closed, kernel, tpu_points):
    # A matmul is placed under each chip's MXU roof, elementwise work under the VPU's; the
    # VPU's is the published parts' product (v5p: 8 x 128 x 4 ALUs x 2 cores x 1.75 GHz).
    unit = "MXU" if kernel.value == "matmul" else "VPU"
    assert tpu_points and all(p["what"].endswith(f"({unit})") for p in tpu_points)
    for point in tpu_points:
        generation = point["what"].split()[2]
        roof = specs.chip(generation).bf16_flops.value if unit == "MXU" else vpu.peak(generation)
        memory = closed.intensity * specs.chip(generation).hbm_bandwidth.value
        assert point["FLOP/s"] == min(roof, memory)
    return


if __name__ == "__main__":
    app.run()
