import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Write gradient descent yourself")

with app.setup:
    import altair as alt
    import jax.numpy as jnp
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import claims
    from core.lessons.math_optimization import gradient_descent as gd
    from core.perf import timing

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("learning_rate", 0.001, "step size lr", lo=0.0, hi=0.005, step=0.0001),
        lab.Flag("momentum", 0.9, "heavy-ball momentum beta", lo=0.0, hi=0.95, step=0.05),
        lab.Flag("steps", 500, "gradient steps", lo=50, hi=2000, step=50),
        lab.Flag("start_x", -1.2, "starting x", lo=-2.0, hi=2.0, step=0.1),
        lab.Flag("start_y", 1.0, "starting y", lo=-1.0, hi=3.0, step=0.1),
        description="Write gradient descent yourself: a loop, jit, lax.scan; momentum.",
    )
    ARGS = FLAGS.parse()
    RUN_COLORS = alt.Scale(domain=["plain GD", "momentum"], range=["#4c78a8", "#e45756"])


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Write gradient descent yourself
    {lab.phase_line("gradient_descent")}

    Gradient descent is three lines: take the gradient, step against it, repeat. The
    Rosenbrock function `f(x, y) = (1 - x)² + 100 (y - x²)²` makes those lines work hard: a
    narrow curved valley, steep across and nearly flat along, with the minimum 0 at (1, 1).
    In this lesson you will

    - write the loop in plain Python with `jax.grad`, then `jit` the step, then put the whole
      loop into one `lax.scan`, and see that all three give the same path;
    - add **momentum** (heavy ball: `v = beta v + grad; p = p - lr v`) and watch it run along
      the valley where plain descent crawls;
    - find the **stability limit** `2 (1 + beta) / lambda_max` of the learning rate, and check
      every step against the same update in NumPy float64 with the closed-form gradient.
    """)
    return


@app.cell
def _():
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    momentum = FLAGS.control("momentum", ARGS, label="momentum beta")
    steps = FLAGS.control("steps", ARGS)
    start_x = FLAGS.control("start_x", ARGS, label="start x")
    start_y = FLAGS.control("start_y", ARGS, label="start y")
    mo.vstack(
        [
            mo.hstack([learning_rate, momentum, steps], justify="start", wrap=True),
            mo.hstack([start_x, start_y], justify="start"),
        ]
    )
    return learning_rate, momentum, start_x, start_y, steps


@app.cell
def _(learning_rate, momentum, start_x, start_y, steps):
    lr, beta = float(learning_rate.value), float(momentum.value)
    start = (float(start_x.value), float(start_y.value))
    _limits = [
        {
            "where": where,
            "lambda_max of the Hessian": float(np.linalg.eigvalsh(gd.hessian_numpy(p)).max()),
            "limit, plain GD": gd.stability_limit(p, 0.0),
            f"limit, momentum {beta:g}": gd.stability_limit(p, beta),
        }
        for where, p in (("start", start), ("minimum (1, 1)", gd.MINIMUM))
    ]
    lab.guard(gd.problem(lr, beta), lab.table(_limits), headline="This run cannot converge.")
    # The float64 reference runs first: a run that escapes is refused before anything is drawn.
    reference_runs = {
        "plain GD": gd.reference(start, lr, 0.0, steps.value),
        "momentum": gd.reference(start, lr, beta, steps.value),
    }
    _escaped = next(
        (
            f"{name}: {gd.path_problem(path)}"
            for name, path in reference_runs.items()
            if gd.path_problem(path)
        ),
        None,
    )
    lab.guard(_escaped, lab.table(_limits), headline="This run leaves the map.")
    mo.vstack(
        [
            mo.md(
                "The learning rate must stay below 2 (1 + beta) / lambda_max, where lambda_max "
                "is the largest curvature (Hessian eigenvalue) where the run is. It is largest "
                "across the valley; at the minimum it is about 1002, so plain GD can only settle "
                "with lr < 0.002."
            ),
            lab.table(_limits),
        ]
    )
    return beta, lr, reference_runs, start


@app.cell
def _(beta, lr, start, steps):
    mo.md(
        f"""
    ## The same update, three ways

    ```python
    def step(p, v, lr, beta):
        v = beta * v + jax.grad(f)(p)        # beta = 0: plain gradient descent
        return p - lr * v, v

    # 1. a Python loop, op by op ({gd.PYTHON_STEPS} steps here: every op is dispatched alone)
    for _ in range(steps): p, v = step(p, v, lr, beta)
    # 2. the same loop calling jax.jit(step): one compiled program per step
    # 3. one compiled program for the whole loop
    (p, v), path = jax.lax.scan(lambda c, _: (step(*c, lr, beta),) * 2, (p0, v0), length=steps)
    ```
    lr = {lr:g}, beta = {beta:g}, {steps.value} steps from {start}.
    """
    )
    return


@app.cell
def _(beta, lr, start, steps):
    _start = jnp.asarray(start)
    python_path, python_s = timing.timed_call(gd.python_loop, start, lr, beta, gd.PYTHON_STEPS)
    jit_path, jit_s = timing.timed_call(gd.jit_loop, start, lr, beta, steps.value)
    (scan_p, scan_v), scan_s = timing.timed_call(gd.scan_states, _start, lr, beta, steps.value)
    plain_p, plain_v = gd.scan_states(_start, lr, 0.0, steps.value)
    runs = {
        "plain GD": (np.asarray(plain_p), np.asarray(plain_v)),
        "momentum": (np.asarray(scan_p), np.asarray(scan_v)),
    }
    lab.table(
        [
            {
                "implementation": "Python loop, op by op",
                "steps": gd.PYTHON_STEPS,
                "seconds (first call, compile included)": python_s,
                "per step (ms)": 1e3 * python_s / gd.PYTHON_STEPS,
            },
            {
                "implementation": "Python loop of a jitted step",
                "steps": steps.value,
                "seconds (first call, compile included)": jit_s,
                "per step (ms)": 1e3 * jit_s / steps.value,
            },
            {
                "implementation": "one lax.scan",
                "steps": steps.value,
                "seconds (first call, compile included)": scan_s,
                "per step (ms)": 1e3 * scan_s / steps.value,
            },
        ],
        caption="Measured once on this machine (a first call: tracing and compiling count).",
    )
    return jit_path, python_path, runs


@app.cell
def _(beta, jit_path, lr, python_path, runs):
    # Independent reference: the update in NumPy float64 with the closed-form gradient,
    # applied to every recorded state (p_t, v_t): what step t + 1 should be. Step by step,
    # since momentum on Rosenbrock amplifies float32 rounding along the whole path.
    _errors = {}
    for _name, (_p, _v) in runs.items():
        _p_ref, _v_ref = gd.one_step_reference(_p, _v, lr, beta if _name == "momentum" else 0.0)
        _errors[f"{_name}: every step vs float64"] = max(
            numerics.scaled_max_error(_p[1:], _p_ref), numerics.scaled_max_error(_v[1:], _v_ref)
        )
    _scan = runs["momentum"][0]
    _errors[f"Python loop vs scan ({gd.PYTHON_STEPS} steps)"] = numerics.scaled_max_error(
        python_path, _scan[: gd.PYTHON_STEPS + 1]
    )
    _errors[f"jit loop vs scan ({gd.JIT_STEPS} steps)"] = numerics.scaled_max_error(
        jit_path[: gd.JIT_STEPS + 1], _scan[: gd.JIT_STEPS + 1]
    )
    check = lab.Check(
        "Rosenbrock gradient descent (float32; Python loop, jit, lax.scan): every step equals "
        "the heavy-ball update in NumPy float64 with the closed-form gradient",
        _errors,
        numerics.tolerance("float32"),
    )
    check
    return (check,)


@app.cell
def _(reference_runs, runs, start):
    final = {name: gd.final_loss(p) for name, (p, _v) in runs.items()}
    _every = max(1, len(runs["momentum"][0]) // 400)
    _paths = pd.DataFrame(
        [
            {"run": name, "step": t, "x": float(xy[0]), "y": float(xy[1])}
            for name, (p, _v) in runs.items()
            for t, xy in list(enumerate(p))[::_every]
        ]
    )
    _field = (
        alt.Chart(pd.DataFrame(gd.landscape()))
        .mark_rect()
        .encode(
            x=alt.X("x:Q", scale=alt.Scale(domain=[-2, 2]), title="x"),
            x2="x2:Q",
            y=alt.Y("y:Q", scale=alt.Scale(domain=[-1, 3]), title="y"),
            y2="y2:Q",
            color=alt.Color("log10(1 + f):Q", scale=alt.Scale(scheme="greys")),
        )
    )
    _lines = (
        alt.Chart(_paths)
        .mark_line(strokeWidth=2, clip=True)
        .encode(
            x="x:Q",
            y="y:Q",
            order="step:Q",
            color=alt.Color("run:N", scale=RUN_COLORS, title=None),
            tooltip=[
                "run",
                "step",
                alt.Tooltip("x:Q", format=".3f"),
                alt.Tooltip("y:Q", format=".3f"),
            ],
        )
    )
    _marks = (
        alt.Chart(
            pd.DataFrame(
                [
                    {"x": start[0], "y": start[1], "point": "start"},
                    {"x": 1.0, "y": 1.0, "point": "minimum"},
                ]
            )
        )
        .mark_point(shape="diamond", size=120, filled=True, color="black")
        .encode(x="x:Q", y="y:Q", tooltip=["point"])
    )
    _map = (_field + _lines + _marks).properties(
        width=360, height=360, title="Paths on log10(1 + f)"
    )
    _loss = pd.DataFrame(
        [
            {"run": name, "step": t, "f": max(float(gd.rosenbrock_numpy(*xy)), 1e-12)}
            for name, (p, _v) in runs.items()
            for t, xy in list(enumerate(p))[::_every]
        ]
    )
    _loss_chart = (
        alt.Chart(_loss, title="f along the path")
        .mark_line()
        .encode(
            x="step:Q",
            y=alt.Y("f:Q", scale=alt.Scale(type="log")),
            color=alt.Color("run:N", scale=RUN_COLORS, title=None),
        )
        .properties(width=300, height=360)
    )
    _f64 = {name: gd.final_loss(path) for name, path in reference_runs.items()}
    mo.vstack(
        [
            mo.hstack([_map, _loss_chart], justify="start"),
            lab.table(
                [
                    {
                        "run": name,
                        "final f (float32 run)": final[name],
                        "final f (float64 run)": _f64[name],
                        "distance to (1, 1)": float(np.linalg.norm(runs[name][0][-1] - 1.0)),
                    }
                    for name in runs
                ]
            ),
            mo.md(
                "Plain GD drops into the valley in a few steps and then crawls: along the valley "
                "the slope is tiny, and the learning rate cannot grow (across it the curvature "
                "is ~1000). Momentum accumulates the small, consistent along-valley gradient. "
                f"Not from everywhere: start at {gd.COUNTER_START} (below the valley) and plain "
                "GD slides to the minimum while momentum overshoots. The float32 and float64 "
                "runs end at slightly different points with momentum: each step agrees to "
                "float32 rounding (the check), and the valley amplifies those differences."
            ),
        ]
    )
    return (final,)


@app.cell(hide_code=True)
def _():
    lab.lesson_end("gradient_descent")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_momentum_wins_at_the_defaults(final, learning_rate, momentum, start_x, start_y, steps):
    # The lesson's claim at its defaults; gradient_descent_test proves it from five starts.
    _controls = dict(
        learning_rate=learning_rate,
        momentum=momentum,
        steps=steps,
        start_x=start_x,
        start_y=start_y,
    )
    if claims.at_defaults(FLAGS, {_n: _c.value for _n, _c in _controls.items()}):
        assert final["momentum"] * 10 <= final["plain GD"]
    return


if __name__ == "__main__":
    app.run()
