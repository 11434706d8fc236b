import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Keras: a .keras file saved under one backend")

with app.setup:
    import tempfile

    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from interop import activations as diffs
    from interop import twins
    from interop.keras_track import child
    from interop.keras_track import saving

    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "seed of DigitsNet's weights and of the input batch", lo=0, hi=9999),
        lab.Flag("batch", 8, "digits images in the input batch", lo=1, hi=64),
        lab.Flag(
            "saved_by",
            saving.DEFAULT_SAVER,
            "the backend that saves the .keras file",
            choices=saving.BACKENDS,
        ),
        lab.Flag(
            "loaders",
            "jax,torch",
            "comma-separated backends that load it: " + ", ".join(saving.BACKENDS),
        ),
        description=(
            "DigitsNet's Keras twin saved as .keras under one backend, loaded under the others "
            "(a subprocess each), every layer compared with the Flax NNX twin."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Keras: a `.keras` file saved under one backend, loaded under the others
    {lab.track_line("keras_saving")}

    The JAX lesson moved DigitsNet's weights between frameworks by hand: renames, transposes,
    epsilons. Keras 3 has one file for all its backends: `model.save("m.keras")` writes a zip
    with the model's **config** (every layer, its arguments, its custom class's registered
    name) and its **weights** (an HDF5 file), and `keras.saving.load_model` rebuilds the model
    under whichever backend the loading process runs. No layout rule is involved: Keras keeps
    one layout (channels-last, kernels `(in, out)`) on every backend.

    This app saves the Keras twin of DigitsNet (with the course's seeded weights) under one
    backend and loads the file under each other one, each in its own subprocess (Keras picks
    its backend once per process), and compares every layer with the course's Flax NNX model,
    which shares no code with Keras. Two habits of the course's loader are on show: it checks
    a manifest (size and sha256) **before** Keras reads the file, and it loads with
    `safe_mode=True`, so a config cannot smuggle in a Python `lambda`.

    You will learn:

    - what a `.keras` file holds, read without Keras (it is a zip);
    - that a file saved under TensorFlow computes the same numbers under JAX and PyTorch,
      within float32 rounding;
    - why a loader verifies what it loads: one flipped byte is refused, with the reason.
    """)
    return


@app.cell
def _():
    seed = FLAGS.control("seed", ARGS)
    batch = FLAGS.control("batch", ARGS)
    saved_by = FLAGS.control("saved_by", ARGS, label="saved by")
    loaders = mo.ui.multiselect(
        options=list(saving.BACKENDS),
        value=[b for b in ARGS.loaders.split(",") if b in saving.BACKENDS],
        label="loaded by",
    )
    run_button = mo.ui.run_button(label="Save and load (one Keras subprocess per backend)")
    mo.vstack(
        [
            mo.hstack([seed, batch, saved_by, loaders], justify="start", wrap=True),
            run_button,
        ]
    )
    return batch, loaders, run_button, saved_by, seed


@app.cell
def _(loaders, saved_by):
    chosen = ARGS.loaders.split(",") if not lab.interactive() else list(loaders.value)
    chosen = [b.strip() for b in chosen if b.strip()]
    lab.guard(saving.problem(saved_by.value, chosen), headline="Nothing to move.")
    lab.require(
        "keras",
        "safetensors",  # the weights travel to each backend's process as a safetensors file
        *sorted({saved_by.value, *chosen} - {"jax"}),
        why="Keras saves and loads under each backend in its own process",
    )
    return (chosen,)


@app.cell
def _(batch, chosen, run_button, saved_by, seed):
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md("Press **Save and load** (each subprocess imports its backend first)."),
    )
    with tempfile.TemporaryDirectory(prefix="keras_saving_") as _tmp:
        try:
            result = saving.run(saved_by.value, chosen, _tmp, seed=seed.value, batch=batch.value)
            _failure = None
        except child.WorkerError as _error:
            result, _failure = None, str(_error)
    lab.guard(_failure, headline="A Keras subprocess failed.")
    _times = ", ".join(f"{b} {s:.1f} s" for b, s in result.seconds.items())
    mo.md(
        f"Keras {result.keras_version}: saved under **{result.saved_by}**, loaded under "
        f"**{', '.join(result.loaders)}** (concurrently). Each subprocess, imports included: "
        f"{_times}."
    )
    return (result,)


@app.cell
def _(result):
    _layers = [{"#": i, "layer": name} for i, name in enumerate(result.config_layers)]
    mo.vstack(
        [
            mo.md(
                "## What the file holds\nA `.keras` file is a zip, listed here with Python's "
                "`zipfile` (nothing in it runs). `config.json` rebuilds the model, "
                "`model.weights.h5` fills it, `metadata.json` names the Keras version."
            ),
            lab.table(result.archive, f"digits_{result.saved_by}.keras, member sizes in bytes"),
            lab.table(_layers, "the layers config.json describes (the functional model's graph)"),
        ]
    )
    return


@app.cell
def _(result):
    _rows = [
        {
            "loaded by": b,
            "tampered copy": "refused" if result.refusals[b] else "LOADED",
            "message": result.refusals[b] or "",
        }
        for b in result.loaders
    ]
    mo.vstack(
        [
            mo.md(
                "## A tampered copy\nOne byte in the middle of a copy of the file is flipped; "
                "the manifest still names the original's sha256. Every loader must refuse it "
                "before Keras opens it."
            ),
            lab.table(_rows, "each loader, given the tampered copy"),
        ]
    )
    return


@app.cell
def _(result):
    _reference = list(result.reference.items())
    layer_diffs = {
        b: diffs.diff([(n, a[n]) for n in twins.LAYERS], _reference)
        for b, a in result.activations.items()
    }
    _rows = [
        {
            "backend": b,
            "role": "saved" if b == result.saved_by else "loaded",
            "worst layer": max(d.layers, key=lambda e: e.scaled).layer,
            "worst scaled error": max(e.scaled for e in d.layers),
            "logits scaled error": d.layers[-1].scaled,
            "first divergent layer": d.first_divergent or "none",
        }
        for b, d in layer_diffs.items()
    ]
    mo.vstack(
        [
            mo.md(
                "## Every backend against Flax NNX\nEvery named layer's activation against "
                "the NNX twin's on the same batch (scaled error: max |a - ref| / "
                "max(max |ref|, 1))."
            ),
            lab.table(_rows, "each backend's run, layer by layer against NNX"),
        ]
    )
    return (layer_diffs,)


@app.cell
def _(result):
    # The reference: the Flax NNX twin in this process (JAX, no Keras code), on the same
    # weights and batch; plus every loaded backend against the saver (the file itself moved).
    _reference = result.reference[saving.OUTPUT_LAYER]
    _errors = {
        f"{b} ({'saved' if b == result.saved_by else 'loaded'}) vs NNX": (
            numerics.scaled_max_error(logits, _reference)
        )
        for b, logits in result.logits.items()
    }
    for _b in result.loaders:
        _errors[f"{_b} loaded vs {result.saved_by} saved"] = numerics.scaled_max_error(
            result.logits[_b], result.logits[result.saved_by]
        )
    _facts = {f"{b} refused the tampered copy": bool(result.refusals[b]) for b in result.loaders}
    _facts.update(
        {
            f"{b} loaded the spec's epsilons and GELUs": not result.config_differences[b]
            for b in result.loaders
        }
    )
    _facts["the archive holds config.json and model.weights.h5"] = {
        "config.json",
        "model.weights.h5",
    } <= {r["member"] for r in result.archive}
    lab.report(
        "worst logits error vs NNX", max(v for k, v in _errors.items() if "NNX" in k), "scaled"
    )
    check = lab.Check(
        f"DigitsNet ({len(_reference)} images) saved as .keras under "
        f"{result.saved_by}, loaded under {', '.join(result.loaders)}: logits equal NNX's "
        "within float32 tolerance, the tampered copy refused",
        _errors,
        numerics.tolerance("float32"),
        facts=_facts,
    )
    check
    return (check,)


@app.cell
def _(layer_diffs):
    _frame = pd.DataFrame(
        [
            {"backend": b, "layer": e.layer, "order": i, "scaled error": max(e.scaled, 1e-9)}
            for b, d in layer_diffs.items()
            for i, e in enumerate(d.layers)
        ]
    )
    _tol = numerics.tolerance("float32")
    _lines = (
        alt.Chart(_frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("layer:N", sort=list(twins.LAYERS), title="layer (forward order)"),
            y=alt.Y("scaled error:Q", scale=alt.Scale(type="log"), title="scaled error vs NNX"),
            color=alt.Color("backend:N"),
            tooltip=["backend", "layer", alt.Tooltip("scaled error:Q", format=".2e")],
        )
    )
    _rule = alt.Chart(pd.DataFrame({"y": [_tol]})).mark_rule(strokeDash=[4, 4]).encode(y="y:Q")
    (_lines + _rule).properties(
        title=f"each backend vs Flax NNX, layer by layer (dashed: float32 tolerance {_tol:g})",
        width=560,
        height=260,
    )
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_every_loader_refused_the_tampered_copy(result):
    assert all("sha256 differs" in (result.refusals[b] or "") for b in result.loaders)
    return


if __name__ == "__main__":
    app.run()
