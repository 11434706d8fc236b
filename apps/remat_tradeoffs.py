import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Memory, rematerialization, and optimization tradeoffs",
)

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lab import exercises, text
    from core.perf import machine, remat, timing
    from core.tpu import topology_compile

    lab.use_cpu_devices()
    TOPOLOGIES = ("none", "v5e:2x2", "v6e:2x2", "v5p:2x2x1")
    FLAGS = lab.Flags(
        lab.Flag("width", 128, "width W of every layer", lo=16, hi=512, step=16),
        lab.Flag("depth", 4, "tanh layers", lo=1, hi=8),
        lab.Flag("batch", 256, "batch rows B", lo=8, hi=2048, step=8),
        lab.Flag("repeats", 10, "timed gradient steps per policy", lo=3, hi=50),
        lab.Flag(
            "tpu", "v5e:2x2", "also compile for one chip of this TPU topology", choices=TOPOLOGIES
        ),
        lab.Flag(
            "show",
            "dots_saveable",
            "policy whose printed residuals are shown",
            choices=remat.POLICIES,
        ),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description="Memory, rematerialization, and optimization tradeoffs.",
    )
    ARGS = FLAGS.parse()
    MACHINE = machine.machine_label()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Memory, rematerialization, and optimization tradeoffs
    {lab.phase_line("remat_tradeoffs")}

    The backward pass needs values from the forward pass. Keeping them costs memory;
    recomputing them (**rematerialization**, `jax.checkpoint`) costs time. In this lesson you
    will compare four policies on a small MLP:

    - **none**: no checkpoint; **everything_saveable**: checkpoint, but save everything;
    - **dots_saveable** (a.k.a. `checkpoint_dots`): save matmul outputs, recompute the tanh;
    - **nothing_saveable**: save only the inputs, recompute the whole forward pass.

    For each you get three *different* kinds of evidence, kept apart: the **residuals JAX
    saves** (`jax.ad_checkpoint.print_saved_residuals`), the **compiler's memory estimate**
    (`memory_analysis()` of the compiled gradient, on this CPU and for a TPU chip), and the
    **observed step time** (this CPU). And one check: every policy gives the same gradients.
    """)
    return


@app.cell
def _():
    width = FLAGS.control("width", ARGS, label="width W")
    depth = FLAGS.control("depth", ARGS)
    batch = FLAGS.control("batch", ARGS, label="batch B")
    repeats = FLAGS.control("repeats", ARGS)
    tpu = FLAGS.control("tpu", ARGS, label="TPU topology")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.hstack([width, depth, batch], justify="start"),
            mo.hstack([repeats, tpu, seed], justify="start"),
        ]
    )
    return batch, depth, repeats, seed, tpu, width


@app.cell
def _(batch, depth, seed, width):
    params, x_BW, y_BW = remat.init_mlp(
        jax.random.key(seed.value), width.value, depth.value, batch.value
    )
    residuals = {
        policy: remat.saved_residuals(policy, params, x_BW, y_BW) for policy in remat.POLICIES
    }
    grads = {policy: remat.grad_fn(policy)(params, x_BW, y_BW) for policy in remat.POLICIES}
    return grads, params, residuals, x_BW, y_BW


@app.cell
def _(params, repeats, tpu, x_BW, y_BW):
    tpu_problem = topology_compile.libtpu_problem() if tpu.value != "none" else None
    cpu_memory = {p: remat.compiled_memory(p, params, x_BW, y_BW) for p in remat.POLICIES}
    tpu_memory = {}
    if tpu.value != "none" and tpu_problem is None:
        for _policy in mo.status.progress_bar(
            remat.POLICIES, title=f"compiling for {tpu.value}", remove_on_exit=True
        ):
            tpu_memory[_policy] = remat.compiled_memory(
                _policy, params, x_BW, y_BW, topology=tpu.value
            )
    step_times = {
        p: timing.time_calls(remat.grad_fn(p), params, x_BW, y_BW, repeats=repeats.value, label=p)
        for p in remat.POLICIES
    }
    return cpu_memory, step_times, tpu_memory, tpu_problem


@app.cell
def _(cpu_memory, residuals, step_times, tpu, tpu_memory, tpu_problem):
    evidence_rows = []
    for _policy in remat.POLICIES:
        _saved = [r for r in residuals[_policy][0] if not r.from_argument]
        _row = {
            "policy": _policy,
            "residuals saved (not inputs)": len(_saved),
            "saved residual KB": sum(r.nbytes for r in _saved) / 1e3,
            "CPU compiler temp KB": cpu_memory[_policy]["temp_size_in_bytes"] / 1e3,
        }
        if tpu_memory:
            _row[f"{tpu.value} compiler peak KB"] = (
                topology_compile.peak_bytes(tpu_memory[_policy]) / 1e3
            )
        _row["step time, median ms (this CPU)"] = step_times[_policy].summary.median * 1e3
        evidence_rows.append(_row)
    _note = f"\n\n*TPU compile skipped: {tpu_problem}*" if tpu_problem else ""
    mo.vstack(
        [
            mo.md("## Three kinds of evidence" + _note),
            lab.table(
                [
                    {k: (f"{v:,.1f}" if isinstance(v, float) else v) for k, v in row.items()}
                    for row in evidence_rows
                ],
                caption=f"Step times measured on {MACHINE}.",
            ),
        ]
    )
    return (evidence_rows,)


@app.cell
def _(evidence_rows):
    _long = pd.DataFrame(evidence_rows).melt(
        id_vars="policy", var_name="evidence", value_name="value"
    )
    _long = _long[_long["evidence"] != "residuals saved (not inputs)"]
    _charts = [
        alt.Chart(_long[_long["evidence"] == _evidence], title=_evidence)
        .mark_bar()
        .encode(
            x=alt.X("value:Q", title=None),
            y=alt.Y("policy:N", sort=list(remat.POLICIES), title=None),
            color=alt.Color("policy:N", legend=None, sort=list(remat.POLICIES)),
            tooltip=["policy", alt.Tooltip("value:Q", format=",.1f")],
        )
        .properties(width=230, height=110)
        for _evidence in _long["evidence"].unique()
    ]
    mo.vstack(
        [
            alt.vconcat(
                *(alt.hconcat(*_charts[i : i + 2]) for i in range(0, len(_charts), 2))
            ).resolve_scale(x="independent"),
            mo.md(
                """
    Read each panel on its own scale:

    - **Saved residuals** follow the policy exactly: `nothing_saveable` keeps only the
      loss's own residual, `dots_saveable` one matmul output per layer, `none` and
      `everything_saveable` the tanh outputs and their derivatives.
    - **The compiler's estimate** need not follow: jit compiles forward and backward as one
      program, so XLA schedules, fuses and frees buffers across the boundary; its temporary
      memory can stay flat, and the TPU compiler (different fusion and layouts) can even rank
      the policies differently. That estimate, not the residual list, is what decides whether
      a step fits in HBM.
    - **Step time** on this CPU says little: XLA:CPU may fold the recomputation back into
      the forward pass (its cost analysis then counts no more matmul FLOPs than without
      remat), and at this size timing noise hides the rest. The TPU compiler keeps it:
      `nothing_saveable` redoes each layer's forward matmul in the backward pass. On a TPU,
      where memory is the constraint, remat buys a bigger batch or model for ~1/3 more
      compute.
    """
            ),
        ]
    )
    return


@app.cell
def _():
    show = FLAGS.control("show", ARGS, label="print residuals of")
    show
    return (show,)


@app.cell
def _(residuals, show):
    mo.vstack([
        mo.md(f"""
    `jax.ad_checkpoint.print_saved_residuals(loss, params, x, y)` with **{show.value}**
    (captured from stdout; shapes are (B, W) activations and (W, W) weights):
    """),
        text.code_block(residuals[show.value][1].strip(), "text", "saved residuals"),
    ])  # fmt: skip
    return


@app.cell
def _(grads, params, x_BW, y_BW):
    # Independent reference: hand-written backpropagation in NumPy float64.
    reference = remat.mlp_grads_numpy(params, x_BW, y_BW)
    # Worst leaf of max |g - ref| / max(max |ref|, 1). This mean-squared error's gradients
    # stay below 1 (at most 0.16 over the controls' ranges), so it is the largest absolute
    # difference (remat.max_grad_difference).
    check_errors = {
        f"{p} vs NumPy float64": numerics.tree_scaled_max_error(grads[p], reference)
        for p in remat.POLICIES
    }
    check_errors |= {
        f"{p} vs no remat": numerics.tree_scaled_max_error(grads[p], grads["none"])
        for p in remat.POLICIES[1:]
    }
    check = lab.Check(
        "gradients of every policy equal the no-remat gradients and NumPy float64 backprop",
        check_errors,
        numerics.tolerance("float32"),
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "remat_tradeoffs", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("remat_tradeoffs")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_residuals_shrink_with_the_policy(evidence_rows):
    saved = {row["policy"]: row["saved residual KB"] for row in evidence_rows}
    assert (
        saved["nothing_saveable"]
        < saved["dots_saveable"]
        < saved["none"]
        == saved["everything_saveable"]
    )
    return


@app.cell
def test_every_policy_was_compiled_and_timed(
    cpu_memory,
    step_times,
    tpu,
    tpu_memory,
):
    assert set(cpu_memory) == set(step_times) == set(remat.POLICIES)
    if tpu.value != "none" and topology_compile.libtpu_problem() is None:
        assert set(tpu_memory) == set(remat.POLICIES)
    return


if __name__ == "__main__":
    app.run()
