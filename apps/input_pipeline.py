import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Design an input pipeline")

with app.setup:
    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import data, lab, numerics
    from core.lab import exercises, text

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("examples", 10, "examples in the data set", lo=1, hi=200),
        lab.Flag("features", 3, "features per example (x has shape (F,))", lo=1, hi=16),
        lab.Flag("classes", 4, "label classes (y in [0, C))", lo=2, hi=10),
        lab.Flag("batch_size", 4, "examples per batch", lo=1, hi=64),
        lab.Flag("seed", 0, "shuffle and data seed", lo=0, hi=9999),
        lab.Flag("epoch", 0, "which epoch's order to show", lo=0, hi=9),
        lab.Flag("drop_remainder", False, "drop the last, short batch instead of padding it"),
        lab.Flag(
            "fault", "none", "break one example to see the contract refuse it", choices=data.FAULTS
        ),
        lab.Flag("fault_index", 2, "which example to break", lo=0, hi=199),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description=(
            "Design an input pipeline: examples -> shuffled, padded, masked batches, checked "
            "at the boundary."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Design an input pipeline
    {lab.phase_line("input_pipeline")}

    A training step wants arrays of one fixed shape; a data set is a list of examples. The
    input pipeline in between decides the order (shuffling), the grouping (batching), what
    happens to the leftovers (padding or dropping) and what it refuses (the data contract).
    In this lesson you will

    - turn examples into **batches**: a seeded shuffle per epoch, groups of B, the last one
      **padded** to B rows with a **mask** so every batch has one shape (one compiled
      program) and padding never counts in the loss;
    - check every example against a **data contract** (shape, dtype, finite values, label
      range) where it enters the pipeline, so bad input stops with a reason instead of a
      NaN loss or a shape error deep inside `jit`;
    - check the batches against NumPy: every example exactly once, padding masked, and the
      masked mean over batches equal to the data set's mean in float64.
    """)
    return


@app.cell
def _():
    examples = FLAGS.control("examples", ARGS)
    features = FLAGS.control("features", ARGS)
    classes = FLAGS.control("classes", ARGS)
    batch_size = FLAGS.control("batch_size", ARGS, label="batch size B")
    seed = FLAGS.control("seed", ARGS)
    epoch = FLAGS.control("epoch", ARGS)
    drop_remainder = FLAGS.control("drop_remainder", ARGS, label="drop the short batch")
    mo.vstack(
        [
            mo.hstack([examples, features, classes], justify="start"),
            mo.hstack([batch_size, seed, epoch, drop_remainder], justify="start"),
        ]
    )
    return batch_size, classes, drop_remainder, epoch, examples, features, seed


@app.cell
def _(classes, examples, features, seed):
    columns = data.make_columns(seed.value, examples.value, features.value, classes.value)
    source = data.ColumnSource(columns)
    contract = data.classification_contract(features.value, classes.value)
    contract_rows = [
        {
            "field": name,
            "shape per example": str(spec.shape),
            "dtype": spec.dtype,
            "values": (f"[{spec.lo}, {spec.hi})" if spec.hi is not None else f">= {spec.lo}")
            if spec.lo is not None
            else "finite",
        }
        for name, spec in contract.fields.items()
    ]
    mo.vstack(
        [
            mo.md(
                f"## The examples and their contract\n{examples.value} generated examples "
                f"(`x` ~ N(0, 1), `y` from a fixed random linear teacher). Each one is a dict; "
                f"`source[i]` is example *i*. The contract every example must meet:"
            ),
            lab.table(contract_rows),
        ]
    )
    return columns, contract, source


@app.cell
def _(batch_size, contract, drop_remainder, epoch, examples, seed, source):
    # A flag that cannot work stops headless (the UI's example slider is bounded by examples).
    if not lab.interactive() and ARGS.fault != "none" and ARGS.fault_index >= ARGS.examples:
        lab.guard(
            f"--fault-index {ARGS.fault_index} does not exist with --examples {ARGS.examples}: "
            f"the examples are numbered 0 to {ARGS.examples - 1}.",
            headline="No such example to break.",
        )
    problem = None
    if drop_remainder.value and batch_size.value > examples.value:
        problem = (
            f"With {examples.value} examples and batch size {batch_size.value}, dropping the "
            "short batch leaves no batch at all: pad it instead, or use a batch size of at "
            f"most {examples.value}."
        )
    lab.guard(problem, headline="No full batch to keep.")
    batched = data.batches(
        source, contract, batch_size.value, seed.value, epoch.value, drop_remainder.value
    )
    order = data.epoch_order(examples.value, seed.value, epoch.value)
    cells = pd.DataFrame(
        [
            {
                "batch": b,
                "row": r,
                "example": int(batch["id"][r]) if batch["mask"][r] else None,
                "kind": "example" if batch["mask"][r] else "padding",
                "label": int(batch["y"][r]) if batch["mask"][r] else None,
            }
            for b, batch in enumerate(batched)
            for r in range(batch_size.value)
        ]
    )
    grid = alt.Chart(
        cells, title=f"epoch {epoch.value}: batches (columns) of B = {batch_size.value} rows"
    ).encode(
        x=alt.X("batch:O"), y=alt.Y("row:O"), tooltip=["batch", "row", "example", "label", "kind"]
    )
    batch_chart = (
        grid.mark_rect(stroke="white").encode(
            color=alt.Color(
                "kind:N",
                scale=alt.Scale(domain=["example", "padding"], range=["#4c78a8", "#dddddd"]),
            )
        )
        + grid.mark_text(color="white").encode(text="example:O")
    ).properties(width=min(600, 40 * len(batched)), height=min(400, 24 * batch_size.value))
    dropped = len(order) - sum(int(b["mask"].sum()) for b in batched)
    _dropped = text.plural(dropped, "example")
    _padding = text.plural(int((~batched[-1]["mask"]).sum()), "padding row")
    mo.vstack(
        [
            mo.md(
                f"## Batches\nThe epoch's order is a seeded permutation "
                f"(`np.random.default_rng([seed, epoch]).permutation(N)`), cut into groups of "
                f"{batch_size.value}. **{text.plural(len(batched), 'batch', 'batches')}**, "
                "each `x` of shape "
                f"`{batched[0]['x'].shape}` and `mask` of shape `{batched[0]['mask'].shape}`; "
                + (
                    f"{_dropped} dropped this epoch (they come back, in another position, "
                    "next epoch)."
                    if dropped
                    else f"{_padding} in the last batch."
                )
            ),
            batch_chart,
        ]
    )
    return batched, dropped, order


@app.cell
def _(batched, columns, dropped, examples, order):
    # Independent reference: NumPy on the raw columns, float64.
    real_ids = np.concatenate([b["id"][b["mask"]] for b in batched])
    covered = order[: len(order) - dropped]
    _once = len(np.unique(real_ids)) == len(real_ids)
    ids_ok = np.array_equal(np.sort(real_ids), np.sort(covered)) and _once
    rows_ok = all(
        np.array_equal(b["x"][b["mask"]], columns["x"][b["id"][b["mask"]]]) for b in batched
    )
    padding_ok = all(not b["x"][~b["mask"]].any() for b in batched)
    masked_total = sum(float(b["x"][:, 0][b["mask"]].astype(np.float64).sum()) for b in batched)
    reference_mean = float(columns["x"][covered, 0].astype(np.float64).mean())
    check = lab.Check(
        f"{len(real_ids)} of {examples.value} examples each exactly once, rows equal to the "
        "source, padding zero and masked; masked mean of x[:, 0] over batches vs NumPy float64 "
        "over the data set",
        {
            "masked mean of x[:, 0]": numerics.max_abs_error(
                masked_total / len(real_ids), reference_mean
            )
        },
        numerics.tolerance("float64", backend="cpu"),
        facts={
            "every example exactly once": bool(ids_ok),
            "rows equal to the source": bool(rows_ok),
            "padding zero": bool(padding_ok),
        },
    )
    check
    return (check,)


@app.cell
def _(examples):
    fault = FLAGS.control("fault", ARGS, label="break an example")
    fault_index = mo.ui.slider(
        0,
        examples.value - 1,
        value=min(ARGS.fault_index, examples.value - 1),
        label="which example",
        show_value=True,
    )
    mo.vstack(
        [
            mo.md(
                "## The contract at the boundary\nBreak one example the way real data breaks "
                "(a feature too many, float64 from a CSV reader, a missing label, a NaN, a label "
                "out of range) and watch the pipeline refuse it *before* it reaches a model."
            ),
            mo.hstack([fault, fault_index], justify="start"),
        ]
    )
    return fault, fault_index


@app.cell
def _(batch_size, classes, contract, fault, fault_index, seed, source):
    broken_examples = data.inject_fault(
        [source[i] for i in range(len(source))], fault.value, fault_index.value, classes.value
    )
    refusal = None
    try:
        data.batches(broken_examples, contract, batch_size.value, seed.value)
    except ValueError as error:
        refusal = str(error)
    if fault.value == "none":
        fault_view = mo.callout(
            mo.md("No fault injected: every example meets the contract."), kind="neutral"
        )
    elif refusal:
        fault_view = mo.callout(mo.md(f"**Refused at the boundary.** `{refusal}`"), kind="warn")
    else:
        fault_view = mo.callout(
            mo.md(f"The fault **{fault.value}** was not caught."), kind="danger"
        )

    def _field(example, name):
        if name not in example:
            return "(missing)"
        value = np.asarray(example[name])
        return f"{value.dtype} {value.shape} {np.array2string(value, precision=3)}"

    _chosen = fault_index.value
    mo.vstack(
        [
            fault_view,
            lab.table(
                [
                    {
                        "field": name,
                        "as generated": _field(source[_chosen], name),
                        "as it reaches the contract": _field(broken_examples[_chosen], name),
                    }
                    for name in ("x", "y")
                ],
                f"example {_chosen}, before and after the fault '{fault.value}'",
            ),
        ]
    )
    return


@app.cell
def _(batched):
    loss_demo = pd.DataFrame(
        [
            {
                "batch": b,
                "mean over B rows (wrong)": float(batch["x"][:, 0].astype(np.float64).mean()),
                "masked mean (right)": data.masked_mean(batch["x"][:, 0], batch["mask"]),
            }
            for b, batch in enumerate(batched)
        ]
    ).melt("batch", var_name="how", value_name="mean_x0")
    # a field name with ":" (x[:, 0]) would be read as Altair's "field:type" shorthand
    alt.Chart(
        loss_demo, title="why the mask matters: per-batch means with and without it"
    ).mark_line(point=True).encode(
        x="batch:O",
        y=alt.Y("mean_x0:Q", title="mean of x[:, 0]"),
        color="how:N",
        strokeDash="how:N",
    ).properties(width=420, height=180)
    return


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "input_pipeline", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("input_pipeline")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_every_batch_has_one_shape_and_a_mask(batch_size, batched, features):
    assert {b["x"].shape for b in batched} == {(batch_size.value, features.value)}
    assert all(b["mask"].dtype == np.bool_ and b["mask"][0] for b in batched)
    return


@app.cell
def test_every_fault_is_refused_with_its_reason(classes, contract, source):
    for _kind in data.FAULTS[1:]:
        _broken = data.inject_fault(
            [source[i] for i in range(len(source))], _kind, 0, classes.value
        )
        try:
            data.batches(_broken, contract, 2, 0)
        except ValueError as _error:
            assert "example 0" in str(_error), str(_error)
        else:
            raise AssertionError(f"fault {_kind} was not refused")
    return


if __name__ == "__main__":
    app.run()
