import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Recover data position and resume")

with app.setup:
    import pathlib
    import shutil
    import subprocess
    import tempfile

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import curriculum, data, lab, numerics
    from core.lab import exercises, text
    from core.state import checkpoint, recovery_demo

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("steps", 16, "steps of the uninterrupted run (N)", lo=2, hi=80),
        lab.Flag(
            "resume_at", 8, "the checkpoint step the fresh process resumes from (K)", lo=1, hi=79
        ),
        lab.Flag("seed", 0, "data, init and dropout seed", lo=0, hi=9999),
        lab.Flag(
            "dropout",
            0.1,
            "dropout rate (the dropout key must be restored too)",
            lo=0.0,
            hi=0.9,
            step=0.05,
        ),
        lab.Flag(
            "batch_size",
            8,
            "examples per batch (48 examples: an epoch is 6 batches at 8)",
            lo=1,
            hi=48,
        ),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description="Recover data position and resume: a fresh process continues bit for bit.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Recover data position and resume
    {lab.phase_line("resume_data_position")}

    A resumed run is correct when the next update is the one the uninterrupted run would
    have made: same parameters, same optimizer moments, same dropout mask, **same batch**.
    Forget the data position and the resumed run silently trains on batches it has seen
    (and skips others); forget the dropout key and it draws other masks. In this lesson you
    will

    - train N steps in this process, saving a complete checkpoint at step K;
    - start a **fresh Python process** that finds only that checkpoint, restores params,
      Adam state, step, dropout key and the Grain iterator position, and trains on to N;
    - check that its losses equal the uninterrupted run's **bit for bit** (CPU), and that
      every part of the restored state equals the uninterrupted state at step K.

    Bit for bit holds on one backend: on a TPU host the fresh process runs on the CPU (a chip
    serves one process), so there the uninterrupted run runs on the host's CPU too.
    """)
    return


@app.cell
def _():
    steps = FLAGS.control("steps", ARGS, label="steps N")
    seed = FLAGS.control("seed", ARGS)
    dropout = FLAGS.control("dropout", ARGS)
    batch_size = FLAGS.control("batch_size", ARGS, label="batch size")
    mo.hstack([steps, seed, dropout, batch_size], justify="start", wrap=True)
    return batch_size, dropout, seed, steps


@app.cell
def _(steps):
    resume_at = mo.ui.slider(
        1,
        steps.value - 1,
        value=min(ARGS.resume_at, steps.value - 1),
        label="resume from step K",
        show_value=True,
    )
    run_button = mo.ui.run_button(label="Resume in a fresh process")
    mo.hstack([resume_at, run_button], justify="start")
    return resume_at, run_button


@app.cell
def _(batch_size, dropout, resume_at, seed, steps):
    problem = None
    if not lab.interactive() and ARGS.resume_at >= ARGS.steps:
        problem = (
            f"--resume-at {ARGS.resume_at} must be below --steps {ARGS.steps}: there is nothing "
            "left to resume."
        )
    lab.guard(problem)

    config = recovery_demo.TrainConfig(
        seed=seed.value, dropout=float(dropout.value), batch_size=batch_size.value
    )
    run_dir = tempfile.TemporaryDirectory(prefix="resume_data_position-")
    full_dir = pathlib.Path(run_dir.name) / "uninterrupted"
    digests = {}
    with lab.on_child_backend():  # the fresh process's backend: bit for bit needs one
        full = recovery_demo.train(
            config,
            full_dir,
            steps.value,
            save_every=resume_at.value,
            max_to_keep=None,
            digests=True,
            on_event=lambda e: (
                digests.__setitem__(e["step"], e["digest"]) if e["event"] == "state" else None
            ),
        )
    # The fresh process gets a directory with only the step-K checkpoint in it.
    resume_dir = pathlib.Path(run_dir.name) / "resumed"
    resume_dir.mkdir()
    shutil.copytree(full_dir / str(resume_at.value), resume_dir / str(resume_at.value))
    batches_per_epoch = -(-config.examples // config.batch_size)
    peek = data.grain_iterator(recovery_demo.pipeline(config))
    data.take_ids(peek, resume_at.value)
    position_at_k = peek.get_state()
    next_batch_ids = data.take_ids(peek, 1)[0]
    mo.md(
        f"""
    ## The uninterrupted run

    {steps.value} steps in this process, checkpoints at multiples of K = {resume_at.value}.
    At step {resume_at.value} the Grain iterator has read {resume_at.value} batches (epoch
    {resume_at.value // batches_per_epoch}, batch {resume_at.value % batches_per_epoch} of
    {batches_per_epoch}); its state `{position_at_k}` is saved in the checkpoint, and the next
    batch holds examples {next_batch_ids}.
    """
    )
    return config, digests, full, resume_dir


@app.cell
def _(config, resume_at, resume_dir, run_button, steps):
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.callout(
            mo.md(
                "Press **Resume in a fresh process** to start `python -m "
                "core.state.recovery_demo` on the step-K checkpoint (a few seconds: a new Python "
                "imports JAX and compiles)."
            ),
            kind="info",
        ),
    )
    overrides = [f"{k}={v}" for k, v in config.to_dict().items()]
    child_command = recovery_demo.command(
        resume_dir, steps.value, "--save-every", str(resume_at.value), *overrides
    )
    with mo.status.spinner(title="Resuming in a fresh Python process..."):
        child = subprocess.run(
            child_command,
            capture_output=True,
            text=True,
            cwd=curriculum.REPO_ROOT,
            env=lab.child_env(JAX_PLATFORMS="cpu"),
            timeout=300,
        )
    child_events = recovery_demo.parse_events(child.stdout)
    _failed = child.returncode != 0
    lab.guard(
        f"the fresh process failed (exit {child.returncode}); its stderr is above."
        if _failed
        else None,
        *([text.code_block(child.stderr[-2000:], "text", "stderr")] if _failed else []),
        headline="Resuming did not work:",
    )
    resumed_event = next(e for e in child_events if e["event"] in ("resumed", "fresh"))
    resumed_losses = {e["step"]: e["loss"] for e in child_events if e["event"] == "step"}
    mo.md(
        f"`{' '.join(child_command[1:3])} --checkpoint-dir .../resumed --steps {steps.value} "
        f"...` printed {len(child_events)} events; it **{resumed_event['event']}**"
        + (f" from step {resumed_event['step']}." if "step" in resumed_event else ".")
    )
    return resumed_event, resumed_losses


@app.cell
def _(digests, full, resume_at, resumed_event, resumed_losses, steps):
    # Independent reference: the uninterrupted run in this process; the result comes from another.
    expected_steps = list(range(resume_at.value + 1, steps.value + 1))
    _common = [s for s in expected_steps if s in resumed_losses]
    loss_error = (
        numerics.max_abs_error(
            [resumed_losses[s] for s in _common], [full.losses[s] for s in _common]
        )
        if _common
        else float("inf")
    )
    digest_rows = [
        {
            "part": part,
            "uninterrupted at K": digests[resume_at.value][part],
            "restored in the fresh process": resumed_event.get("digest", {}).get(part, "-"),
            "equal": digests[resume_at.value][part] == resumed_event.get("digest", {}).get(part),
        }
        for part in checkpoint.DIGEST_GROUPS
    ]
    check = lab.Check(
        f"fresh process resumed from step {resume_at.value}; losses of steps "
        f"{resume_at.value + 1}..{steps.value} equal the uninterrupted run's bit for bit"
        f"{lab.child_backend_note('the uninterrupted run')}; "
        "params, both Adam moments, count, step, dropout key and data position equal at step "
        f"{resume_at.value} (sha256)",
        {"losses: resumed vs uninterrupted (max |difference|)": loss_error},
        0.0,
        facts={
            f"resumed from step {resume_at.value}": resumed_event.get("step") == resume_at.value,
            f"a loss for every step {resume_at.value + 1}..{steps.value}": (
                sorted(resumed_losses) == expected_steps
            ),
            "every part's sha256 equal at step K": all(r["equal"] for r in digest_rows),
        },
    )
    mo.vstack([check, lab.table(digest_rows)])
    return check, loss_error


@app.cell
def _(full, loss_error, resume_at, resumed_losses):
    curves = pd.DataFrame(
        [
            {"step": s, "loss": v, "run": "uninterrupted (this process)"}
            for s, v in full.losses.items()
        ]
        + [
            {"step": s, "loss": v, "run": "resumed (fresh process)"}
            for s, v in resumed_losses.items()
        ]
    )
    line = (
        alt.Chart(curves[curves["run"].str.startswith("un")])
        .mark_line(color="#4c78a8")
        .encode(
            x="step:Q",
            y=alt.Y("loss:Q", scale=alt.Scale(zero=False)),
            tooltip=["run", "step", "loss"],
        )
    )
    points = (
        alt.Chart(curves[curves["run"].str.startswith("re")])
        .mark_point(color="#f58518", size=70, filled=False)
        .encode(x="step:Q", y="loss:Q", tooltip=["run", "step", "loss"])
    )
    rule = (
        alt.Chart(pd.DataFrame({"step": [resume_at.value]}))
        .mark_rule(strokeDash=[4, 4])
        .encode(x="step:Q")
    )
    mo.vstack(
        [
            (line + points + rule).properties(
                title=(
                    "loss per step: line = uninterrupted, circles = resumed "
                    f"(max |difference| = {loss_error})"
                ),
                width=520,
                height=240,
            ),
            mo.md(
                "Try: set dropout to 0.5 (the masks differ step by step, yet the resumed run "
                "matches), or resume from a step inside an epoch: the iterator state puts the "
                "fresh process on the very next batch."
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "resume_data_position", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("resume_data_position")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_losses_are_bitwise_equal(full, resumed_losses):
    assert resumed_losses and all(
        np.float64(v) == np.float64(full.losses[s]) for s, v in resumed_losses.items()
    )
    return


if __name__ == "__main__":
    app.run()
