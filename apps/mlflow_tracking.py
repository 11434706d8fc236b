import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Track experiments and lineage with MLflow",
)

with app.setup:
    import hashlib
    import pathlib
    import tempfile

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import curriculum, lab, numerics
    from core.lab import text
    from core.state import checkpoint, recovery_demo, tracking

    lab.use_cpu_devices()
    LEARNING_RATES = (0.003, 0.01, 0.03, 0.1)
    FLAGS = lab.Flags(
        lab.Flag(
            "runs", 3, "runs in the sweep (learning rates 0.003, 0.01, 0.03, 0.1)", lo=1, hi=4
        ),
        lab.Flag("steps", 30, "training steps per run", lo=2, hi=200),
        lab.Flag("hidden", 16, "hidden width of the MLP", lo=1, hi=128),
        lab.Flag("seed", 0, "data, init and dropout seed", lo=0, hi=9999),
        description=(
            "Track experiments and lineage with MLflow: params, metric histories, data "
            "identity, code, checkpoints."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Track experiments and lineage with MLflow
    {lab.phase_line("mlflow_tracking")}

    A loss curve is only useful if you can say what produced it: which config, which data
    (and in which order), which code, and where its checkpoints are. MLflow keeps that
    record; this lesson keeps it **locally**, in a SQLite file inside the run directory
    (nothing leaves the machine). In this lesson you will

    - run a small learning-rate sweep of the resumable trainer and log each run: params
      (the config), the loss **history** (one value per step), the data identity (sha256 of
      the data set and of the order examples were read in), the git revision, and the
      checkpoint paths;
    - read the runs back from the store: a runs table, a comparison of what differs, and
      the loss histories overlaid;
    - open the same store in the MLflow UI with one command.
    """)
    return


@app.cell
def _():
    runs = FLAGS.control("runs", ARGS, label="runs in the sweep")
    steps = FLAGS.control("steps", ARGS)
    hidden = FLAGS.control("hidden", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.hstack([runs, steps, hidden, seed], justify="start", wrap=True)
    return hidden, runs, seed, steps


@app.cell
def _(hidden, runs, seed, steps):
    lab.require("mlflow", why="the runs are tracked in an MLflow store")
    run_dir = tempfile.TemporaryDirectory(prefix="mlflow_tracking-")
    store_dir = pathlib.Path(run_dir.name)
    with mo.status.spinner(
        title="Opening the MLflow store (the first time on a machine builds its schema: a while)..."
    ):
        tracker = tracking.Tracker(store_dir)
    revision = tracking.git_revision(curriculum.REPO_ROOT)
    trained = {}
    logged_ids = {}
    for _learning_rate in mo.status.progress_bar(
        LEARNING_RATES[: runs.value], title="training and logging", remove_on_exit=True
    ):
        _config = recovery_demo.TrainConfig(
            seed=seed.value, hidden=hidden.value, learning_rate=_learning_rate
        )
        _checkpoint_dir = store_dir / f"checkpoints-lr{_learning_rate}"
        _result = recovery_demo.train(
            _config,
            _checkpoint_dir,
            steps.value,
            save_every=max(1, steps.value // 2),
            max_to_keep=2,
        )
        _name = f"lr={_learning_rate}"
        trained[_name] = (_config, _result)
        logged_ids[_name] = tracker.log_run(
            _name,
            params={**_config.to_dict(), "steps": steps.value},
            metrics={"loss": _result.losses},
            tags={
                "data.sha256": tracking.dataset_sha256(recovery_demo.columns(_config)),
                "data.order_sha256": tracking.order_sha256(_result.example_ids),
                "data.examples_read": str(len(_result.example_ids)),
                "git.revision": revision,
                "checkpoint.dir": str(_checkpoint_dir),
                "checkpoint.steps": ",".join(
                    map(str, sorted(checkpoint.step_dirs(_checkpoint_dir)))
                ),
                "checkpoint.latest": str(
                    _checkpoint_dir / str(max(checkpoint.step_dirs(_checkpoint_dir)))
                ),
            },
        )
    mo.md(
        f"Logged **{text.plural(len(trained), 'run')}** to `{tracker.uri}` "
        "(a temporary directory, deleted when this cell runs again)."
    )
    return logged_ids, store_dir, tracker, trained


@app.cell
def _(tracker):
    summaries = tracker.runs()
    runs_table = pd.DataFrame(
        [
            {
                "run": r.name,
                "learning_rate": r.params.get("learning_rate"),
                "last loss": round(r.metrics.get("loss", float("nan")), 4),
                "data.sha256": r.tags.get("data.sha256", "")[:12] + "...",
                "data.order_sha256": r.tags.get("data.order_sha256", "")[:12] + "...",
                "git.revision": r.tags.get("git.revision", "")[:12],
                "checkpoint.steps": r.tags.get("checkpoint.steps"),
                "status": r.status,
            }
            for r in summaries
        ]
    )
    mo.vstack(
        [
            mo.md(
                "## The runs, read back from the store\nSame data (equal `data.sha256`); the "
                "order differs only if the seed does; the code is the revision you ran."
            ),
            mo.ui.table(runs_table, selection=None, label="runs"),
            mo.md("What differs between the runs (params that are equal everywhere are left out):"),
            lab.table(tracker.compare("loss")),
        ]
    )
    return (summaries,)


@app.cell
def _(tracker):
    histories = pd.DataFrame(tracker.history("loss"))
    alt.Chart(histories, title="loss histories, as stored in MLflow").mark_line(
        point=alt.OverlayMarkDef(size=12)
    ).encode(
        x="step:Q",
        y=alt.Y("value:Q", title="loss"),
        color=alt.Color("run:N", title="run"),
        tooltip=["run", "step", "value"],
    ).properties(width=520, height=240)
    return (histories,)


@app.cell
def _(logged_ids, summaries, tracker, trained):
    # Independent reference: the losses and configs held in this process, compared with what
    # MLflow returns from its SQLite store; the data hash recomputed with hashlib.
    _loss_errors, _params_match, _data_match, _paths_exist = [], [], [], []
    for _name, (_config, _result) in trained.items():
        _stored = {
            row["step"]: row["value"] for row in tracker.history("loss", [logged_ids[_name]])
        }
        _steps = sorted(_result.losses)
        _loss_errors.append(
            numerics.max_abs_error(
                [_stored[s] for s in _steps], [_result.losses[s] for s in _steps]
            )
            if sorted(_stored) == _steps
            else float("inf")
        )
        _summary = next(s for s in summaries if s.run_id == logged_ids[_name])
        _params_match.append(
            _summary.params.get("learning_rate") == str(_config.learning_rate)
            and _summary.params.get("hidden") == str(_config.hidden)
        )
        _columns = recovery_demo.columns(_config)
        _digest = hashlib.sha256()
        for _field in sorted(_columns):
            _column = _columns[_field]
            _digest.update(
                f"{_field}:{_column.dtype.str}:{_column.shape};".encode() + _column.tobytes()
            )
        _data_match.append(_summary.tags.get("data.sha256") == _digest.hexdigest())
        _paths_exist.append(pathlib.Path(_summary.tags.get("checkpoint.latest", "")).is_dir())
    check = lab.Check(
        f"{text.plural(len(trained), 'run')}: loss histories read back from MLflow equal the "
        "in-memory losses exactly; params, data sha256 (recomputed with hashlib) and checkpoint "
        "paths match",
        {
            "loss histories: MLflow vs in memory (max |difference|)": max(
                _loss_errors, default=float("inf")
            )
        },
        0.0,
        facts={
            "every run read back from the store": len(summaries) == len(trained),
            "params match": all(_params_match),
            "data sha256 matches hashlib": all(_data_match),
            "latest checkpoint directory exists": all(_paths_exist),
        },
    )
    check
    return (check,)


@app.cell
def _(store_dir):
    mo.vstack([
        mo.md("## Open this store in the MLflow UI"),
        text.code_block(tracking.ui_command(store_dir), "bash", "mlflow ui"),
        mo.md(
            "(`--host 127.0.0.1`: only this machine can connect. The directory is temporary; "
            "to keep a store, give `core.state.tracking.Tracker` a directory of your own, "
            "beside its checkpoints.)"
        ),
    ])  # fmt: skip
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("mlflow_tracking")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_histories_cover_every_step(histories, steps, trained):
    assert len(histories) == steps.value * len(trained)
    return


if __name__ == "__main__":
    app.run()
