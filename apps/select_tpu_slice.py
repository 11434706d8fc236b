import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Select a TPU slice and provision your Cloud TPU VM",
)

with app.setup:
    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lab import text
    from core.tpu import slice_planner
    from core.tpu import specs

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("params_billion", 1.0, "model parameters, billions", lo=0.1, hi=500.0, step=0.1),
        lab.Flag("layers", 24, "transformer layers", lo=1, hi=128),
        lab.Flag("d_model", 2048, "model width", lo=128, hi=16384, step=128),
        lab.Flag("batch", 32, "global batch, sequences", lo=1, hi=4096),
        lab.Flag("seq_len", 2048, "sequence length, tokens", lo=128, hi=32768, step=128),
        lab.Flag("mode", "train", "train (Adam) or inference", choices=slice_planner.MODES),
        lab.Flag("step_time_s", 1.0, "target seconds per step", lo=0.1, hi=60.0, step=0.1),
        lab.Flag("mfu", 0.4, "model FLOP utilization you expect", lo=0.05, hi=0.9, step=0.05),
        lab.Flag("name", "jax-tpu-lab", "TPU VM name for the create command"),
        description="Select a TPU slice: memory and throughput needs -> v5e/v5p/v6e slices.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Select a TPU slice and provision your Cloud TPU VM
    {lab.phase_line("select_tpu_slice")}

    A slice is chosen by two needs, and the larger one wins:

    - **memory**: training state (float32 weights, gradients and two Adam moments: 16 bytes
      per parameter) or inference weights (bfloat16: 2 bytes), plus the activations a step
      keeps, must fit in the slice's HBM, sharded across its chips;
    - **throughput**: a training step costs 6 N FLOPs per token (2 N forward, 4 N backward;
      inference 2 N); divided by your target step time and a realistic MFU that is the peak
      FLOP/s the slice must offer.

    You will size a workload, compare the v5e, v5p and v6e slices that cover it (chips,
    topology, hosts, with the arithmetic shown), and get the `gcloud` command that creates
    the recommended one. Per-chip figures come from `core/tpu/specs.py`.
    """)
    return


@app.cell
def _():
    params_billion = FLAGS.control("params_billion", ARGS)
    layers = FLAGS.control("layers", ARGS)
    d_model = FLAGS.control("d_model", ARGS)
    batch = FLAGS.control("batch", ARGS)
    seq_len = FLAGS.control("seq_len", ARGS)
    mode = FLAGS.control("mode", ARGS)
    step_time_s = FLAGS.control("step_time_s", ARGS)
    mfu = FLAGS.control("mfu", ARGS)
    mo.vstack(
        [
            mo.hstack([params_billion, layers, d_model], justify="start"),
            mo.hstack([batch, seq_len, mode], justify="start"),
            mo.hstack([step_time_s, mfu], justify="start"),
        ]
    )
    return (
        batch,
        d_model,
        layers,
        mfu,
        mode,
        params_billion,
        seq_len,
        step_time_s,
    )


@app.cell
def _(batch, d_model, layers, mfu, mode, params_billion, seq_len, step_time_s):
    workload = slice_planner.Workload(
        params_billion=params_billion.value,
        layers=layers.value,
        d_model=d_model.value,
        batch=batch.value,
        seq_len=seq_len.value,
        mode=mode.value,
        step_time_s=step_time_s.value,
        mfu=mfu.value,
    )
    memory_rows = slice_planner.memory_breakdown(workload)
    options = slice_planner.plan(workload)
    best = slice_planner.recommend(options)
    mo.vstack(
        [
            mo.md(
                f"## What the workload needs\n"
                f"**{slice_planner.memory_need_bytes(workload) / 1e9:.1f} GB** of HBM and "
                f"**{slice_planner.flops_need(workload) / 1e12:.0f} TFLOP/s** of peak "
                f"({slice_planner.step_flops(workload) / 1e12:.0f} TFLOP per step)."
            ),
            lab.table([{"component": k, "GB": f"{v / 1e9:.2f}"} for k, v in memory_rows.items()]),
            lab.table(slice_planner.option_rows(options), "## One slice per generation"),
        ]
    )
    return best, options, workload


@app.cell
def _(best, options):
    _problem = (
        None
        if best
        else "no v5e, v5p or v6e slice offered here covers this workload: "
        + ("; ".join(o.reasoning[-1] for o in options))
        + ". Lower the model size or batch, or allow a longer step time."
    )
    _title = "No slice fits."
    create_line = None
    if _problem is None:
        try:  # the VM name (--name) must be one gcloud accepts
            create_line = slice_planner.create_command(best, name=ARGS.name)
        except ValueError as _error:
            _problem, _title = f"--name: {_error}", "No create command."
    lab.guard(_problem, headline=_title)
    reasons = "\n".join(
        f"**{o.generation}**\n\n" + "\n".join(f"- {line}" for line in o.reasoning) for o in options
    )
    chosen = best  # cells that need a slice read `chosen`: they wait for this stop
    mo.vstack(
        [
            mo.md(f"## The reasoning\n{reasons}"),
            mo.md(
                f"## Recommended: `{best.accelerator_type}` ({best.generation}, {best.chips} chips "
                f"in a {best.topology} torus, {best.hosts} host{'s' if best.hosts > 1 else ''})\n"
                "The fewest hosts first (one host needs no multi-host launch), then the fewest "
                "chips."
            ),
            text.code_block(create_line, "bash", "create the TPU VM"),
            mo.md(
                "Add `--spot` for a cheaper, preemptible VM (then checkpoint often). Delete it "
                "when done: billing runs while it exists."
            ),
        ]
    )
    return chosen, create_line


@app.cell
def _(chosen, workload):
    # Independent references: (1) the TPU compiler (libtpu, on this CPU host) compiles this
    # workload's state for the recommended slice's topology: its memory_analysis() is what one
    # chip holds; (2) figures published in papers that the planner's formulas must reproduce.
    published_rows = slice_planner.published_example_rows()
    compiler_problem = slice_planner.compiler_check_problem()
    _where = f"{chosen.generation} {chosen.topology}"
    with mo.status.spinner(title=f"Compiling the state for {_where} ..."):
        compiler = None if compiler_problem else slice_planner.compiler_check(workload, chosen)
    _published = f"{len(published_rows)} published figures reproduced"
    if compiler is not None:
        _chips = f"{compiler.chips} chip{'s' if compiler.chips > 1 else ''}"
        # The compiler's bytes are the measurement; each published figure must hold too
        # (its own relative error and tolerance are in the table below).
        check = lab.Check(
            f"per-chip {workload.mode} state: planner's closed form vs the TPU compiler's "
            f"memory_analysis() on {compiler.topology} ({_chips}), within the compiler's HBM; "
            + _published,
            {
                "per-chip state: planner vs TPU compiler (relative)": (
                    numerics.elementwise_relative_error(
                        compiler.compiler_argument_bytes_per_chip,
                        compiler.planner_state_bytes_per_chip,
                    )
                )
            },
            slice_planner.COMPILER_TOLERANCE,
            facts={
                "the compiler's peak fits the HBM it allows": compiler.fits_compiler_hbm,
                "the planner's usable HBM is within the compiler's": (
                    compiler.usable_within_compiler_hbm
                ),
            }
            | {f"published: {r['claim']}": r["holds"] for r in published_rows},
        )
    else:
        check = lab.Check(
            f"{_published} (TPU compiler part skipped: {compiler_problem})",
            {r["claim"]: r["relative error"] for r in published_rows},
            {r["claim"]: r["tolerance"] for r in published_rows},
        )
    _published_table = [
        {**r, "relative error": f"{r['relative error']:.2g}", "tolerance": f"{r['tolerance']:g}"}
        for r in published_rows
    ]
    mo.vstack(
        [
            mo.md(
                "## Check\n"
                "The state is compiled as one Adam update (float32 parameters, gradients from "
                "`jax.grad`, Adam's state from `optax.adam`) or, for inference, bfloat16 weights, "
                "sharded by rows over the slice's chips. Nothing runs: compiling is evidence about "
                "memory, not speed. The activation estimate and the FLOP count are checked "
                "against the published figures only."
            ),
            check,
            (
                lab.table(compiler.rows())
                if compiler is not None
                else mo.callout(mo.md(compiler_problem), kind="warn")
            ),
            lab.table(_published_table, "Published figures"),
        ]
    )
    return (check,)


@app.cell
def _(options):
    _rows = []
    for _o in options:
        _rows.append({"generation": _o.generation, "need": "memory", "chips": _o.chips_for_memory})
        _rows.append(
            {"generation": _o.generation, "need": "compute", "chips": _o.chips_for_compute}
        )
        _rows.append(
            {"generation": _o.generation, "need": "slice", "chips": _o.chips if _o.fits else 0}
        )
    alt.Chart(
        pd.DataFrame(_rows), title="Chips each need asks for, and the slice that covers both"
    ).mark_bar().encode(
        x=alt.X("need:N", sort=["memory", "compute", "slice"], title=None),
        y=alt.Y("chips:Q", scale=alt.Scale(type="symlog")),
        color="need:N",
        column=alt.Column("generation:N", sort=list(specs.GENERATIONS)),
        tooltip=["generation", "need", "chips"],
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("select_tpu_slice")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_recommended_slice_covers_both_needs(best, create_line):
    assert best.chips >= max(best.chips_for_memory, best.chips_for_compute)
    assert f"--accelerator-type={best.accelerator_type}" in create_line
    return


if __name__ == "__main__":
    app.run()
