import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Asynchronous checkpoints and failure boundaries",
)

with app.setup:
    import os
    import pathlib
    import subprocess
    import tempfile
    import time

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import curriculum, lab, numerics
    from core.state import checkpoint, recovery_demo

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("steps", 16, "training steps", lo=4, hi=64),
        lab.Flag("save_every", 4, "save every N steps", lo=1, hi=16),
        lab.Flag(
            "step_ms",
            40,
            "simulated device time per step, ms (a bigger model's compute)",
            lo=0,
            hi=200,
        ),
        lab.Flag("max_to_keep", 2, "retention: keep the newest N steps", lo=1, hi=8),
        lab.Flag(
            "keep_period",
            0,
            "retention: also keep every step divisible by this (0: off)",
            lo=0,
            hi=32,
        ),
        lab.Flag(
            "kill_at_save", 2, "SIGKILL the training process during its n-th save", lo=1, hi=16
        ),
        description=(
            "Asynchronous checkpoints and failure boundaries: overlap, commits, SIGKILL, retention."
        ),
    )
    ARGS = FLAGS.parse()
    LANE_COLORS = alt.Scale(
        domain=[
            "training step",
            "save call (blocks training)",
            "writing in the background",
            "committed (Orbax rename)",
            "manifest written",
        ],
        range=["#bab0ac", "#e45756", "#f58518", "#54a24b", "#4c78a8"],
    )


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Asynchronous checkpoints and failure boundaries
    {lab.phase_line("async_checkpoints")}

    A synchronous save stops training until every byte is on disk. An **asynchronous** save
    (Orbax's default) only blocks while the arrays are copied off the device, then writes
    the files in background threads while training goes on. That raises two questions this
    lesson answers with measurements and a real crash:

    - **What is saved, and when?** A timeline of each save: the call, the background write,
      the moment Orbax **commits** (renames `<step>.orbax-checkpoint-tmp/` to `<step>/`),
      and the manifest written after it. Sync vs async wall time of the same run.
    - **What survives a crash?** A training process is killed with `SIGKILL` in the middle
      of a save. The partial directory it leaves is never restored: the newest *committed*
      step is.
    - **What is kept?** The retention policy (newest *N*, plus every *k*-th step) decides
      which committed steps stay on disk.
    """)
    return


@app.cell
def _():
    steps = FLAGS.control("steps", ARGS)
    save_every = FLAGS.control("save_every", ARGS, label="save every")
    step_ms = FLAGS.control("step_ms", ARGS, label="device time per step (ms)")
    max_to_keep = FLAGS.control("max_to_keep", ARGS, label="keep newest")
    keep_period = FLAGS.control("keep_period", ARGS, label="keep every k-th (0 = off)")
    mo.vstack(
        [
            mo.hstack([steps, save_every, step_ms], justify="start"),
            mo.hstack([max_to_keep, keep_period], justify="start"),
        ]
    )
    return keep_period, max_to_keep, save_every, step_ms, steps


@app.cell
def _():
    # A headless --kill-at-save past the last save is refused before the runs, which take
    # `kill_ok`, so a refused run trains nothing. It reads only ARGS (in the UI the kill
    # slider stays within the steps), so no control change reruns it or the runs.
    _problem = None
    if not lab.interactive() and ARGS.kill_at_save * ARGS.save_every > ARGS.steps:
        _problem = (
            f"--kill-at-save {ARGS.kill_at_save} with --save-every {ARGS.save_every} is step "
            f"{ARGS.kill_at_save * ARGS.save_every}, past --steps {ARGS.steps}: that save never "
            "happens."
        )
    lab.guard(_problem)
    kill_ok = True
    return (kill_ok,)


@app.cell
def _(keep_period, kill_ok, max_to_keep, save_every, step_ms, steps):
    assert kill_ok  # used in the body, so marimo orders the runs after the guard above
    config = recovery_demo.TrainConfig()
    run_dir = tempfile.TemporaryDirectory(prefix="async_checkpoints-")
    runs = {}
    wall_s = {}
    for _mode in ("sync", "async"):  # warm up: compile, thread pools, first-save setup
        recovery_demo.train(
            config,
            pathlib.Path(run_dir.name) / f"warmup-{_mode}",
            1,
            save_every=1,
            async_save=_mode == "async",
        )
    for mode in ("sync", "async"):
        _start = time.time()
        runs[mode] = recovery_demo.train(
            config,
            pathlib.Path(run_dir.name) / mode,
            steps.value,
            save_every=save_every.value,
            max_to_keep=max_to_keep.value,
            keep_period=keep_period.value or None,
            async_save=mode == "async",
            step_seconds=step_ms.value / 1000,
        )
        wall_s[mode] = time.time() - _start
    _saved_s = wall_s["sync"] - wall_s["async"]
    _saved_percent = 100 * (1 - wall_s["async"] / wall_s["sync"])
    mo.md(
        f"""
    ## Sync vs async: the same run twice

    {steps.value} steps of the tiny MLP, each followed by {step_ms.value} ms of simulated device
    time (a sleep: on an accelerator the host thread idles while the chip computes, and that
    idle time is what a background save uses), saving every {save_every.value} steps.

    | | wall time (this machine's CPU, {os.cpu_count()} cores) |
    |---|---|
    | synchronous saves | {wall_s["sync"]:.2f} s |
    | asynchronous saves | {wall_s["async"]:.2f} s |
    | time saved | {_saved_s:+.2f} s ({_saved_percent:+.0f} %) |

    Measured once after a warm-up run of each, on this CPU, with whatever else it is doing:
    a demonstration of overlap, not a benchmark. With 0 ms of device time there is nothing to
    overlap with: the next save waits for the previous one (Orbax runs one save at a time).
    """
    )
    return config, run_dir, runs


@app.cell
def _(runs):
    timeline_rows = []
    for _mode, _run in runs.items():
        _t0 = _run.started
        _previous = _t0
        for _step, _done in sorted(_run.step_times.items()):
            timeline_rows.append(
                {
                    "mode": _mode,
                    "lane": "training step",
                    "start ms": 1000 * (_previous - _t0),
                    "end ms": 1000 * (_done - _t0),
                    "step": _step,
                }
            )
            _previous = _done
        _events = {}
        for _e in _run.checkpointer.events:
            _events.setdefault(_e.step, {})[_e.event] = 1000 * (_e.time - _t0)
        for _step, _at in _events.items():
            if "save called" in _at and "save returned" in _at:
                timeline_rows.append(
                    {
                        "mode": _mode,
                        "lane": "save call (blocks training)",
                        "start ms": _at["save called"],
                        "end ms": _at["save returned"],
                        "step": _step,
                    }
                )
            if "save returned" in _at and "committed" in _at:
                timeline_rows.append(
                    {
                        "mode": _mode,
                        "lane": "writing in the background",
                        "start ms": _at["save returned"],
                        "end ms": _at["committed"],
                        "step": _step,
                    }
                )
            for _lane, _key in (
                ("committed (Orbax rename)", "committed"),
                ("manifest written", "manifest written"),
            ):
                if _key in _at:
                    timeline_rows.append(
                        {
                            "mode": _mode,
                            "lane": _lane,
                            "start ms": _at[_key],
                            "end ms": _at[_key] + 0.5,
                            "step": _step,
                        }
                    )
    timeline = pd.DataFrame(timeline_rows)
    _bars = (
        alt.Chart()
        .mark_bar(height=12)
        .encode(
            x=alt.X("start ms:Q", title="ms since the run started"),
            x2="end ms:Q",
            y=alt.Y("lane:N", sort=LANE_COLORS.domain, title=None),
            color=alt.Color("lane:N", scale=LANE_COLORS, legend=None),
            tooltip=[
                "mode",
                "lane",
                "step",
                alt.Tooltip("start ms:Q", format=".1f"),
                alt.Tooltip("end ms:Q", format=".1f"),
            ],
        )
    )
    _ticks = (
        alt.Chart()
        .transform_filter(
            alt.FieldOneOfPredicate(
                field="lane", oneOf=["committed (Orbax rename)", "manifest written"]
            )
        )
        .mark_tick(thickness=2, size=16)
        .encode(
            x="start ms:Q",
            y=alt.Y("lane:N", sort=LANE_COLORS.domain),
            color=alt.Color("lane:N", scale=LANE_COLORS, legend=None),
        )
    )
    commit_rows = []
    for _mode, _run in runs.items():
        _by_step = {}
        for _e in _run.checkpointer.events:
            _by_step.setdefault(_e.step, {})[_e.event] = f"{1000 * (_e.time - _run.started):.0f} ms"
        commit_rows += [
            {"mode": _mode, "step": _step, **_at} for _step, _at in sorted(_by_step.items())
        ]
    mo.vstack(
        [
            mo.md(
                "## What is committed, and when\nOne row per kind of event; hover for the step. "
                "In the async run the orange background writes overlap the grey training steps; "
                "in the sync run the red save calls stop them."
            ),
            alt.layer(_bars, _ticks, data=timeline)
            .properties(width=560, height=110)
            .facet(row=alt.Row("mode:N", title=None)),
            lab.table(commit_rows),
        ]
    )
    return


@app.cell
def _(save_every, steps):
    kill_at_save = mo.ui.slider(
        1,
        max(1, steps.value // save_every.value),
        value=min(ARGS.kill_at_save, max(1, steps.value // save_every.value)),
        label="kill during save number",
        show_value=True,
    )
    kill_button = mo.ui.run_button(label="Start, kill, restore")
    mo.vstack(
        [
            mo.md(
                "## A crash in the middle of a save\n`python -m core.state.recovery_demo "
                "--async-save --kill-after-save-call STEP` sends itself `SIGKILL` right after "
                "the save call for STEP returns: the background threads are still writing. No "
                "`finally`, no atexit: what is on disk is what a power cut or an OOM kill would "
                "leave."
            ),
            mo.hstack([kill_at_save, kill_button], justify="start"),
        ]
    )
    return kill_at_save, kill_button


@app.cell
def _(config, kill_at_save, kill_button, run_dir, save_every, steps):
    mo.stop(
        lab.interactive() and not kill_button.value,
        mo.callout(
            mo.md("Press **Start, kill, restore** (a fresh Python process: a few seconds)."),
            kind="info",
        ),
    )
    kill_step = kill_at_save.value * save_every.value
    kill_dir = pathlib.Path(run_dir.name) / f"killed-at-{kill_step}"
    with mo.status.spinner(
        title=(
            "Training in a child process until it kills itself during the save of step "
            f"{kill_step}..."
        )
    ):
        victim = subprocess.run(
            recovery_demo.command(
                kill_dir,
                steps.value,
                "--save-every",
                str(save_every.value),
                "--max-to-keep",
                "3",
                "--async-save",
                "--kill-after-save-call",
                str(kill_step),
            ),
            capture_output=True,
            text=True,
            cwd=curriculum.REPO_ROOT,
            env=lab.child_env(JAX_PLATFORMS="cpu"),
            timeout=300,
        )
    victim_events = recovery_demo.parse_events(victim.stdout)
    committed_before_kill = [e["step"] for e in victim_events if e["event"] == "committed"]
    left_on_disk = [
        {
            "entry": p.name + "/",
            "what": "partial save: not committed"
            if checkpoint.TMP_SUFFIX in p.name
            else (
                "committed step, manifest "
                + ("written" if (p / checkpoint.MANIFEST).exists() else "missing")
            ),
            "files": sum(1 for f in p.rglob("*") if f.is_file()),
        }
        for p in sorted(kill_dir.iterdir())
    ]
    partial_before = checkpoint.partial_saves(kill_dir)
    # A new process would do exactly this: open the directory, restore the newest good step.
    survivor = checkpoint.Checkpointer(kill_dir)
    removed = survivor.removed_partial_saves
    recovered = survivor.restore_latest(recovery_demo.abstract_state(config))
    survivor.close()
    _partial = (
        ("the partial saves " if len(removed) > 1 else "the partial save ") + str(removed)
        if removed
        else "no partial save"
    )
    mo.vstack(
        [
            mo.md(
                f"The child exited with **{victim.returncode}** "
                f"({'SIGKILL' if victim.returncode == -9 else 'not killed'}) after printing "
                f"`committed` for steps {committed_before_kill}. Left on disk:"
            ),
            lab.table(left_on_disk),
            mo.md(
                f"Opening the directory removed {_partial}; `restore_latest` returned "
                + (
                    f"step **{recovered.step}**."
                    if recovered
                    else "**nothing** (no step was committed before the kill: training would "
                    "start from step 0)."
                )
            ),
        ]
    )
    return (
        committed_before_kill,
        kill_dir,
        kill_step,
        partial_before,
        recovered,
        victim,
    )


@app.cell
def _(keep_period, max_to_keep, runs):
    saved_steps = sorted(
        {e.step for e in runs["async"].checkpointer.events if e.event == "save called"}
    )
    kept_steps = sorted(checkpoint.step_dirs(runs["async"].checkpointer.directory))
    # Closed form of the policy: the newest max_to_keep saves, plus multiples of keep_period.
    expected_kept = sorted(
        set(saved_steps[-max_to_keep.value :])
        | {s for s in saved_steps if keep_period.value and s % keep_period.value == 0}
    )
    retention = pd.DataFrame(
        [
            {"step": s, "on disk": "kept" if s in kept_steps else "deleted by retention"}
            for s in saved_steps
        ]
    )
    mo.vstack(
        [
            mo.md(
                f"## Retention\nSaved steps {saved_steps}; the policy (newest {max_to_keep.value}"
                + (
                    f", plus every step divisible by {keep_period.value}"
                    if keep_period.value
                    else ""
                )
                + f") keeps {kept_steps}."
            ),
            alt.Chart(retention, title="which saves stay on disk")
            .mark_square(size=220)
            .encode(
                x="step:O",
                color=alt.Color(
                    "on disk:N",
                    scale=alt.Scale(
                        domain=["kept", "deleted by retention"], range=["#54a24b", "#dddddd"]
                    ),
                ),
                tooltip=["step", "on disk"],
            )
            .properties(width=min(560, 40 * len(saved_steps)), height=40),
        ]
    )
    return expected_kept, kept_steps


@app.cell
def _(
    committed_before_kill,
    expected_kept,
    kept_steps,
    kill_dir,
    kill_step,
    partial_before,
    recovered,
    runs,
    victim,
):
    # Independent references: the sync run's losses; the victim's own "committed" reports and
    # the directory listing; the retention policy in closed form.
    _sync, _async = runs["sync"].losses, runs["async"].losses
    _same_steps = sorted(_sync) == sorted(_async)
    loss_error = (
        numerics.max_abs_error(
            [_async[s] for s in sorted(_sync)], [_sync[s] for s in sorted(_sync)]
        )
        if _same_steps
        else float("inf")
    )
    last_committed = max(committed_before_kill) if committed_before_kill else None
    on_disk_verified = max(
        [
            s
            for s, p in checkpoint.step_dirs(kill_dir).items()
            if (p / checkpoint.MANIFEST).exists()
        ],
        default=None,
    )
    restored_step = recovered.step if recovered else None
    comparisons = {
        "async and sync losses for the same steps": _same_steps,
        "the victim was killed by SIGKILL": victim.returncode == -9,
        f"restored step == last committed before the kill ({last_committed})": (
            restored_step == last_committed == on_disk_verified
        ),
        f"the step being saved ({kill_step}) was not restored": restored_step != kill_step,
        f"retention kept {expected_kept} (closed form)": kept_steps == expected_kept,
    }
    check = lab.Check(
        "async == sync losses; after SIGKILL mid-save the newest committed step is restored, "
        "never the partial one; retention keeps what the policy says",
        {"async losses vs sync losses (bit for bit: max |difference|)": loss_error},
        0.0,
        facts=comparisons,
    )
    _partial = partial_before or "(none: the kill came before Orbax created the directory)"
    mo.vstack([check, mo.md(f"Partial saves found after the kill: {_partial}.")])
    return (check,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("async_checkpoints")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_async_run_overlapped_its_saves(runs):
    # Order, not speed: a sync save is verified (manifest written) before the next training
    # step; an async save returns at once and is verified only after training went on (the
    # manifest of step s comes after step s+1 finished). Both readings are taken on the
    # training thread, in program order: this is the order of events, not a duration.
    for _mode, _run in runs.items():
        _events = _run.checkpointer.events
        _manifests = {e.step: e.time for e in _events if e.event == "manifest written"}
        _saved = sorted({e.step for e in _events if e.event == "save called"})
        assert sorted(_manifests) == _saved, _mode
        for _step, _written in _manifests.items():
            if _step + 1 in _run.step_times:
                assert (_written > _run.step_times[_step + 1]) == (_mode == "async"), (_mode, _step)
    return


if __name__ == "__main__":
    app.run()
