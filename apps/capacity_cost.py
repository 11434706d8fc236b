import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Capacity, utilization, and operating cost",
)

with app.setup:
    import json
    import tempfile

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import text
    from core.lessons.operations import capacity_cost as lesson
    from core.tpu import billing, cloud_tpu, gcloud_grammar, iam, pricing, specs
    from core.workload import sweep

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("batch", 64, "MLP step: batch rows", lo=8, hi=1024),
        lab.Flag("hidden", 256, "MLP step: hidden units", lo=16, hi=2048),
        lab.Flag("mfu", 0.4, "assumed MFU on the TPU (cost table)", lo=0.05, hi=1.0, step=0.05),
        lab.Flag("params_b", 1.0, "model size (B parameters)", lo=0.1, hi=500.0, step=0.1),
        lab.Flag("chips", 8, "slice size (chips) for the hourly bill", lo=1, hi=9216),
        lab.Flag("v5p_on_demand", 0.0, "your v5p on-demand quote, USD/chip-h (0: none)",
                 lo=0.0, hi=50.0, step=0.05),
        lab.Flag("budget_usd", 500.0, "monthly budget (USD)", lo=10.0, hi=100000.0, step=10.0),
        lab.Flag("team", "ml-platform", "label: team",
                 choices=("ml-platform", "research", "ML Platform")),
        lab.Flag("job", "capacity-sweep", "label: job",
                 choices=("capacity-sweep", "nightly-train")),
        lab.Flag("cost_center", "research", "label: cost-center",
                 choices=("research", "cc_4711", "CC/4711")),
        lab.Flag("bucket", "my-tpu-checkpoints", "the job's one bucket",
                 choices=("my-tpu-checkpoints", "team-shared-data")),
        lab.Flag("trials", 6, "sweep trials (headless; the button runs 30)", lo=1, hi=100),
        lab.Flag("seed", 0, "seed (sweep sampler)", lo=0, hi=99),
        description="Utilization, cost per Mtok, labels, budgets, IAM, a sweep.",
    )  # fmt: skip
    ARGS = FLAGS.parse()
    QUOTE_DATE = "2026-12-03"  # the date an entered quote is recorded with
    BUTTON_TRIALS = 30  # the UI's sweep behind the run button


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Capacity, utilization, and operating cost
    {lab.phase_line("capacity_cost")}

    What a TPU job costs follows from how well it uses the chip. In this lesson you will

    - **measure** a jitted training step on this CPU and set it against the roofline: FLOPs and
      bytes from XLA's cost analysis (checked against the closed form), achieved FLOP/s, the
      bound, and two utilizations: **MFU** counts the model's FLOPs (its matmuls, the 6N per
      token of the cost table), **HFU** every FLOP XLA executes (elementwise work too).
      *Every measured figure here is this CPU's, not a TPU's*;
    - turn a stated MFU into **cost per million tokens** on v5e, v5p, v6e and TPU7x with
      on-demand, spot and committed prices: dated inputs with their source, left out where no
      source gave one (`core/tpu/prices.json`; enter your own quote below). Those sources
      are secondary (a news report of Google's announcement, a blog): the price list that
      counts is https://cloud.google.com/tpu/pricing;
    - put **cost-attribution labels** on every launch and generate the **budget and alert**
      commands, checked against gcloud's recorded grammar;
    - give the job **least privilege**: a custom role and one bucket, checked against
      over-broad grants;
    - run a **hyperparameter sweep** (Optuna TPE, sqlite), every trial an MLflow run, and write
      the same study as a Vertex AI Vizier study spec.
    """)
    return


@app.cell
def _():
    # One global name per control: marimo re-runs the cells that read a control's name when
    # it moves (a control held in a dict or a list is no name, and nothing would re-run).
    batch = FLAGS.control("batch", ARGS)
    hidden = FLAGS.control("hidden", ARGS)
    mfu = FLAGS.control("mfu", ARGS)
    params_b = FLAGS.control("params_b", ARGS)
    chips = FLAGS.control("chips", ARGS)
    v5p_on_demand = FLAGS.control("v5p_on_demand", ARGS)
    budget_usd = FLAGS.control("budget_usd", ARGS)
    team = FLAGS.control("team", ARGS)
    job = FLAGS.control("job", ARGS)
    cost_center = FLAGS.control("cost_center", ARGS)
    bucket = FLAGS.control("bucket", ARGS)
    trials_control = FLAGS.control("trials", ARGS)
    seed = FLAGS.control("seed", ARGS)
    run_button = mo.ui.run_button(label=f"Run the sweep with {BUTTON_TRIALS} trials")
    mo.vstack([
        mo.md("**Measured step**"),
        mo.hstack([batch, hidden], justify="start", wrap=True),
        mo.md("**Cost**"),
        mo.hstack([mfu, params_b, chips, v5p_on_demand], justify="start", wrap=True),
        mo.md("**Labels, budget, IAM**"),
        mo.hstack([team, job, cost_center, budget_usd, bucket], justify="start", wrap=True),
        mo.md("**Sweep**"),
        mo.hstack([trials_control, seed, run_button], justify="start"),
    ])  # fmt: skip
    return (
        batch, bucket, budget_usd, chips, cost_center, hidden, job, mfu, params_b, run_button,
        seed, team, trials_control, v5p_on_demand,
    )  # fmt: skip


@app.cell
def _(batch, hidden):
    measured = lesson.measure(batch.value, 32, hidden.value, 10)
    lab.report("MFU of the step (this CPU)", measured.mfu)
    lab.report("HFU of the step (this CPU)", measured.hfu)
    lab.table(measured.rows(), f"One SGD step of a 32-{hidden.value}-10 MLP, batch "
              f"{batch.value}, on {measured.machine}")  # fmt: skip
    return (measured,)


@app.cell
def _(chips, cost_center, job, mfu, params_b, team, v5p_on_demand):
    _labels = (("team", team.value), ("job", job.value),
               ("cost-center", cost_center.value))  # fmt: skip
    _problems = cloud_tpu.label_problems(_labels)
    lab.guard(
        "; ".join(_problems) if _problems else None,
        headline="These labels break GCP's label rules.",
    )
    table = pricing.load()
    if v5p_on_demand.value > 0:
        table = pricing.with_price(table, pricing.Price(
            generation="v5p", tier="on-demand", region="us-east5",
            usd_per_chip_hour=float(v5p_on_demand.value), retrieved=QUOTE_DATE,
            source="https://example.org/your-own-quote", note="entered in the lesson"))  # fmt: skip
    # The inputs travel with the rows, so the check judges the rows at the values they used.
    cost_inputs = {"mfu": float(mfu.value), "params_b": float(params_b.value)}
    cost = pricing.cost_rows(table, cost_inputs["mfu"], cost_inputs["params_b"] * 1e9, chips.value)
    labels = _labels
    lab.table(
        cost,
        f"Cost per Mtok at MFU {mfu.value:g} for a "
        f"{params_b.value:g} B-parameter model (6N FLOPs per token), per chip",
    )
    return cost, cost_inputs, labels, table


@app.cell
def _(bucket, budget_usd, labels):
    vm = cloud_tpu.TpuVm(labels=labels, spot=True)
    budget = billing.Budget(
        "012345-6789AB-CDEF01", "my-tpu-project", float(budget_usd.value),
        thresholds=((0.5, "current-spend"), (0.9, "current-spend"), (1.0, "forecasted-spend")),
        labels=labels,
    )  # fmt: skip
    plan = iam.Plan(bucket=bucket.value)
    launch = [cloud_tpu.create_command(vm), *billing.commands(budget)]
    iam_commands = iam.commands(plan)
    _lines = [cloud_tpu.display_command(cloud_tpu.shell_join(a)) for a in [*launch, *iam_commands]]
    mo.vstack([
        mo.md("## The commands (generated, never run)"),
        text.code_block("\n\n".join(_lines), "bash", "commands.sh"),
    ])  # fmt: skip
    return budget, iam_commands, launch, plan


@app.cell
def _(run_button, seed, trials_control):
    _trials = BUTTON_TRIALS if lab.interactive() and run_button.value else trials_control.value
    lab.require(
        "optuna", "mlflow", why="the sweep is an Optuna study (TPE), its trials tracked in MLflow"
    )
    run_dir = tempfile.TemporaryDirectory(prefix="capacity-cost-sweep-")
    problem = sweep.make_problem(0)
    trials = sweep.run_sweep(run_dir.name, problem, _trials, seed=seed.value)
    spec = sweep.vizier_spec("tpe")
    sweep.write_vizier_spec(f"{run_dir.name}/vizier_study_spec.json", spec)
    _cpu_hours = sum(t.seconds for t in trials) / 3600
    trial_rows = [
        {"trial": t.number, "lr": t.lr, "momentum": t.momentum, sweep.METRIC: t.value,
         "seconds (this CPU)": t.seconds, "MLflow run": t.run_id[:8]}
        for t in trials
    ]  # fmt: skip
    _table = lab.table(trial_rows, f"{len(trials)} trials (Optuna TPE, seed {seed.value}); "
                       f"MLflow store {run_dir.name}/mlflow")  # fmt: skip
    # CPU time only: a TPU chip-hour price times CPU seconds would be no cost of anything
    lab.report("sweep time on this CPU", _cpu_hours, "CPU-hours")
    mo.vstack([
        _table,  # the trials a learner just ran (it was never shown, only recorded)
        mo.md("Vizier study spec (validated, `vizier_study_spec.json`):"),
        text.code_block(json.dumps(spec, indent=2), "json", "vizier_study_spec.json"),
    ])  # fmt: skip
    return problem, run_dir, spec, trials


@app.cell
def _(budget, cost, cost_inputs, iam_commands, launch, measured, plan, problem, table, trials):
    _raw = json.loads(pricing.PRICES_JSON.read_text(encoding="utf-8"))["prices"]
    _mine = {(r["generation"], r["tier"]): r for r in cost}
    _got, _want = [], []
    for _p in [*_raw, *[p.model_dump() for p in table.prices if p.generation == "v5p"]]:
        # The other way round from the lesson's tokens/s: the work of a million tokens (6N
        # FLOPs each) in chip-hours at the useful FLOP/s, times the price of a chip-hour.
        _useful = np.float64(cost_inputs["mfu"]) * np.float64(
            specs.chip(_p["generation"]).bf16_flops.value)  # fmt: skip
        _work = 1e6 * 6.0 * np.float64(cost_inputs["params_b"]) * 1e9
        _want.append(_work / _useful / 3600.0 * np.float64(_p["usd_per_chip_hour"]))
        _got.append(_mine[(_p["generation"], _p["tier"])]["USD per Mtok"])
    _closed = [sweep.closed_form_losses(problem, t.lr, t.momentum) for t in trials]
    _ok = [np.isfinite(c[-1]) and c[-1] < 1e6 for c in _closed]
    _bindings, _roles = iam.bindings_from_commands(iam_commands)
    _budget_argv = launch[-1]
    check = lab.Check(
        "cost per Mtok vs the chip-hours of a million tokens' FLOPs (NumPy float64, the raw "
        "price file); each sweep trial's training "
        "losses vs the float64 closed form; the step's FLOPs vs the closed form; commands vs "
        "the recorded gcloud grammar; IAM least privilege",
        {
            "USD per Mtok vs float64": numerics.scaled_max_error(np.array(_got), np.array(_want)),
            "sweep losses vs closed form": max(
                [numerics.scaled_max_error(t.losses, c) for t, c, k in
                 zip(trials, _closed, _ok, strict=True) if k] or [0.0]),
        },  # fmt: skip
        numerics.tolerance("float32"),
        facts={
            "XLA FLOPs within the elementwise share of the closed form": (
                measured.closed_form_flops <= measured.xla_flops
                <= measured.closed_form_flops * (1 + lesson.ELEMENTWISE_SHARE)
            ),
            "every command in the recorded grammar": all(
                gcloud_grammar.problems(a) == [] for a in [*launch, *iam_commands]
            ),
            "labels on the create command": any(a.startswith("--labels=") for a in launch[0]),
            "budget thresholds as chosen": billing.parse_thresholds(_budget_argv)
            == list(budget.thresholds),
            "IAM: no over-broad or missing grant": iam.problems(_bindings, _roles, plan) == [],
        },
    )  # fmt: skip
    check
    return (check,)


@app.cell
def _(cost):
    _frame = pd.DataFrame([r for r in cost if r["USD per Mtok"] is not None])
    (
        alt.Chart(_frame, title="USD per million tokens (cited prices only)")
        .mark_bar()
        .encode(
            x=alt.X("generation:N"), xOffset="tier:N", color="tier:N",
            y=alt.Y("USD per Mtok:Q"), tooltip=["generation", "tier", "USD per Mtok", "source"],
        )
    )  # fmt: skip
    return


@app.cell
def _(trials):
    _frame = pd.DataFrame(
        [{"trial": t.number, "lr": t.lr, "momentum": t.momentum, "value": t.value} for t in trials]
    )
    alt.hconcat(
        alt.Chart(_frame, title="Objective by trial").mark_line(point=True)
        .encode(x="trial:Q", y=alt.Y("value:Q", title=sweep.METRIC)),
        alt.Chart(_frame, title="Where TPE sampled").mark_circle(size=80)
        .encode(x=alt.X("lr:Q", scale=alt.Scale(type="log")), y="momentum:Q",
                color=alt.Color("value:Q", scale=alt.Scale(scheme="viridis"))),
    )  # fmt: skip
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("capacity_cost")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()


@app.cell
def test_sweep_is_logged(run_dir, trials):
    from core.state import tracking

    _runs = tracking.Tracker(f"{run_dir.name}/mlflow", experiment="capacity-cost-sweep").runs()
    assert len(_runs) == len(trials)


if __name__ == "__main__":
    app.run()
