import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium",
    app_title="Save model, optimizer, and random state",
)

with app.setup:
    import json
    import pathlib
    import tempfile

    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import exercises, text
    from core.state import checkpoint, recovery_demo

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("steps", 6, "training steps before the save", lo=1, hi=50),
        lab.Flag("hidden", 16, "hidden width of the MLP", lo=1, hi=256),
        lab.Flag("dropout", 0.1, "dropout rate (uses the dropout key)", lo=0.0, hi=0.9, step=0.05),
        lab.Flag("seed", 0, "data, init and dropout seed", lo=0, hi=9999),
        lab.Flag("async_save", True, "save asynchronously (Orbax writes in the background)"),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description=(
            "Save model, optimizer, and random state: a complete Orbax checkpoint, verified."
        ),
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Save model, optimizer, and random state
    {lab.phase_line("save_full_state")}

    Saving only the parameters is enough to *use* a model, not to *continue training* it:
    Adam's two moment estimates, its step count, the PRNG key that draws the next dropout
    mask, and the input pipeline's position all shape the next update. In this lesson you will

    - train a small MLP (dropout, Adam) for a few steps and save the **complete** state with
      Orbax: parameters, both Adam moments and the count, the step, the dropout key, the
      Grain iterator position, the config and metadata (`core.state.checkpoint.Checkpointer`);
    - look inside the checkpoint directory: Orbax's committed step, its items, file sizes,
      and the **manifest** (size and sha256 of every file, shape and dtype of every leaf)
      that is verified before anything is loaded;
    - restore into a fresh abstract state and check, leaf by leaf with NumPy, that what came
      back is exactly what was saved.
    """)
    return


@app.cell
def _():
    steps = FLAGS.control("steps", ARGS)
    hidden = FLAGS.control("hidden", ARGS)
    dropout = FLAGS.control("dropout", ARGS)
    seed = FLAGS.control("seed", ARGS)
    async_save = FLAGS.control("async_save", ARGS, label="asynchronous save")
    mo.hstack([steps, hidden, dropout, seed, async_save], justify="start", wrap=True)
    return async_save, dropout, hidden, seed, steps


@app.cell
def _(async_save, dropout, hidden, seed, steps):
    config = recovery_demo.TrainConfig(
        seed=seed.value, hidden=hidden.value, dropout=float(dropout.value)
    )
    # A fresh temporary directory per run; it is deleted when this cell runs again.
    run_dir = tempfile.TemporaryDirectory(prefix="save_full_state-")
    checkpoint_dir = pathlib.Path(run_dir.name) / "checkpoints"
    trained = recovery_demo.train(
        config, checkpoint_dir, steps.value, save_every=steps.value, async_save=async_save.value
    )
    saved_state, saved_data_state = trained.state, trained.data_state
    mo.md(
        f"Trained **{text.plural(steps.value, 'step')}** "
        f"(last loss {trained.losses[steps.value]:.4f}) and saved step "
        f"{steps.value} {'asynchronously' if async_save.value else 'synchronously'} to a "
        "temporary directory."
    )
    return checkpoint_dir, config, saved_data_state, saved_state


@app.cell
def _(checkpoint_dir, saved_state, steps):
    adam = checkpoint.adam_state(saved_state)
    parts = [
        ("parameters", saved_state["params"], "what the model computes with"),
        ("Adam first moment (mu)", adam.mu, "running mean of gradients"),
        ("Adam second moment (nu)", adam.nu, "running mean of squared gradients"),
        ("Adam count", adam.count, "bias correction uses it"),
        ("step", saved_state["step"], "where training is"),
        ("dropout key", saved_state["rng"], "raw uint32 key data: the next dropout masks"),
    ]
    part_rows = [
        {
            "part": name,
            "leaves": len(jax.tree.leaves(tree)),
            "bytes": sum(np.asarray(x).nbytes for x in jax.tree.leaves(tree)),
            "why it matters": why,
        }
        for name, tree, why in parts
    ]
    tree_rows = checkpoint.directory_tree(checkpoint_dir / str(steps.value))
    _item = lambda path: path.split("/")[0] if "/" in path else "top-level files"  # noqa: E731
    size_frame = pd.DataFrame(
        [
            {"item": _item(r["path"]), "file": r["path"], "bytes": r["bytes"]}
            for r in tree_rows
            if r["kind"] == "file"
        ]
    )
    size_chart = (
        alt.Chart(size_frame, title="bytes on disk per item")
        .mark_bar()
        .encode(
            y=alt.Y("item:N", sort="-x", title=None),
            x=alt.X("sum(bytes):Q", title="bytes on disk"),
            tooltip=["item", alt.Tooltip("sum(bytes):Q", title="bytes", format=",")],
        )
        .properties(width=420, height=120)
    )
    manifest = json.loads((checkpoint_dir / str(steps.value) / checkpoint.MANIFEST).read_text())
    manifest_preview = {
        **manifest,
        "files": dict(list(manifest["files"].items())[:4])
        | {"...": f"{len(manifest['files'])} files in all"},
        "state_tree": manifest["state_tree"][:4]
        + [f"... {len(manifest['state_tree'])} leaves in all"],
    }
    mo.vstack(
        [
            mo.md("## What a complete training state holds"),
            lab.table(part_rows),
            mo.md(
                f"""
    ## Inside the checkpoint directory

    Orbax wrote `{steps.value}.orbax-checkpoint-tmp/`, then renamed it to `{steps.value}/` once
    every item was complete: the rename is the commit. Three items: `state` (arrays, as
    TensorStore/zarr in an OCDBT database), `data` (Grain's iterator state, JSON), `meta`
    (config and metadata, JSON). `manifest.json` was written after the commit.
    """
            ),
            lab.table(
                [
                    {"path": r["path"], "bytes": r["bytes"] if r["kind"] == "file" else ""}
                    for r in tree_rows
                ]
            ),
            size_chart,
            mo.md("`manifest.json` (abridged):"),
            text.code_block(json.dumps(manifest_preview, indent=1)[:2500], "json", "manifest"),
        ]
    )
    return (manifest,)


@app.cell
def _(checkpoint_dir, config):
    # A new Checkpointer, as a new process would open it; restore into an abstract state.
    reader = checkpoint.Checkpointer(checkpoint_dir)
    restored = reader.restore_latest(recovery_demo.abstract_state(config))
    reader.close()
    mo.md(
        f"""
    ## Restore, then compare

    ```python
    reader = checkpoint.Checkpointer(checkpoint_dir)        # as a new process would
    restored = reader.restore_latest(recovery_demo.abstract_state(config))
    ```

    `restore_latest` verified step {restored.step} against its manifest first (every file's
    size and sha256, the state tree against the abstract state), then let Orbax read it.
    """
    )
    return (restored,)


@app.cell
def _(config, restored, saved_data_state, saved_state, steps):
    # Independent reference: the arrays still in memory from training, compared with NumPy.
    saved_leaves = jax.tree_util.tree_flatten_with_path(saved_state)[0]
    restored_leaves = jax.tree.leaves(restored.state)
    leaf_rows = []
    for (path, saved_leaf), restored_leaf in zip(saved_leaves, restored_leaves, strict=True):
        a, b = np.asarray(saved_leaf), np.asarray(restored_leaf)
        leaf_rows.append(
            {
                "leaf": jax.tree_util.keystr(path),
                "shape": str(a.shape),
                "dtype": str(a.dtype),
                "equal": a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b)),
                "max |diff|": numerics.max_abs_error(a, b) if a.shape == b.shape else np.inf,
            }
        )
    same_tree = jax.tree_util.tree_structure(saved_state) == jax.tree_util.tree_structure(
        restored.state
    )
    check = lab.Check(
        f"restored == saved, leaf by leaf ({len(leaf_rows)} leaves: params, both Adam moments, "
        "count, step, dropout key; numpy array_equal), and data position, step and config equal",
        {"max |diff| over all leaves": max(r["max |diff|"] for r in leaf_rows)},
        0.0,
        facts={
            "same tree structure": same_tree,
            "every leaf array_equal (same dtype and shape)": all(r["equal"] for r in leaf_rows),
            "step equal": restored.step == steps.value,
            "data position equal": restored.data_state == saved_data_state,
            "config equal": restored.config == config.to_dict(),
        },
    )
    mo.vstack(
        [
            check,
            lab.table(leaf_rows),
            mo.md(
                f"Data position: saved `{saved_data_state}`, restored `{restored.data_state}`; "
                f"metadata `{restored.metadata}`."
            ),
        ]
    )
    return (check,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "save_full_state", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("save_full_state")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_manifest_covers_every_file_and_leaf(
    checkpoint_dir,
    manifest,
    saved_state,
    steps,
):
    _step_dir = checkpoint_dir / str(steps.value)
    _files = {p.relative_to(_step_dir).as_posix() for p in _step_dir.rglob("*") if p.is_file()} - {
        checkpoint.MANIFEST
    }
    assert set(manifest["files"]) == _files
    assert len(manifest["state_tree"]) == len(jax.tree.leaves(saved_state))
    return


@app.cell
def test_both_adam_moments_are_saved_and_nonzero(restored):
    _adam = checkpoint.adam_state(restored.state)
    assert all(np.asarray(x).any() for x in jax.tree.leaves(_adam.nu))
    assert int(_adam.count) == int(restored.state["step"])
    return


if __name__ == "__main__":
    app.run()
