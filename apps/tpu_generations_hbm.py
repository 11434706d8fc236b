import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="TPU generations and HBM memory budgeting",
)

with app.setup:
    import dataclasses

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lab import charts, text
    from core.tpu import budget, generations, model, specs, topology_compile

    lab.use_cpu_devices()
    POWERS_OF_TWO = tuple(2**i for i in range(0, 9))
    LENGTHS = tuple(2**i for i in range(7, 18))
    COMPILE_CHOICES = {
        "v5e + v6e": ("v5e", "v6e"),
        "v5e + v5p": ("v5e", "v5p"),
        "v5e + tpu7x": ("v5e", "tpu7x"),
        "all four": specs.GENERATIONS,
    }
    FLAGS = lab.Flags(
        lab.Flag("model", "llama2-7b", "model to budget", choices=tuple(budget.PRESETS)),
        lab.Flag("batch", 16, "global training batch (sequences per step)", lo=1, hi=1024),
        lab.Flag("seq", 2048, "training sequence length", choices=LENGTHS),
        lab.Flag("chips", 16, "chips in the training slice", choices=POWERS_OF_TWO),
        lab.Flag(
            "strategy",
            "fsdp",
            "data: replicate state; fsdp: split it over chips",
            choices=budget.STRATEGIES,
        ),
        lab.Flag("remat", False, "jax.checkpoint around each layer"),
        lab.Flag(
            "optimizer",
            "adam",
            "optimizer (moments per parameter: adam 2, momentum 1, sgd 0)",
            choices=tuple(budget.OPTIMIZER_MOMENTS),
        ),
        lab.Flag(
            "param_dtype",
            "float32",
            "parameter dtype (bfloat16 adds an f32 master copy)",
            choices=("float32", "bfloat16"),
        ),
        lab.Flag("serve_batch", 16, "serving batch (sequences decoded together)", lo=1, hi=1024),
        lab.Flag("context", 4096, "serving context length", choices=LENGTHS),
        lab.Flag("kv_dtype", "bfloat16", "KV cache dtype", choices=("float32", "bfloat16", "int8")),
        lab.Flag(
            "serve_chips",
            1,
            "chips serving one model replica (tensor parallel)",
            choices=POWERS_OF_TWO[:6],
        ),
        lab.Flag(
            "compile_for",
            "v5e + v6e",
            "TPU topologies to compile for on this CPU",
            choices=tuple(COMPILE_CHOICES),
        ),
        lab.Flag("compile_layers", 1, "layers of the small model compiled for TPU", lo=1, hi=4),
        description="TPU generations and HBM memory budgeting.",
    )
    ARGS = FLAGS.parse()
    # The small model compiled for real TPU topologies: widths are multiples of 128 lanes.
    COMPILE_BATCH, COMPILE_SEQ, COMPILE_CHIPS = 8, 64, 4
    # Relative, not a dtype's table: the compiler's argument bytes exceed the analytic ones by
    # TPU layout padding (128-lane tiles, a tile for Adam's step count): up to 1%, plus up to
    # 16 KiB of whole (8, 128) tiles for scalars and short rows (TPU7x's 8 devices hold one
    # 64-token row each, padded to 8 rows), the bound core/tpu/topology_compile_test uses.
    PADDING_TOLERANCE = 0.01
    TILE_PADDING_BYTES = 16 * 1024


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # TPU generations and HBM memory budgeting
    {lab.phase_line("tpu_generations_hbm")}

    Before you provision a slice, know whether the model fits. In this lesson you will

    - compare TPU **v5e, v5p, v6e and TPU7x (Ironwood)** chip by chip, every number with its
      source (or marked *not published*), and derive the **ridge point** (FLOP per HBM byte)
      and per-chip ICI bandwidth from them;
    - see, per generation, how many **JAX devices** a slice gives (one per chip, but one per
      TensorCore on TPU7x), on how many hosts, and how it is **created** (TPU7x is not made
      with `gcloud compute tpus tpu-vm create`);
    - budget **training** HBM (parameters, gradients, optimizer moments, activations with and
      without rematerialization) and **serving** HBM (weights + KV cache) per chip and per
      slice, against each generation's capacity;
    - compile a small version of the same model for **real TPU topologies on this CPU host**
      (libtpu's compiler) and put its `memory_analysis()` beside the analytic budget.

    Compiling tells you about TPU *memory and compilation*; nothing runs on a TPU here, so
    nothing here is a TPU *speed*.
    """)
    return


@app.cell
def _():
    mo.vstack(
        [
            mo.md(
                "## The chips\n"
                "Published figures disagree a little (GB vs GiB, table vs text, later "
                "corrections); the table keeps every value with its source."
            ),
            lab.table(specs.spec_rows()),
            mo.md(
                "**Derived, not typed in**: ridge point = bf16 FLOP/s / HBM bytes/s; a kernel "
                "with fewer FLOPs per byte than that is memory-bound on the chip. Per-chip ICI "
                "= links x per-link bandwidth lands at 0.90 of Cloud's per-chip number on "
                "every generation with a per-link figure (no source gives TPU7x's link count "
                "or per-link rate). That is no rounding: "
                + specs.ICI_RATIO_REASON
                + ". Budget collectives with the per-link figure (what the scaling book's "
                "collective times use) and read Cloud's as the link rate's ceiling."
            ),
            lab.table(specs.derived_rows()),
            mo.md(
                "## Slices, devices and how they are made\n"
                "One single-host slice per generation. The JAX device count is what libtpu "
                "gives for the topology on this host (tested): v5p's two TensorCores act as "
                "one device (megacore), TPU7x's are two devices, each with half the chip's HBM."
            ),
            lab.table(generations.generation_rows()),
            mo.md("\n".join(f"- **{key}**: {text}" for key, text in specs.SOURCES.items())),
        ]
    )
    return


@app.cell
def _():
    model_name = FLAGS.control("model", ARGS)
    batch = FLAGS.control("batch", ARGS, label="global batch")
    seq = FLAGS.control("seq", ARGS, label="sequence length")
    chips = FLAGS.control("chips", ARGS)
    strategy = FLAGS.control("strategy", ARGS)
    remat = FLAGS.control("remat", ARGS, label="remat each layer")
    optimizer = FLAGS.control("optimizer", ARGS)
    param_dtype = FLAGS.control("param_dtype", ARGS, label="parameter dtype")
    serve_batch = FLAGS.control("serve_batch", ARGS, label="serving batch")
    context = FLAGS.control("context", ARGS)
    kv_dtype = FLAGS.control("kv_dtype", ARGS, label="KV dtype")
    serve_chips = FLAGS.control("serve_chips", ARGS, label="serving chips")
    mo.vstack(
        [
            mo.md("## Your model and setup"),
            model_name,
            mo.md("**Training**"),
            mo.hstack([batch, seq, chips, strategy], justify="start", wrap=True),
            mo.hstack([remat, optimizer, param_dtype], justify="start"),
            mo.md("**Serving**"),
            mo.hstack([serve_batch, context, kv_dtype, serve_chips], justify="start", wrap=True),
        ]
    )
    return (
        batch,
        chips,
        context,
        kv_dtype,
        model_name,
        optimizer,
        param_dtype,
        remat,
        seq,
        serve_batch,
        serve_chips,
        strategy,
    )


@app.cell
def _(
    batch,
    chips,
    context,
    kv_dtype,
    model_name,
    optimizer,
    param_dtype,
    remat,
    seq,
    serve_batch,
    serve_chips,
    strategy,
):
    shape = budget.PRESETS[model_name.value]
    problem = None
    try:
        training_setup = budget.TrainingSetup(
            batch=batch.value,
            seq=int(seq.value),
            chips=int(chips.value),
            strategy=strategy.value,
            remat=remat.value,
            optimizer=optimizer.value,
            param_dtype=param_dtype.value,
            master_copy=param_dtype.value == "bfloat16",
        )
        serving_setup = budget.ServingSetup(
            batch=serve_batch.value,
            context=int(context.value),
            kv_dtype=kv_dtype.value,
            chips=int(serve_chips.value),
        )
        problem = budget.serving_problem(shape, serving_setup)
    except ValueError as error:
        problem = str(error)
    lab.guard(problem, headline="This setup cannot work.")
    training = budget.training_budget(shape, training_setup)
    serving = budget.serving_budget(shape, serving_setup)
    return serving, serving_setup, shape, training, training_setup


@app.cell
def _(serving, serving_setup, shape, training, training_setup):
    _train_chips = text.plural(training_setup.chips, "chip")
    _train_label = f"training, per chip ({_train_chips}, {training_setup.strategy})"
    _serve_label = f"serving, per chip ({text.plural(serving_setup.chips, 'chip')})"
    _bars = pd.DataFrame(
        [{"budget": _train_label, "component": k, "GB": v / 1e9} for k, v in training.items()]
        + [{"budget": _serve_label, "component": k, "GB": v / 1e9} for k, v in serving.items()]
    )
    _capacity = pd.DataFrame(
        [
            {
                "chip": f"{g} HBM ({specs.chip(g).hbm_bytes.value / 1e9:.0f} GB)",
                "GB": specs.chip(g).hbm_bytes.value / 1e9,
            }
            for g in specs.GENERATIONS
        ]
    )
    # Capacity labels in a strip above the bars, one row per clash (charts.label_rows), each
    # starting at its dashed line, or ending at it when it would run past the right edge.
    _width = 560
    _x_max = 1.04 * max(sum(training.values()) / 1e9, sum(serving.values()) / 1e9, *_capacity["GB"])
    _scale = alt.Scale(domain=[0, _x_max], nice=False)
    _label_px = [charts.text_width(t) for t in _capacity["chip"]]
    _line_px = [gb / _x_max * _width for gb in _capacity["GB"]]
    _start_px = [
        x + 3 if x + 3 + w <= _width else x - 3 - w
        for x, w in zip(_line_px, _label_px, strict=True)
    ]
    _capacity["label at"] = [px / _width * _x_max for px in _start_px]
    _capacity["row"] = [-r for r in charts.label_rows(_start_px, _label_px)]  # row 0 at the bars
    _strip = (
        alt.Chart(_capacity)
        .mark_text(align="left", fontSize=10)
        .encode(
            x=alt.X("label at:Q", scale=_scale, axis=None),
            y=alt.Y("row:O", axis=None),
            text="chip:N",
        )
    )
    _stack = (
        alt.Chart(_bars)
        .mark_bar()
        .encode(
            y=alt.Y("budget:N", title=None),
            x=alt.X("sum(GB):Q", scale=_scale, title="GB per chip"),
            color=alt.Color("component:N", legend=alt.Legend(orient="bottom", columns=4)),
            order=alt.Order("component:N"),
            tooltip=["budget", "component", alt.Tooltip("GB:Q", format=".3f")],
        )
    )
    _rules = (
        alt.Chart(_capacity)
        .mark_rule(strokeDash=[4, 3], size=1.5, color="black")
        .encode(x=alt.X("GB:Q", scale=_scale), tooltip=["chip"])
    )
    budget_chart = alt.vconcat(
        _strip.properties(
            width=_width,
            height=13 * (1 - _capacity["row"].min()),
            view=alt.ViewBackground(stroke=None),
        ),
        alt.layer(_stack, _rules).properties(width=_width, height=150),
        spacing=2,
        title=alt.TitleParams(
            "HBM per chip vs each generation's capacity (dashed)", anchor="middle"
        ),
    ).resolve_scale(x="shared")
    _train_total, _serve_total = sum(training.values()), sum(serving.values())
    fit_rows = []
    _slice = f"training slice ({_train_chips})"
    for _g in specs.GENERATIONS:
        _capacity_bytes = specs.chip(_g).hbm_bytes.value
        fit_rows.append(
            {
                "chip": _g,
                "HBM": f"{_capacity_bytes / 1e9:.0f} GB",
                "training / chip": f"{_train_total / 1e9:.1f} GB: "
                + ("fits" if _train_total <= _capacity_bytes else "**does not fit**"),
                _slice: f"{_train_total * training_setup.chips / 1e9:.0f} of "
                f"{_capacity_bytes * training_setup.chips / 1e9:.0f} GB",
                "serving / chip": f"{_serve_total / 1e9:.1f} GB: "
                + ("fits" if _serve_total <= _capacity_bytes else "**does not fit**"),
                "largest serving batch that fits": budget.max_batch_that_fits(
                    shape, serving_setup, _capacity_bytes
                ),
            }
        )
    mo.vstack(
        [
            mo.md(
                f"## The budget\n{shape.param_count() / 1e9:.3g} B parameters. Training keeps "
                f"{', '.join(f'{k} {v / 1e9:.2f} GB' for k, v in training.items())} per chip; "
                "serving keeps "
                f"{', '.join(f'{k} {v / 1e9:.2f} GB' for k, v in serving.items())} per chip."
            ),
            budget_chart,
            lab.table(fit_rows),
            mo.md(
                "Try: switch **remat** on (activations drop to one layer's worth plus each "
                "layer's input), **fsdp** vs **data** (state split over chips or replicated), "
                "a longer **context** (the KV cache grows linearly; attention scores in training "
                "quadratically), **int8** KV. The activation model is an estimate of what a "
                "plain implementation saves: it keeps the T x T attention probabilities of "
                "every head for the backward pass. Flash attention (a fused, blocked kernel, "
                "such as the Pallas TPU kernel of this course's attention lesson) never stores "
                "them: it keeps one log-sum-exp per query row and "
                "recomputes the scores in the backward pass, so that T^2 term drops to T. "
                "The compiler's view follows."
            ),
        ]
    )
    return (fit_rows,)


@app.cell
def _():
    compile_for = FLAGS.control("compile_for", ARGS, label="compile for")
    compile_layers = FLAGS.control("compile_layers", ARGS, label="layers")
    compile_button = mo.ui.run_button(label="Compile for these TPU topologies")
    mo.vstack(
        [
            mo.md(
                f"""
    ## Ask the TPU compiler
    The same kind of model, small enough to compile in seconds: D=128, F=512, 2 heads,
    vocab 256, batch {COMPILE_BATCH} x {COMPILE_SEQ} tokens over a 4-chip topology, one Adam
    step with parameters and optimizer state donated. Remat and strategy follow your
    training setup above. `jax.experimental.topologies.get_topology_desc(platform="tpu",
    topology_name="v5e:2x2")` gives TPU devices on this CPU host; `jax.jit(step).lower(...)
    .compile()` runs libtpu's compiler, whose `memory_analysis()` is per chip.
    """
            ),
            mo.hstack([compile_for, compile_layers, compile_button], justify="start"),
        ]
    )
    return compile_button, compile_for, compile_layers


@app.cell
def _(compile_button, compile_for, compile_layers, remat, strategy):
    libtpu_problem = topology_compile.libtpu_problem()
    lab.guard(libtpu_problem, headline="No TPU compiler here.")
    mo.stop(
        lab.interactive() and not compile_button.value,
        mo.callout(
            mo.md("Press **Compile for these TPU topologies** (a few seconds per topology)."),
            kind="info",
        ),
    )
    compile_shape = budget.TransformerShape(
        vocab=256, d_model=128, layers=compile_layers.value, heads=2, d_ff=512
    )
    compile_setup = budget.TrainingSetup(
        batch=COMPILE_BATCH,
        seq=COMPILE_SEQ,
        chips=COMPILE_CHIPS,
        strategy=strategy.value,
        remat=remat.value,
    )
    reports, setups = {}, {}
    for _generation in mo.status.progress_bar(
        COMPILE_CHOICES[compile_for.value], title="compiling for TPU", remove_on_exit=True
    ):
        _topology = specs.chip(_generation).topology_name
        # SPMD over every JAX device of the topology: 4 chips, 8 TensorCore devices on TPU7x
        setups[_generation] = dataclasses.replace(
            compile_setup, chips=len(topology_compile.topology_devices(_topology))
        )
        reports[_generation] = topology_compile.training_step_report(
            compile_shape, setups[_generation], _topology
        )
    usable_hbm = {
        g: topology_compile.usable_hbm_bytes(specs.chip(g).topology_name) for g in reports
    }
    comparison_rows = [
        row
        for g, report in reports.items()
        for row in topology_compile.training_comparison(compile_shape, setups[g], report)
    ]
    _usable_rows = [
        {
            "chip": g,
            "device kind": reports[g].device_kind,
            "published HBM per chip": f"{specs.chip(g).hbm_bytes.value / 1e9:.0f} GB",
            "JAX devices per chip": specs.chip(g).devices_per_chip,
            "compiler's limit for one program": (
                f"{usable_hbm[g] / 2**30:.2f} GiB = {usable_hbm[g] / 1e9:.2f} GB"
            ),
        }
        for g in reports
    ]
    mo.vstack(
        [
            mo.md(
                "### Analytic budget vs `memory_analysis()`, per device (a chip; one "
                "TensorCore on TPU7x) "
                f"({'remat' if remat.value else 'no remat'}, {strategy.value})"
            ),
            lab.table(comparison_rows),
            mo.md(
                """
    Why they differ:

    - **Arguments** match to a few KB: the compiler counts exactly the parameters, Adam's
      two moments and this chip's tokens; the small excess is **layout padding** (TPU arrays
      are stored in tiles whose minor dimension is 128 lanes, so a 64-token row occupies 128
      slots, and Adam's scalar step count takes a tile of its own).
    - **Outputs** are aliased to the donated inputs: the new parameters and optimizer state
      are written into the old buffers, so they cost nothing extra.
    - **Peak**: the analytic budget adds every component as if all were alive at once. The
      compiler frees buffers as soon as they are dead and fuses elementwise work (a GELU
      output is recomputed inside the backward fusion instead of being stored), but it also
      needs workspace, and with **fsdp** each chip all-gathers a layer's full weights just
      before that layer runs (in the forward, and again in the backward) and holds that
      layer's full-size gradient until its reduce-scatter: one or two layers' worth of
      transient bytes at a time (the next layer's gather overlaps the current layer), not
      the whole model's, and the per-chip budget does not count them. Its peak can land on
      either side of the estimate; flip remat and strategy above and watch both move.
    """
            ),
            mo.md(
                "### How much HBM one program may use\nCompiling a 1 TiB program makes the "
                "compiler refuse it and name its limit (`RESOURCE_EXHAUSTED ... exceeds "
                "available HBM (15.75G)`, G = GiB)."
            ),
            lab.table(_usable_rows),
            mo.md(
                "Where the compiler's limit is above the published figure read as 10^9 bytes, the "
                'published "16" / "32" are GiB (2^30 bytes), and a little of each chip is '
                "reserved. On TPU7x the limit is per TensorCore device, about half the chip's "
                "192 GiB. Budget against the compiler's number: "
                + ", ".join(f"{g} {usable_hbm[g] / 2**30:.2f} GiB" for g in usable_hbm)
                + "."
            ),
        ]
    )
    return comparison_rows, compile_shape, reports, setups


@app.cell
def _(compile_shape, reports, setups, shape):
    # Independent references: (1) a real parameter tree built by core.tpu.model (its leaves
    # counted by jax.eval_shape, no closed form involved); (2) the TPU compiler's own count
    # of argument bytes for the compiled step.
    tree_count = model.count_params(model.param_shapes(shape))
    analytic_arguments = {}
    for _g, _setup in setups.items():
        _parts = budget.training_budget(compile_shape, _setup)
        # this device's tokens and targets, int32
        _tokens = 2 * (_setup.batch // _setup.chips) * _setup.seq * 4
        analytic_arguments[_g] = _parts["parameters"] + _parts["optimizer moments"] + _tokens
    compiler_arguments = {g: r.memory["argument_size_in_bytes"] for g, r in reports.items()}
    check = lab.Check(
        f"closed-form parameter count = real parameter tree ({tree_count:,}); analytic "
        f"argument bytes vs the TPU compiler's for {', '.join(reports)} (relative)",
        {
            f"{g} argument bytes: compiler vs analytic (relative)": (
                numerics.elementwise_relative_error(b, analytic_arguments[g])
            )
            for g, b in compiler_arguments.items()
        },
        {
            f"{g} argument bytes: compiler vs analytic (relative)": (
                PADDING_TOLERANCE + TILE_PADDING_BYTES / analytic_arguments[g]
            )
            for g in compiler_arguments
        },
        facts={
            "closed-form parameter count = parameter tree": tree_count == shape.param_count(),
            # padding only ever adds bytes: the compiler may not count fewer than the budget
            "the compiler counts no fewer argument bytes": all(
                b >= analytic_arguments[g] for g, b in compiler_arguments.items()
            ),
        },
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("tpu_generations_hbm")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_compiled_at_least_two_generations(comparison_rows, reports):
    assert len(reports) >= 2
    assert len({r.device_kind for r in reports.values()}) == len(reports)
    assert all(row["compiler (MB)"] > 0 for row in comparison_rows)
    return


@app.cell
def test_budget_fits_table_covers_every_generation(
    fit_rows,
    training,
    training_setup,
):
    assert [row["chip"] for row in fit_rows] == list(specs.GENERATIONS)
    assert training["activations"] > 0 and training_setup.chips >= 1
    return


if __name__ == "__main__":
    app.run()
