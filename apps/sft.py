import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Supervised fine-tuning with response-only token loss")

with app.setup:
    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import claims
    from core.lessons.post_training import sft
    from core.lm import transformer
    from core.post_training import losses, model, report, task

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("steps", 150, "SFT steps (batch of 64 pairs each)", lo=10, hi=600, step=10),
        lab.Flag("learning_rate", 0.003, "Adam learning rate", lo=0.0001, hi=0.02, step=0.0001),
        lab.Flag("loss_on", "response", "which tokens the loss covers", choices=sft.LOSS_ON),
        lab.Flag("seed", 0, "PRNG seed (base model, split, batches)", lo=0, hi=9999),
        description="SFT with a response-only loss: zero prompt gradient, accuracy before/after.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Supervised fine-tuning with response-only token loss
    {lab.phase_line("sft")}

    A **base model** (the course's byte Transformer, {task.MODEL.num_layers} layers of width
    {task.MODEL.width}) was pretrained by the course (in this process, or loaded from the
    verified on-disk cache of an earlier run of the same code) on prompts like `cab=` followed
    by *random* letters and a `.`: it knows the format, not the task. The task: answer with
    the prompt reversed (`cab=` -> `bac.`). In this lesson you will

    - build prompt/response pairs and a **loss mask** that covers the response tokens only;
    - check the valid-token loss against a NumPy float64 forward pass and loss, and that the
      prompt positions get **exactly zero** gradient;
    - fine-tune, and compare samples and held-out accuracy **before and after**;
    - see each identity (base model, data sets, trained policy) by its content hash.
    """)
    return


@app.cell
def _():
    steps = FLAGS.control("steps", ARGS)
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    loss_on = FLAGS.control("loss_on", ARGS, label="loss on")
    seed = FLAGS.control("seed", ARGS)
    # Pretraining and fine-tuning are the lesson's long work: they run on a press, so a
    # learner sets the controls first. Headless runs train at the flags.
    train_button = mo.ui.run_button(label="Fine-tune")
    mo.hstack([steps, learning_rate, loss_on, seed, train_button], justify="start", wrap=True)
    return learning_rate, loss_on, seed, steps, train_button


@app.cell
def _():
    _example = task.encode(["cab="], ["bac."])
    _mask_rows = [
        {
            "position t": t,
            "token t": repr(chr(_example["tokens_BT"][0, t])),
            "target t+1": repr(chr(_example["tokens_BT"][0, t + 1])),
            "response mask": int(_example["weights_BT"][0, t]),
            "all-token mask": int(_example["all_weights_BT"][0, t]),
        }
        for t in range(task.SEQ_LEN - 1)
    ]
    mo.vstack(
        [
            mo.md(
                """
    ## Data and mask

    Position t predicts token t+1; the response mask keeps the positions whose target is a
    response token (PAD is byte 0):
    """
            ),
            lab.table(_mask_rows),
        ]
    )
    return


@app.cell
def _(learning_rate, loss_on, seed, steps, train_button):
    mo.stop(
        lab.interactive() and not train_button.value,
        mo.callout(
            mo.md(
                f"Press **Fine-tune**: {steps.value} steps at learning rate "
                f"{learning_rate.value:g}, loss on {loss_on.value}, seed {seed.value}."
            ),
            kind="info",
        ),
    )
    with mo.status.spinner(title="pretraining the base model, then fine-tuning"):
        result = sft.run(seed.value, steps.value, learning_rate.value, loss_on.value)
    mo.vstack(
        [
            mo.md(
                f"{len(result.train_prompts)} training prompts, {len(result.heldout_prompts)} "
                "held out (never seen in training)."
            ),
            lab.table(
                result.identities(),
                caption=report.hashes_caption(task.base_origin(seed.value)),
            ),
        ]
    )
    return (result,)


@app.cell
def _(result):
    mo.vstack(
        [
            mo.md("## Before and after"),
            lab.table(result.samples, caption="Greedy samples on held-out prompts"),
            lab.table(
                [
                    {"model": "base", "held-out accuracy": f"{result.accuracy_before:.1%}"},
                    {"model": "after SFT", "held-out accuracy": f"{result.accuracy_after:.1%}"},
                ]
            ),
        ]
    )
    return


@app.cell
def _(result):
    # Independent reference: the trained policy's logits from core.lm's NumPy float64 forward
    # pass (transformer.lm_reference on a TinyLM holding the weights), then the masked loss by
    # a loop over the marked positions in float64.
    _batch = result.heldout_data
    _logits = model.logits_BTV(result.policy, _batch["tokens_BT"])
    loss = float(losses.token_loss_from_logits(_logits, _batch["tokens_BT"], _batch["weights_BT"]))
    _logits64 = transformer.lm_reference(
        model.to_model(result.policy, task.MODEL), _batch["tokens_BT"]
    )
    loss_reference = losses.masked_token_loss_reference(
        _logits64, _batch["tokens_BT"], _batch["weights_BT"]
    )
    # Zero prompt gradient: d loss / d logits, exactly 0 wherever the mask is 0.
    grad_BTV = losses.logits_gradient_BTV(_logits, _batch["tokens_BT"], _batch["weights_BT"])
    _outside = _batch["weights_BT"] == 0
    outside_grad = numerics.max_abs_error(grad_BTV[_outside], np.zeros_like(grad_BTV[_outside]))
    _inside_norms = np.abs(grad_BTV[~_outside]).sum(-1)
    check = lab.Check(
        f"held-out response-only loss {loss:.4g} (float32) vs NumPy float64 forward + loss "
        f"{loss_reference:.4g}; d loss / d logits at prompt and padding positions is exactly 0",
        {
            "valid-token loss": numerics.scaled_max_error(loss, loss_reference),
            "gradient outside the mask": outside_grad,
        },
        {"valid-token loss": numerics.tolerance("float32"), "gradient outside the mask": 0.0},
        facts={"every response position gets a gradient": bool(np.all(_inside_norms > 0))},
    )
    check
    return (check,)


@app.cell
def _(result):
    _rows = pd.DataFrame(
        {"step": np.arange(1, len(result.loss_S) + 1), "training loss": result.loss_S}
    )
    alt.Chart(_rows, title="SFT training loss (nats per marked token)").mark_line().encode(
        x="step:Q", y=alt.Y("training loss:Q", scale=alt.Scale(type="log"))
    ).properties(width=480, height=220)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("sft")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_sft_learns_the_task_at_defaults(learning_rate, loss_on, result, seed, steps):
    # The lesson's claim at its defaults; sft_test proves it over several seeds.
    _values = {
        "steps": steps.value,
        "learning_rate": learning_rate.value,
        "loss_on": loss_on.value,
        "seed": seed.value,
    }
    if claims.at_defaults(FLAGS, _values):
        assert sft.claim_problems(result) == []
    return


if __name__ == "__main__":
    app.run()
