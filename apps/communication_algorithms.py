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
      equals the big-batch gradient.
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
                "apart: FSDP/ZeRO keeps only the reduce-scattered slice and gathers it when the "
                "weights are next needed."
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
    **{distributed.max_tree_error(grads_accumulated, grads_big):.2g}**. With accumulation,
    devices all-reduce once per step instead of once per microbatch. Both gradients are
    computed at HIGHEST matmul precision: on a TPU, DEFAULT runs each float32 matmul as one
    bfloat16 pass, which moves these gradients in their fourth digit.
    """
    )
    return data, grads_accumulated, parameter_count, params


@app.cell
def _(data, devices, g_DN, grads_accumulated, hlo_rows, params, summed):
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
    # one device: XLA may drop the collectives altogether
    bytes_match = all(r["bytes"] == r["closed form bytes"] for r in hlo_rows) and (
        len(hlo_rows) == 3 or devices == 1
    )
    _tolerances = dict.fromkeys(_errors, CHECK_TOLERANCE)
    _tolerances["accumulated gradient vs NumPy float64 big-batch gradient"] = (
        distributed.accumulation_tolerance()  # CHECK_TOLERANCE on a CPU
    )
    check = lab.Check(
        "both sums equal NumPy float64, accumulation equals the big-batch gradient, and HLO "
        "bytes equal the closed form" + ("" if bytes_match else " (HLO bytes DIFFER)"),
        _errors,
        _tolerances,
        facts={"HLO bytes equal the closed form": bytes_match},
    )
    check
    return (check,)


@app.cell
def _(devices, microbatches, parameter_count):
    strategy_rows = distributed.strategy_bytes(parameter_count, devices, microbatches.value)
    _frame = pd.DataFrame(strategy_rows)
    mo.vstack(
        [
            mo.md(
                "## Bytes each device sends per optimizer step\nThe MLP above has "
                f"{parameter_count} parameters ({parameter_count * 4} bytes of float32 "
                f"gradient), {devices} devices, K = {microbatches.value} (ring model)."
            ),
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
    lab.tpu_results("communication_algorithms")
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
