import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Run course scripts and multi-host TPU Pod slices",
)

with app.setup:
    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab
    from core.lab import charts, text
    from core.lab import text
    from core.tpu import cloud_tpu
    from tpu_scripts import rehearse

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("processes", 2, "JAX processes (hosts) to rehearse", lo=1, hi=4),
        lab.Flag("devices_per_process", 4, "CPU devices per process (chips per host)", lo=1, hi=8),
        lab.Flag(
            "batch", 32, "global batch (split across processes, then devices)", lo=8, hi=256, step=8
        ),
        lab.Flag("steps", 3, "training steps (the first one compiles)", lo=2, hi=10),
        lab.Flag(
            "accelerator_type",
            "v5litepod-16",
            "the Pod slice to launch on",
            choices=cloud_tpu.CREATABLE_TYPES,
        ),
        description=(
            "Run course scripts on multi-host TPU Pod slices, rehearsed with local processes."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Run course scripts and multi-host TPU Pod slices
    {lab.phase_line("pod_slices")}

    A slice bigger than one host (v5e/v6e: more than 8 chips; v5p: more than 4) is several
    VMs, one JAX **process** per host, all running the **same script**. What changes:

    - `gcloud ... ssh --worker=all` starts the script on every host at once;
    - each process calls `jax.distributed.initialize()`; `jax.process_index()` tells it which
      host it is, `jax.devices()` lists every chip of the slice, `jax.local_devices()` its own;
    - each host loads **only its share of the batch** and
      `jax.make_array_from_process_local_data` assembles the global array;
    - collectives (the gradient all-reduce) cross hosts; the result must not depend on how
      many hosts there are.

    You will rehearse this here: `python -m tpu_scripts rehearse` starts N local processes
    (gloo CPU collectives, a coordinator on a free local port), runs one sharded training
    script, shows every process's output, and compares the result with one process holding
    all the devices.
    """)
    return


@app.cell
def _():
    processes = FLAGS.control("processes", ARGS)
    devices_per_process = FLAGS.control("devices_per_process", ARGS)
    batch = FLAGS.control("batch", ARGS)
    steps = FLAGS.control("steps", ARGS)
    accelerator_type = FLAGS.control("accelerator_type", ARGS)
    run_button = mo.ui.run_button(label="Run the rehearsal (N processes, then 1)")
    mo.vstack(
        [
            mo.hstack([processes, devices_per_process, batch, steps], justify="start", wrap=True),
            mo.hstack([accelerator_type, run_button], justify="start"),
        ]
    )
    return (
        accelerator_type,
        batch,
        devices_per_process,
        processes,
        run_button,
        steps,
    )


@app.cell
def _(accelerator_type, batch, devices_per_process, processes, steps):
    _accel = cloud_tpu.ACCELERATOR_TYPES[accelerator_type.value]
    _vm = cloud_tpu.TpuVm(
        accelerator_type=accelerator_type.value, zone=cloud_tpu.ZONES[_accel.generation][0]
    )
    _script_flags = f"--steps {steps.value} --batch {batch.value}"
    _remote = cloud_tpu.bootstrap_remote_command("sharded_step.py", extra_flags=_script_flags)
    _run_line = cloud_tpu.shell_join(cloud_tpu.ssh_command(_vm, _remote))
    _devices = devices_per_process.value
    _per_host = batch.value // processes.value
    mo.vstack(
        [
            mo.md(
                f"## On a `{_accel.name}`: {text.plural(_accel.hosts, 'host')} x "
                f"{text.plural(min(_accel.chips, _accel.chips_per_host), 'chip')}\n"
                "The same command reaches every worker (`--worker=all`):"
            ),
            text.code_block(_run_line, "bash", "run on every worker"),
            lab.table(
                [
                    {
                        "process_index": i,
                        "local devices": f"{i * _devices}..{(i + 1) * _devices - 1}",
                        "rows of the global batch it loads": (
                            f"{i * _per_host}..{(i + 1) * _per_host - 1}"
                        ),
                    }
                    for i in range(processes.value)
                ],
                f"## The rehearsal here: {processes.value} processes x {_devices} devices",
            ),
        ]
    )
    return


@app.cell
def _(batch, devices_per_process, processes, run_button, steps):
    _total = processes.value * devices_per_process.value
    _problem = None
    if batch.value % _total:
        _problem = (
            f"a global batch of {batch.value} does not split over {_total} devices "
            f"({processes.value} x {devices_per_process.value}); choose a multiple of {_total}."
        )
    lab.guard(_problem, headline="Can't shard this way.")
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md("*Press **Run the rehearsal**.*"),
    )
    lab.require(
        sockets=True,
        why="the rehearsal's processes join one JAX job through a coordinator on 127.0.0.1",
    )
    _args = ["--steps", str(steps.value), "--batch", str(batch.value)]
    try:
        multi, single, difference = rehearse.compare_with_single_process(
            rehearse.EXAMPLE, processes.value, devices_per_process.value, _args
        )
        failure = None
    except rehearse.RehearsalFailed as _exc:
        multi = single = difference = None
        failure = str(_exc)
    lab.guard(failure, headline="The rehearsal failed.")

    def _shown(stdout):
        """A process's output without gloo's chatter and the machine-read result line."""
        skip = ("[Gloo]", rehearse.RESULT_PREFIX)
        return "\n".join(line for line in stdout.splitlines() if not line.startswith(skip))

    _outputs = [
        _part
        for o in multi.outputs
        for _part in (
            mo.md(f"**process {o.process_id}** (exit {o.returncode})"),
            text.code_block(_shown(o.stdout), "text", f"process {o.process_id}"),
        )
    ]
    mo.vstack(
        [
            mo.md(
                f"## Each process's output ({multi.seconds:.1f} s for the "
                f"{processes.value}-process run)"
            ),
            *_outputs,
            mo.md(f"**1 process x {single.devices_per_process} devices**"),
            text.code_block(_shown(single.outputs[0].stdout), "text", "1 process"),
        ]
    )
    return difference, multi, single


@app.cell
def _(difference, multi, processes, single):
    # Independent reference: a fresh single process holding every device (no cross-process
    # collectives), same seed and data.
    check = lab.Check(
        f"{processes.value} processes x {multi.devices_per_process} devices vs 1 process x "
        f"{single.devices_per_process} devices: losses and weights",
        # max |a - b| over every number of the two results (rehearse.max_difference)
        {"losses and weights: N processes vs 1 (absolute)": difference},
        rehearse.AGREEMENT_TOLERANCE,  # absolute: another process count, another sum order
        facts={"every process printed the same result": rehearse.results_agree(multi)},
    )
    check
    return (check,)


@app.cell
def _(multi, single):
    _rows = []
    for _label, _run in ((f"{multi.processes} processes", multi), ("1 process", single)):
        for _o in _run.outputs:
            for _phase, _key in (
                ("compile (first step)", "compile_s"),
                ("steady-state step", "step_s"),
            ):
                _rows.append(
                    {
                        "run": _label,
                        "process": _o.process_id,
                        "phase": _phase,
                        "ms": _o.result[_key] * 1e3,
                    }
                )
    _domain = charts.log_domain([r["ms"] for r in _rows])
    alt.Chart(
        pd.DataFrame(_rows), title="Compile vs steady-state step time, per process"
    ).mark_bar().encode(
        x=alt.X("ms:Q", scale=alt.Scale(type="log", domain=_domain)),
        y=alt.Y("process:O"),
        color="phase:N",
        yOffset="phase:N",
        row=alt.Row("run:N", title=None),
        tooltip=["run", "process", "phase", "ms"],
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("pod_slices")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_every_process_saw_the_global_devices(
    devices_per_process,
    multi,
    processes,
):
    total = processes.value * devices_per_process.value
    for o in multi.outputs:
        assert f"{devices_per_process.value} local of {total} devices" in o.stdout
    return


if __name__ == "__main__":
    app.run()
