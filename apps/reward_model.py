import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Learn a reward model from pairwise preferences")

with app.setup:
    import altair as alt
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import claims
    from core.lessons.post_training import reward_model
    from core.post_training import losses, model, preferences, report, task

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag(
            "steps",
            preferences.RM_STEPS,
            "training steps (64 pairs each)",
            lo=10,
            hi=600,
            step=10,
        ),
        lab.Flag(
            "learning_rate",
            preferences.RM_LEARNING_RATE,
            "Adam learning rate",
            lo=0.0001,
            hi=0.02,
            step=0.0001,
        ),
        lab.Flag("seed", 0, "PRNG seed (base model, pairs, labels, batches)", lo=0, hi=9999),
        description="A Bradley-Terry reward model from synthetic pairwise preferences.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Learn a reward model from pairwise preferences
    {lab.phase_line("reward_model")}

    People rarely score an answer on a scale; they pick the better of two. Here the
    "people" are simulated: two responses to a prompt are sampled from the base model, and
    a labeller prefers a over b with the **Bradley–Terry** probability
    `σ({preferences.LABEL_BETA:g} · (r*(a) − r*(b)))`, where the hidden ground-truth
    reward r* gives one point per letter of the reversed prompt in its place and one for the
    right length. In this lesson you will

    - train a reward model (the base Transformer with a scalar head on the last token) with
      the Bradley–Terry loss `−log σ(r(y_w) − r(y_l))`, checked against its closed form;
    - compare its loss with the best any reward can do on these noisy labels (the
      labeller's own reward);
    - measure how often it orders **held-out** pairs like the ground truth.
    """)
    return


@app.cell
def _():
    steps = FLAGS.control("steps", ARGS)
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    seed = FLAGS.control("seed", ARGS)
    # Sampling the pairs and training the reward model are the lesson's long work: they run
    # on a press, so a learner sets the controls first. Headless runs train at the flags.
    train_button = mo.ui.run_button(label="Train the reward model")
    mo.hstack([steps, learning_rate, seed, train_button], justify="start", wrap=True)
    return learning_rate, seed, steps, train_button


@app.cell
def _(learning_rate, seed, steps, train_button):
    mo.stop(
        lab.interactive() and not train_button.value,
        mo.callout(
            mo.md(
                f"Press **Train the reward model**: preference pairs sampled at seed "
                f"{seed.value}, then {steps.value} steps at learning rate {learning_rate.value:g}."
            ),
            kind="info",
        ),
    )
    with mo.status.spinner(title="pretraining the base model, sampling pairs, training"):
        result = reward_model.run(seed.value, steps.value, learning_rate.value)
    _pairs = result.train_pairs
    _examples = [
        {
            "prompt": _pairs.prompts[i],
            "chosen y_w": task.responses_of(
                _pairs.tokens_w_BT[i : i + 1], _pairs.weights_w_BT[i : i + 1]
            )[0],
            "r*(y_w)": _pairs.true_w_B[i],
            "rejected y_l": task.responses_of(
                _pairs.tokens_l_BT[i : i + 1], _pairs.weights_l_BT[i : i + 1]
            )[0],
            "r*(y_l)": _pairs.true_l_B[i],
        }
        for i in range(6)
    ]
    mo.vstack(
        [
            mo.md(
                f"## Preferences and identities\n{len(result.train_pairs)} training pairs, "
                f"{len(result.heldout_pairs)} on held-out prompts. The labels are noisy: "
                f"{np.mean(_pairs.true_w_B < _pairs.true_l_B):.0%} of the training pairs "
                "prefer the response with the lower true reward."
            ),
            lab.table(_examples, caption="A few training pairs"),
            lab.table(
                [
                    {
                        "identity": "base model = behaviour policy of the pairs",
                        "sha256": model.short_hash(result.base),
                    },
                    {"identity": "training pairs", "sha256": result.train_pairs.hash()},
                    {"identity": "held-out pairs", "sha256": result.heldout_pairs.hash()},
                    {"identity": "reward model (trained)", "sha256": model.short_hash(result.rm)},
                ],
                caption=report.hashes_caption(task.base_origin(seed.value)),
            ),
        ]
    )
    return (result,)


@app.cell
def _(result):
    # Independent reference: the Bradley-Terry loss in NumPy float64 from its closed form
    # mean log(1 + exp(-(r_w - r_l))), on the learned rewards of the held-out pairs.
    _pairs = result.heldout_pairs
    r_w = np.asarray(preferences.reward_B(result.rm, _pairs.tokens_w_BT, _pairs.weights_w_BT))
    r_l = np.asarray(preferences.reward_B(result.rm, _pairs.tokens_l_BT, _pairs.weights_l_BT))
    heldout_loss = float(losses.bradley_terry_loss(r_w, r_l))
    _reference = losses.bradley_terry_reference(r_w, r_l)
    best_loss = preferences.true_label_loss(_pairs)
    check = lab.Check(
        f"held-out Bradley-Terry loss {heldout_loss:.4f} (float32) vs the closed form "
        f"{_reference:.4f} (NumPy float64)",
        numerics.scaled_max_error(heldout_loss, _reference),
        numerics.tolerance("float32"),
    )
    mo.vstack(
        [
            check,
            lab.table(
                [
                    {
                        "reward": "constant (learns nothing)",
                        "held-out loss": f"{np.log(2):.4f}",
                        "agreement with r*": "50%",
                    },
                    {
                        "reward": "learned",
                        "held-out loss": f"{heldout_loss:.4f}",
                        "agreement with r*": f"{result.heldout_agreement:.1%}",
                    },
                    {
                        "reward": f"the labeller's own ({preferences.LABEL_BETA:g} r*)",
                        "held-out loss": f"{best_loss:.4f}",
                        "agreement with r*": "100%",
                    },
                ],
                caption="Agreement: pairs with different true rewards that the reward orders "
                f"like r* (training pairs: {result.train_agreement:.1%})",
            ),
        ]
    )
    return best_loss, check


@app.cell
def _(best_loss, result):
    _loss = pd.DataFrame({"step": np.arange(1, len(result.loss_S) + 1), "loss": result.loss_S})
    _lines = pd.DataFrame(
        {"y": [np.log(2), best_loss], "what": ["log 2 (constant reward)", "labeller's own reward"]}
    )
    loss_chart = (
        alt.Chart(_loss, title="Bradley-Terry training loss")
        .mark_line()
        .encode(x="step:Q", y=alt.Y("loss:Q", scale=alt.Scale(zero=False)))
        + alt.Chart(_lines)
        .mark_rule(strokeDash=[4, 3])
        .encode(y="y:Q", color=alt.Color("what:N", legend=alt.Legend(orient="bottom", title=None)))
    ).properties(width=320, height=220)
    _rows = pd.DataFrame(reward_model.reward_rows(result))
    reward_chart = (
        alt.Chart(_rows, title="Learned reward by true reward (held-out responses)")
        .mark_boxplot()
        .encode(x=alt.X("true reward:O"), y=alt.Y("learned reward:Q"))
        .properties(width=260, height=220)
    )
    mo.hstack([loss_chart, reward_chart], justify="start")
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("reward_model")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_reward_agrees_at_defaults(learning_rate, result, seed, steps):
    _values = {"steps": steps.value, "learning_rate": learning_rate.value, "seed": seed.value}
    if claims.at_defaults(FLAGS, _values):
        assert result.heldout_agreement >= reward_model.AGREES_ABOVE
    return


if __name__ == "__main__":
    app.run()
