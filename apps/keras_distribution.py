import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Keras distribution: DataParallel and ModelParallel")

with app.setup:
    import tempfile

    import marimo as mo
    import numpy as np

    from core import lab, numerics
    from core.lab import charts
    from interop.keras_track import child
    from interop.keras_track import distribution as dist

    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "seed of the MLP's weights and of the batch", lo=0, hi=9999),
        lab.Flag("batch", 16, "rows in the batch (split over the data axis)", lo=1, hi=64),
        lab.Flag("hidden", 32, "hidden units of the two hidden Dense layers", lo=1, hi=64),
        lab.Flag(
            "mesh", "2x4", "DeviceMesh shape (batch x model) on 8 devices", choices=dist.MESHES
        ),
        lab.Flag("kernel_key", dist.GOOD_KEYS[0], "LayoutMap key for (None, 'model') kernels"),
        lab.Flag("bias_key", dist.GOOD_KEYS[1], "LayoutMap key for ('model',) biases"),
        description=(
            "keras.distribution on 8 CPU devices (jax backend): every weight's sharding read "
            "back, LayoutMap keys that shard nothing flagged."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Keras distribution: DataParallel and ModelParallel
    {lab.track_line("keras_distribution")}

    Keras 3 has its own sharding API, `keras.distribution`, which on the jax backend becomes
    the `jax.sharding` you met in the JAX lesson: a `DeviceMesh` is a `Mesh`, a `LayoutMap`
    entry is a `PartitionSpec` for every variable whose **path** it matches.
    `DataParallel` replicates the weights and splits the batch; `ModelParallel` splits the
    weights the `LayoutMap` names and leaves every other weight replicated.

    That last clause is the trap. Keras matches a key against the whole path with
    `re.fullmatch`, and a Sequential model's paths start with the model's name
    (`mlp/dense_1/kernel`). So the key `"dense.*kernel"`, as Keras's own docstring spells
    it, matches **nothing**: the model trains, fully replicated, and nothing warns you.
    `".*dense.*/kernel"` works. The only way to know is to read the shardings back.

    This app runs a three-layer MLP in a `KERAS_BACKEND=jax` subprocess on the lab's 8 CPU
    devices four ways (one device, DataParallel, ModelParallel with your keys, and
    ModelParallel with the docstring's keys) and reads back every weight's
    `w.value.sharding.spec` and each device's shard. Keras picks its backend at its first
    import, once per process; a subprocess gives it a clean one whatever this notebook (or a
    server running many notebooks) has imported before.

    You will learn:

    - how a `DeviceMesh` shape and a `LayoutMap` become per-device shards;
    - to predict each shard's shape from the mesh shape, and check it;
    - to catch a `LayoutMap` key that silently shards nothing.
    """)
    return


@app.cell
def _():
    seed = FLAGS.control("seed", ARGS)
    batch = FLAGS.control("batch", ARGS)
    hidden = FLAGS.control("hidden", ARGS)
    mesh = FLAGS.control("mesh", ARGS, label="mesh (batch x model)")
    kernel_key = mo.ui.text(value=ARGS.kernel_key, label="LayoutMap key, kernels", full_width=True)
    bias_key = mo.ui.text(value=ARGS.bias_key, label="LayoutMap key, biases", full_width=True)
    run_button = mo.ui.run_button(label="Run the Keras jax subprocess")
    mo.vstack(
        [
            mo.hstack([seed, batch, hidden, mesh], justify="start", wrap=True),
            kernel_key,
            bias_key,
            mo.md(
                "Try `dense.*kernel` (the docstring's key), `.*dense_1/kernel` (one layer "
                "only), or mesh `1x8` with 32 hidden units."
            ),
            run_button,
        ]
    )
    return batch, bias_key, hidden, kernel_key, mesh, run_button, seed


@app.cell
def _(batch, bias_key, hidden, kernel_key, mesh, seed):
    request = dist.Request(
        seed=seed.value,
        batch=batch.value,
        hidden=hidden.value,
        mesh=mesh.value,
        kernel_key=kernel_key.value,
        bias_key=bias_key.value,
    )
    _shapes = dist.weight_shapes(request)
    _context = lab.table(
        [{"path": p, "shape": str(s)} for p, s in _shapes.items()], "the MLP's weights"
    )
    lab.guard(dist.problem(request), _context, headline="This layout cannot be built.")
    lab.require("keras", why="the Keras model runs in a subprocess (jax backend)")
    return (request,)


@app.cell
def _(request, run_button):
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md("Press **Run the Keras jax subprocess**."),
    )
    with tempfile.TemporaryDirectory(prefix="keras_distribution_") as _tmp:
        try:
            result = dist.run(request, _tmp)
            _failure = None
        except dist.child.WorkerError as _error:
            result, _failure = None, str(_error)
    lab.guard(_failure, headline="The Keras subprocess failed.")
    mo.md(
        f"Keras {result.keras_version}, jax backend, 8 CPU devices: the subprocess took "
        f"{result.seconds:.1f} s (imports included)."
    )
    return (result,)


@app.cell
def _(request, result):
    _tabs = {
        "ModelParallel (your keys)": "model_parallel",
        "ModelParallel (docstring keys)": "trap",
        "DataParallel": "data_parallel",
    }
    _left = [p for p in dist.replicated(result.readback["model_parallel"]) if p.endswith("kernel")]
    _warning = (
        mo.callout(
            mo.md(
                f"**{len(_left)} kernel(s) left replicated by your keys:** "
                + ", ".join(f"`{p}`" for p in _left)
                + ". ModelParallel shards only what a key fullmatches."
            ),
            kind="warn",
        )
        if _left
        else mo.md("Every kernel is sharded by your keys.")
    )
    lab.report("kernels left replicated by the asked keys", len(_left), "weights")
    mo.vstack(
        [
            mo.md("## Every weight's sharding, read back"),
            mo.ui.tabs(
                {
                    label: lab.table(
                        dist.weight_rows(request, mode, result.readback[mode]),
                        f"{label}: mesh {request.mesh}",
                    )
                    for label, mode in _tabs.items()
                }
            ),
            mo.md("## What each LayoutMap key matches"),
            lab.table(dist.audit(request, result.readback["single"]), "re.fullmatch per key"),
            _warning,
        ]
    )
    return


@app.cell
def _(request, result):
    _rows = [
        {
            "mode": mode,
            "batch spec": str(tuple(result.inputs[mode]["spec"])),
            "batch shard": ", ".join(
                sorted({str(tuple(s["shape"])) for s in result.inputs[mode]["shards"]})
            ),
            "expected": str(dist.expected_input_shard(request, mode)),
            "output spec": str(tuple(result.output_specs[mode])),
        }
        for mode in dist.MODES
    ]
    mo.vstack([mo.md("## The batch and the output"), lab.table(_rows, "per mode")])
    return


@app.cell
def _(request, result):
    # The reference: the MLP in NumPy float64 from the same weights, and the shardings
    # predicted here from the keys (re.fullmatch) and the mesh shape, never read from Keras.
    _reference = dist.numpy_forward(result.weights, result.x_BF)
    _errors = {
        f"{mode} vs NumPy float64": numerics.scaled_max_error(result.outputs[mode], _reference)
        for mode in dist.MODES
    }
    _errors["model_parallel vs single"] = numerics.scaled_max_error(
        result.outputs["model_parallel"], result.outputs["single"]
    )
    _facts = {}
    for _mode in dist.MODES:
        _wrong = dist.mismatches(request, _mode, result.readback[_mode])
        _facts[f"{_mode}: every spec and shard shape as predicted"] = not _wrong
    for _mode in ("data_parallel", "model_parallel"):
        _shards = {tuple(s["shape"]) for s in result.inputs[_mode]["shards"]}
        _facts[f"{_mode}: the batch split as predicted"] = _shards == {
            dist.expected_input_shard(request, _mode)
        }
    _facts["the docstring's keys left every weight replicated"] = len(
        dist.replicated(result.readback["trap"])
    ) == len(dist.weight_shapes(request))
    check = lab.Check(
        f"keras.distribution on mesh {request.mesh}: outputs equal NumPy float64, every "
        "weight sharded as its key and the mesh predict",
        _errors,
        child.FLOAT32,  # the child computed on the CPU, whatever this process runs on
        facts=_facts,
    )
    check
    return (check,)


@app.cell
def _(request, result):
    _weights = result.readback["model_parallel"]
    _devices = sorted({s["device"] for s in _weights[0]["shards"]})
    _blocks = np.zeros((len(_weights), len(_devices)))
    for _i, _w in enumerate(_weights):
        for _s in _w["shards"]:
            _start, _ = _s["index"][-1]  # the last dimension: the one the keys split
            _blocks[_i, _devices.index(_s["device"])] = _start // max(_s["shape"][-1], 1)
    mo.vstack(
        [
            charts.heatmap(
                _blocks,
                f"ModelParallel {request.mesh}: which block of each weight's last dimension "
                "each device holds",
                row_title="weight #",
                col_title="device",
                scheme="viridis",
            ),
            mo.md("Weights: " + ", ".join(f"{i} `{w['path']}`" for i, w in enumerate(_weights))),
        ]
    )
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_docstring_keys_shard_nothing(request, result):
    assert dist.replicated(result.readback["trap"]) == list(dist.weight_shapes(request))
    return


if __name__ == "__main__":
    app.run()
