import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Bootstrap .venv and verify a TPU runtime receipt",
)

with app.setup:
    import json

    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import curriculum, lab, numerics
    from core.lab import charts, text
    from core.tpu import cloud_tpu
    from tpu_scripts import receipt

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag(
            "accelerator_type",
            "v5litepod-8",
            "the slice you provisioned",
            choices=cloud_tpu.CREATABLE_TYPES,
        ),
        lab.Flag("repeats", 3, "timed psum calls after the warmup (median)", lo=1, hi=50),
        description="Bootstrap .venv on a TPU VM and verify its runtime receipt.",
    )
    ARGS = FLAGS.parse()
    # What jax.devices()[0].device_kind reads on each generation's TPU VM.
    DEVICE_KIND = {"v5e": "TPU v5 lite", "v5p": "TPU v5", "v6e": "TPU v6 lite"}
    # Absolute, not the float32 table: a float32 sum of the integers 1..n is exact while
    # n (n + 1) / 2 < 2^24, so the psum must equal the closed form (well within 1e-6).
    PSUM_TOLERANCE = 1e-6


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Bootstrap .venv and verify a TPU runtime receipt
    {lab.phase_line("tpu_receipt")}

    A fresh TPU VM has Python and nothing else you need. In this lesson you will

    - bootstrap a project `.venv` on every worker (uv, Python 3.11, `jax[tpu]` with libtpu);
    - run `python -m tpu_scripts receipt --json receipt.json`: backend, device kind and count,
      chip coordinates, process index and count, host and versions, plus a **synchronized
      collective**: a `psum` of (device index + 1) over every device, checked against the
      closed form n (n + 1) / 2 and timed (warmup = compile, then the median);
    - read a receipt from a live run on this host and what each field should read on a TPU.

    On a multi-host slice every worker runs the receipt with `--distributed` (it joins one
    JAX job first), so the psum spans every chip of the slice.
    """)
    return


@app.cell
def _():
    accelerator_type = FLAGS.control("accelerator_type", ARGS)
    repeats = FLAGS.control("repeats", ARGS)
    run_button = mo.ui.run_button(label="Run the receipt (subprocess)")
    mo.hstack([accelerator_type, repeats, run_button], justify="start")
    return accelerator_type, repeats, run_button


@app.cell
def _(accelerator_type):
    vm = cloud_tpu.TpuVm(
        accelerator_type=accelerator_type.value,
        zone=cloud_tpu.ZONES[cloud_tpu.ACCELERATOR_TYPES[accelerator_type.value].generation][0],
    )
    _steps = [
        ("create the VM", cloud_tpu.shell_join(cloud_tpu.create_command(vm))),
        (
            "make the project folder on every worker",
            cloud_tpu.shell_join(cloud_tpu.ssh_command(vm, f"mkdir -p ~/{cloud_tpu.REMOTE_DIR}")),
        ),
        (
            "copy the project wheel",
            cloud_tpu.shell_join(cloud_tpu.scp_command(vm, [cloud_tpu.WHEEL])),
        ),
        (
            "bootstrap .venv and run the receipt on every worker",
            cloud_tpu.shell_join(
                cloud_tpu.ssh_command(
                    vm,
                    cloud_tpu.bootstrap_remote_command("receipt.py").replace(
                        ".venv/bin/python receipt.py",
                        ".venv/bin/python -m tpu_scripts receipt --json receipt.json"
                        + (" --distributed" if vm.accelerator.multi_host else ""),
                    ),
                )
            ),
        ),
    ]
    mo.vstack(
        [
            mo.md(
                f"## Bootstrap on a `{vm.accelerator_type}` "
                f"({text.plural(vm.accelerator.hosts, 'worker')})"
            )
        ]
        + [
            _part
            for _what, _line in _steps
            for _part in (mo.md(f"**{_what}**"), text.code_block(_line, "bash", _what))
        ]
    )
    return (vm,)


@app.cell
def _(repeats, run_button):
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md("*Press **Run the receipt** to run it here.*"),
    )
    # One process per chip: holding the TPU, the receipt is taken in this process (a child
    # could not open the chip); otherwise by the lesson's command in a child process.
    _taken = receipt.live_receipt(repeats.value, cwd=curriculum.REPO_ROOT)
    _failed = _taken.receipt is None
    lab.guard(
        f"`python -m tpu_scripts receipt` exited {_taken.returncode}; its stderr is above."
        if _failed
        else None,
        *([text.code_block(_taken.stderr[-1500:], "text", "stderr")] if _failed else []),
    )
    live = _taken.receipt
    mo.vstack(
        [
            mo.md(
                f"## The live receipt (this host, taken in {_taken.where})"
                + (
                    ": this process holds the TPU, and a chip serves one process at a time, "
                    "so a child `python -m tpu_scripts receipt` could not open it"
                    if _taken.where == "this process"
                    else ""
                )
            ),
            text.code_block(_taken.stdout.strip(), "text", "receipt output"),
            mo.json(json.dumps(live)),
        ]
    )
    return (live,)


@app.cell
def _(live, vm):
    _accel = vm.accelerator
    _collective = live["collective"]
    _coords = [d["coords"] for d in live["devices"]]
    mo.vstack(
        [
            mo.md(f"## Each field, here and on a `{vm.accelerator_type}`"),
            lab.table(
                [
                    {"field": "backend", "here": live["backend"], "on the TPU VM": "tpu"},
                    {
                        "field": "device_kind",
                        "here": live["device_kind"],
                        "on the TPU VM": DEVICE_KIND[_accel.generation],
                    },
                    {
                        "field": "device_count",
                        "here": live["device_count"],
                        "on the TPU VM": f"{_accel.chips} (one device per chip)",
                    },
                    {
                        "field": "local_device_count",
                        "here": live["local_device_count"],
                        "on the TPU VM": min(_accel.chips, _accel.chips_per_host),
                    },
                    {
                        "field": "process_count",
                        "here": live["process_count"],
                        "on the TPU VM": f"{_accel.hosts} (one process per host)",
                    },
                    {
                        "field": "process_index",
                        "here": live["process_index"],
                        "on the TPU VM": f"0..{_accel.hosts - 1}, one per worker",
                    },
                    {
                        "field": "devices[].coords",
                        "here": _coords[0] if _coords else None,
                        "on the TPU VM": "[x, y, z] chip position in the torus",
                    },
                    {
                        "field": "versions.libtpu",
                        "here": live["versions"]["libtpu"],
                        "on the TPU VM": "the libtpu wheel jax[tpu] pinned",
                    },
                    {
                        "field": "host.tpu_vm",
                        "here": live["host"]["tpu_vm"],
                        "on the TPU VM": "True (/dev/accel* or vfio)",
                    },
                    {
                        "field": "collective.result",
                        "here": _collective["result"],
                        "on the TPU VM": f"{_accel.chips * (_accel.chips + 1) / 2:g}",
                    },
                ]
            ),
        ]
    )
    return


@app.cell
def _(live):
    # Independent reference: the psum closed form summed in Python, and this process's JAX.
    n_devices = jax.device_count()
    expected_psum = float(sum(range(1, n_devices + 1)))
    check = lab.Check(
        f"receipt psum = {live['collective']['result']:g} vs closed form {expected_psum:g}; "
        f"device count {live['device_count']} vs jax.device_count() {n_devices}",
        {
            "psum vs closed form (absolute)": numerics.max_abs_error(
                live["collective"]["result"], expected_psum
            )
        },
        PSUM_TOLERANCE,
        facts={
            "device count matches": live["device_count"] == n_devices,
            "the receipt's own collective check passed": live["collective"]["passed"],
        },
    )
    check
    return check, n_devices


@app.cell
def _(live):
    _timing = pd.DataFrame(
        [
            {"phase": "warmup (compile + first run)", "ms": live["collective"]["compile_s"] * 1e3},
            {
                "phase": f"median of {live['collective']['repeats']}",
                "ms": live["collective"]["median_s"] * 1e3,
            },
        ]
    )
    alt.Chart(_timing, title="psum over all devices: compile vs steady state").mark_bar().encode(
        x=alt.X("ms:Q", scale=alt.Scale(type="log", domain=charts.log_domain(_timing["ms"]))),
        y=alt.Y("phase:N", title=None),
        tooltip=["phase", "ms"],
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("tpu_receipt")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_receipt_lists_every_device(live, n_devices):
    assert len(live["devices"]) == n_devices
    assert [d["id"] for d in live["devices"]] == [d.id for d in jax.devices()]
    return


if __name__ == "__main__":
    app.run()
