import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Move your experiment to a TPU")

with app.setup:
    import shlex

    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import curriculum, lab
    from core.lab import text
    from core.tpu import cloud_tpu, command_check, local_run

    lab.use_cpu_devices()
    # The course's apps: the checkout's, or on a TPU VM the copies the wheel ships (an exported
    # script's own folder holds only scripts).
    APPS_DIR, REPO_ROOT = curriculum.APPS_DIR, curriculum.REPO_ROOT
    RUNTIME_CHOICES = ("auto", *cloud_tpu.RUNTIME_VERSIONS.values())
    FLAGS = lab.Flags(
        lab.Flag(
            "accelerator_type",
            "v5litepod-8",
            "gcloud accelerator type",
            choices=cloud_tpu.CREATABLE_TYPES,
        ),
        lab.Flag("zone", "us-west4-a", "zone to create the TPU VM in", choices=cloud_tpu.ALL_ZONES),
        lab.Flag(
            "runtime_version",
            "auto",
            "TPU software version (auto: the generation's image)",
            choices=RUNTIME_CHOICES,
        ),
        lab.Flag("tpu_name", "jax-tpu-lab", "name of the TPU VM"),
        lab.Flag("project", "", "Google Cloud project id (empty: gcloud's configured project)"),
        lab.Flag("spot", False, "create a Spot TPU VM (cheaper, can be preempted)"),
        lab.Flag(
            "script_flags",
            "--rows 4 --cols 4 --seed 1",
            "flags for the exported script; write --script-flags='--rows 2'",
        ),
        description=(
            "Move your experiment to a TPU: gcloud commands for a Cloud TPU VM, "
            "and a headless export."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Move your experiment to a TPU
    {lab.phase_line("move_to_tpu")}

    So far every lesson ran on virtual CPU devices. A Cloud TPU VM runs the *same* program:
    you copy a script there and start it with `python`. In this lesson you will

    - choose an **accelerator type**, read off its **chips** and **hosts**, and pick a zone and
      runtime that offer it;
    - get the **exact gcloud commands** for the round trip: create the VM, copy your files to
      every worker, run the script on every worker, delete the VM, and check it is gone;
    - **export** the previous lesson as a headless script with flags, and run it here exactly
      as a TPU VM would (only the devices differ).
    """)
    return


@app.cell(hide_code=True)
def _():
    mo.md("""
    ## Chips, hosts and workers

    - A **chip** is one TPU accelerator with its own high-bandwidth memory. On v5e, v5p and
      v6e JAX shows one device per chip (v5p's two TensorCores act as one device); on TPU7x
      it shows **two**, one per TensorCore, each with half the chip's HBM. v5e
      (`v5litepod-N`) and v6e (`v6e-N`) names count chips; v5p names count TensorCores, two
      per chip, so `v5p-8` is **4** chips.
    - A **host** is the VM the chips are attached to: its CPUs, RAM and disk run your Python.
      A v5e or v6e host holds up to 8 chips, a v5p host 4. gcloud calls each host a
      **worker** and numbers them from 0.
    - A **single-host** slice (`v5litepod-8`) is one VM: one Python process sees all chips.
    - A **multi-host** slice (`v5litepod-16` and up) is several VMs. Each host runs its own
      Python process (`jax.process_index()` is its worker number, `jax.process_count()` the
      number of hosts) and drives its local chips (`jax.local_devices()`), while
      `jax.devices()` lists the chips of all hosts. The program is SPMD: **the same script
      must start on every host**, or a collective waits forever for the hosts that never
      came. That is why the copy and the run below use `--worker=all`.
    """)
    return


@app.cell
def _():
    accelerator_type = FLAGS.control("accelerator_type", ARGS, label="accelerator type")
    zone = FLAGS.control("zone", ARGS)
    runtime_version = FLAGS.control("runtime_version", ARGS, label="runtime version")
    tpu_name = mo.ui.text(value=ARGS.tpu_name, label="TPU name")
    project = mo.ui.text(
        value=ARGS.project, label="project (optional)", placeholder="gcloud's default"
    )
    spot = FLAGS.control("spot", ARGS, label="Spot VM")
    mo.vstack(
        [
            mo.md("## Choose your TPU VM"),
            mo.hstack([accelerator_type, zone, runtime_version], justify="start"),
            mo.hstack([tpu_name, project, spot], justify="start"),
        ]
    )
    return accelerator_type, project, runtime_version, spot, tpu_name, zone


@app.cell
def _(accelerator_type, project, runtime_version, spot, tpu_name, zone):
    try:
        vm = cloud_tpu.TpuVm(
            name=tpu_name.value,
            accelerator_type=accelerator_type.value,
            zone=zone.value,
            runtime_version="" if runtime_version.value == "auto" else runtime_version.value,
            spot=spot.value,
            project=project.value,
        )
        vm_problem = None
    except ValueError as error:
        vm, vm_problem = None, str(error)
    lab.guard(vm_problem, headline="This TPU VM cannot be created.")
    slice_rows = [
        {"property": "generation", "value": vm.generation},
        {"property": "chips (JAX devices)", "value": str(vm.accelerator.chips)},
        {"property": "hosts (gcloud workers)", "value": str(vm.accelerator.hosts)},
        {
            "property": "chips per host",
            "value": str(min(vm.accelerator.chips, vm.accelerator.chips_per_host)),
        },
        {"property": "runtime version", "value": vm.runtime_version},
        {
            "property": "zones with this generation",
            "value": ", ".join(cloud_tpu.ZONES[vm.generation]),
        },
        {"property": "billing", "value": "Spot (preemptible)" if vm.spot else "on-demand"},
    ]
    if vm.accelerator.multi_host:
        hosts_note = (
            f"`{vm.accelerator_type}` is **multi-host**: {vm.accelerator.hosts} VMs with "
            f"{vm.accelerator.chips_per_host} chips each. Every worker needs the files and every "
            f"worker must run the script; in each process `jax.process_count()` is "
            f"{vm.accelerator.hosts} and `len(jax.devices())` is {vm.accelerator.chips}."
        )
    else:
        hosts_note = (
            f"`{vm.accelerator_type}` is **single-host**: one VM, one Python process, and "
            f"`jax.devices()` lists {text.plural(vm.accelerator.chips, 'TPU device')}. "
            "`--worker=all` "
            "still works (it means worker 0) and keeps the commands ready for a bigger slice."
        )
    mo.vstack(
        [
            mo.ui.table(pd.DataFrame(slice_rows), selection=None, label="your slice"),
            mo.md(
                hosts_note + f"\n\nHere, for comparison, JAX sees {jax.device_count()} virtual "
                f"{jax.default_backend().upper()} devices in one process."
            ),
        ]
    )
    return (vm,)


@app.cell
def _(accelerator_type):
    chosen_generation = cloud_tpu.ACCELERATOR_TYPES[accelerator_type.value].generation
    same_generation = [
        a for a in cloud_tpu.ACCELERATOR_TYPES.values() if a.generation == chosen_generation
    ]
    sizes = pd.DataFrame(
        [
            {
                "type": a.name,
                "measure": measure,
                "count": count,
                "chosen": a.name == accelerator_type.value,
            }
            for a in same_generation
            for measure, count in (("chips", a.chips), ("hosts (workers)", a.hosts))
        ]
    )
    bars = alt.Chart().encode(
        x=alt.X("type:N", sort=[a.name for a in same_generation], title=None),
        # symlog: sizes double at each step, and a 1 still gets a visible bar.
        y=alt.Y("count:Q", title=None, scale=alt.Scale(type="symlog")),
        tooltip=["type", "measure", "count"],
    )
    (
        alt.layer(
            bars.mark_bar().encode(
                color=alt.Color(
                    "chosen:N",
                    scale=alt.Scale(domain=[True, False], range=["#e45756", "#4c78a8"]),
                    legend=None,
                )
            ),
            bars.mark_text(dy=-6, fontSize=10).encode(text="count:Q"),
        )
        .properties(width=280, height=180)
        .facet(column=alt.Column("measure:N", title=None), data=sizes)
        .resolve_scale(y="independent")
        .properties(
            title=f"{chosen_generation}: chips and hosts per accelerator type (yours in red)"
        )
    )
    return


@app.cell
def _():
    previous_app = local_run.previous_lesson_app(APPS_DIR)
    script_flags = mo.ui.text(
        value=ARGS.script_flags, label="flags for the script", full_width=True
    )
    run_button = mo.ui.run_button(label="Export and run the script")
    mo.vstack(
        [
            mo.md(
                f"""
    ## Take the previous lesson along

    A lesson app is already a program: `python apps/{previous_app.name}` runs every cell
    without a browser, and its controls are command-line flags. `python -m tpu_scripts export`
    writes it as one self-contained script with a header (where it came from, a hash of the
    source, its flags). That script, plus the project wheel, is all a TPU VM needs.
    Below, the export goes to a temporary folder and runs here, on CPU. Change the flags and
    only the script runs again: the export of the same source, and its `--help`, are kept.
    """
            ),
            script_flags,
            run_button,
        ]
    )
    return previous_app, run_button, script_flags


@app.cell
def _(script_flags):
    try:
        script_flag_words = shlex.split(script_flags.value)
        script_flags_problem = None
    except ValueError as error:
        script_flag_words, script_flags_problem = [], str(error)
    lab.guard(
        f"--script-flags do not parse ({script_flags_problem})" if script_flags_problem else None,
        headline="Close every quote in the script flags.",
    )
    return (script_flag_words,)


@app.cell
def _(previous_app, run_button, script_flag_words, script_flags):
    if lab.interactive() and not run_button.value:
        export_run = None
        export_view = mo.callout(
            mo.md("Press **Export and run the script** to export and run it (a few seconds)."),
            kind="info",
        )
    else:
        with mo.status.spinner(title=f"Exporting {previous_app.name} and running the script ..."):
            export_run = local_run.export_and_run(previous_app, REPO_ROOT, script_flag_words)
        ignored = (
            local_run.unknown_flags(script_flag_words, export_run.help.stdout)
            if export_run.help
            else []
        )
        parts = [
            mo.md(
                f"**1. Export** into a temporary folder (exit code {export_run.export.returncode}, "
                f"{export_run.export.seconds:.1f} s):"
            ),
            text.code_block(
                cloud_tpu.shell_join(["python", *export_run.export.argv[1:]]), "bash", "export"
            ),
        ]
        if not export_run.export.ok:
            parts.append(
                mo.callout(
                    mo.vstack(
                        [
                            mo.md("The export failed:"),
                            text.code_block(
                                export_run.export.stderr[-3000:], "text", "export error"
                            ),
                        ]
                    ),
                    kind="danger",
                )
            )
        else:
            _run_line = shlex.join(["python", export_run.script_name, *script_flag_words])
            _run_output = (export_run.run.stdout + export_run.run.stderr).strip()[-3000:]
            parts += [
                mo.accordion(
                    {
                        "The script's header (origin, source hash, versions, flags)": (
                            text.code_block(export_run.script_header, "python", "script header")
                        )
                    }
                ),
                mo.md(
                    f"**2. Its flags** (`python {export_run.script_name} --help`, exit code "
                    f"{export_run.help.returncode}):"
                ),
                text.code_block(export_run.help.stdout.strip(), "text", "--help"),
                mo.md(
                    f"**3. A real run** (`{_run_line}`, "
                    f"exit code **{export_run.run.returncode}**, "
                    f"{export_run.run.seconds:.1f} s):"
                ),
                text.code_block(_run_output or "(no output)", "text", "the run's output"),
            ]
        if ignored:
            parts.append(
                mo.callout(
                    mo.md(
                        f"The script does not know {', '.join(f'`{o}`' for o in ignored)}: "
                        "a lesson script refuses a flag it does not have (exit 2, naming the "
                        "nearest one), so check `--help` before you pay for a TPU run."
                    ),
                    kind="warn",
                )
            )
        export_view = mo.vstack(parts)
    # Exit 0 with neither PASS nor FAIL: the lesson stopped before its check (it refused
    # the flags); exit 2: the script's argparse refused them (a flag it does not have, a value
    # out of bounds). Either is a choice to fix, not a failed check.
    _run = export_run.run if export_run is not None else None
    script_refused = _run is not None and (
        _run.returncode == 2
        or (
            _run.ok
            and not any(line.startswith(("PASS", "FAIL")) for line in _run.stdout.splitlines())
        )
    )
    lab.guard(
        (
            f"the exported script refused --script-flags {script_flags.value!r}: "
            + (
                _run.stderr.strip().splitlines()[-1][:500]
                if _run.returncode == 2 and _run.stderr.strip()
                else _run.stdout.strip()[-500:]
            )
        )
        if script_refused
        else None,
        export_view,
        headline="The script stopped before its check: change the flags.",
    )
    export_view
    return (export_run,)


@app.cell
def _(previous_app, script_flag_words, vm):
    local_script = f"dist/{previous_app.stem}_tpu.py"
    steps = cloud_tpu.workflow(
        vm, local_script, extra_flags=shlex.join(script_flag_words), app=f"apps/{previous_app.name}"
    )
    # What the page shows: one option per line (shell continuations); the <style> below wraps
    # what is still too wide (the remote --command) on this lesson's page instead of cutting it.
    shown_commands = [cloud_tpu.display_command(line) for _, line in steps]
    _blocks = [
        _part
        for i, ((step, _), _command) in enumerate(zip(steps, shown_commands, strict=True), 1)
        for _part in (mo.md(f"**{i}. {step}**"), text.code_block(_command, "bash", step))
    ]
    _intro = mo.md(
        """
    ## The commands

    Run these from the repository root of your checkout (gcloud installed, `gcloud auth login`
    done, TPU quota in the zone). Steps 1-2 are local; the rest talk to Cloud TPU. A `\\` at
    a line's end continues the command on the next line: copy a block whole.

    <style>pre { white-space: pre-wrap; overflow-wrap: anywhere; }</style>
    """
    )
    _hygiene = mo.md(
        f"""
    ## Cost hygiene

    A TPU VM is billed from **create** until **delete**, whether or not anything runs on it:
    a finished script does not stop the bill. So always run the delete step, then the describe
    step: it must fail with `NOT_FOUND`. A Spot VM is cheaper but can be preempted at any
    moment, so use it for runs that save checkpoints (a later lesson). If something went
    wrong midway, `gcloud compute tpus tpu-vm list --zone={vm.zone}` shows what is still
    running.
    """
    )
    mo.vstack([_intro, *_blocks, _hygiene])
    return local_script, shown_commands, steps


@app.cell
def _(
    accelerator_type,
    export_run,
    local_script,
    project,
    runtime_version,
    shown_commands,
    spot,
    tpu_name,
    zone,
):
    # Independent reference: read the commands as shown back with shlex (the shell's own word
    # splitting) and compare them with the control values, not with the builder's inputs.
    chosen_version = (
        cloud_tpu.RUNTIME_VERSIONS[cloud_tpu.ACCELERATOR_TYPES[accelerator_type.value].generation]
        if runtime_version.value == "auto"
        else runtime_version.value
    )
    command_problems = command_check.workflow_problems(
        shown_commands,
        name=tpu_name.value,
        zone=zone.value,
        accelerator_type=accelerator_type.value,
        version=chosen_version,
        spot=spot.value,
        project=project.value,
        script=local_script,
    )
    script_checked = export_run is not None
    check_what = (
        "gcloud commands read back with shlex carry the chosen name, zone, type, version, "
        "--spot and --worker=all"
    )
    if script_checked:
        _exit = export_run.run.returncode if export_run.run else "never"
        check_what += f"; the exported {export_run.script_name} exited {_exit} and printed PASS"
    else:
        check_what += " (press the button to check the exported script too)"
    # Nothing here is measured: the error is the number of problems found in the commands
    # read back (none may be), and the exported script's run is a fact that must hold.
    check = lab.Check(
        check_what,
        {"command problems": float(len(command_problems))},
        0.0,
        facts={"the exported script exited 0 and printed PASS": export_run.passed}
        if script_checked
        else None,
    )
    mo.vstack(
        [
            check,
            mo.md("\n".join(f"- {p}" for p in command_problems)) if command_problems else mo.md(""),
        ]
    )
    return (check,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("move_to_tpu")
    return


@app.cell
def test_check_passes(check, export_run):
    # Served, the script runs only when the learner presses the button: until then the check
    # covers the commands alone, and this test must not raise at the learner.
    if not lab.interactive():
        assert export_run is not None, "headless runs must export and run the script"
    check.assert_passed()
    return


@app.cell
def test_exported_script_ran_and_passed(export_run):
    # Served, before the button, nothing ran yet; headless (and under pytest) it always runs.
    if export_run is not None or not lab.interactive():
        assert export_run.export.ok, export_run.export.stderr
        assert export_run.help.ok and "usage:" in export_run.help.stdout
        assert export_run.run.returncode == 0 and export_run.run.printed_pass
    return


@app.cell
def test_run_step_reaches_every_worker(steps, vm):
    run_line = next(line for step, line in steps if step.startswith("run"))
    words = shlex.split(run_line)
    assert "--worker=all" in words and words[4:6] == ["ssh", vm.name]
    return


if __name__ == "__main__":
    app.run()
