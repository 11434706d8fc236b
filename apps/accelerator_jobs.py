import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Accelerator jobs and runtime lifecycle",
)

with app.setup:
    import tempfile

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab
    from core.lab import text
    from core.lessons.operations import accelerator_jobs as lesson
    from core.serving import kubernetes
    from core.state import recovery_demo
    from core.workload import events, job

    FLAGS = lab.Flags(
        lab.Flag("steps", 6, "training steps of the job", lo=2, hi=200),
        lab.Flag(
            "step_seconds", 0.05, "device time per step (a sleep, s)", lo=0.0, hi=2.0, step=0.05
        ),
        lab.Flag("preempt_after", 3, "send SIGTERM after this step (0: never)", lo=0, hi=200),
        lab.Flag("generation", "v5e", "TPU generation of the GKE slice",
                 choices=tuple(lesson.JOB_TOPOLOGIES)),
        lab.Flag("topology", "4x4", "slice topology (multi-host)",
                 choices=tuple(dict.fromkeys(
                     t for ts in lesson.JOB_TOPOLOGIES.values() for t in ts))),
        description="A real job under the runner, its states per provisioning path, a JobSet.",
    )  # fmt: skip
    ARGS = FLAGS.parse()
    IMAGE = "us-docker.pkg.dev/PROJECT/jax-tpu-lab/train:v1"  # a placeholder registry path


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Accelerator jobs and runtime lifecycle
    {lab.phase_line("accelerator_jobs")}

    A training job on a TPU slice is a process with a life: it waits for capacity, is
    provisioned, runs, and ends as succeeded, failed or preempted. In this lesson you will

    - run **a real job** (`python -m core.workload.job`, the phase's trainer) under a **job
      runner** (`core.workload.runner`) that starts it in its own process group and records
      every transition with its time and cause, then send it the **preemption notice**
      (SIGTERM): the job finishes its step, saves, and exits with code 143;
    - read the same states as **each provisioning path reports them**: `gcloud compute tpus
      tpu-vm describe` (Node state), queued resources (`WAITING_FOR_RESOURCES`,
      `PROVISIONING`, `ACTIVE`, `SUSPENDING`...), GKE pods and Compute Engine; TPU7x is not on
      the Cloud TPU API at all;
    - render the job as a **GKE JobSet** for a multi-host slice and validate it with
      `kubernetes-validate` (JobSet is a CRD with no shipped schema: its embedded Job is
      validated), its pod failure policy reading the job's exit codes.
    """)
    return


@app.cell
def _():
    steps = FLAGS.control("steps", ARGS)
    step_seconds = FLAGS.control("step_seconds", ARGS)
    preempt_after = FLAGS.control("preempt_after", ARGS)
    generation = FLAGS.control("generation", ARGS)
    topology = FLAGS.control("topology", ARGS)
    run_button = mo.ui.run_button(label="Run the job")
    mo.vstack(
        [
            mo.hstack([steps, step_seconds, preempt_after, run_button], justify="start", wrap=True),
            mo.hstack([generation, topology], justify="start", wrap=True),
        ]
    )
    return generation, preempt_after, run_button, step_seconds, steps, topology


@app.cell
def _(generation, preempt_after, steps, topology):
    _problem = None
    if preempt_after.value >= steps.value:
        _problem = (
            f"a preemption after step {preempt_after.value} of a {steps.value}-step job comes "
            "after the job has ended: choose a step before the last, or 0 for no preemption"
        )
    elif topology.value not in lesson.JOB_TOPOLOGIES[generation.value]:
        _problem = (
            f"{generation.value} has no multi-host slice {topology.value} here: choose one of "
            f"{', '.join(lesson.JOB_TOPOLOGIES[generation.value])}"
        )
    lab.guard(_problem, headline="This job cannot run as asked.")
    chosen = {"generation": generation.value, "topology": topology.value}
    return (chosen,)


@app.cell
def _(chosen, preempt_after, run_button, step_seconds, steps):
    mo.stop(lab.interactive() and not run_button.value, mo.md("Press **Run the job**."))
    run_dir = tempfile.mkdtemp(prefix="accelerator-jobs-")
    ran = lesson.run_job(run_dir, steps.value, step_seconds.value, preempt_after.value)
    job_events = events.read_events(job.events_path(run_dir))
    lab.table(lesson.transition_rows(ran), "The runner's transitions (times from queued)")
    lab.report("job end state", ran.state)
    _ = chosen
    return job_events, ran


@app.cell
def _(chosen):
    _ = chosen
    lab.table(lesson.state_rows(), "The same states as each provisioning path reports them")
    lab.table(lesson.path_rows(), "Which path creates which generation (core.tpu.cloud_tpu)")
    return


@app.cell
def _(chosen, steps):
    _g, _t = chosen["generation"], chosen["topology"]
    jobset = lesson.jobset_manifest("train-mlp", IMAGE, _g, _t, steps.value)
    lab.require("kubernetes_validate", why="the JobSet's Job is checked against Kubernetes' schema")
    jobset_problems = lesson.validate_jobset(jobset)
    _chips, _hosts = lesson.slice_hosts(_g, _t)
    mo.vstack([
        mo.md(f"**JobSet** for {_g} {_t}: {_chips} chips, "
              f"{_hosts} hosts (one pod each). Problems: {jobset_problems or 'none'}"),
        text.code_block(kubernetes.to_yaml([jobset]), "yaml", "jobset.yaml"),
    ])  # fmt: skip
    return (jobset_problems,)


@app.cell
def _(job_events, jobset_problems, preempt_after, ran):
    _config = recovery_demo.TrainConfig()
    _steps = [e for e in job_events if e["event"] == "step"]
    _last = job_events[-1]["event"] if job_events else None
    _expected = "preempted" if preempt_after.value else "succeeded"
    _times = [t.ts for t in ran.transitions]
    check = lab.Check(
        "the runner's transitions vs the job's own event log (a separate process), tokens vs "
        "steps x batch size, the JobSet's Job vs the Kubernetes 1.33 schema",
        {"tokens trained vs steps x batch_size (closed form)": abs(
            sum(e["tokens"] for e in _steps) - len(_steps) * _config.batch_size)},
        0.0,
        facts={
            f"ended {_expected}, as the job logged": ran.state == _last == _expected,
            "exit status is the job's named code": ran.transitions[-1].exit_status
            == (job.EXIT_PREEMPTED if preempt_after.value else job.EXIT_SUCCEEDED),
            "queued -> provisioning -> running -> end, in time order": [
                t.state for t in ran.transitions][:3] == ["queued", "provisioning", "running"]
            and _times == sorted(_times),
            "preempted at a step boundary, nothing lost beyond it": not preempt_after.value
            or job_events[-1].get("saved_step") == job_events[-1].get("step"),
            "JobSet's Job valid (kubernetes-validate) and TPU rules hold": jobset_problems == [],
            "every state named is in the documented enums": lesson.map_problems() == [],
        },
    )  # fmt: skip
    check
    return (check,)


@app.cell
def _(job_events):
    _rows = [
        {"t (s)": e["ts"] - job_events[0]["ts"], "event": e["event"], "step": e.get("step", 0)}
        for e in job_events
    ]
    alt.Chart(pd.DataFrame(_rows)).mark_point(filled=True).encode(
        x=alt.X("t (s):Q"), y=alt.Y("event:N"), color="event:N", tooltip=["step", "t (s)"]
    ).properties(title="The job's event log over time", height=180)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("accelerator_jobs")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


if __name__ == "__main__":
    app.run()
