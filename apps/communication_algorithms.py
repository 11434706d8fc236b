import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Communication-efficient algorithms",
)

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import distributed, lab, numerics
    from core.distributed import sharding
    from core.lab import exercises
    from core.lessons.distributed import communication_algorithms as lesson
    from core.tpu import specs

    lab.use_cpu_devices()
    MESH_SIZES = tuple(sharding.valid_mesh_sizes(jax.device_count()))
    FLAGS = lab.Flags(
        lab.Flag(
            "mesh_size", max(MESH_SIZES), "devices in the 1-D mesh (axis x)", choices=MESH_SIZES
        ),
        lab.Flag("length", 64, "gradient length N (floats per device)", lo=1, hi=4096),
        lab.Flag("batch", 16, "examples in the big batch", lo=1, hi=64),
        lab.Flag("microbatches", 4, "microbatches K the batch is cut into", lo=1, hi=16),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description=(
            "Communication-efficient algorithms: all-reduce, reduce-scatter + all-gather, "
            "gradient accumulation."
        ),
    )
    ARGS = FLAGS.parse()
    # Absolute, and looser than the float32 table: float32 sums over up to 8 devices and a
    # 16-microbatch scan of float32 backprop, each against NumPy float64.
    CHECK_TOLERANCE = 1e-4


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Communication-efficient algorithms
    {lab.phase_line("communication_algorithms")}

    Data-parallel training ends every step with the same job: each device has its own
    gradient, and all of them need the sum. How that sum travels decides how much of a
    step is spent waiting on the network (ICI between TPU chips). In this lesson you will

    - sum per-device gradients with one `lax.psum` (an **all-reduce**) and with
      `lax.psum_scatter` + `lax.all_gather` (**reduce-scatter + all-gather**), inside
      `jax.shard_map`, and see they agree;
    - read the collectives and their sizes out of the compiled HLO and check them against
      the closed form;
    - accumulate gradients over K microbatches (one all-reduce instead of K) and check it
      equals the big-batch gradient, then count the all-reduces a **sharded** accumulation
      step runs in its compiled HLO;
    - turn each strategy's bytes into microseconds with the published per-link ICI figures.
    """)
    return


@app.cell
def _():
    mesh_size = FLAGS.control("mesh_size", ARGS, label="mesh size (devices)")
    length = FLAGS.control("length", ARGS, label="gradient length N")
    batch = FLAGS.control("batch", ARGS)
    microbatches = FLAGS.control("microbatches", ARGS, label="microbatches K")
    seed = FLAGS.control("seed", ARGS)
    mo.hstack([mesh_size, length, batch, microbatches, seed], justify="start", wrap=True)
    return batch, length, mesh_size, microbatches, seed


@app.cell
def _(batch, length, mesh_size, microbatches):
    devices = int(mesh_size.value)
    problem = None
    if length.value % devices:
        problem = (
            f"N={length.value} can't be reduce-scattered over {devices} devices (each gets "
            f"N/D floats): pick N divisible by {devices}."
        )
    elif batch.value % microbatches.value:
        problem = (
            f"batch={batch.value} can't be cut into {microbatches.value} equal microbatches: "
            "pick K dividing the batch."
        )
    lab.guard(problem, headline="Can't run this combination.")
    mesh = sharding.make_mesh((devices,), ("x",))
    rows_per_microbatch = batch.value // microbatches.value  # cells using K depend on this stop
    return devices, mesh, rows_per_microbatch


@app.cell
def _(devices, length, mesh, seed):
    g_DN = np.asarray(jax.random.normal(jax.random.key(seed.value), (devices, length.value)))
    g_sharded = sharding.shard(g_DN, mesh, jax.sharding.PartitionSpec("x"))
    summed = {}
    hlo_rows = []
    _algorithms = (
        ("all-reduce (psum)", distributed.allreduce_fn),
        ("reduce-scatter + all-gather", distributed.reduce_scatter_gather_fn),
    )
    for _name, _make in _algorithms:
        _fn = _make(mesh)
        # compile once: run it and read its HLO
        _compiled = jax.jit(_fn).lower(g_sharded).compile()
        summed[_name] = _compiled(g_sharded)
        for _op in distributed.hlo_collectives(_compiled.as_text()):
            hlo_rows.append(
                {
                    "algorithm": _name,
                    **_op,
                    "closed form bytes": distributed.expected_result_bytes(
                        _op["op"], length.value, devices
                    ),
                    "ring bytes sent / device": distributed.ring_bytes(
                        _op["op"], length.value * 4, devices
                    ),
                }
            )
    mo.vstack(
        [
            mo.md(
                f"""
    ## Two ways to sum {devices} gradients of {length.value} floats
    ```python
    jax.shard_map(lambda g: lax.psum(g[0], "x"), mesh=mesh, in_specs=P("x"), out_specs=P())
    jax.shard_map(
        lambda g: lax.all_gather(lax.psum_scatter(g[0], "x", tiled=True), "x", tiled=True),
        ...,
    )
    ```
    The collectives XLA compiled (parsed from `jax.jit(f).lower(g).compile().as_text()`;
    bytes of each result):
    """
            ),
            lab.table(hlo_rows),
            mo.md(
                "A ring all-reduce *is* a reduce-scatter followed by an all-gather: each device "
                "sends 2(D-1)/D·N·4 bytes either way. Split in two, the halves can be placed "
                "apart: FSDP keeps only the reduce-scattered slice of the gradients (and "
                "updates only its slice of the weights), then all-gathers the weights before "
                "the next forward. That saves memory, not bytes: a step still sends an "
                "all-reduce's worth, and ZeRO-3, which gathers the weights again for the "
                "backward, sends about 1.5 times that."
            ),
        ]
    )
    return g_DN, hlo_rows, summed


@app.cell
def _(batch, microbatches, rows_per_microbatch, seed):
    params = distributed.init_mlp(jax.random.key(seed.value), 8, 16, 4)
    data = distributed.example_batch(
        jax.random.fold_in(jax.random.key(seed.value), 1), batch.value, 8, 4
    )
    # At HIGHEST matmul precision: checked against NumPy float64 below (on a TPU, DEFAULT is
    # one bfloat16 pass per matmul)
    grads_big, grads_accumulated = distributed.big_batch_and_accumulated_grads(
        params, data, microbatches.value
    )
    parameter_count = sum(int(v.size) for v in params.values())
    mo.md(
        f"""
    ## Gradient accumulation
    The loss is a mean over rows, so the mean of K = {microbatches.value} microbatch gradients
    (each on {rows_per_microbatch} rows, summed in a `lax.scan`) is the gradient of
    the whole batch of {batch.value}: max difference
    **{distributed.max_tree_error(grads_accumulated, grads_big):.2g}**. This runs on one
    device; with the batch split over devices, accumulation all-reduces once per step
    instead of once per microbatch (shown in the compiled HLO below). Both gradients are
    computed at HIGHEST matmul precision: on a TPU, DEFAULT runs each float32 matmul as one
    bfloat16 pass, which moves these gradients in their fourth digit.
    """
    )
    return data, grads_accumulated, parameter_count, params


@app.cell
def _(devices, mesh, microbatches, params, seed):
    # The same accumulation with the batch split over the mesh: each device scans its own K
    # microbatches; then one all-reduce, or one per microbatch. Two rows per microbatch per
    # device keep every K valid and the compile small.
    sharded_data = distributed.example_batch(
        jax.random.fold_in(jax.random.key(seed.value), 2),
        devices * microbatches.value * 2, 8, 4,
    )  # fmt: skip
    with jax.default_matmul_precision("highest"):  # checked against NumPy float64 below
        accumulation_rows, sharded_grads = lesson.accumulation_versions(
            mesh, params, sharded_data, microbatches.value
        )
    mo.vstack(
        [
            mo.md(
                f"""
    ## One all-reduce a step, in the compiled HLO
    The batch ({devices * microbatches.value * 2} rows) split over {devices} devices, each
    summing its K = {microbatches.value} microbatch gradients in a `lax.scan`; one version
    all-reduces the sum after the scan, the other each microbatch's gradient inside it. The
    HLO text holds one all-reduce either way, but the second sits in the scan's while loop,
    whose trip count XLA writes beside it (`known_trip_count`): it runs K times a step.
    """
            ),
            lab.table(accumulation_rows),
        ]
    )
    return accumulation_rows, sharded_data, sharded_grads


@app.cell
def _(
    accumulation_rows,
    data,
    devices,
    g_DN,
    grads_accumulated,
    hlo_rows,
    params,
    sharded_data,
    sharded_grads,
    summed,
):
    # Independent references: NumPy float64 sums and backprop; closed-form byte counts.
    reference_sum_N = g_DN.astype(np.float64).sum(0)
    _, reference_grads = distributed.reference_loss_and_grads(params, data)
    _errors = {  # all absolute: max |a - b|
        f"{k} vs NumPy float64 sum": numerics.max_abs_error(v, reference_sum_N)
        for k, v in summed.items()
    }
    _errors["accumulated gradient vs NumPy float64 big-batch gradient"] = (
        distributed.max_tree_error(grads_accumulated, reference_grads)
    )
    _, _sharded_reference = distributed.reference_loss_and_grads(params, sharded_data)
    for _every, _grads in sharded_grads.items():
        _name = "per microbatch" if _every else "once"
        _errors[f"sharded accumulation (all-reduce {_name}) vs NumPy float64"] = (
            distributed.max_tree_error(_grads, _sharded_reference)
        )
    # closed form: 1 all-reduce a step when accumulating first, K when reducing each one
    all_reduces_match = all(
        r["all-reduces run per step"] == r["closed form"] for r in accumulation_rows
    )
    # one device: XLA may drop the collectives altogether
    bytes_match = all(r["bytes"] == r["closed form bytes"] for r in hlo_rows) and (
        len(hlo_rows) == 3 or devices == 1
    )
    _tolerances = dict.fromkeys(_errors, CHECK_TOLERANCE)
    for _name in _errors:
        if "accumulat" in _name:
            _tolerances[_name] = distributed.accumulation_tolerance()  # CHECK_TOLERANCE on CPU
    check = lab.Check(
        "both sums equal NumPy float64, accumulation (one device and sharded) equals the "
        "big-batch gradient, and HLO bytes and all-reduces per step equal the closed form"
        + ("" if bytes_match else " (HLO bytes DIFFER)"),
        _errors,
        _tolerances,
        facts={
            "HLO bytes equal the closed form": bytes_match,
            "all-reduces per step: 1 accumulating, K reducing each microbatch": (all_reduces_match),
        },
    )
    check
    return (check,)


@app.cell
def _(devices, microbatches, parameter_count):
    strategy_rows = distributed.strategy_bytes(parameter_count, devices, microbatches.value)
    _frame = pd.DataFrame(strategy_rows)
    _links = ", ".join(
        f"{g} {specs.chip(g).ici_link_bidirectional.value / 1e9:.0f} GB/s"
        for g in specs.generations_with_link_figures()
    )
    mo.vstack(
        [
            mo.md(
                "## Bytes each device sends per optimizer step\nThe MLP above has "
                f"{parameter_count} parameters ({parameter_count * 4} bytes of float32 "
                f"gradient), {devices} devices, K = {microbatches.value} (ring model). "
                "Microseconds: the bytes over one ICI link used in both directions (a ring "
                f"with wraparound along one mesh axis; per-link bidirectional: {_links}, "
                "from the scaling book's TPU chapter; no source gives TPU7x's), bandwidth "
                "only: each hop's latency "
                "(about a microsecond) dominates a gradient this small."
            ),
            lab.table(lesson.strategy_rows_with_seconds(strategy_rows)),
            alt.Chart(_frame, title="bytes sent per device per step")
            .mark_bar()
            .encode(
                x=alt.X("bytes:Q"),
                y=alt.Y("strategy:N", sort="-x", title=None),
                tooltip=["strategy", alt.Tooltip("bytes:Q", format=",.0f")],
            ),
        ]
    )
    return (strategy_rows,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "communication_algorithms", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("communication_algorithms")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_sums_are_replicated(summed):
    for _result in summed.values():
        for _piece in _result.addressable_shards:
            np.testing.assert_array_equal(np.asarray(_piece.data), np.asarray(_result))
    return


@app.cell
def test_accumulation_saves_k_all_reduces(microbatches, strategy_rows):
    assert strategy_rows[0]["bytes"] == microbatches.value * strategy_rows[1]["bytes"]
    return


if __name__ == "__main__":
    app.run()
