import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Failure recovery and operational runbooks",
)

with app.setup:
    import pathlib
    import tempfile

    import altair as alt
    import jax.numpy as jnp
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lessons.operations import failure_runbooks as lesson
    from core.workload import faults, gcs, recovery

    FLAGS = lab.Flags(
        lab.Flag("failure", "sigterm", "the failure to inject", choices=list(recovery.KINDS)),
        lab.Flag("at_step", 5, "inject it at this step", lo=1, hi=40),
        lab.Flag("steps", 10, "training steps", lo=2, hi=40),
        lab.Flag("save_every", 2, "checkpoint every N steps", lo=1, hi=20),
        lab.Flag("spot_drill", False, "headless: also run the drill on the capstone's trainer"),
        description="Inject a failure into a real job, recover it, compare bitwise.",
    )  # fmt: skip
    ARGS = FLAGS.parse()
    SPOT_NOTICES = (3, 4)  # steps each capstone trainer process trains before its SIGTERM


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Failure recovery and operational runbooks
    {lab.phase_line("failure_runbooks")}

    The playbook: "test preemptible runs to cut costs and confirm you can recover cleanly".
    Here a real training job (`python -m core.workload.job`) is started by a supervisor
    (`core.workload.recovery`), one failure is injected **for real** (SIGKILL or SIGTERM sent
    to its process group, a NaN loss, a hung step, a full disk: a one-page tmpfs mounted over
    the checkpoint directory in the job's own mount namespace), the supervisor detects it,
    restarts the job from the newest committed checkpoint, and the result is compared with a
    fresh process's uninterrupted run: per-step losses and the final state digest, bit for
    bit. Choose the failure and when it strikes, then press **Run the drill**. Below: the
    timeline, the runbook, and a checkpoint written to a `gs://` path on a local Cloud Storage
    emulator through Orbax's own GCS code.
    """)
    return


@app.cell
def _():
    failure = FLAGS.control("failure", ARGS)
    at_step = FLAGS.control("at_step", ARGS)
    steps = FLAGS.control("steps", ARGS)
    save_every = FLAGS.control("save_every", ARGS)
    # The drill starts real processes (each imports JAX and compiles): it runs on a press, so
    # a learner sets all four controls first. Headless runs it at the flags.
    drill_button = mo.ui.run_button(label="Run the drill")
    mo.hstack([failure, at_step, steps, save_every, drill_button], justify="start", wrap=True)
    return at_step, drill_button, failure, save_every, steps


@app.cell
def _(at_step, drill_button, failure, save_every, steps):
    lab.guard(
        None if at_step.value <= steps.value else
        f"the failure step {at_step.value} is after the last step {steps.value}",
        headline="Inject the failure inside the run.",
    )  # fmt: skip
    lab.guard(
        None if failure.value != "disk-full" or at_step.value % save_every.value == 0 else
        f"a full disk shows at a save: step {at_step.value} is not a multiple of save_every "
        f"{save_every.value}",
        headline="A full disk needs a save at that step.",
    )  # fmt: skip
    lab.guard(
        None if failure.value != "disk-full" or faults.disk_full_supported() else
        "this machine does not allow a private mount namespace (needs CAP_SYS_ADMIN)",
        headline="disk-full cannot be injected here.",
    )  # fmt: skip
    mo.stop(
        lab.interactive() and not drill_button.value,
        mo.callout(
            mo.md(
                f"Press **Run the drill**: a `{failure.value}` at step {at_step.value} of "
                f"{steps.value}, checkpoints every {save_every.value} steps, then a fresh "
                "uninterrupted process to compare with (a few job processes, some seconds)."
            ),
            kind="info",
        ),
    )
    _base = pathlib.Path(tempfile.mkdtemp(prefix="failure_runbooks-"))
    result, reference = lesson.drill(
        _base, failure.value, at_step.value, steps.value, save_every.value
    )
    problems = recovery.compare(result, reference)
    lab.report("recovered", result.recovered)
    lab.report("steps trained twice (lost work)", result.lost_steps)
    lab.table(
        [{"process": a.index, "outcome": a.outcome, "exit": a.exit_status,
          "resumed from": a.start_step, "last step": a.last_step, "detected": a.detected,
          "action": a.action} for a in result.attempts],
        "Detection and recovery, per job process",
    )  # fmt: skip
    return problems, reference, result


@app.cell
def _(result):
    _steps = pd.DataFrame(lesson.timeline(result))
    _marks = pd.DataFrame(lesson.marks(result))
    _line = (
        alt.Chart(_steps)
        .mark_line(point=True)
        .encode(
            x=alt.X("t_s:Q", title="seconds since the first process started"),
            y=alt.Y("step:Q", title="step"),
            color=alt.Color("attempt:N", title="process"),
        )
    )
    _rules = (
        alt.Chart(_marks)
        .mark_rule(strokeDash=[4, 4])
        .encode(x="t_s:Q", tooltip=["what", alt.Tooltip("t_s:Q", format=".2f")])
    )
    (_line + _rules).properties(title="Steps over time: failure and restart marked", width=600)
    return


@app.cell
def _(failure):
    lab.table(lesson.runbook_rows(failure.value), f"Runbook: {failure.value}")
    return


@app.cell(hide_code=True)
def _():
    spot_button = mo.ui.run_button(label="Run the drill on the capstone's trainer")
    mo.vstack([
        mo.md(f"""
        ## The same drill on the capstone's trainer

        The SIGTERM path again, on `python -m capstones.byte_transformer train` (a tiny
        config): SIGTERM reaches its process group once it has trained {SPOT_NOTICES[0]}
        steps; its handler lets the step in flight finish, saves it and exits 0; a fresh
        process resumes and is preempted after {SPOT_NOTICES[1]} steps of its own; a last one
        trains to the end. It saves only at a notice or the last step, so a step kept can
        only come from the save at the notice. Steps lost = steps finished before the exit
        but trained again after the resume (the goal: 0). Compared with a fresh uninterrupted
        process: every loss and the final state, bit for bit. Four trainer processes (each
        imports JAX and compiles), so headless runs show the command and the test unless
        `--spot-drill`.
        """),
        spot_button,
    ])  # fmt: skip
    return (spot_button,)


@app.cell
def _(spot_button):
    # not mo.stop: the lesson's check below reads `spot`, and must not wait for this button
    # (it gains the drill's line once the drill has run)
    if lab.interactive() and not spot_button.value:
        spot, _shown = None, mo.md("Press **Run the drill on the capstone's trainer**.")
    elif lab.interactive() or ARGS.spot_drill:
        # imported here: the capstone's trainer pulls in flax/optax/orbax, which the lesson's
        # default headless run does not need
        from capstones.byte_transformer import spot_drill

        _base = pathlib.Path(tempfile.mkdtemp(prefix="spot_drill-"))
        spot = spot_drill.drill(_base, SPOT_NOTICES)
        _shown = lab.table(spot_drill.rows(spot), "SIGTERM on the capstone's trainer, per notice")
        lab.report("capstone: steps lost to preemption", spot.steps_lost)
        lab.report("capstone: losses and final state == uninterrupted",
                   spot.losses_equal_reference and spot.final_state_equal_reference)  # fmt: skip
    else:
        spot, _shown = None, mo.md(f"""
        Not run headless (four JAX processes): `python apps/failure_runbooks.py --spot-drill`
        runs it, or on its own: `python -m capstones.byte_transformer.spot_drill OUT_DIR
        --after {" ".join(map(str, SPOT_NOTICES))}` (writes `OUT_DIR/spot_drill.json`). It
        holds for notices at three different steps, not only one.
        """)  # fmt: skip
    _shown
    return (spot,)


@app.cell
def _():
    lab.require(
        "gcp_storage_emulator",
        "gcsfs",
        "google.cloud.storage",
        sockets=True,
        why="the checkpoint round trip goes through a storage emulator on 127.0.0.1",
    )
    _state = {"w": jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4) / 7,
              "step": jnp.asarray(3, jnp.int32)}  # fmt: skip
    gcs_trip = gcs.round_trip(_state, step=3)
    lab.table(
        [{"object": o["name"], "bytes": o["bytes"], "sha256": o["sha256"][:16]}
         for o in gcs_trip.manifest["objects"]],
        f"{gcs_trip.url}/3 on the emulator at {gcs_trip.emulator_url} (Orbax's own GCS path)",
    )  # fmt: skip
    lab.report("gs:// read-back bitwise", gcs_trip.bitwise_equal)
    lab.report("without commit_success.txt", "; ".join(gcs_trip.partial_problems))
    return (gcs_trip,)


@app.cell
def _(gcs_trip, problems, reference, result, save_every, spot):
    _diff = max(
        (abs(result.losses[s] - reference.losses[s]) for s in reference.losses
         if s in result.losses), default=float("inf"),
    )  # fmt: skip
    check = lab.Check(
        "recovered run == a fresh process's uninterrupted run (losses, final state digest)",
        {"max |loss - reference loss|": _diff},
        numerics.tolerance("float32"),
        facts={
            "every step's loss equal bit for bit, final state digest equal": not problems,
            "recovered automatically": result.recovered,
            "SIGTERM loses no step; others at most save_every": result.lost_steps
            <= (0 if result.failures[0].kind == "sigterm" else save_every.value),
            "gs:// checkpoint read back bitwise": gcs_trip.bitwise_equal,
            "a gs:// step without its commit marker is refused": bool(gcs_trip.partial_problems),
        } | ({} if spot is None else {
            "capstone's trainer: SIGTERM loses no step, ends bitwise == a fresh uninterrupted "
            "process": spot.steps_lost == 0 and spot.losses_equal_reference
            and spot.final_state_equal_reference,
        }),
    )  # fmt: skip
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("failure_runbooks")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()


if __name__ == "__main__":
    app.run()
