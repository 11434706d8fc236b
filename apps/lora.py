import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="LoRA: adapt, save and merge low-rank updates")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lessons.post_training import lora as lesson
    from core.post_training import lora, model, report, task

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("rank", 4, "LoRA rank R", lo=1, hi=64),
        lab.Flag("alpha", 8.0, "LoRA alpha (the adapter is scaled by alpha / R)", lo=1.0, hi=64.0),
        lab.Flag(
            "targets",
            "attention + MLP",
            "which kernels get adapters",
            choices=tuple(lora.TARGET_SETS),
        ),
        lab.Flag("steps", 150, "training steps (batch of 64 pairs each)", lo=10, hi=600, step=10),
        lab.Flag(
            "learning_rate",
            0.01,
            "Adam learning rate of the adapters",
            lo=0.0001,
            hi=0.05,
            step=0.0001,
        ),
        lab.Flag("seed", 0, "PRNG seed (base model, adapters, batches)", lo=0, hi=9999),
        description="LoRA: frozen base, rank/alpha, parameter count, save, merge and unmerge.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # LoRA: adapt, save and merge low-rank updates
    {lab.phase_line("lora")}

    Full fine-tuning updates every weight. **LoRA** freezes the base model and learns, beside
    each chosen kernel W (d_in x d_out), two thin matrices A (d_in x R) and B (R x d_out):
    the layer computes `x W + (alpha/R) (x A) B`. B starts at zero, so training starts from
    the base model exactly. In this lesson you will

    - count trainable parameters, LoRA vs full fine-tuning, and check the closed form
      `L · Σ R (d_in + d_out)`;
    - train the adapters (press **Train**) on the reversal task of the SFT lesson, and
      compare with full fine-tuning on the same batches;
    - **save only the adapters** (bytes shown), **merge** them, `W' = W + (alpha/R) B·A`,
      check that the merged model gives the outputs of base + adapter, and **unmerge**
      back to the base bit for bit.
    """)
    return


@app.cell
def _():
    rank = FLAGS.control("rank", ARGS, label="rank R")
    alpha = FLAGS.control("alpha", ARGS)
    targets = FLAGS.control("targets", ARGS, label="adapted kernels")
    steps = FLAGS.control("steps", ARGS)
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    seed = FLAGS.control("seed", ARGS)
    # Training (the adapters and a full fine-tuning run) is the lesson's long work: it runs on
    # a press, so a learner sets the controls first. Headless runs train at the flags.
    train_button = mo.ui.run_button(label="Train")
    mo.vstack(
        [
            mo.hstack([rank, alpha, targets], justify="start", wrap=True),
            mo.hstack([steps, learning_rate, seed, train_button], justify="start", wrap=True),
        ]
    )
    return alpha, learning_rate, rank, seed, steps, targets, train_button


@app.cell
def _(alpha, learning_rate, rank, seed, steps, targets, train_button):
    kernels = lora.TARGET_SETS[targets.value]
    lab.guard(
        lesson.rank_problem(rank.value, kernels),
        headline=f"Rank {rank.value} is not a low-rank update here.",
    )
    mo.stop(
        lab.interactive() and not train_button.value,
        mo.callout(
            mo.md(
                f"Press **Train**: LoRA adapters of rank {rank.value} (alpha {alpha.value:g}) on "
                f"{targets.value}, {steps.value} steps at learning rate {learning_rate.value:g}, "
                f"seed {seed.value}, beside full fine-tuning on the same batches."
            ),
            kind="info",
        ),
    )
    with mo.status.spinner(title="pretraining the base model, training LoRA and full FT"):
        result = lesson.run(
            seed.value, rank.value, alpha.value, kernels, steps.value, learning_rate.value
        )
    mo.md(
        f"Trained: adapters (R = {rank.value}, scale alpha/R = {result.scale:g}) and a full "
        "fine-tuning run on the same batches."
    )
    return kernels, result


@app.cell
def _(kernels, rank, result, seed):
    n_lora = lora.count(result.adapters)
    closed_form = lora.trainable_count(result.base, rank.value, kernels)
    n_full = lora.count(result.base)
    adapter_bytes = lora.save(result.adapters, rank.value, float(result.scale * rank.value))
    merged, patch = lora.merge(result.base, result.adapters, result.scale)
    restored = lora.unmerge(merged, result.adapters, result.scale, patch)
    subtracted = lora.unmerge(merged, result.adapters, result.scale)
    mo.vstack(
        [
            mo.md("## What trains, what is saved"),
            lab.table(
                [
                    {
                        "method": "LoRA",
                        "trainable parameters": n_lora,
                        "share of the model": f"{n_lora / n_full:.1%}",
                        "what is saved": f"{len(adapter_bytes):,} bytes (adapters, .npz)",
                        "held-out accuracy": f"{result.accuracy['base + LoRA adapter']:.1%}",
                    },
                    {
                        "method": "full fine-tuning",
                        "trainable parameters": n_full,
                        "share of the model": "100%",
                        "what is saved": f"{4 * n_full:,} bytes (every float32 weight)",
                        "held-out accuracy": f"{result.accuracy['full fine-tuning']:.1%}",
                    },
                ]
            ),
            lab.table(
                [
                    {"identity": "base model (frozen)", "sha256": model.short_hash(result.base)},
                    {"identity": "SFT data set", "sha256": task.dataset_hash(result.data)},
                    {"identity": "LoRA adapters", "sha256": model.short_hash(result.adapters)},
                    {"identity": "merged model", "sha256": model.short_hash(merged)},
                    {"identity": "unmerged (with patch)", "sha256": model.short_hash(restored)},
                    {"identity": "unmerged (subtraction)", "sha256": model.short_hash(subtracted)},
                    {"identity": "full fine-tuning", "sha256": model.short_hash(result.full)},
                ],
                caption=report.hashes_caption(
                    task.base_origin(seed.value),
                    "the unmerged model with the patch has the base model's hash",
                ),
            ),
            mo.md(
                "Unmerging by subtraction, `W' - (alpha/R) B·A`, rounds "
                f"{lora.patch_size(patch):,} of the adapted weights differently from the "
                "original (one float32 rounding each); the patch merge returns holds those "
                "weights, so unmerging restores the base exactly. The merged model and base + "
                "adapter are compared with their matmuls at HIGHEST precision, and the merge "
                "computes its A B at HIGHEST too: on a TPU, DEFAULT runs each float32 matmul "
                "as one bfloat16 pass, and the two orders of the same sum then differ by about "
                "2% of the logits' scale."
            ),
        ]
    )
    return adapter_bytes, closed_form, merged, n_lora, restored


@app.cell
def _(adapter_bytes, closed_form, merged, n_lora, rank, restored, result):
    # References: the closed-form count; the merge written out in NumPy float64
    # (W + (alpha/R) A B); base + adapter outputs, computed without merging, for the merged
    # model's outputs; the base weights themselves for unmerge and for the reloaded adapters.
    _tokens = task.encode(
        result.heldout_prompts, [task.reverse_response(p) for p in result.heldout_prompts]
    )["tokens_BT"]
    _reference = lora.merged_reference(result.base, result.adapters, result.scale)
    _merge_error = max(
        numerics.scaled_max_error(lora.kernel(merged, int(k.split(".")[0]), k.split(".")[1]), w)
        for k, w in _reference.items()
    )
    # both at HIGHEST matmul precision (on a TPU, DEFAULT is one bfloat16 pass per matmul)
    _merged_logits, _adapter_logits = lora.merged_and_adapter_logits(
        merged, result.base, result.adapters, result.scale, _tokens
    )
    _reloaded, _meta = lora.load(adapter_bytes)
    _base_leaves, _restored_leaves = jax.tree.leaves(result.base), jax.tree.leaves(restored)
    check = lab.Check(
        f"LoRA R={rank.value}: trainable count vs closed form; merged kernels vs NumPy float64 "
        "W + (alpha/R) A B; merged-model logits vs base + adapter logits; unmerge and reload "
        "vs the originals, bit for bit",
        {
            "trainable count": numerics.max_abs_error(n_lora, closed_form),
            "merged kernels": _merge_error,
            "merged vs base + adapter logits": numerics.scaled_max_error(
                _merged_logits, _adapter_logits
            ),
            "unmerged vs base": max(
                numerics.max_abs_error(a, b)
                for a, b in zip(_restored_leaves, _base_leaves, strict=True)
            ),
            "reloaded adapters": numerics.tree_scaled_max_error(_reloaded, result.adapters),
        },
        {
            "trainable count": 0.0,
            "merged kernels": numerics.tolerance("float32", precision="HIGHEST"),  # lora.delta
            "merged vs base + adapter logits": numerics.tolerance("float32", precision="HIGHEST"),
            "unmerged vs base": 0.0,
            "reloaded adapters": 0.0,
        },
        facts={
            "unmerged hash == base hash": model.content_hash(restored)
            == model.content_hash(result.base),
            "reloaded adapters hash == trained": model.content_hash(_reloaded)
            == model.content_hash(result.adapters),
            "saved rank matches": _meta["rank"] == rank.value,
        },
    )
    check
    return (check,)


@app.cell
def _(result):
    _rows = pd.DataFrame(
        [
            {"step": s + 1, "method": name, "training loss": float(v)}
            for name, curve in (
                ("LoRA", result.lora_loss_S),
                ("full fine-tuning", result.full_loss_S),
            )
            for s, v in enumerate(curve)
        ]
    )
    alt.Chart(_rows, title="Training loss on the same batches").mark_line().encode(
        x="step:Q",
        y=alt.Y("training loss:Q", scale=alt.Scale(type="log")),
        color=alt.Color("method:N", legend=alt.Legend(orient="bottom", title=None)),
    ).properties(width=480, height=220)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("lora")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_adapters_start_at_the_base_model(kernels, rank, result):
    # B starts at 0: the merged fresh adapter is the base, bit for bit (W + 0 = W)
    _fresh = lora.init_adapters(result.base, rank.value, kernels, jax.random.key(1))
    _merged, _patch = lora.merge(result.base, _fresh, result.scale)
    assert model.content_hash(_merged) == model.content_hash(result.base)
    assert lora.patch_size(_patch) == 0
    return


if __name__ == "__main__":
    app.run()
