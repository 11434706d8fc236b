import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Adam, clipping, and learning-rate schedules")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lessons.math_optimization import adam_clipping_schedules as acs
    from core.optim import references

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("schedule", "warmup_cosine", "learning-rate schedule", choices=acs.SCHEDULES),
        lab.Flag("peak_lr", 0.03, "peak learning rate", lo=0.001, hi=0.1, step=0.001),
        lab.Flag("end_lr", 0.0001, "learning rate at the last step", lo=0.0, hi=0.01, step=0.0001),
        lab.Flag("warmup", 10, "warmup steps (warmup-cosine)", lo=0, hi=200),
        lab.Flag("steps", 100, "optimizer steps S", lo=20, hi=200, step=10),
        lab.Flag("b1", 0.9, "Adam beta1 (first-moment decay)", lo=0.0, hi=0.99, step=0.01),
        lab.Flag("b2", "0.999", "Adam beta2 (second-moment decay)", choices=acs.B2_CHOICES),
        lab.Flag("eps", "1e-08", "Adam epsilon", choices=acs.EPS_CHOICES),
        lab.Flag("weight_decay", 0.01, "decoupled weight decay", lo=-0.1, hi=0.5, step=0.01),
        lab.Flag(
            "clip_norm", 10.0, "clip the global gradient norm to this", lo=0.5, hi=50.0, step=0.5
        ),
        lab.Flag("grad_scale", 1.0, "std of the gradient entries", lo=0.1, hi=5.0, step=0.1),
        lab.Flag("seed", 0, "PRNG seed (params and gradients)", lo=0, hi=9999),
        description="Adam, clipping, schedules: hand-written AdamW vs optax and torch.",
    )
    ARGS = FLAGS.parse()
    IMPLEMENTATION_COLORS = alt.Scale(
        domain=["vs optax.adamw", "vs torch.optim.AdamW"], range=["#4c78a8", "#e45756"]
    )


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Adam, clipping, and learning-rate schedules
    {lab.phase_line("adam_clipping_schedules")}

    Adam keeps two running averages per parameter, of the gradient (m) and of its square
    (s), corrects both for starting at zero, and steps by m / (sqrt(s) + eps): each parameter
    gets its own step size. AdamW adds *decoupled* weight decay, a pull towards zero scaled
    by the learning rate but not by the gradient statistics. In this lesson you will

    - write AdamW by hand (`core.optim.optimizers.adamw`, a pure `init`/`update` pair) and
      check it against `optax.adamw` (max difference <= 1e-6 over the whole run) and
      `torch.optim.AdamW`, on the same parameters and the same gradient sequence;
    - clip gradients by their **global** norm and compare with `optax.clip_by_global_norm`;
    - plot warmup-cosine, linear and constant learning-rate schedules and check each
      against optax's.
    """)
    return


@app.cell
def _():
    schedule = FLAGS.control("schedule", ARGS)
    peak_lr = FLAGS.control("peak_lr", ARGS, label="peak lr")
    end_lr = FLAGS.control("end_lr", ARGS, label="end lr")
    warmup = FLAGS.control("warmup", ARGS)
    steps = FLAGS.control("steps", ARGS)
    b1 = FLAGS.control("b1", ARGS)
    b2 = FLAGS.control("b2", ARGS)
    eps = FLAGS.control("eps", ARGS)
    weight_decay = FLAGS.control("weight_decay", ARGS, label="weight decay")
    clip_norm = FLAGS.control("clip_norm", ARGS, label="clip norm")
    grad_scale = FLAGS.control("grad_scale", ARGS, label="gradient std")
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md("**Schedule**"),
            mo.hstack([schedule, peak_lr, end_lr, warmup, steps], justify="start", wrap=True),
            mo.md("**AdamW**"),
            mo.hstack([b1, b2, eps, weight_decay], justify="start", wrap=True),
            mo.md("**Gradients and clipping**"),
            mo.hstack([grad_scale, clip_norm, seed], justify="start", wrap=True),
        ]
    )
    return (
        b1,
        b2,
        clip_norm,
        end_lr,
        eps,
        grad_scale,
        peak_lr,
        schedule,
        seed,
        steps,
        warmup,
        weight_decay,
    )


@app.cell
def _(
    b1,
    b2,
    end_lr,
    eps,
    grad_scale,
    peak_lr,
    schedule,
    seed,
    steps,
    warmup,
    weight_decay,
):
    _settings = [
        {
            "schedule": schedule.value,
            "warmup": warmup.value,
            "steps": steps.value,
            "weight decay": weight_decay.value,
        }
    ]
    lab.guard(
        acs.problem(schedule.value, warmup.value, steps.value, weight_decay.value),
        lab.table(_settings),
        headline="These settings cannot train.",
    )
    hyper = dict(
        b1=b1.value, b2=float(b2.value), eps=float(eps.value), weight_decay=weight_decay.value
    )
    ours_schedule, optax_schedule = acs.make_schedule(
        schedule.value, peak_lr.value, warmup.value, steps.value, end_lr.value
    )
    params, grads_S = acs.gradient_sequence(
        jax.random.key(seed.value), steps.value, grad_scale.value
    )
    learning_rates = acs.evaluate(optax_schedule, np.arange(steps.value))
    ours_S = acs.ours_adamw(params, grads_S, ours_schedule, **hyper)
    optax_S = acs.optax_adamw(params, grads_S, optax_schedule, **hyper)
    lab.require("torch", why="the third reference is torch.optim.AdamW")
    torch_S = references.torch_adamw(params, grads_S, learning_rates, **hyper)
    mo.md(
        f"""
    ## One gradient sequence, three AdamWs

    {steps.value} gradients of a 36-parameter layer (`w` 8x4, `b` 4), entries ~ N(0,
    {grad_scale.value:g}²), {acs.SPIKE_FRACTION:.0%} of the steps {acs.SPIKE_FACTOR:g}x larger.
    The same float32 parameters and gradients go to the hand-written AdamW, to `optax.adamw`
    and to `torch.optim.AdamW` (its learning rate set from the schedule before every step).

    ```python
    m = b1 * m + (1 - b1) * g;   s = b2 * s + (1 - b2) * g**2
    m_hat = m / (1 - b1**t);     s_hat = s / (1 - b2**t)
    p = p - lr_t * (m_hat / (sqrt(s_hat) + eps) + weight_decay * p)
    ```
    torch writes it as `p *= 1 - lr_t * wd` followed by
    `p -= lr_t / (1 - b1**t) * m / (sqrt(s) / sqrt(1 - b2**t) + eps)`: the same update (eps
    after the bias correction, the decay on the old p), rounded differently.
    """
    )
    return grads_S, learning_rates, ours_S, ours_schedule, optax_S, params, torch_S


@app.cell
def _(clip_norm, grads_S):
    clipped_S, optax_clipped_S, norm_before_S, norm_after_S = acs.clip_sequences(
        grads_S, clip_norm.value
    )
    return clipped_S, norm_after_S, norm_before_S, optax_clipped_S


@app.cell
def _(
    clip_norm,
    clipped_S,
    learning_rates,
    norm_after_S,
    optax_S,
    optax_clipped_S,
    ours_S,
    ours_schedule,
    schedule,
    steps,
    torch_S,
):
    _ours_lr = acs.evaluate(ours_schedule, np.arange(steps.value))
    _within = bool(np.all(norm_after_S <= clip_norm.value * (1 + 1e-6)))
    check = lab.Check(
        f"hand-written AdamW vs optax.adamw and torch.optim.AdamW over {steps.value} steps; "
        f"global-norm clipping vs optax.clip_by_global_norm; {schedule.value} vs optax's",
        {
            "params vs optax.adamw (scaled max)": numerics.tree_scaled_max_error(ours_S, optax_S),
            "params vs torch.optim.AdamW (scaled max)": numerics.tree_scaled_max_error(
                ours_S, torch_S
            ),
            "clipped gradients vs optax (normwise)": numerics.tree_normwise_max_error(
                clipped_S, optax_clipped_S
            ),
            "schedule vs optax (scaled max)": numerics.scaled_max_error(_ours_lr, learning_rates),
        },
        {
            "params vs optax.adamw (scaled max)": acs.OPTAX_AGREEMENT,
            "params vs torch.optim.AdamW (scaled max)": numerics.tolerance("float32"),
            "clipped gradients vs optax (normwise)": numerics.tolerance("float32"),
            "schedule vs optax (scaled max)": numerics.tolerance("float32"),
        },
        facts={f"every clipped norm <= {clip_norm.value:g}": _within},
    )
    check
    return (check,)


@app.cell
def _(optax_S, ours_S, steps, torch_S):
    _rows = pd.DataFrame(
        [
            {"step": t + 1, "against": name, "max |difference|": max(float(d), 1e-10)}
            for name, other in (("vs optax.adamw", optax_S), ("vs torch.optim.AdamW", torch_S))
            for t, d in enumerate(acs.per_step_difference(ours_S, other))
        ]
    )
    _chart = (
        alt.Chart(_rows, title="Hand-written AdamW: largest parameter difference per step")
        .mark_line(point=steps.value <= 60)
        .encode(
            x=alt.X("step:Q"),
            y=alt.Y("max |difference|:Q", scale=alt.Scale(type="log", domain=[1e-10, 1e-4])),
            color=alt.Color("against:N", scale=IMPLEMENTATION_COLORS, title=None),
            tooltip=["step", "against", alt.Tooltip("max |difference|:Q", format=".2e")],
        )
        .properties(width=480, height=220)
    )
    _bound = (
        alt.Chart(pd.DataFrame({"y": [acs.OPTAX_AGREEMENT]}))
        .mark_rule(strokeDash=[4, 3], color="grey")
        .encode(y="y:Q")
    )
    mo.vstack(
        [
            _chart + _bound,
            mo.md(
                "Zero differences are drawn at 1e-10. The dashed line is the 1e-6 bound. The "
                "differences are float32 rounding, a few units in the last place of "
                "parameters near 1: torch rounds twice a step (decay, then the Adam step) and "
                "computes the bias corrections 1 - b^t in float64 on the host, so it walks a "
                "little further from the two float32 versions."
            ),
        ]
    )
    return


@app.cell
def _(end_lr, peak_lr, schedule, steps, warmup):
    _rows = []
    for _name in acs.SCHEDULES:
        _warm = min(warmup.value, steps.value - 1)
        _ours, _theirs = acs.make_schedule(_name, peak_lr.value, _warm, steps.value, end_lr.value)
        _t = np.arange(steps.value)
        _rows += [
            {"step": int(t), "schedule": _name, "lr": float(v), "source": "ours"}
            for t, v in zip(_t, acs.evaluate(_ours, _t), strict=True)
        ]
        _every = _t[:: max(1, steps.value // 20)]
        _rows += [
            {"step": int(t), "schedule": _name, "lr": float(v), "source": "optax"}
            for t, v in zip(_every, acs.evaluate(_theirs, _every), strict=True)
        ]
    _frame = pd.DataFrame(_rows)
    _lines = (
        alt.Chart(_frame[_frame.source == "ours"])
        .mark_line()
        .encode(
            x="step:Q",
            y=alt.Y("lr:Q", title="learning rate"),
            color=alt.Color("schedule:N", sort=list(acs.SCHEDULES)),
            strokeWidth=alt.condition(
                alt.datum.schedule == schedule.value, alt.value(3), alt.value(1)
            ),
        )
    )
    _points = (
        alt.Chart(_frame[_frame.source == "optax"])
        .mark_point(filled=False, size=40)
        .encode(
            x="step:Q",
            y="lr:Q",
            color=alt.Color("schedule:N", sort=list(acs.SCHEDULES)),
            tooltip=["schedule", "step", alt.Tooltip("lr:Q", format=".3g")],
        )
    )
    mo.vstack(
        [
            mo.md(
                "## Schedules\nLines: `core.optim.schedules`; circles: optax's "
                "`warmup_cosine_decay_schedule`, `linear_schedule`, `constant_schedule`. The "
                f"run above used **{schedule.value}** (thick). Warmup keeps the first steps small "
                "while Adam's s is still a poor estimate; the decay lets the run settle."
            ),
            (_lines + _points).properties(width=480, height=220, title="Learning rate per step"),
        ]
    )
    return


@app.cell
def _(clip_norm, norm_after_S, norm_before_S):
    _rows = pd.DataFrame(
        [
            {"step": t + 1, "norm": float(v), "gradient": name}
            for name, values in (("before clipping", norm_before_S), ("after", norm_after_S))
            for t, v in enumerate(values)
        ]
    )
    _chart = (
        alt.Chart(_rows, title="Global gradient norm per step")
        .mark_line(point=True)
        .encode(
            x="step:Q",
            y=alt.Y("norm:Q", scale=alt.Scale(type="log")),
            color=alt.Color("gradient:N", title=None, sort=["before clipping", "after"]),
            tooltip=["step", "gradient", alt.Tooltip("norm:Q", format=".3g")],
        )
        .properties(width=480, height=220)
    )
    _rule = (
        alt.Chart(pd.DataFrame({"y": [clip_norm.value]}))
        .mark_rule(strokeDash=[4, 3], color="black")
        .encode(y="y:Q")
    )
    _clipped = int(np.sum(norm_before_S > clip_norm.value))
    mo.vstack(
        [
            mo.md(
                f"""
    ## Clipping by the global norm

    `g * min(1, c / ||g||)` with `||g||` over **all** leaves at once: {_clipped} of
    {len(norm_before_S)} steps were above c = {clip_norm.value:g} (dashed) and were scaled
    down, every leaf by the same factor, so the update keeps its direction. The spikes are
    what clipping is for; the ordinary steps pass unchanged.
    """
            ),
            _chart + _rule,
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("adam_clipping_schedules")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_parameters_moved(ours_S, params):
    # The agreement is not that of two unmoved copies: AdamW changed the parameters.
    final = jax.tree.map(lambda p: p[-1], ours_S)
    assert numerics.tree_scaled_max_error(final, params) > 100 * acs.OPTAX_AGREEMENT
    return


if __name__ == "__main__":
    app.run()
