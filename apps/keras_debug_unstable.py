import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Keras 3: unstable learning on every backend")

with app.setup:
    import dataclasses

    import marimo as mo

    from core import lab
    from core.lab import claims
    from interop.keras_track import parity, runner, unstable, views

    _D = unstable.DEFAULTS
    FLAGS = lab.Flags(
        lab.Flag("backends", "jax,torch,tensorflow", "comma-separated Keras backends to run"),
        lab.Flag(
            "learning_rate",
            _D["learning_rate"],
            "SGD (momentum 0.9) learning rate of the unstable run",
            lo=0.01,
            hi=2.0,
            step=0.01,
        ),
        lab.Flag("init_scale", _D["init_scale"], "multiplier on the He kernels", lo=0.25, hi=3.0),
        lab.Flag("depth", _D["depth"], "hidden layers", lo=2, hi=8),
        lab.Flag("hidden", _D["hidden"], "units per hidden layer", lo=8, hi=64, step=8),
        lab.Flag(
            "clip_norm", _D["clip_norm"], "fix 1: clip the global gradient norm", lo=0.1, hi=10.0
        ),
        lab.Flag(
            "safe_learning_rate",
            _D["safe_learning_rate"],
            "fix 2: a lower learning rate",
            lo=0.001,
            hi=0.5,
            step=0.001,
        ),
        lab.Flag("steps", _D["steps"], "training steps (full batch)", lo=10, hi=300, step=10),
        lab.Flag("seed", 0, "seed of the weights and the data", lo=0, hi=9999),
        description="debug_unstable in Keras 3: divergence and its fixes on every backend.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Keras 3: unstable learning on every backend
    {lab.track_line("keras_debug_unstable")}

    A deep ReLU network (He kernels scaled up) trained with SGD and momentum 0.9 at too high a
    learning rate blows up: the loss leaves the chart and becomes `nan`. That is a property of
    the optimization problem, not of a framework: under **jax**, **torch** and
    **tensorflow** (one process each, the same weights and points) the unstable run diverges
    the same way, and both fixes train everywhere: Keras's `global_clipnorm` (the global
    gradient norm clipped, like `optax.clip_by_global_norm`; `clipnorm` clips each tensor
    alone) or a lower learning rate.

    The fixed runs are also a parity test: their loss curves agree across backends step by
    step. A diverging run is chaotic, so it is judged by its verdict, not by its numbers.
    """)
    return


@app.cell
def _():
    backends = mo.ui.text(value=ARGS.backends, label="backends (comma-separated)")
    # A mo.ui.dictionary, which marimo tracks: a plain dict of controls re-runs nothing when
    # one moves (the results of the last run would stay beside the moved control).
    controls = mo.ui.dictionary(
        {
            name: FLAGS.control(name, ARGS)
            for name in (
                "learning_rate",
                "init_scale",
                "depth",
                "hidden",
                "clip_norm",
                "safe_learning_rate",
                "steps",
                "seed",
            )
        }
    )
    run_button = mo.ui.run_button(label="Run under the chosen backends")
    mo.vstack(
        [
            backends,
            mo.hstack(list(controls.values()), justify="start", wrap=True),
            run_button,
        ]
    )
    return run_button, backends, controls


@app.cell
def _(backends):
    chosen, _problem = runner.parse_backends(backends.value)
    lab.guard(_problem, headline="These backends cannot be run.")
    lab.require(
        "keras",
        "safetensors",  # the weights travel to each backend's process as a safetensors file
        *[b for b in chosen if b != "jax"],
        why="Keras runs each chosen backend in its own process",
    )
    return (chosen,)


@app.cell
def _(chosen, controls, run_button):
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md(
            "Press **Run under the chosen backends**: one Keras process per backend, "
            "each importing its backend first (most of the wait; longer on a busy machine)."
        ),
    )
    settings = {k: c.value for k, c in controls.items()}
    _cases = unstable.cases(settings["seed"], settings)
    # gradients once (the first fix): all three runs start from the same weights
    _cases[1] = dataclasses.replace(
        _cases[1], training=dataclasses.replace(_cases[1].training, gradients=True)
    )
    with mo.status.spinner(f"3 runs under {', '.join(chosen)} (one process per backend)"):
        runs = runner.run_cases(_cases, chosen)
    cases = {c.name: c for c in _cases}
    verdicts = [
        {
            "run": name,
            "backend": b,
            "verdict": unstable.verdict(runs[b][name].train_loss),
            "expected": unstable.expected(name),
            "peak / first loss": unstable.peak_ratio(runs[b][name].train_loss),
            "last loss": float(runs[b][name].train_loss[-1]),
        }
        for name in cases
        for b in chosen
    ]
    lab.table(
        verdicts,
        "each run's verdict per backend (diverged: a non-finite loss, or a rise past "
        f"{unstable.DIVERGED_FACTOR:g}x the first loss that never came back; trained: the last "
        f"{unstable.TAIL} losses under {unstable.TRAINED_LOSS:g}, whatever spike came before)",
    )
    return cases, runs, settings, verdicts


@app.cell
def _(cases, runs):
    _name = list(cases)[1]
    _fixed = {b: by_case[_name] for b, by_case in runs.items()}
    _case = cases[_name]
    _ref = parity.reference(_case.spec, _case.weights, _case.data)
    table = parity.table(_fixed, _ref, unstable.FIXED_LOSS_TOLERANCE)
    for _other in list(cases)[2:]:
        _others = {b: by_case[_other] for b, by_case in runs.items()}
        _rows = parity.table(_others, None, unstable.FIXED_LOSS_TOLERANCE).rows
        table = parity.Table(table.rows + tuple(r for r in _rows if "loss" in r.quantity))
    mo.vstack(
        [
            mo.md("## Parity of the fixed runs (pairwise, and against NumPy float64)"),
            lab.table(table.dicts(), words={"check": ("PASS", "FAIL")}),
            lab.table(
                parity.timing_rows(_fixed),
                f"time per step ({_name}): this machine's CPU, not a TPU",
            ),
        ]
    )
    return (table,)


@app.cell
def _(backends, settings, table, verdicts):
    _values = {**settings, "backends": FLAGS.flags["backends"].default}
    _claimed = claims.at_defaults(FLAGS, _values)
    _facts = {"the verdicts are claimed (defaults)": True} if not _claimed else {}
    if _claimed:
        for _row in verdicts:
            _facts[f"{_row['run']} {_row['expected']} on {_row['backend']}"] = (
                _row["verdict"] == _row["expected"]
            )
    check = lab.Check(
        f"Keras deep MLP, unstable vs fixed under {backends.value}: fixed runs' outputs, "
        "gradients and loss curves vs NumPy float64 and pair by pair"
        + ("; at the defaults each verdict as claimed" if _claimed else ""),
        table.errors(),
        table.tolerances(),
        facts=_facts,
    )
    check
    return (check,)


@app.cell
def _(runs):
    _rows = []
    for _b, _by_case in runs.items():
        for _name, _run in _by_case.items():
            for _row in parity.curve_rows({_b: _run}):
                if _row["loss"] == _row["loss"] and _row["loss"] < 1e6:  # drop nan and blow-up
                    _rows.append({**_row, "run": _name})
    views.loss_chart(_rows, "loss per step (log), colour: backend, dash: run", log=True)
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


if __name__ == "__main__":
    app.run()
