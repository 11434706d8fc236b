import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Health, logs, and workload observability",
)

with app.setup:
    import tempfile

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab
    from core.lab import text
    from core.lessons.operations import observability as lesson
    from core.state import recovery_demo
    from core.workload import health

    FLAGS = lab.Flags(
        lab.Flag("steps", 8, "training steps of the job", lo=2, hi=400),
        lab.Flag("hang_at", 6, "step that hangs (--fault hang@K; 0: no hang)", lo=0, hi=400),
        lab.Flag("step_seconds", 0.05, "device time per step (a sleep, s)",
                 lo=0.0, hi=2.0, step=0.05),
        lab.Flag("heartbeat_s", 0.25, "heartbeat interval (s)", lo=0.05, hi=5.0, step=0.05),
        lab.Flag("stall_after_s", 1.5, "stall threshold: no step for this long alerts (s)",
                 lo=0.1, hi=30.0, step=0.1),
        lab.Flag("seed", 0, "the job's seed", lo=0, hi=1000),
        description="One real job's logs, heartbeats, metrics endpoint and a live stall alert.",
    )  # fmt: skip
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Health, logs, and workload observability
    {lab.phase_line("observability")}

    A training job on a slice is watched through what it says about itself. In this lesson
    one **real job** (`python -m core.workload.job`) runs under the runner and you read it the
    way the engineer on call does:

    - its **structured JSON log**: one line per event (`running`, `step` with step time,
      tokens and loss, `heartbeat` from a thread of its own, `save`, ...), shown raw and parsed;
    - its **Prometheus metrics endpoint** (`prometheus-client`, on 127.0.0.1, any free port),
      **scraped over HTTP** while it runs: a second channel from the same process;
    - **step time, tokens/s and MFU**: model FLOPs (closed form) against this CPU's measured
      matmul peak, labelled **CPU MFU** (a TPU's would use its own peak);
    - **stall detection**: step K hangs (`--fault hang@K`: the training thread blocks, a
      wedged collective or input pipeline), the heartbeat keeps beating, and after the
      threshold with no step the watcher raises **one alert**, takes a last scrape and kills
      the job (lesson 3 resumes it from its checkpoint).

    The check compares the two channels (scrape vs log), the tokens with steps x batch size,
    the FLOPs with the closed form, and the alert with what the log's own step times say.
    """)
    return


@app.cell
def _():
    steps = FLAGS.control("steps", ARGS)
    hang_at = FLAGS.control("hang_at", ARGS)
    step_seconds = FLAGS.control("step_seconds", ARGS)
    heartbeat_s = FLAGS.control("heartbeat_s", ARGS)
    stall_after_s = FLAGS.control("stall_after_s", ARGS)
    seed = FLAGS.control("seed", ARGS)
    run_button = mo.ui.run_button(label="Run and watch the job")
    mo.vstack(
        [
            mo.hstack([steps, hang_at, step_seconds], justify="start", wrap=True),
            mo.hstack([heartbeat_s, stall_after_s, seed, run_button], justify="start", wrap=True),
            mo.md("In the UI, try 300 steps with a hang at 250: the charts refresh as it runs."),
        ]
    )
    return hang_at, heartbeat_s, run_button, seed, stall_after_s, step_seconds, steps


@app.cell
def _(hang_at, heartbeat_s, stall_after_s, step_seconds, steps):
    lab.guard(
        lesson.problem(
            steps.value, hang_at.value, step_seconds.value, heartbeat_s.value,
            stall_after_s.value,
        ),
        headline="This watch cannot work as asked.",
    )  # fmt: skip
    chosen = dict(
        steps=steps.value, hang_at=hang_at.value, step_seconds=step_seconds.value,
        heartbeat_s=heartbeat_s.value, stall_after_s=stall_after_s.value,
    )  # fmt: skip
    return (chosen,)


@app.function
def live_chart(evts, scrapes, alerts, stall_after_s):
    """What the watcher has seen so far: the alert line and the live charts."""
    chart = lesson.live_chart(evts, scrapes, stall_after_s)
    if chart is None:
        return mo.md("Starting the job: the interpreter imports JAX, the step compiles...")
    _alert = f"**ALERT**: {alerts[-1].message}" if alerts else "no alert"
    return mo.vstack([mo.md(_alert), chart])


@app.cell
def _(chosen, run_button, seed):
    mo.stop(lab.interactive() and not run_button.value, mo.md("Press **Run and watch the job**."))
    lab.require(
        sockets=True, why="the job exports its metrics on 127.0.0.1 and the watcher scrapes them"
    )
    _run_dir = tempfile.mkdtemp(prefix="observability-")

    def _draw(evts, scrapes, alerts):
        mo.output.replace(live_chart(evts, scrapes, alerts, chosen["stall_after_s"]))

    watched = lesson.watch_job(
        _run_dir, seed=seed.value, on_poll=_draw if lab.interactive() else None, **chosen
    )
    mo.output.replace(mo.md(
        f"Job ended **{watched.end.state}** ({watched.end.cause}); "
        f"{len(watched.alerts)} alert(s); {len(watched.scrapes)} scrapes of "
        f"`{watched.metrics_url}`.  \nCommand: `{' '.join(watched.argv[1:])}`"))  # fmt: skip
    lab.report("job end state", watched.end.state)
    lab.report("alerts", len(watched.alerts))
    return (watched,)


@app.cell
def _(watched):
    _lines = watched.raw_lines
    _shown = _lines[:16]  # whole lines only: what is shown parses as the log does
    _rows = lesson.event_rows(watched.events)
    mo.vstack([
        mo.md(f"**The raw log** (`events.jsonl`, the first {len(_shown)} of {len(_lines)} "
              "lines, one JSON object each):"),
        text.code_block("\n".join(_shown), "jsonl", "events.jsonl"),
        lab.table(_rows if len(_rows) <= 40 else [*_rows[:25], *_rows[-15:]],
                  "The same log parsed (core.workload.events.read_events)", digits=4),
    ])  # fmt: skip
    return


@app.cell
def _(watched):
    _samples = watched.settled or {}
    _rows = [
        {"sample": name, "value": value}
        for name, value in _samples.items()
        if "_created" not in name and "_bucket" not in name
    ]
    mo.vstack([
        mo.md(f"**The metrics endpoint** `{watched.metrics_url}`, last settled scrape "
              "(parsed by prometheus_client's own parser):"),
        lab.table(_rows, "Scraped samples", digits=6),
        mo.md(f"**Alerts**: {[a.message for a in watched.alerts] or 'none'}"),
    ])  # fmt: skip
    return


@app.cell
def _(watched):
    _config = recovery_demo.TrainConfig()
    flops = lesson.model_flops(
        _config.batch_size, _config.features, _config.hidden, _config.classes
    )
    _peak, _label = lesson.cpu_peak()
    _closed = flops["matmuls (closed form, forward + backward)"]
    _xla_flops = watched.running["flops_per_step"] if watched.running else None
    rate = health.throughput(watched.events, _closed, _peak, f"CPU: {_label}")
    _xla = health.throughput(watched.events, _xla_flops, _peak, f"CPU: {_label}")
    _flop_rows = [{"count": k, "FLOPs per step": v} for k, v in flops.items()]
    _flop_rows.append({"count": "XLA's HLO cost analysis of the job's step", "FLOPs per step":
                       _xla_flops})  # fmt: skip
    lab.report("tokens per s", rate.tokens_per_s)
    lab.report("CPU MFU", rate.mfu)
    mo.vstack([
        lab.table(lesson.throughput_rows(rate, _xla), "Throughput and utilization (this CPU)"),
        lab.table(_flop_rows, "FLOPs of one step: MFU uses the model's matmuls; XLA also "
                  "counts Adam, softmax, dropout and biases"),
    ])  # fmt: skip
    return flops, rate


@app.cell
def _(chosen, flops, rate, watched):
    _errors, _tolerances, _facts = lesson.check_terms(
        watched, chosen["hang_at"], rate.tokens_per_s,
        flops["matmuls (closed form, forward + backward)"],
        recovery_demo.TrainConfig().batch_size,
    )  # fmt: skip
    check = lab.Check(
        "the scraped metrics vs the job's event log (two channels of one process, read as raw "
        "JSON + NumPy), tokens and FLOPs vs the closed form, the alert vs the log's step gaps",
        _errors,
        _tolerances,
        facts=_facts,
    )
    check
    return (check,)


@app.cell
def _(chosen, watched):
    _t0 = watched.events[0]["ts"]
    _data = lesson.series(watched.events, watched.scrapes, _t0)
    _loss = (
        alt.Chart(pd.DataFrame(_data["steps"]))
        .mark_line(point=True)
        .encode(x="step:Q", y="loss:Q")
        .properties(title="Loss per step (from the log)", height=140, width=560)
    )
    _ch = (
        alt.Chart(pd.DataFrame(_data["channels"]))
        .mark_point()
        .encode(x="t (s):Q", y="step:Q", color="channel:N", shape="channel:N")
        .properties(
            title="Step as logged vs as scraped over HTTP (two channels, one process)",
            height=160,
            width=560,
        )
    )
    _gaps = (
        alt.Chart(
            pd.DataFrame(
                [r for r in _data["heartbeats"] if r["gap to previous beat (s)"] is not None]
            )
        )
        .mark_bar()
        .encode(x="t (s):Q", y="gap to previous beat (s):Q")
        .properties(
            title=f"Gap between heartbeats (every {chosen['heartbeat_s']:g} s; they go on during "
            "the hang)",
            height=120,
            width=560,
        )
    )
    mo.vstack([
        live_chart(watched.events, watched.scrapes, watched.alerts, chosen["stall_after_s"]),
        alt.vconcat(_loss, _ch, _gaps),
    ])  # fmt: skip
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("observability")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


if __name__ == "__main__":
    app.run()
