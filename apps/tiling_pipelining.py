import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Tiling, memory, and pipelining")

with app.setup:
    import inspect

    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.kernels import matmul, pipeline, vmem
    from core.lab import charts, exercises, text
    from core.lessons.pallas import tiling_pipelining

    FLAGS = lab.Flags(
        lab.Flag("bm", 512, "block rows bm", lo=128, hi=4096, step=128),
        lab.Flag("bk", 1024, "block size bk along K", lo=128, hi=4096, step=128),
        lab.Flag("bn", 1024, "block columns bn", lo=128, hi=4096, step=128),
        lab.Flag("dtype", "bfloat16", "element type", choices=tiling_pipelining.DTYPES),
        lab.Flag("buffers", 2, "buffers per operand (2 = double buffering)", lo=1, hi=3),
        lab.Flag(
            "size", 4096, "matrix size m = k = n for the roofline", lo=1024, hi=16384, step=1024
        ),
        lab.Flag(
            "generation",
            "v5e",
            "TPU generation of the timeline and roofline",
            choices=tuple(tiling_pipelining.GENERATIONS),
        ),
        lab.Flag("rows", 256, "rows of x in the DMA demo", lo=8, hi=2048, step=8),
        lab.Flag("chunk", 32, "rows per DMA in the demo", lo=8, hi=1024, step=8),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description="Tiling, memory and pipelining: VMEM per block size, DMAs, the roofline.",
    )
    ARGS = FLAGS.parse()
    RUNS_ON = (
        "compiled by Mosaic on this TPU"
        if jax.default_backend() == "tpu"
        else "in TPU interpret mode on this CPU"
    )
    DMA_K = DMA_N = 128  # the demo's x is rows x 128, w 128 x 128


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Tiling, memory, and pipelining
    {lab.phase_line("tiling_pipelining")}

    A TPU core computes only on data in **VMEM**, its small on-chip memory; the arrays live
    in **HBM**. A Pallas grid is a loop in which every step copies its blocks HBM → VMEM
    (a DMA), computes, and copies results back. Block sizes decide three things at once: how
    much VMEM the kernel holds, how many bytes cross from HBM, and whether the copies can hide
    behind the compute. In this lesson you will

    - size blocks against each generation's VMEM (jax's own hardware table) and against the
      smaller **scoped** limit the compiler grants a kernel by default, with the memory cost
      of double buffering;
    - see the pipeline's timeline with one buffer and with two;
    - write the pipeline by hand: explicit DMAs and semaphores, run in TPU interpret mode and
      checked against NumPy float64;
    - predict utilization per block size with the roofline, beside the figures jax's matmul
      guide published for a TPU v5e.
    """)
    return


@app.cell
def _():
    bm = FLAGS.control("bm", ARGS, label="bm")
    bk = FLAGS.control("bk", ARGS, label="bk")
    bn = FLAGS.control("bn", ARGS, label="bn")
    dtype = FLAGS.control("dtype", ARGS)
    buffers = FLAGS.control("buffers", ARGS)
    mo.vstack(
        [
            mo.md("## Blocks and VMEM"),
            mo.hstack([bm, bk, bn], justify="start"),
            mo.hstack([dtype, buffers], justify="start"),
        ]
    )
    return bk, bm, bn, buffers, dtype


@app.cell
def _(bk, bm, bn, buffers, dtype):
    _parts = tiling_pipelining.vmem_parts(bm.value, bk.value, bn.value, dtype.value, buffers.value)
    vmem_rows = tiling_pipelining.vmem_rows(
        bm.value, bk.value, bn.value, dtype.value, buffers.value
    )
    _bars = pd.DataFrame(
        [
            {
                "generation": r["generation"],
                "MiB": r["VMEM per core (MiB)"],
                "what": "VMEM per core",
            }
            for r in vmem_rows
        ]
        + [
            {
                "generation": r["generation"],
                "MiB": r["default scoped limit (MiB)"],
                "what": "default scoped limit",
            }
            for r in vmem_rows
        ]
        + [
            {"generation": r["generation"], "MiB": r["blocks need (MiB)"], "what": "blocks need"}
            for r in vmem_rows
        ]
    )
    _chart = (
        alt.Chart(
            _bars, title="VMEM per TensorCore, the default scoped limit, what the blocks need"
        )
        .mark_bar()
        .encode(
            y=alt.Y("generation:N", title=None, sort=list(tiling_pipelining.GENERATIONS)),
            yOffset="what:N",
            x=alt.X("MiB:Q", title="MiB"),
            color=alt.Color(
                "what:N",
                scale=alt.Scale(range=list(charts.PALETTE[:3])),
                legend=alt.Legend(orient="bottom", title=None),
            ),
            tooltip=["generation", "what", alt.Tooltip("MiB:Q", format=".2f")],
        )
        .properties(width=420, height=200)
    )
    mo.vstack(
        [
            lab.table(
                [{"in VMEM": name, "MiB": b / 2**20} for name, b in _parts.items()],
                caption=f"{buffers.value} buffer(s) per operand: the pipeline copies the next "
                "block into one while the kernel reads the other",
            ),
            lab.table(
                vmem_rows,
                caption="VMEM per TensorCore from jax's pltpu.get_tpu_info_for_chip; the "
                f"default scoped limit as libtpu {vmem.LIBTPU_VERSION}'s compiler reports it",
            ),
            _chart,
            mo.md(
                "Double buffering doubles the blocks' VMEM: the price of hiding the copies. "
                "**Fits** is judged against the scoped limit, not the physical VMEM: Mosaic "
                "gives a kernel only that much unless it asks for more with "
                "`pltpu.CompilerParams(vmem_limit_bytes=...)` (or a whole program with XLA's "
                "`--xla_tpu_scoped_vmem_limit_kib`); blocks over the limit fail to compile "
                'with "Scoped allocation ... exceeded scoped vmem limit".'
            ),
        ]
    )
    return (vmem_rows,)


@app.cell
def _():
    size = FLAGS.control("size", ARGS, label="m = k = n")
    generation = FLAGS.control("generation", ARGS)
    mo.vstack(
        [mo.md("## The pipeline and the roofline"), mo.hstack([size, generation], justify="start")]
    )
    return generation, size


@app.cell
def _(bk, bm, bn, dtype, generation, size):
    _blocks = {"bm": bm.value, "bk": bk.value, "bn": bn.value}
    lab.guard(
        next(
            (
                f"{name} = {value} does not divide m = k = n = {size.value}: the grid needs "
                "whole blocks"
                for name, value in _blocks.items()
                if size.value % value
            ),
            None,
        ),
        headline="No grid for these blocks.",
    )
    shape = (size.value, size.value, size.value)
    blocks = (bm.value, bk.value, bn.value)
    roof = tiling_pipelining.roofline(*shape, *blocks, dtype.value, generation.value)
    _pipelined = tiling_pipelining.pipelined_utilization(
        *shape, *blocks, dtype.value, generation.value
    )
    lab.report("roofline utilization", 100 * roof["utilization"], "%")
    lab.table(
        [
            {
                "FLOPs": roof["FLOPs"],
                "HBM bytes": roof["HBM bytes"],
                "FLOP/byte": round(roof["intensity (FLOP/byte)"], 1),
                f"{generation.value} ridge": round(roof["ridge (FLOP/byte)"], 1),
                "bound": roof["bound"],
                "roofline utilization": f"{100 * roof['utilization']:.1f}%",
                "pipeline model": f"{100 * _pipelined:.1f}%",
            }
        ],
        caption=f"Predicted for {generation.value} from jax's peak figures (a model, not a "
        "measurement)",
    )
    return blocks, roof, shape


@app.cell
def _(blocks, dtype, generation, shape):
    _copy, _compute = tiling_pipelining.step_seconds(
        *blocks, dtype.value, generation.value, k_steps=shape[1] // blocks[1]
    )
    _rows = [
        {
            **row,
            "buffers": f"{b} buffer{'s' if b > 1 else ''}",
            "start": 1e6 * row["start"],
            "end": 1e6 * row["end"],
        }
        for b in (1, 2)
        for row in tiling_pipelining.timeline(6, _copy, _compute, b)
    ]
    mo.vstack(
        [
            mo.md(
                f"""
    The first 6 grid steps on {generation.value}: each copies an x and a y block in, and its
    share of the output out ({1e6 * _copy:.2f} µs at the HBM bandwidth), and multiplies them
    ({1e6 * _compute:.2f} µs at the bf16 peak). With one buffer, copy and compute alternate;
    with two, the next copy runs under the current multiply, and a step costs the longer.
    """
            ),
            alt.Chart(pd.DataFrame(_rows), title="pipeline timeline (model)")
            .mark_bar(height=14)
            .encode(
                x=alt.X("start:Q", title="µs"),
                x2="end:Q",
                y=alt.Y("work:N", title=None),
                row=alt.Row("buffers:N", title=None),
                color=alt.Color("step:O", scale=alt.Scale(range=list(charts.PALETTE[:6]))),
                tooltip=[
                    "buffers",
                    "step",
                    "work",
                    alt.Tooltip("start:Q", format=".3f"),
                    alt.Tooltip("end:Q", format=".3f"),
                ],
            )
            .properties(width=460, height=50),
        ]
    )
    return


@app.cell
def _():
    lab.table(
        tiling_pipelining.published_rows(),
        caption=f"Published (bf16, TPU v5e): {tiling_pipelining.PUBLISHED_SOURCE}; not measured "
        "here. Roofline and pipeline "
        "model: this lesson's upper bounds",
    )
    return


@app.cell(hide_code=True)
def _():
    mo.md("""
    The published figures sit below both bounds. Small blocks (128) are memory bound:
    the grid reads x N/bn times and y M/bm times, so the intensity stays near 60 FLOP/byte, a
    quarter of v5e's ridge; each grid step also has a fixed cost that the models leave out.
    Large blocks on a 1024 matrix leave a grid of 2 steps: nothing to overlap the first copy
    with, and the guide's timing includes dispatch. At 8192 the big blocks reach 91.5%.
    """)
    return


@app.cell(hide_code=True)
def _(bk, bm, bn, size):
    # The chip's figures come from a kept record (tpu_scripts/matmul_blocks_tpu.py on one
    # chip), never from this machine: interpret mode's wall time says nothing about a TPU.
    _figures, _source = tiling_pipelining.tpu_record()
    _sizes = [] if _figures is None else tiling_pipelining.tpu_sizes(_figures)
    if not _sizes:
        _why = _source if _figures is None else f"the record {_source} holds no Pallas sweep"
        lab.report("TPU block sweep", f"not measured yet ({tiling_pipelining.TPU_RECORD})")
        _shown = mo.callout(
            mo.md(
                "### Measured on a TPU: not yet\n"
                f"No chip has run this sweep, so there is no measured curve to show: {_why}"
            ),
            kind="info",
        )
    else:
        _n = size.value if size.value in _sizes else max(_sizes)
        _label = tiling_pipelining.measured_label(_figures, _source)
        _rows = tiling_pipelining.tpu_block_rows(_figures, _n)
        _xla = tiling_pipelining.tpu_xla_percent(_figures, _n)
        _series = {
            "measured % of peak": "measured on the chip",
            "pipeline % (model)": "pipeline model (v5e)",
            "roofline % (model)": "roofline model (v5e)",
        }
        _bars = pd.DataFrame(
            [
                {"blocks": r["blocks (bm, bk, bn)"], "what": name, "% of bf16 peak": r[key]}
                for r in _rows
                for key, name in _series.items()
                if r[key] is not None
            ]
        )
        _yours = f"({bm.value}, {bk.value}, {bn.value})"
        _mine = next((r for r in _rows if r["blocks (bm, bk, bn)"] == _yours), None)
        _ran = [r["measured % of peak"] for r in _rows if r["measured % of peak"] is not None]
        if _ran:
            lab.report(f"best measured block shape on the chip, N = {_n}", max(_ran), "% of peak")
        _shown = mo.vstack(
            [
                mo.md(
                    f"""
    ### Measured on the chip, beside the models
    The same kernel (core.kernels.matmul, bf16 inputs, f32 accumulator) at
    m = k = n = {_n}, one bar group per block shape the chip ran, sorted by the pipeline
    model: the measured share of the bf16 peak beside this lesson's two upper bounds.
    {_label}. XLA's `jnp.dot` at the same size:
    {"not in the record" if _xla is None else f"{_xla:.1f}% of the peak"}. Your blocks
    {_yours}: {"not in the sweep" if _mine is None else _mine["status"]}. Sizes in the
    record: {", ".join(map(str, _sizes))} (the chart follows m = k = n when it is one).
    """
                ),
                alt.Chart(_bars, title=f"share of the bf16 peak per block shape, N = {_n}")
                .mark_bar()
                .encode(
                    y=alt.Y("blocks:N", title="blocks (bm, bk, bn)", sort=None),
                    yOffset=alt.YOffset("what:N", sort=list(_series.values())),
                    x=alt.X("% of bf16 peak:Q", scale=alt.Scale(domain=[0, 100])),
                    color=alt.Color(
                        "what:N",
                        sort=list(_series.values()),
                        scale=alt.Scale(range=list(charts.PALETTE[:3])),
                        legend=alt.Legend(orient="bottom", title=None),
                    ),
                    tooltip=["blocks", "what", alt.Tooltip("% of bf16 peak:Q", format=".1f")],
                )
                .properties(width=420, height=28 * max(len(_rows), 1)),
                lab.table(
                    [{k: "-" if v is None else v for k, v in r.items()} for r in _rows],
                    caption=f"{_label}; the models are upper bounds for v5e",
                ),
            ]
        )
    _shown
    return


@app.cell
def _():
    rows = FLAGS.control("rows", ARGS, label="rows of x")
    chunk = FLAGS.control("chunk", ARGS, label="rows per DMA")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md(
                """
    ## A pipeline by hand: DMAs and semaphores
    BlockSpecs write this loop for you. Here x stays in HBM (`memory_space=pl.ANY`) and the
    kernel copies it chunk by chunk into a VMEM buffer with `pltpu.make_async_copy`; each copy
    signals a DMA semaphore that `.wait()` blocks on. With two buffers the copy of chunk i + 1
    is started before chunk i is multiplied by w:
    """
            ),
            text.code_block(
                inspect.getsource(pipeline._pipeline_kernel), "python", "the pipeline kernel"
            ),
            mo.hstack([rows, chunk, seed], justify="start"),
        ]
    )
    return chunk, rows, seed


@app.cell
def _(chunk, dtype, rows, seed):
    lab.guard(
        tiling_pipelining.dma_problem(rows.value, DMA_K, chunk.value, dtype.value),
        headline="This DMA pipeline cannot run.",
    )
    _kx, _kw = jax.random.split(jax.random.key(seed.value))
    x = jax.random.normal(_kx, (rows.value, DMA_K), dtype.value)
    w = jax.random.normal(_kw, (DMA_K, DMA_N), dtype.value)
    streamed = {b: pipeline.stream_matmul(x, w, chunk.value, buffers=b) for b in (1, 2)}
    mo.md(
        f"Ran x {tuple(x.shape)} @ w {tuple(w.shape)} in {rows.value // chunk.value} DMAs of "
        f"{chunk.value} rows, with 1 and with 2 buffers, {RUNS_ON}."
    )
    return streamed, w, x


@app.cell
def _(dtype, streamed, w, x):
    # Independent reference: NumPy float64 x @ w of the same inputs.
    reference = pipeline.stream_matmul_reference(x, w)
    check = lab.Check(
        f"manual DMA pipeline ({dtype.value}, {RUNS_ON}) equals NumPy float64 x @ w, "
        f"shape {reference.shape}",
        {
            f"{b} buffer{'s' if b > 1 else ''}": numerics.scaled_max_error(out, reference)
            for b, out in streamed.items()
        },
        numerics.tolerance(dtype.value),
        facts={"no data race found": matmul.races_found() in (None, False)},
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "tiling_pipelining", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("tiling_pipelining")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_double_buffering_doubles_block_memory(bk, bm, bn, dtype):
    one = sum(tiling_pipelining.vmem_parts(bm.value, bk.value, bn.value, dtype.value, 1).values())
    two = sum(tiling_pipelining.vmem_parts(bm.value, bk.value, bn.value, dtype.value, 2).values())
    assert two - one == one - bm.value * bn.value * 4  # the accumulator is not buffered
    return


@app.cell
def test_roofline_is_an_upper_bound_of_published(roof, vmem_rows):
    assert 0 < roof["utilization"] <= 1
    assert [r["VMEM per core (MiB)"] for r in vmem_rows] == [128, 128, 64, 64]
    for row in tiling_pipelining.published_rows():
        published = float(row["published (v5e, measured by the guide)"].rstrip("%"))
        assert published <= float(row["pipeline model: at most"].rstrip("%"))
    return


if __name__ == "__main__":
    app.run()
