import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Inference capacity, batching, and autoscaling",
)

with app.setup:
    import math
    import tempfile

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lab import text
    from core.lessons.deployment import inference_capacity as lesson
    from core.serving import capacity, kubernetes
    from core.serving.predict import export

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("max_batch", 16, "micro-batch window: most rows per model call", lo=1, hi=64),
        lab.Flag(
            "max_wait_ms", 2.0, "window: longest wait after the first request (ms)",
            lo=0.0, hi=20.0, step=0.5,
        ),
        lab.Flag("users", 4, "locust users (closed loop, no think time)", lo=1, hi=64),
        lab.Flag("run_time_s", 1, "seconds per locust run", lo=1, hi=10),
        lab.Flag("p95_budget_ms", 100.0, "SLO: p95 latency budget (ms)", lo=5.0, hi=500.0),
        lab.Flag("policy", "queue", "autoscaling policy", choices=capacity.POLICIES),
        lab.Flag(
            "target_utilization", 0.7, "policy's target share of a replica's capacity",
            lo=0.1, hi=1.0, step=0.05,
        ),
        lab.Flag("startup_steps", 1, "cold start of a new replica (5-minute steps)", lo=0, hi=6),
        lab.Flag("peak_replicas", 6.0, "diurnal peak in replicas' worth", lo=1.0, hi=40.0),
        lab.Flag("burst_factor", 3.0, "burst: x the traffic for 30 minutes", lo=1.0, hi=6.0),
        lab.Flag(
            "canary_noise", 1.0, "degraded candidate: weight noise (x each leaf's std)",
            lo=0.0, hi=3.0, step=0.1,
        ),
        lab.Flag("train_steps", 60, "champion's training steps", lo=20, hi=300),
        lab.Flag("seed", 0, "seed (training, noise, traffic, routing)", lo=0, hi=99),
        description="Micro-batching, a locust load run, an autoscaling replay, canary gates.",
    )  # fmt: skip
    ARGS = FLAGS.parse()
    MIN_AGREEMENT = 0.97  # the canary gate: labels equal to the champion's on >= 97 % of rows
    MIN_REQUESTS = 10  # a stage judged on fewer requests than this is a failed gate
    BATCH_ROWS = 64  # held-out rows sent one by one through the batcher for the check
    IMAGE = "us-docker.pkg.dev/PROJECT/jax-tpu-lab/predict:v1"  # a placeholder registry path


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Inference capacity, batching, and autoscaling
    {lab.phase_line("inference_capacity")}

    One replica of the predict service (the digits classifier exported with `jax.export`,
    served by `core.serving.predict`) answers so many requests a second inside its latency
    budget. In this lesson you will

    - **micro-batch** single requests by a time window (`core.serving.batching.MicroBatcher`:
      up to *max batch* rows, waiting at most *max wait* after the first), and see that the
      answers do not change, bit for bit, when every model call runs at one compiled shape;
    - **load-test** the service with locust (headless, its own process, 127.0.0.1 only,
      bounded in time) and read throughput against p50/p95/p99 for each window setting;
    - **size and autoscale**: the measured per-replica capacity drives a replay of a day of
      traffic with a burst (replicas, SLO violations, cost), under a queue-depth, a p95 or a
      fixed policy;
    - **roll out** a new model version through a shadow stage and canary stages gated on
      p95, error rate and agreement with the champion, with automatic rollback.
    """)
    return


@app.cell
def _():
    max_batch = FLAGS.control("max_batch", ARGS)
    max_wait_ms = FLAGS.control("max_wait_ms", ARGS)
    users = FLAGS.control("users", ARGS)
    run_time_s = FLAGS.control("run_time_s", ARGS)
    p95_budget_ms = FLAGS.control("p95_budget_ms", ARGS)
    policy = FLAGS.control("policy", ARGS)
    target_utilization = FLAGS.control("target_utilization", ARGS)
    startup_steps = FLAGS.control("startup_steps", ARGS)
    peak_replicas = FLAGS.control("peak_replicas", ARGS)
    burst_factor = FLAGS.control("burst_factor", ARGS)
    canary_noise = FLAGS.control("canary_noise", ARGS)
    train_steps = FLAGS.control("train_steps", ARGS)
    seed = FLAGS.control("seed", ARGS)
    run_button = mo.ui.run_button(label="Run the load sweep (locust, a few runs)")
    mo.vstack(
        [
            mo.md("**Window and load**"),
            mo.hstack([max_batch, max_wait_ms, users, run_time_s], justify="start", wrap=True),
            mo.md("**SLO and autoscaling**"),
            mo.hstack(
                [p95_budget_ms, policy, target_utilization, startup_steps],
                justify="start", wrap=True,
            ),
            mo.hstack([peak_replicas, burst_factor], justify="start", wrap=True),
            mo.md("**Model versions**"),
            mo.hstack([canary_noise, train_steps, seed, run_button], justify="start", wrap=True),
        ]
    )  # fmt: skip
    return (
        burst_factor, canary_noise, max_batch, max_wait_ms, p95_budget_ms, peak_replicas,
        policy, run_button, run_time_s, seed, startup_steps, target_utilization, train_steps,
        users,
    )  # fmt: skip


@app.cell
def _(seed, train_steps):
    trained = export.train(seed=seed.value, steps=train_steps.value)
    return (trained,)


@app.cell
def _(max_batch, trained):
    # The champion follows only the training and the artifact's batch: moving the noise, the
    # window's wait or the budget keeps it (and the load run below that measures it).
    lab.require("flatbuffers", why="jax.export serializes the model the service loads")
    workdir = tempfile.TemporaryDirectory(prefix="inference-capacity-")
    champion_dir = lesson.write_champion(trained, workdir.name, max_batch.value)
    champion = export.load_artifacts(champion_dir)
    return champion, champion_dir, workdir


@app.cell
def _(canary_noise, champion_dir, max_batch, seed, train_steps, trained):
    candidates_dir = tempfile.TemporaryDirectory(prefix="inference-capacity-candidates-")
    versions = lesson.write_candidates(
        trained, champion_dir, candidates_dir.name, max_batch.value, canary_noise.value,
        seed.value,
    )  # fmt: skip
    _accuracy = f"test accuracy {trained.info['test_accuracy']:.3f}"
    _rows = [{"version": "champion", "made by": f"{train_steps.value} steps, {_accuracy}"}]
    _rows += [
        {"version": name, "made by": "the champion's weights"} for name in versions.candidates
    ]
    lab.table(
        _rows, "Model versions (jax.export artifacts, verified by sha256 + schema before load)"
    )
    return candidates_dir, versions


@app.cell
def _(max_batch, max_wait_ms):
    window = {"max_batch": max_batch.value, "max_wait_ms": max_wait_ms.value}
    return (window,)


@app.cell
def _(champion, seed, window):
    x_batch = lesson.held_out(seed.value, BATCH_ROWS)
    batching = lesson.batched_vs_unbatched(
        champion, x_batch, window["max_batch"], window["max_wait_ms"] / 1000
    )
    _stats = batching["stats"]
    lab.table(
        [
            {
                "requests": _stats.requests,
                "model calls": _stats.batches,
                "mean batch": _stats.mean_batch,
                "largest batch": _stats.largest_batch,
                "bucket-1 vs padded: max |diff|": numerics.max_abs_error(
                    batching["bucket1"], batching["alone"]
                ),
                "labels equal across shapes": bool(
                    (batching["bucket1"].argmax(-1) == batching["alone"].argmax(-1)).all()
                ),
            }
        ],
        f"{BATCH_ROWS} rows sent one by one from 8 threads through the window "
        f"(max batch {window['max_batch']}, max wait {window['max_wait_ms']:g} ms)",
    )
    return batching, x_batch


@app.cell
def _(champion_dir, run_button, run_time_s, seed, users, window):
    # The locust runs measure the window; the budget only judges them (the cell below), so
    # moving the budget does not load the service again.
    lab.require(
        "locust", sockets=True, why="the service listens on 127.0.0.1 and locust loads it over HTTP"
    )
    _current = (window["max_batch"], window["max_wait_ms"])
    if lab.interactive() and run_button.value:
        _settings = list(dict.fromkeys([(1, 0.0), _current, (window["max_batch"], 5.0)]))
        _users = sorted({1, 4, 16, users.value})
    else:  # headless, or before the button: one tiny run of the current window
        _settings, _users = [_current], [users.value]
    load_rows = lesson.load_runs(champion_dir, _settings, _users, run_time_s.value, seed=seed.value)
    _clean = [
        r for r in load_rows
        if (r["max_batch"], r["max_wait_ms"]) == _current and r["failures"] == 0
    ]  # fmt: skip
    _table = lab.table(
        [{k: v for k, v in r.items() if k != "result"} for r in load_rows],
        "Locust runs against the predict service on 127.0.0.1 (CPU, this machine)",
    )
    _problem = None if _clean else "every load run of this window had failed requests"
    lab.guard(_problem, _table, headline="The service failed under load.")
    _table
    return (load_rows,)


@app.cell
def _(load_rows, p95_budget_ms, window):
    _problem = None
    if window["max_wait_ms"] >= p95_budget_ms.value:
        _problem = (
            f"a window that waits up to {window['max_wait_ms']:g} ms cannot meet a p95 budget "
            f"of {p95_budget_ms.value:g} ms: the wait alone uses it up. Shorten max wait or "
            "raise the budget."
        )
    lab.guard(_problem, headline="This window cannot meet the SLO.")
    _current = (window["max_batch"], window["max_wait_ms"])
    _mine = [r["result"] for r in load_rows if (r["max_batch"], r["max_wait_ms"]) == _current]
    # A latency measured on a shared CPU, not a bad control: when no run met the budget the
    # lesson goes on with the lowest-p95 run and a relaxed budget, and says so (a callout, the
    # SLO table, the check's words): "budget met: no" is a finding, never hidden.
    sizing = lesson.size_replica(_mine, p95_budget_ms.value)
    capacity_rps, p95_at_capacity = sizing.capacity_rps, sizing.p95_at_capacity_ms
    replay_budget_ms = sizing.replay_budget_ms
    _slo = lab.table(sizing.rows(), "The SLO on this machine: one replica against your budget")
    _over = mo.callout(mo.md(
        f"**Budget met: no.** {sizing.why_not}. The replay below uses the lowest-p95 run's "
        "throughput as the capacity per replica and "
        f"{lesson.RELAXED_HEADROOM:g}x that run's p95 as its budget: a relaxed SLO, not "
        "yours. Raise the budget, or try a shorter max wait or fewer users."
    ), kind="warn")  # fmt: skip
    lab.report("per-replica p95 budget met (CPU, this machine)", sizing.met)
    lab.report("per-replica capacity (CPU, this machine)", capacity_rps, "requests/s")
    lab.report("replay's p95 budget", replay_budget_ms, "ms")
    mo.vstack([_slo] if sizing.met else [_over, _slo])
    return capacity_rps, p95_at_capacity, replay_budget_ms, sizing


@app.cell
def _(
    burst_factor, capacity_rps, p95_at_capacity, peak_replicas, policy, replay_budget_ms, seed,
    startup_steps, target_utilization,
):  # fmt: skip
    trace, constant_part = lesson.lesson_trace(
        peak_replicas.value, burst_factor.value, seed.value, capacity_rps
    )
    scaling = capacity.Policy(
        policy.value, target_utilization.value, max_replicas=1000,
        min_replicas=math.ceil(peak_replicas.value) if policy.value == "fixed" else 1,
        startup_steps=startup_steps.value,
    )  # fmt: skip
    # The p95 policy reacts one replica a step: from one replica it may not reach the
    # constant part's need within those 3 hours (nor come back down after overshooting, when
    # the p95 at capacity is over half the budget), so it starts at the fewest that keep up.
    replayed = capacity.replay(
        trace, scaling, capacity_rps, p95_at_capacity, replay_budget_ms, lesson.STEP_S,
        initial_replicas=(
            math.ceil(trace[constant_part.start] / capacity_rps) if policy.value == "p95" else None
        ),
    )  # fmt: skip
    lab.report("SLO violations in the replay", replayed.violation_steps, "5-minute steps")
    lab.report("replay cost", replayed.total_cost, "replica-hours")
    lab.table(
        [
            {
                "policy": policy.value,
                "capacity per replica (req/s)": capacity_rps,
                "peak replicas": int(replayed.ready.max()),
                "violation steps": replayed.violation_steps,
                "violations in the burst": int(
                    replayed.violation[lesson.BURST_START : lesson.BURST_START + 12].sum()
                ),
                "cost (replica-hours)": replayed.total_cost,
            }
        ],
        "Autoscaling replay: 3 constant hours, then a day of 5-minute steps with a burst",
    )
    return constant_part, replayed, scaling, trace


@app.cell
def _(p95_budget_ms, seed, versions):
    gates = capacity.Gates(
        max_p95_ms=p95_budget_ms.value, max_error_rate=0.0, min_agreement=MIN_AGREEMENT,
        min_requests=MIN_REQUESTS,
    )  # fmt: skip
    rollouts = lesson.gate_rollouts(versions, gates, seed.value)
    lab.table(
        [
            {"candidate": name, **row, "decision": r.decision}
            for name, r in rollouts.items()
            for row in r.rows()
        ],
        "Shadow (a copy of the traffic, answers discarded) then canary stages: the first "
        "failed gate rolls back",
    )
    return gates, rollouts


@app.cell
def _(
    batching, capacity_rps, constant_part, load_rows, replayed, scaling, sizing, trace,
    window, x_batch, champion,
):  # fmt: skip
    _, _want = export.reference_forward(champion.weights, x_batch)
    _load = trace[constant_part.start]
    _settled = replayed.ready[constant_part.stop // 2 : constant_part.stop]
    _u = scaling.target_utilization
    if scaling.kind == "queue":
        _closed = bool((_settled == math.ceil(_load / (_u * capacity_rps))).all())
    elif scaling.kind == "fixed":
        _closed = bool((_settled == scaling.min_replicas).all())
    else:  # p95: between the fewest that keep up and the fewest at the target utilization
        _low, _high = math.ceil(_load / capacity_rps), math.ceil(_load / (_u * capacity_rps))
        _closed = bool(((_settled >= _low) & (_settled <= _high)).all())
    check = lab.Check(
        f"window {window['max_batch']} rows / {window['max_wait_ms']:g} ms: batched answers "
        "vs each request alone (bitwise, one compiled shape) and a NumPy float64 forward; "
        f"the {scaling.kind} policy's replicas on the constant part vs its closed form "
        f"{sizing.check_words}; the load run",
        {"batched probabilities vs NumPy float64": numerics.scaled_max_error(
            batching["batched"], _want)},
        numerics.tolerance("float32"),
        facts={
            "batched == alone, bit for bit": lesson.bitwise_equal(
                batching["batched"], batching["alone"]
            ),
            "replicas on the constant part == closed form": _closed,
            "load runs: zero failures, zero 5xx": all(
                r["failures"] == 0 and r["errors_5xx"] == 0 for r in load_rows
            ),
        },
    )  # fmt: skip
    check
    return (check,)


@app.cell
def _(load_rows):
    lesson.load_chart(load_rows)  # one run per setting: bars; several users levels: the curve
    return


@app.cell
def _(capacity_rps, replayed):
    _frame = pd.DataFrame(replayed.rows())
    _frame["hour"] = _frame["step"] * replayed.step_s / 3600
    _frame["capacity_rps"] = _frame["ready"] * capacity_rps
    _base = alt.Chart(_frame).encode(x=alt.X("hour:Q", title="hour"))
    _traffic = alt.layer(
        _base.mark_line(color="#4c78a8").encode(y=alt.Y("load_rps:Q", title="requests/s")),
        _base.mark_line(color="#f58518", strokeDash=[4, 2]).encode(y="capacity_rps:Q"),
    ).properties(title="Traffic (blue) and serving capacity (orange)", height=160)
    _replicas = (
        _base.mark_line(interpolate="step-after")
        .encode(y=alt.Y("provisioned:Q", title="replicas (paid)"))
        .properties(title="Replicas", height=120)
    )
    _violations = (
        _base.mark_bar(color="#e45756")
        .encode(y=alt.Y("violation:Q", title="SLO violated"))
        .properties(title="SLO violations (p95 over budget)", height=80)
    )
    _cost = (
        _base.mark_line(color="#54a24b")
        .encode(y=alt.Y("cost:Q", title="replica-hours"))
        .properties(title="Cumulative cost", height=120)
    )
    alt.vconcat(_traffic, _replicas, _violations, _cost).properties(
        title="Autoscaling replay: traffic, replicas, SLO violations, cost"
    )
    return


@app.cell
def _(p95_budget_ms, policy, replayed):
    _metric = "p95_ms" if policy.value == "p95" else "queue_depth"
    _target = p95_budget_ms.value if _metric == "p95_ms" else 4.0
    _hpa = kubernetes.Hpa(_metric, _target, 1, max(1, min(1000, int(replayed.ready.max()))))
    manifests = kubernetes.gke_manifests(IMAGE, hpa=_hpa)
    lab.require("kubernetes_validate", why="the manifests are checked against Kubernetes' schemas")
    manifest_problems = kubernetes.validate(manifests)
    mo.vstack(
        [
            mo.md(
                f"## The GKE side\nDeployment, Service and a HorizontalPodAutoscaler on "
                f"`{_metric}` (max replicas from the replay's peak), checked against the "
                f"Kubernetes schemas: {manifest_problems or 'no problems'}"
            ),
            text.code_block(kubernetes.to_yaml(manifests), "yaml", "gke_manifests.yaml"),
        ]
    )
    return (manifest_problems,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("inference_capacity")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_rounded_copy_promoted_and_rollbacks_go_to_zero(rollouts):
    first, *_ = rollouts.values()
    assert first.decision == "promoted", first.failed
    for rollout in rollouts.values():
        assert (rollout.final_fraction == 0.0) == (rollout.decision == "rolled back")
    return


@app.cell
def test_manifests_validate(manifest_problems):
    assert manifest_problems == []
    return


if __name__ == "__main__":
    app.run()
