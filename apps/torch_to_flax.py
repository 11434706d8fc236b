import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Convert PyTorch weights to Flax and locate numerical errors",
)

with app.setup:
    import tempfile

    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import charts
    from interop import torch_flax, twins, weights_file

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "seed of the torch weights and of the digits batch", lo=0, hi=50),
        lab.Flag("batch", 32, "digits images in the batch", lo=1, hi=256),
        lab.Flag(
            "mistake",
            "none",
            "a deliberately wrong conversion to inject",
            choices=tuple(torch_flax.MISTAKES),
        ),
        lab.Flag(
            "tolerance_dtype",
            "float32",
            "judge each layer with this dtype's tolerance",
            choices=("float32", "float16", "bfloat16"),
        ),
        description="Convert PyTorch weights to Flax NNX and locate numerical errors layer by "
        "layer.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Convert PyTorch weights to Flax and locate numerical errors
    {lab.phase_line("torch_to_flax")}

    The same network, DigitsNet (conv, BatchNorm, GELU, conv, GELU, flatten, linear,
    LayerNorm, GELU, linear), is written twice: a `torch.nn.Module` and a Flax NNX module
    (`interop/twins.py`). A torch `state_dict` moves into the NNX model by a handful of
    **layout rules** (`interop/torch_flax.py`). Getting one wrong rarely crashes: the shapes
    often still fit and the model returns plausible logits. In this lesson you will

    - read the layout rules (the table below) and which settings are **configuration, not
      weights** (epsilons, GELU's approximation, the flatten order);
    - inject one classic mistake and watch a **layer-by-layer activation diff** (both models
      run on the same digits; every layer's error against torch) name the first layer that
      diverges: that is where to look, since every later layer inherits the error;
    - see why a tolerance must fit the dtype: a loose one hides a small mistake.
    """)
    return


@app.cell
def _():
    seed = FLAGS.control("seed", ARGS)
    batch = FLAGS.control("batch", ARGS)
    mistake = FLAGS.control("mistake", ARGS)
    tolerance_dtype = FLAGS.control("tolerance_dtype", ARGS, label="tolerance of")
    mo.hstack([seed, batch, mistake, tolerance_dtype], justify="start", wrap=True)
    return batch, mistake, seed, tolerance_dtype


@app.cell(hide_code=True)
def _():
    lab.table(torch_flax.layout_table(), "The layout rules: torch state_dict -> NNX state")
    return


@app.cell
def _(batch, mistake, seed, tolerance_dtype):
    lab.require(
        "torch",
        "safetensors",
        why="the weights come from a torch model, run beside its NNX twin, and go through a "
        "safetensors file",
    )
    tolerance = numerics.tolerance(tolerance_dtype.value)
    correct = torch_flax.parity(seed.value, batch.value, "none", tolerance)
    injected = torch_flax.parity(seed.value, batch.value, mistake.value, tolerance)
    _expected = injected.expected_layer
    _found = injected.diff.first_divergent
    _at = {e.layer: e for e in injected.diff.layers}
    _problem = None
    if _expected is not None and _found != _expected and _at[_expected].agrees:
        _problem = (
            f"at the {tolerance_dtype.value} tolerance ({tolerance:.0e}) the mistake "
            f"{mistake.value!r} is invisible at {_expected} (scaled error "
            f"{_at[_expected].scaled:.1e}): the diff "
            + (f"first blames {_found}, where the error has grown" if _found else "sees nothing")
            + ". Judge a float32 model with the float32 tolerance."
        )
    lab.guard(
        _problem,
        lab.table(injected.diff.rows(), "Per-layer error against torch", digits=3),
        headline="This tolerance cannot locate the mistake.",
    )
    diff = injected.diff
    lab.report("first diverging layer", str(diff.first_divergent))
    mo.vstack(
        [
            mo.md(
                f"**Injected:** `{mistake.value}`: "
                f"{torch_flax.MISTAKES[mistake.value].description}."
                f" **First diverging layer: `{diff.first_divergent}`**"
                f" (tolerance {tolerance:.0e}, {tolerance_dtype.value})."
            ),
            lab.table(diff.rows(), "Per-layer error against torch", digits=3),
        ]
    )
    return correct, diff, injected, tolerance


@app.cell
def _(correct, seed):
    # The torch weights through the neutral file and back, and torch -> NNX -> torch, bitwise.
    _weights = twins.seeded_weights(seed.value)
    with tempfile.TemporaryDirectory(prefix="weights_") as _tmp:
        _saved = weights_file.save(f"{_tmp}/digits_net", _weights)
        _loaded = weights_file.load(_saved.weights, weights_file.digitsnet_expected())
    _back = torch_flax.nnx_to_torch(torch_flax.torch_to_nnx(_loaded))
    round_trip_bitwise = all(
        _back[k].dtype == v.dtype and _back[k].tobytes() == v.tobytes() for k, v in _weights.items()
    )
    assert correct.diff.layers
    mo.md(
        "torch weights -> safetensors + manifest (sha256 verified) -> NNX -> torch: "
        f"**{'bitwise equal' if round_trip_bitwise else 'NOT equal'}** "
        f"({len(_weights)} tensors)."
    )
    return (round_trip_bitwise,)


@app.cell
def _(correct, diff, injected, mistake, round_trip_bitwise, tolerance, tolerance_dtype):
    # Independent reference: torch's own forward pass of the same weights on the same images.
    _ok = numerics.scaled_max_error(correct.logits_nnx_BK, correct.logits_torch_BK)
    _facts = {"torch -> safetensors -> NNX -> torch is bitwise": round_trip_bitwise}
    if mistake.value == "none":
        _errors = {"Flax logits vs torch logits": _ok}
        _facts["no layer diverges"] = diff.first_divergent is None
        _what = f"converted Flax model vs torch ({tolerance_dtype.value} tolerance)"
    else:
        _expected = injected.expected_layer
        _before = [e.scaled for e in diff.layers[: [e.layer for e in diff.layers].index(_expected)]]
        _errors = {
            "correct conversion: Flax logits vs torch logits": _ok,
            f"layers before {_expected}, with the mistake": max(_before, default=0.0),
        }
        _bad = numerics.scaled_max_error(injected.logits_nnx_BK, injected.logits_torch_BK)
        _facts[f"the diff names {_expected} as the first diverging layer"] = (
            diff.first_divergent == _expected
        )
        # Not a fact to hold: at a loose tolerance the logits may pass while a layer does not.
        _caught = "catches" if _bad > tolerance else "MISSES"
        _what = (
            f"the diff localises {mistake.value!r} to {_expected} ({tolerance_dtype.value}); "
            f"a logits-only parity test {_caught} it (logits error {_bad:.1e})"
        )
    check = lab.Check(_what, _errors, tolerance, facts=_facts)
    check
    return (check,)


@app.cell
def _(correct, diff, mistake, tolerance):
    _floor = 1e-12  # an exact zero has no place on a log axis: drawn at the floor
    _rows = [
        {"layer": e.layer, "order": i, "run": run, "scaled error": max(e.scaled, _floor)}
        for run, layers in (("correct", correct.diff.layers), (mistake.value, diff.layers))
        for i, e in enumerate(layers)
    ]
    if mistake.value == "none":
        _rows = [r for r in _rows if r["run"] == "correct"]
    _domain = charts.log_domain([r["scaled error"] for r in _rows] + [tolerance])
    _y = alt.Y("scaled error:Q", scale=alt.Scale(type="log", domain=_domain))
    _x = alt.X("layer:N", sort=list(twins.LAYERS), title="layer (forward order)")
    _lines = (
        alt.Chart(pd.DataFrame(_rows))
        .mark_line(point=True)
        .encode(x=_x, y=_y, color="run:N", tooltip=["run", "layer", "scaled error"])
    )
    _rule = (
        alt.Chart(pd.DataFrame({"tolerance": [tolerance]}))
        .mark_rule(strokeDash=[6, 4], color="gray")
        .encode(y="tolerance:Q")
    )
    (_lines + _rule).properties(
        title=f"Error against torch by layer (log scale); dashed: tolerance {tolerance:.0e}",
        width=520,
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("torch_to_flax")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_correct_conversion_agrees_everywhere(correct):
    assert correct.diff.first_divergent is None
    assert np.all(np.isfinite(correct.logits_nnx_BK))
    return


if __name__ == "__main__":
    app.run()
