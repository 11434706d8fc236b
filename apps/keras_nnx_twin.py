import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Keras and Flax NNX: one model, two frameworks")

with app.setup:
    import tempfile

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from interop.keras_track import child
    from interop.keras_track import nnx_twin as twin

    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "seed of DigitsNet's weights and of the input batch", lo=0, hi=9999),
        lab.Flag("batch", 8, "digits images in the input batch", lo=1, hi=64),
        lab.Flag(
            "backends",
            ",".join(twin.BACKENDS),
            "comma-separated Keras backends: " + ", ".join(twin.BACKENDS),
        ),
        lab.Flag(
            "mistake",
            "none",
            "a conversion mistake planted in the move that the check judges",
            choices=tuple(twin.MISTAKES),
        ),
        lab.Flag(
            "control",
            "conv1_kernel_transposed",
            "the planted mistake always run beside the correct move (the control)",
            choices=tuple(m for m in twin.MISTAKES if m != "none"),
        ),
        description=(
            "DigitsNet in Flax NNX and its Keras 3 twin under each backend (a subprocess each): "
            "the weights moved, every layer compared, a planted mistake caught."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Keras and Flax NNX: one model, two frameworks
    {lab.track_line("keras_nnx_twin")}

    The Flax NNX lesson built models as Python objects holding their parameters. Keras 3
    does the same with layers, and runs them on JAX, PyTorch or TensorFlow. This app takes the
    course's **DigitsNet** in NNX (two 3×3 convolutions, BatchNorm, LayerNorm, exact and tanh
    GELU), moves its weights into the Keras twin, and checks that both compute the same numbers
    under every backend you choose, layer by layer.

    For these two frameworks the move is easy to state: a convolution kernel is HWIO and a
    Dense kernel `(in, out)` in both, so every weight is a **copy** under a new name. What
    goes wrong is what the names and shapes cannot show: a kernel transposed into the same
    shape, Keras's default epsilons (BatchNorm 1e-3, not 1e-5), its default tanh GELU, or
    BatchNorm's running statistics left at their initial 0 and 1. Each still runs. The
    **control** below plants one such mistake beside the correct move, and the layer table
    shows where it first diverges: every layer after it inherits the error, so the first one
    is where to look.

    Each backend runs in its own subprocess (Keras picks its backend once per process), all
    at once; one subprocess runs both moves, paying its import once.

    You will learn:

    - the NNX -> Keras weight mapping (names, shapes, layouts);
    - how close two correct implementations are (a few 1e-7 in float32), on every backend;
    - to find a conversion mistake by its first divergent layer.
    """)
    return


@app.cell(hide_code=True)
def _():
    mo.vstack(
        [
            mo.md("## The weight mapping, NNX -> Keras (`keras_bridge.KERAS_RULES`)"),
            lab.table(twin.mapping_rows(), "every parameter: a copy under a new name"),
        ]
    )
    return


@app.cell
def _():
    seed = FLAGS.control("seed", ARGS)
    batch = FLAGS.control("batch", ARGS)
    backends = mo.ui.multiselect(
        options=list(twin.BACKENDS),
        value=[b for b in ARGS.backends.split(",") if b in twin.BACKENDS],
        label="backends",
    )
    mistake = FLAGS.control("mistake", ARGS, label="mistake in the judged move")
    control = FLAGS.control("control", ARGS, label="planted control")
    run_button = mo.ui.run_button(label="Run the Keras twin (one subprocess per backend)")
    mo.vstack(
        [
            mo.hstack([seed, batch, backends], justify="start", wrap=True),
            mo.hstack([mistake, control], justify="start", wrap=True),
            mo.md(
                "Plant a **mistake in the judged move** to watch the layer table mark its "
                "`FIRST DIVERGENCE` (the check then asks that the diff catches it there); the "
                "**control** always runs beside the correct move and must be caught."
            ),
            run_button,
        ]
    )
    return backends, batch, control, mistake, run_button, seed


@app.cell
def _(backends, mistake):
    chosen = ARGS.backends.split(",") if not lab.interactive() else list(backends.value)
    chosen = [b.strip() for b in chosen if b.strip()]
    lab.guard(twin.problem(chosen, mistake.value), headline="Nothing to compare.")
    lab.require(
        "keras",
        "safetensors",  # the weights travel to each backend's process as a safetensors file
        *[b for b in chosen if b != "jax"],
        why="Keras runs each chosen backend in its own process",
    )
    return (chosen,)


@app.cell
def _(batch, chosen, control, mistake, run_button, seed):
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md("Press **Run the Keras twin** (each subprocess imports its backend first)."),
    )
    with tempfile.TemporaryDirectory(prefix="keras_nnx_twin_") as _tmp:
        try:
            result = twin.run(
                chosen,
                _tmp,
                seeds=(seed.value,),
                batch=batch.value,
                mistakes=[m for m in (mistake.value, control.value) if m != "none"],
            )
            _failure = None
        except child.WorkerError as _error:
            result, _failure = None, str(_error)
    lab.guard(_failure, headline="A Keras subprocess failed.")
    judged = {b: result.diff(b, seed.value, mistake.value) for b in result.backends}
    planted = {b: result.diff(b, seed.value, control.value) for b in result.backends}
    _times = ", ".join(f"{b} {s:.1f} s" for b, s in result.seconds.items())
    mo.md(
        f"Keras {result.keras_version}; each subprocess, imports included: {_times} (concurrently)."
    )
    return judged, planted


@app.cell
def _(control, judged, mistake, planted):
    def _rows(diffs, move):
        return [{"backend": b, "move": move, **row} for b, d in diffs.items() for row in d.rows()]

    _judged_name = "correct" if mistake.value == "none" else f"judged: {mistake.value}"
    mo.vstack(
        [
            mo.md(
                "## Layer by layer against NNX\nScaled error: max |a - ref| / max(max |ref|, "
                "1), per named layer, against float32's tolerance. `FIRST DIVERGENCE` marks "
                "where a run leaves NNX."
            ),
            mo.ui.tabs(
                {
                    f"the judged move ({_judged_name})": lab.table(
                        _rows(judged, _judged_name), "every backend, every layer"
                    ),
                    f"the control ({control.value})": lab.table(
                        _rows(planted, control.value),
                        twin.MISTAKES[control.value],
                    ),
                }
            ),
        ]
    )
    return


@app.cell
def _(control, judged, mistake, planted):
    # The reference: the Flax NNX model in this process (JAX, no Keras code), same weights,
    # same batch. The correct move must agree at every layer; a mistake judged on purpose must
    # be caught: agreeing before the layer it breaks and diverging first there, as the control
    # (always planted beside the correct move) must.
    _tol = numerics.tolerance("float32")
    _expected = twin.FIRST_DIVERGENT[control.value]
    _facts = {
        f"{b}: the control ({control.value}) diverges first at {_expected}": (
            d.first_divergent == _expected
        )
        for b, d in planted.items()
    }
    if mistake.value == "none":
        _errors = {f"{b} vs NNX, logits": d.layers[-1].scaled for b, d in judged.items()}
        _errors.update(
            {f"{b} vs NNX, worst layer": max(e.scaled for e in d.layers) for b, d in judged.items()}
        )
        _claim = "the correct move: every layer equals Flax NNX within float32 tolerance"
    else:
        _breaks = twin.FIRST_DIVERGENT[mistake.value]
        _errors = {}
        for _b, _d in judged.items():
            _names = [e.layer for e in _d.layers]
            _before = _d.layers[: _names.index(_breaks)] if _breaks in _names else _d.layers
            _errors[f"{_b} vs NNX, layers before {_breaks}"] = max(
                (e.scaled for e in _before), default=0.0
            )
            _facts[f"{_b}: the judged move ({mistake.value}) diverges first at {_breaks}"] = (
                _d.first_divergent == _breaks
            )
        _claim = (
            f"the move with {mistake.value}: the layer diff catches it (equal to Flax NNX "
            f"within float32 tolerance before {_breaks}, diverging first there)"
        )
    lab.report(
        "worst judged error vs NNX",
        max(max(e.scaled for e in d.layers) for d in judged.values()),
        "scaled",
    )
    check = lab.Check(
        f"DigitsNet's Keras twin under {', '.join(judged)} with {_claim}",
        _errors,
        _tol,
        facts=_facts,
    )
    check
    return (check,)


@app.cell
def _(control, judged, planted):
    _frame = pd.DataFrame(
        [
            {
                "run": f"{b}, {move}",
                "layer": e.layer,
                "scaled error": max(e.scaled, 1e-9),
            }
            for move, diffs in (("judged", judged), (control.value, planted))
            for b, d in diffs.items()
            for e in d.layers
        ]
    )
    _tol = numerics.tolerance("float32")
    _order = [e.layer for e in next(iter(judged.values())).layers]
    _lines = (
        alt.Chart(_frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("layer:N", sort=_order, title="layer (forward order)"),
            y=alt.Y("scaled error:Q", scale=alt.Scale(type="log"), title="scaled error vs NNX"),
            color=alt.Color("run:N"),
            tooltip=["run", "layer", alt.Tooltip("scaled error:Q", format=".2e")],
        )
    )
    _rule = alt.Chart(pd.DataFrame({"y": [_tol]})).mark_rule(strokeDash=[4, 4]).encode(y="y:Q")
    (_lines + _rule).properties(
        title=f"every run vs NNX, layer by layer (dashed: float32 tolerance {_tol:g})",
        width=560,
        height=280,
    )
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_the_control_is_caught(control, planted):
    for _backend, _diff in planted.items():
        assert _diff.first_divergent == twin.FIRST_DIVERGENT[control.value], _backend
    return


if __name__ == "__main__":
    app.run()
