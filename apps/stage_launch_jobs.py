import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Stage and launch checkpointed TPU jobs",
)

with app.setup:
    import io
    import pathlib
    import tempfile

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import curriculum, lab, numerics
    from core.lab import charts, text
    from core.tpu import cloud_tpu, command_check, local_run
    from tpu_scripts import __main__ as cli
    from tpu_scripts import launch, rehearse

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("name", "jax-tpu-lab", "TPU VM name"),
        lab.Flag(
            "accelerator_type",
            "v5litepod-8",
            "slice to launch on",
            choices=cloud_tpu.CREATABLE_TYPES,
        ),
        lab.Flag("zone", "us-west4-a", "zone", choices=cloud_tpu.ALL_ZONES),
        lab.Flag("spot", True, "Spot VM: cheaper, can be preempted (so checkpoint)"),
        lab.Flag("steps", 6, "training steps of the checkpointed job", lo=2, hi=20),
        lab.Flag("kill_after", 3, "kill the job after this step (a preemption)", lo=1, hi=19),
        description="Stage and launch checkpointed TPU jobs: export, stage, run, fetch, resume.",
    )
    ARGS = FLAGS.parse()
    # The job ships with the package, so a TPU VM's wheel install has it too; shown from here.
    _here = pathlib.Path.cwd()
    JOB = str(
        rehearse.EXAMPLE.relative_to(_here)
        if rehearse.EXAMPLE.is_relative_to(_here)
        else rehearse.EXAMPLE
    )
    # Absolute, not the float32 table: the resumed job repeats the uninterrupted job's float32
    # steps from a restored checkpoint, so its weights must match to rounding (0 in practice).
    RESUME_TOLERANCE = 1e-6


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Stage and launch checkpointed TPU jobs
    {lab.phase_line("stage_launch_jobs")}

    A job on a TPU VM is a script, its flags and a checkpoint directory. In this lesson you will

    - **export** a lesson app as a headless script and run it here, exactly as a worker would;
    - **stage, launch, fetch and delete** with `python -m tpu_scripts launch ...`: the exact
      `gcloud` commands (shown here with `--dry-run`; with `gcloud` installed and logged in,
      the same command runs them and stops at the first failure);
    - **survive a preemption**: a tiny checkpointed job is killed with SIGKILL after a few
      steps, restarted, resumes from its last checkpoint (`core/state/checkpoint.py`, Orbax with a
      verified manifest) and ends exactly where an uninterrupted run ends.
    """)
    return


@app.cell
def _():
    name = mo.ui.text(value=ARGS.name, label="name")
    accelerator_type = FLAGS.control("accelerator_type", ARGS)
    zone = FLAGS.control("zone", ARGS)
    spot = FLAGS.control("spot", ARGS)
    steps = FLAGS.control("steps", ARGS)
    kill_after = FLAGS.control("kill_after", ARGS)
    run_button = mo.ui.run_button(label="Run export + interrupted job (subprocesses)")
    mo.vstack(
        [
            mo.hstack([name, accelerator_type, zone, spot], justify="start", wrap=True),
            mo.hstack([steps, kill_after, run_button], justify="start"),
        ]
    )
    return accelerator_type, kill_after, name, run_button, spot, steps, zone


@app.cell
def _(accelerator_type, kill_after, name, spot, steps, zone):
    _common = [
        *("--name", name.value, "--zone", zone.value),
        *("--accelerator-type", accelerator_type.value, "--dry-run"),
    ]
    _calls = [
        ["launch", "create", *_common] + (["--spot"] if spot.value else []),
        ["launch", "stage", *_common, JOB],
        [
            *("launch", "run", *_common, JOB, "--"),
            *("--steps", str(steps.value), "--checkpoint-dir", "ckpt"),
        ],
        ["launch", "fetch", *_common, "ckpt", "./ckpt_from_tpu"],
        ["launch", "delete", *_common],
    ]
    _problem = None
    if kill_after.value >= steps.value:
        _problem = (
            f"kill after step {kill_after.value} leaves nothing to resume: choose fewer than "
            f"{steps.value} steps."
        )
    dry_runs = []
    for _argv in _calls:
        if _problem:
            break
        _args = cli.build_parser().parse_args(_argv)
        try:
            _steps = launch.plan(_args)
        except ValueError as _exc:
            _problem = str(_exc)
            break
        _out = io.StringIO()
        launch.execute(_steps, dry_run=True, out=_out)
        dry_runs.append(("python -m tpu_scripts " + " ".join(_argv), _out.getvalue().strip()))
    lab.guard(_problem, headline="Can't launch this way.")
    # checked above: the job cells read these, so they wait for this stop
    job = {"steps": steps.value, "kill_after": kill_after.value}
    mo.vstack(
        [mo.md("## Stage, launch, fetch, delete (`--dry-run` output)")]
        + [
            _part
            for _cmd, _out in dry_runs
            for _part in (mo.md(text.code(_cmd)), text.code_block(_out, "bash", _cmd))
        ]
    )
    return dry_runs, job


@app.cell
def _(job, run_button):
    # Reading `job` orders this cell after the launch guard (marimo links cells by the names a
    # body reads): a refused job starts no subprocess.
    assert job
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md("*Press **Run** to export and run the job here.*"),
    )
    exported = local_run.export_and_run(
        curriculum.APPS_DIR / "arrays_devices.py",
        curriculum.REPO_ROOT,
        ["--rows", "3", "--cols", "4"],
    )
    _printed = exported.run.stdout.strip() if exported.run else exported.export.stderr[-1000:]
    mo.vstack(
        [
            mo.md(f"## Export, then run it here\n`{exported.export.command}`"),
            text.code_block(exported.script_header, "text", "script header"),
            mo.md(f"`python {exported.script_name} --rows 3 --cols 4` printed:"),
            text.code_block(_printed, "text", "script output"),
        ]
    )
    return (exported,)


@app.cell
def _(job, run_button):
    mo.stop(lab.interactive() and not run_button.value)
    with tempfile.TemporaryDirectory(prefix="ckpt_") as _tmp:
        interrupted = launch.interrupted_and_resumed(
            rehearse.EXAMPLE, f"{_tmp}/ckpt", job["steps"], job["kill_after"], ("--batch", "16")
        )
    mo.vstack(
        [
            mo.md(
                f"## A preempted job\nKilled (exit {interrupted.killed_returncode}, SIGKILL) after:"
            ),
            text.code_block(interrupted.killed_stdout.strip(), "text", "before the kill"),
            mo.md("Restarted with the same `--checkpoint-dir`:"),
            text.code_block(interrupted.resumed_stdout.strip()[:1500], "text", "after the restart"),
        ]
    )
    return (interrupted,)


@app.cell
def _(exported, interrupted, kill_after):
    # Independent reference: a fresh subprocess that ran every step without interruption.
    check = lab.Check(
        f"job killed after step {kill_after.value}, resumed from step "
        f"{interrupted.resumed_from_step}: final weights vs an uninterrupted run; "
        f"exported script printed PASS: {exported.passed}",
        {
            "final weights: resumed vs uninterrupted (absolute)": numerics.max_abs_error(
                interrupted.resumed_result["w"], interrupted.uninterrupted_result["w"]
            )
        },
        RESUME_TOLERANCE,
        facts={
            "resumed from the step it was killed after": (
                interrupted.resumed_from_step == kill_after.value
            ),
            "the exported script printed PASS": exported.passed,
        },
    )
    check
    return (check,)


@app.cell
def _(interrupted):
    _reference = interrupted.uninterrupted_result["losses"]
    _first = interrupted.resumed_result["first_step"]
    _rows = [{"step": i + 1, "loss": v, "run": "uninterrupted"} for i, v in enumerate(_reference)]
    _rows += [
        {"step": i + 1, "loss": v, "run": "killed run"}
        for i, v in enumerate(_reference[: _first - 1])
    ]
    _rows += [
        {"step": _first + i, "loss": v, "run": "resumed run"}
        for i, v in enumerate(interrupted.resumed_result["losses"])
    ]
    (
        alt.Chart(pd.DataFrame(_rows), title="Loss by step: killed + resumed = uninterrupted")
        .mark_line(point=True)
        .encode(
            x="step:O",
            y=alt.Y(
                "loss:Q",
                scale=alt.Scale(type="log", domain=charts.log_domain([r["loss"] for r in _rows])),
            ),
            color="run:N",
            strokeDash="run:N",
            tooltip=["run", "step", "loss"],
        )
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("stage_launch_jobs")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_dry_runs_use_cloud_tpu_commands(dry_runs):
    lines = [line for _, out in dry_runs for line in out.splitlines() if line.startswith("gcloud ")]
    verbs = [command_check.parse_tpu_command(line).verb for line in lines]
    assert verbs == ["create", "ssh", "scp", "ssh", "scp", "delete", "describe"]
    return


if __name__ == "__main__":
    app.run()
