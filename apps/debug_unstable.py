import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Debug unstable learning")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import claims
    from core.lessons.nn_training import debug_unstable
    from core.nn import mlp

    lab.use_cpu_devices()
    # Defaults: debug_unstable.DEBUG_UNSTABLE_LESSON, where stability_test proves the lesson's claim
    # (the unstable run diverges, every fix trains) over seeds with margin.
    FLAGS = lab.Flags(
        lab.Flag(
            "learning_rate",
            0.25,
            "SGD (momentum 0.9) learning rate of the unstable run",
            lo=0.01,
            hi=2.0,
            step=0.01,
        ),
        lab.Flag("init_scale", 1.4, "multiplier on the He init std", lo=0.25, hi=3.0, step=0.05),
        lab.Flag("depth", 6, "hidden layers", lo=2, hi=8),
        lab.Flag("hidden", 32, "units per hidden layer", lo=8, hi=64, step=8),
        lab.Flag(
            "clip_norm",
            0.5,
            "fix 1: clip the global gradient norm to this",
            lo=0.1,
            hi=10.0,
            step=0.1,
        ),
        lab.Flag(
            "safe_learning_rate",
            0.003,
            "fix 3: a lower learning rate",
            lo=0.001,
            hi=0.5,
            step=0.001,
        ),
        lab.Flag("steps", 150, "training steps (full batch)", lo=20, hi=500, step=10),
        lab.Flag("seed", 0, "PRNG seed (data and init)", lo=0, hi=9999),
        description="Debug unstable learning: divergence, per-layer diagnostics, first NaN, fixes.",
    )
    ARGS = FLAGS.parse()
    DATA = debug_unstable.DEBUG_UNSTABLE_DATA  # 256 points in 3 Gaussian clusters
    POINTS, CLASSES = DATA["points"], DATA["classes"]
    EXPLODE_FACTOR = debug_unstable.DIVERGENCE_FACTOR


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Debug unstable learning
    {lab.phase_line("debug_unstable")}

    Training that blows up rarely says why: the loss jumps, turns `inf`, then `nan`, and
    everything after is garbage. A deep ReLU network, a learning rate a bit too high and an
    init a bit too large are enough. In this lesson you will

    - make a deep MLP **diverge** with the learning-rate and init-scale controls;
    - watch the **gradient norm of every layer** and the **activation size of every hidden
      layer** step by step, and see where it starts;
    - find the **first operation that made a NaN** with `jax.experimental.checkify`;
    - compare three fixes side by side: **clipping** the global gradient norm
      (`optax.clip_by_global_norm`), **layer normalisation**, a **lower learning rate**
      (and all three together).
    """)
    return


@app.cell
def _():
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    init_scale = FLAGS.control("init_scale", ARGS, label="init scale")
    depth = FLAGS.control("depth", ARGS)
    hidden = FLAGS.control("hidden", ARGS)
    clip_norm = FLAGS.control("clip_norm", ARGS, label="clip norm")
    safe_learning_rate = FLAGS.control("safe_learning_rate", ARGS, label="lower learning rate")
    steps = FLAGS.control("steps", ARGS)
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md("**The unstable run**"),
            mo.hstack([learning_rate, init_scale, depth, hidden], justify="start", wrap=True),
            mo.md("**The fixes** (each starts from the same weights)"),
            mo.hstack([clip_norm, safe_learning_rate, steps, seed], justify="start", wrap=True),
        ]
    )
    return (
        clip_norm,
        depth,
        hidden,
        init_scale,
        learning_rate,
        safe_learning_rate,
        seed,
        steps,
    )


@app.cell
def _(
    clip_norm,
    depth,
    hidden,
    init_scale,
    learning_rate,
    safe_learning_rate,
    seed,
    steps,
):
    _data_key, _init_key = jax.random.split(jax.random.key(seed.value))
    x_ND, y_N = mlp.make_dataset(_data_key, DATA["dataset"], POINTS, DATA["noise"], CLASSES)
    base_params = mlp.init_params(
        _init_key, mlp.layer_sizes(2, hidden.value, depth.value, CLASSES), "he"
    )
    # unstable, clip, layer norm (both at the unstable rate), lower rate, all three
    configs = debug_unstable.lesson_configs(
        learning_rate.value, init_scale.value, clip_norm.value, safe_learning_rate.value
    )
    # One compiled program trains all five: learning rate, clip and layer norm are its arguments.
    runs = debug_unstable.train(configs, base_params, x_ND, y_N, steps.value)
    outcomes = [debug_unstable.outcome(run.config.name, run.loss_S, CLASSES) for run in runs]
    diverged_at = {o.name: o.diverged_at for o in outcomes}
    summary_rows = [
        {
            "run": run.config.name,
            "lr": run.config.learning_rate,
            "clip": run.config.clip_norm or "-",
            "layer norm": "yes" if run.config.layernorm else "-",
            "first loss": f"{run.loss_S[0]:.3f}",
            "final loss": f"{run.loss_S[-1]:.3f}",
            "diverged at step": "-"
            if diverged_at[run.config.name] is None
            else diverged_at[run.config.name],
            "trains": "yes" if outcome.trains else "no",
            "largest grad norm": (
                f"{np.max(run.global_grad_norm_S[np.isfinite(run.global_grad_norm_S)]):.3g}"
                if np.isfinite(run.global_grad_norm_S).any()
                else "inf"
            ),
        }
        for run, outcome in zip(runs, outcomes, strict=True)
    ]
    mo.vstack(
        [
            mo.md(
                f"## Five runs from the same weights\n"
                f"{depth.value} hidden layers of {hidden.value} ReLUs, He init × "
                f"{init_scale.value}, full-batch SGD with momentum 0.9 on {POINTS} points in "
                f"{CLASSES} Gaussian clusters. A run **diverged** at the first step whose loss is "
                f"not finite or exceeds {EXPLODE_FACTOR:.0f}× its first loss; it **trains** when "
                f"it never diverges and ends below {debug_unstable.TRAINS_BELOW:g} × ln {CLASSES} "
                f"= {outcomes[0].trains_below:.3f}, a quarter of the loss of a model that learned "
                "nothing."
            ),
            lab.table(summary_rows),
        ]
    )
    return diverged_at, outcomes, runs, x_ND, y_N


@app.cell
def _(runs):
    _every = max(1, len(runs[0].loss_S) // 250)  # keep the charts under ~1k points a run
    _loss_rows = pd.DataFrame(
        [
            {"run": run.config.name, "step": s, "loss": float(v) if np.isfinite(v) else None}
            for run in runs
            for s, v in list(enumerate(run.loss_S))[::_every]
        ]
    )
    loss_chart = (
        alt.Chart(_loss_rows, title="Loss per step (gaps: inf or NaN)")
        .mark_line()
        .encode(
            x="step:Q",
            y=alt.Y("loss:Q", scale=alt.Scale(type="log")),
            color=alt.Color("run:N", sort=[r.config.name for r in runs]),
            tooltip=["run", "step", "loss"],
        )
        .properties(width=420, height=260)
    )
    _shown = [runs[0], runs[-1]]
    _grad_rows = pd.DataFrame(
        [
            {
                "run": run.config.name,
                "step": s,
                "layer": f"{layer + 1}",
                "grad norm": float(v) if np.isfinite(v) and v > 0 else None,
            }
            for run in _shown
            for s in range(0, len(run.loss_S), _every)
            for layer, v in enumerate(run.grad_norm_SL[s])
        ]
    )
    grad_chart = (
        alt.Chart(_grad_rows, title="Gradient norm of every layer (1 = first)")
        .mark_line()
        .encode(
            x="step:Q",
            y=alt.Y("grad norm:Q", scale=alt.Scale(type="log")),
            color=alt.Color("layer:O", scale=alt.Scale(scheme="viridis")),
            tooltip=["run", "step", "layer", "grad norm"],
        )
        .properties(width=260, height=200)
        .facet(column=alt.Column("run:N", title=None, sort=[r.config.name for r in _shown]))
    )
    _activation_rows = pd.DataFrame(
        [
            {
                "run": run.config.name,
                "step": s,
                "hidden layer": f"{h + 1}",
                "activation RMS": float(v) if np.isfinite(v) and v > 0 else None,
            }
            for run in _shown
            for s in range(0, len(run.loss_S), _every)
            for h, v in enumerate(run.activation_std_SH[s])
        ]
    )
    activation_chart = (
        alt.Chart(_activation_rows, title="Size (root mean square) of every hidden layer's output")
        .mark_line()
        .encode(
            x="step:Q",
            y=alt.Y("activation RMS:Q", scale=alt.Scale(type="log")),
            color=alt.Color("hidden layer:O", scale=alt.Scale(scheme="viridis")),
            tooltip=["run", "step", "hidden layer", "activation RMS"],
        )
        .properties(width=260, height=200)
        .facet(column=alt.Column("run:N", title=None, sort=[r.config.name for r in _shown]))
    )
    mo.vstack(
        [
            loss_chart,
            mo.md("### Inside the network: the unstable run against all three fixes"),
            grad_chart,
            activation_chart,
            mo.md(
                "With init scale above 1 every ReLU layer multiplies the signal: the last "
                "hidden layers start largest, and a big step makes the weights (and the next "
                "forward pass) larger still. Clipping bounds each update; layer norm resets "
                "every hidden layer to unit size; a lower learning rate takes smaller steps."
            ),
        ]
    )
    return


@app.cell
def _(diverged_at, runs, steps, x_ND, y_N):
    # Re-run the unstable run's recorded steps under checkify(float_checks): every
    # floating-point primitive gets a NaN test, and the first failure comes back as a value.
    nan_report = debug_unstable.first_nan(runs[0], x_ND, y_N)
    if nan_report is not None:
        nan_view = mo.vstack(
            [
                mo.md(
                    f"""
    ## The first NaN

    `checkify` reports: **{nan_report.message}** at step **{nan_report.step}**, made by
    `{nan_report.where or "(no user frame)"}`. The loss first exploded at step
    {diverged_at["unstable"]}: the NaN is the end of the story (overflowing numbers meeting in
    `inf - inf` or `0 * inf`), not its start: the charts above show the start.

    ```python
    checked = jax.jit(checkify.checkify(jax.value_and_grad(loss), errors=checkify.float_checks))
    error, (loss_value, grads) = checked(params_at_step_{nan_report.step}, x, y)
    error.get()   # '{nan_report.message}'
    ```
    """
                ),
            ]
        )
    elif diverged_at["unstable"] is not None:
        nan_view = mo.callout(
            mo.md(
                f"The unstable run exploded at step {diverged_at['unstable']} but made no NaN "
                f"within {steps.value} steps (only large or infinite values)."
            ),
            kind="info",
        )
    else:
        nan_view = mo.callout(
            mo.md(
                "The 'unstable' run did not diverge with these settings: raise the **learning "
                "rate** or the **init scale**."
            ),
            kind="info",
        )
    debug_nans_button = mo.ui.run_button(
        label="Also ask jax.debug_nans (slow: every op compiles separately)"
    )
    mo.vstack([nan_view, debug_nans_button] if nan_report is not None else [nan_view])
    return debug_nans_button, nan_report


@app.cell
def _(debug_nans_button, nan_report, runs, x_ND, y_N):
    mo.stop(nan_report is None or not debug_nans_button.value)
    _message = debug_unstable.debug_nans_message(runs[0], nan_report.step, x_ND, y_N)
    mo.md(
        "`with jax.debug_nans(True):` re-runs the step op by op and raises "
        f"`FloatingPointError: {_message}`."
    )
    return


@app.cell
def _(diverged_at, outcomes, runs, x_ND, y_N):
    # Independent references. (1) Gradient norms: recompute the gradients at the recorded
    # weights of the first steps (a separately compiled program) and take their norms in
    # NumPy float64; compare with the norms recorded inside the compiled training loop.
    _norm_errors = []
    for _run in [r for r in runs if not r.config.layernorm]:
        for _k in range(min(4, len(_run.loss_S))):
            _error, _value, _grads = debug_unstable.checked_gradients(_run.params_at(_k), x_ND, y_N)
            _global = debug_unstable.global_norm_reference(jax.tree.leaves(_grads))
            if not np.isfinite(_global):
                break  # the gradients themselves overflowed: nothing finite to compare
            _per_layer = debug_unstable.layer_grad_norms_reference(_grads)
            _scale = max(_global, 1e-30)  # relative to the whole gradient: a vanished layer is ~0
            _norm_errors.append(
                numerics.max_abs_error(_run.global_grad_norm_S[_k], _global) / _scale
            )
            _norm_errors.append(numerics.max_abs_error(_run.grad_norm_SL[_k], _per_layer) / _scale)
    grad_norm_error = max(_norm_errors, default=np.inf)
    # (2) Divergence: the loss in NumPy float64, from the recorded weights, at the first step,
    # just before the step the detector named, and at it.
    _step = diverged_at["unstable"]
    divergence_confirmed = None
    if _step is not None:
        with np.errstate(all="ignore"):
            _first = mlp.loss_reference(runs[0].params_at(0), x_ND, y_N)
            _at = mlp.loss_reference(runs[0].params_at(_step), x_ND, y_N)
            _before = (
                mlp.loss_reference(runs[0].params_at(_step - 1), x_ND, y_N) if _step > 0 else _first
            )
        divergence_confirmed = bool(
            (not np.isfinite(_at) or _at > EXPLODE_FACTOR * _first)
            and np.isfinite(_before)
            and _before <= EXPLODE_FACTOR * _first
        )
    # (3) Shown, not checked here: does the combined fix train (never diverges, ends below a
    # quarter of ln C)? It is a claim about training dynamics, made for the defaults: the test
    # cell below asserts it there, and stability_test proves it over seeds with margin.
    _fix_works = outcomes[-1].trains
    _divergence_text = (
        f"the unstable run diverged at step {_step} "
        f"(confirmed in NumPy float64: {divergence_confirmed})"
        if _step is not None
        else "the unstable run did not diverge (nothing to confirm)"
    )
    check = lab.Check(
        "recorded gradient norms vs NumPy float64 norms of recomputed gradient leaves; "
        f"{_divergence_text}; 'all three' ends at loss {outcomes[-1].final_loss:.3f} "
        f"({'trains' if _fix_works else 'does not train'}: "
        f"the line is {outcomes[-1].trains_below:.3f})",
        {"gradient norms (relative to the global norm)": grad_norm_error},
        numerics.tolerance("float32"),
        facts={
            "NumPy float64 confirms the divergence step (if any)": divergence_confirmed is not False
        },
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("debug_unstable")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_defaults_diverge_and_every_fix_trains(
    clip_norm,
    depth,
    hidden,
    init_scale,
    learning_rate,
    outcomes,
    safe_learning_rate,
    seed,
    steps,
):
    # The lesson's claim, made for its defaults (read from the controls: a served app keeps
    # ARGS while the sliders move); stability_test proves it over seeds with margin >= 2.
    _controls = dict(
        learning_rate=learning_rate,
        init_scale=init_scale,
        depth=depth,
        hidden=hidden,
        clip_norm=clip_norm,
        safe_learning_rate=safe_learning_rate,
        steps=steps,
        seed=seed,
    )
    if claims.at_defaults(FLAGS, {_name: _control.value for _name, _control in _controls.items()}):
        assert debug_unstable.claim_problems(outcomes) == []
    return


@app.cell
def test_nan_report_names_an_op(diverged_at, nan_report):
    if nan_report is not None:
        assert (
            nan_report.primitive in nan_report.message
            and nan_report.step >= diverged_at["unstable"]
        )
        assert ".py:" in nan_report.where
    return


if __name__ == "__main__":
    app.run()
