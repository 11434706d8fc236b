import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Resilient distributed training")

with app.setup:
    import tempfile

    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import data, distributed, lab, numerics
    from core.distributed import sharding

    lab.use_cpu_devices()
    MESH_SIZES = tuple(sharding.valid_mesh_sizes(jax.device_count()))
    FLAGS = lab.Flags(
        lab.Flag(
            "devices_before", max(MESH_SIZES), "devices that train and save", choices=MESH_SIZES
        ),
        lab.Flag(
            "devices_after",
            max(n for n in MESH_SIZES if n < max(MESH_SIZES)) if len(MESH_SIZES) > 1 else 1,
            "devices that restore and continue",
            choices=MESH_SIZES,
        ),
        lab.Flag("examples", 20, "examples in the data set", lo=2, hi=256),
        lab.Flag("batch", 8, "examples per step (split over the devices)", lo=1, hi=64),
        lab.Flag("steps", 5, "steps in the whole run", lo=2, hi=40),
        lab.Flag("stop_at", 2, "step after which the run is interrupted and saved", lo=1, hi=39),
        lab.Flag("optimizer", "adam", "optax optimizer", choices=distributed.OPTIMIZERS),
        # hi 0.1: above it float32 training drifts from the float64 reference past the check's
        # tolerance (1.3e-3 after 40 adam steps at lr 0.5); at <= 0.1 the worst seen is 5e-6.
        lab.Flag("learning_rate", 0.05, "learning rate", lo=0.001, hi=0.1, step=0.001),
        lab.Flag("seed", 0, "PRNG seed (data, shuffle and init)", lo=0, hi=9999),
        description=(
            "Resilient distributed training: save a sharded state, restore it onto another "
            "mesh, continue."
        ),
    )
    ARGS = FLAGS.parse()
    # The check's bounds, absolute, not the float32 table. Resumed vs uninterrupted: another
    # mesh sums in another order, and the float32 difference grows with the steps (worst seen
    # at lr <= 0.1, 40 steps: 2.4e-7): 1e-5 leaves 40x. Training vs NumPy float64: up to 40
    # accumulated float32 optimizer steps (worst seen at lr <= 0.1: 5e-6).
    RESUME_TOLERANCE = 1e-5
    TRAINING_TOLERANCE = 1e-4
    MODEL = {"features": 4, "hidden": 8, "classes": 3}


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Resilient distributed training
    {lab.phase_line("resilient_training")}

    Preemptions happen, and the slice you get back may not be the slice you lost. A run is
    resilient when it can stop anywhere, and continue, **on a different number of devices**,
    exactly where it was. In this lesson you will

    - train data parallel on one mesh, then stop and save parameters, Adam state and the
      Grain iterator position with the course's Orbax checkpointer (`core/state/checkpoint.py`);
    - restore the state straight onto a **smaller mesh** (Orbax reshards while loading: the
      abstract state's `ShapeDtypeStruct`s carry the target `NamedSharding`) and continue
      across an epoch boundary;
    - compare with the uninterrupted run: same batches, same state, the same losses to
      ~1e-6 (a different mesh sums the gradient in a different order, so not bitwise).
    """)
    return


@app.cell
def _():
    devices_before = FLAGS.control("devices_before", ARGS, label="devices before")
    devices_after = FLAGS.control("devices_after", ARGS, label="devices after restore")
    examples = FLAGS.control("examples", ARGS)
    batch = FLAGS.control("batch", ARGS)
    steps = FLAGS.control("steps", ARGS)
    stop_at = FLAGS.control("stop_at", ARGS, label="stop and save after step")
    optimizer = FLAGS.control("optimizer", ARGS)
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    seed = FLAGS.control("seed", ARGS)
    run_button = mo.ui.run_button(label="train, interrupt, restore, continue")
    mo.vstack(
        [
            mo.hstack(
                [devices_before, devices_after, optimizer, learning_rate, seed],
                justify="start",
                wrap=True,
            ),
            mo.hstack([examples, batch, steps, stop_at], justify="start", wrap=True),
            run_button,
        ]
    )
    return (
        batch,
        devices_after,
        devices_before,
        examples,
        learning_rate,
        optimizer,
        run_button,
        seed,
        steps,
        stop_at,
    )


@app.cell
def _(
    batch,
    devices_after,
    devices_before,
    examples,
    learning_rate,
    optimizer,
    run_button,
    seed,
    steps,
    stop_at,
):
    problem = None
    if stop_at.value >= steps.value:
        problem = (
            f"stop at step {stop_at.value} leaves nothing to resume in a run of {steps.value} "
            "steps: pick stop_at < steps."
        )
    for _devices in (int(devices_before.value), int(devices_after.value)):
        if problem is None and batch.value % _devices:
            problem = (
                f"batch={batch.value} can't be split evenly over {_devices} devices: pick a "
                f"batch divisible by {_devices}."
            )
    lab.guard(problem, headline="Can't run this combination.")
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md("*Press the button to run (two short training runs and a checkpoint).*"),
    )
    config = dict(seed=seed.value, examples=examples.value, batch=batch.value, **MODEL)
    with (
        tempfile.TemporaryDirectory() as _tmp,
        mo.status.spinner(title="training, saving, restoring..."),
    ):
        run = distributed.resume_on_other_mesh(
            f"{_tmp}/checkpoints",
            **config,
            steps=steps.value,
            stop_at=stop_at.value,
            devices_before=int(devices_before.value),
            devices_after=int(devices_after.value),
            optimizer=optimizer.value,
            learning_rate=learning_rate.value,
            matmul_precision="highest",  # checked against NumPy float64 below
        )
    epoch_length = data.batches_per_epoch(examples.value, batch.value)
    _crosses = any(
        stop_at.value < k * epoch_length < steps.value for k in range(1, steps.value + 1)
    )
    _epochs = (
        "crosses an epoch boundary" if _crosses else "stays in one epoch (raise steps to cross one)"
    )
    mo.md(
        f"""
    Saved after step {stop_at.value} on {devices_before.value} devices: parameters, optimizer
    state ({optimizer.value}) and the data position `{run.data_state}`. Restored onto
    **{run.restored_devices}** devices. An epoch is {epoch_length} batches, so the resumed part
    {_epochs}. Both runs take their matmuls at HIGHEST precision, since the losses are checked
    against NumPy float64: on a TPU, DEFAULT runs each float32 matmul as one bfloat16 pass and
    the losses drift from float64's in their fourth digit.
    """
    )
    return config, epoch_length, run


@app.cell
def _(config, learning_rate, optimizer, run):
    # Independent references: the uninterrupted run, and NumPy float64 training on the same
    # examples.
    _ref_config = {k: v for k, v in config.items() if k != "batch"}
    reference = distributed.reference_losses(
        **_ref_config,
        batch_ids=run.ids_straight,
        optimizer=optimizer.value,
        learning_rate=learning_rate.value,
    )
    check = lab.Check(
        "the run restored onto another mesh matches the uninterrupted run (losses to 1e-5, "
        "state bitwise at restore, same batches) and NumPy float64",
        {  # all absolute: max |a - b|
            "resumed losses vs uninterrupted": numerics.max_abs_error(
                run.losses_resumed, run.losses_straight
            ),
            "final params/state vs uninterrupted": distributed.max_tree_error(
                run.final_resumed, run.final_straight
            ),
            "uninterrupted losses vs NumPy float64": numerics.max_abs_error(
                run.losses_straight, reference
            ),
        },
        {
            "resumed losses vs uninterrupted": RESUME_TOLERANCE,
            "final params/state vs uninterrupted": TRAINING_TOLERANCE,
            # on a CPU TRAINING_TOLERANCE; on a TPU its HIGHEST float32 bound (its tanh, log)
            "uninterrupted losses vs NumPy float64": max(
                TRAINING_TOLERANCE, numerics.tolerance("float32", precision="HIGHEST")
            ),
        },
        facts={
            "restored state == saved state (bitwise)": distributed.bitwise_equal(
                run.saved_state, run.restored_state
            ),
            "same examples in every step": run.ids_resumed == run.ids_straight,
        },
    )
    check
    return check, reference


@app.cell
def _(devices_after, devices_before, epoch_length, reference, run, stop_at):
    _straight = f"uninterrupted ({devices_before.value} devices)"
    _resumed = f"resumed ({devices_before.value} → {devices_after.value} devices)"
    _frame = pd.DataFrame(
        [{"step": i + 1, "run": _straight, "loss": v} for i, v in enumerate(run.losses_straight)]
        + [{"step": i + 1, "run": _resumed, "loss": v} for i, v in enumerate(run.losses_resumed)]
        + [{"step": i + 1, "run": "NumPy float64", "loss": v} for i, v in enumerate(reference)]
    )
    _marks = pd.DataFrame(
        [{"step": stop_at.value + 0.5, "what": "save / restore"}]
        + [
            {"step": k * epoch_length + 0.5, "what": "epoch boundary"}
            for k in range(1, len(run.losses_straight) // epoch_length + 1)
        ]
    )
    _lines = (
        alt.Chart(_frame, title="loss per step")
        .mark_line(point=True)
        .encode(
            x="step:Q",
            y=alt.Y("loss:Q", scale=alt.Scale(zero=False)),
            color="run:N",
            strokeDash="run:N",
            tooltip=["run", "step", alt.Tooltip("loss:Q", format=".7f")],
        )
    )
    _rules = (
        alt.Chart(_marks)
        .mark_rule()
        .encode(
            x="step:Q",
            color=alt.value("#999999"),
            strokeDash=alt.value([4, 4]),
            tooltip=["what"],
        )
    )
    _layout = [
        {
            "leaf": k,
            "spec": sharding.spec_name(v.sharding.spec),
            "devices before": len(run.saved_state["params"][k].sharding.device_set),
            "devices after": len(v.sharding.device_set),
        }
        for k, v in run.restored_state["params"].items()
    ]
    mo.vstack(
        [
            (_lines + _rules).properties(width=520, height=240),
            lab.table(_layout, "Where the restored parameters live"),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("resilient_training")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_restored_on_the_new_mesh(devices_after, run):
    assert run.restored_devices == int(devices_after.value)
    return


@app.cell
def test_every_example_seen_once_per_epoch(epoch_length, examples, run):
    _first_epoch = [i for ids in run.ids_resumed[:epoch_length] for i in ids]
    if len(run.ids_resumed) >= epoch_length:
        assert sorted(_first_epoch) == list(range(examples.value))
    return


if __name__ == "__main__":
    app.run()
