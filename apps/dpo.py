import marimo

__generated_with = "0.25.2"
app = marimo.App(
    width="medium", app_title="Direct preference optimization and reference-corrected margins"
)

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np
    import pandas as pd

    from core import lab, numerics
    from core.lab import claims, exercises, text
    from core.post_training import dpo, losses, model, preferences, report, rlhf, task

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag(
            "beta", dpo.DPO_BETA, "DPO beta (strength of the KL anchor)", lo=0.01, hi=1.0, step=0.01
        ),
        lab.Flag("steps", dpo.DPO_STEPS, "training steps (64 pairs each)", lo=10, hi=600, step=10),
        lab.Flag(
            "learning_rate",
            dpo.DPO_LEARNING_RATE,
            "Adam learning rate",
            lo=0.0001,
            hi=0.02,
            step=0.0001,
        ),
        lab.Flag("seed", 0, "PRNG seed (base model, pairs, batches, samples)", lo=0, hi=9999),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description="DPO on synthetic preferences: the loss vs its closed form, implicit margins.",
    )
    ARGS = FLAGS.parse()
    SHOWN_PAIRS = 6  # training pairs shown as text, each of another prompt
    SHOWN_SAMPLES = 8  # held-out prompts whose samples are shown


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Direct preference optimization and reference-corrected margins
    {lab.phase_line("dpo")}

    **What happens here.** A tiny byte model answers prompts such as `cab=`; the right answer
    is the prompt reversed, `bac.`, but the model was pretrained on random answers and almost
    never gives it. It then sees nothing but pairs of its own answers in which a labeller
    marked one as better, and learns from them, with no reward model and no sampling during
    training, to answer more like `bac.`: at the default settings the true reward of its
    answers to prompts it never trained on rises by at least {dpo.REWARD_GAIN:g} (of a
    perfect {task.MAX_REWARD}; tested over several seeds), and you measure what that cost in
    KL divergence from the model it started from.

    **How.** RLHF learns a reward model from preferences, then optimises the policy against it
    with a KL penalty to a reference. **DPO** ([Rafailov et al.,
    2023](https://arxiv.org/abs/2305.18290)) skips both: the policy that RLHF's objective would
    reach makes `β · log(π(y) / π_ref(y))` an implicit reward, and fitting that reward to the
    preferences with the Bradley–Terry loss is a loss on the policy itself:

    `−log σ(β · ((log π(y_w) − log π_ref(y_w)) − (log π(y_l) − log π_ref(y_l))))`

    where `y_w` is the chosen response and `y_l` the rejected one. Below: the pairs it learns
    from, its training (on a press of **Train DPO**), answers before and after, a check of the
    loss against NumPy float64, what it gained and what it cost, and two exercises.
    """)
    return


@app.cell
def _():
    seed = FLAGS.control("seed", ARGS)
    mo.vstack(
        [
            mo.md("## The preference pairs"),
            mo.hstack(
                [seed, mo.md("picks the base model, the pairs, the batches and the samples")],
                justify="start",
            ),
        ]
    )
    return (seed,)


@app.function
def answer_text(answer: str):
    """A prompt or a decoded answer as a code span; a byte that is not printable text (the
    byte model can sample any of 256) shows as �."""
    return text.code("".join(c if c.isprintable() else "\ufffd" for c in answer) or "\ufffd")


@app.cell
def _(seed):
    with mo.status.spinner(title="the base model (pretrained or loaded), sampling the pairs"):
        train_pairs, heldout_pairs = preferences.lesson_data(seed.value)
    _picked = np.arange(SHOWN_PAIRS) * preferences.PAIRS_PER_PROMPT  # one pair per prompt
    _chosen = task.responses_of(train_pairs.tokens_w_BT[_picked], train_pairs.weights_w_BT[_picked])
    _rejected = task.responses_of(
        train_pairs.tokens_l_BT[_picked], train_pairs.weights_l_BT[_picked]
    )
    _rows = []
    for _i, _w, _l in zip(_picked, _chosen, _rejected, strict=True):
        _prompt = train_pairs.prompts[_i]
        _r_w, _r_l = train_pairs.true_w_B[_i], train_pairs.true_l_B[_i]
        _rows.append(
            {
                "prompt x": answer_text(_prompt),
                "right answer": answer_text(task.reverse_response(_prompt)),
                "chosen y_w": answer_text(_w),
                "true reward of y_w": _r_w,
                "rejected y_l": answer_text(_l),
                "true reward of y_l": _r_l,
                "P(labeller picks y_w)": 1 / (1 + np.exp(-preferences.LABEL_BETA * (_r_w - _r_l))),
            }
        )
    _diff = train_pairs.true_w_B - train_pairs.true_l_B
    mo.vstack(
        [
            mo.md(
                f"Each of {len(train_pairs) // preferences.PAIRS_PER_PROMPT} training prompts "
                f"got {preferences.PAIRS_PER_PROMPT} pairs of answers sampled from the base "
                "model. A simulated labeller scores each answer with the true reward (one point "
                f"per letter in its place in the reversed prompt, one more for exactly "
                f"{task.PROMPT_LETTERS} letters and a `.`) and picks one with probability "
                f"σ({preferences.LABEL_BETA:g} · (reward difference)): a coin flip on a tie, and "
                "now and then the worse answer. **DPO never sees the rewards**, only which "
                f"answer was picked. Of the {len(train_pairs)} training pairs, the chosen answer "
                f"scores higher in {np.mean(_diff > 0):.0%}, the same in {np.mean(_diff == 0):.0%} "
                f"and lower in {np.mean(_diff < 0):.0%}."
            ),
            lab.table(_rows, caption=f"{SHOWN_PAIRS} training pairs, decoded (seed {seed.value})"),
        ]
    )
    return heldout_pairs, train_pairs


@app.cell
def _():
    beta = FLAGS.control("beta", ARGS)
    steps = FLAGS.control("steps", ARGS)
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    # Training and sampling are the lesson's long work: they run on a press, so a learner
    # sets the three controls first. Headless runs train at the flags.
    train_button = mo.ui.run_button(label="Train DPO")
    mo.vstack(
        [
            mo.md("## Training"),
            mo.hstack([beta, steps, learning_rate, train_button], justify="start", wrap=True),
        ]
    )
    return beta, learning_rate, steps, train_button


@app.cell
def _(beta, learning_rate, seed, steps, train_button, train_pairs):
    mo.stop(
        lab.interactive() and not train_button.value,
        mo.callout(
            mo.md(
                f"Press **Train DPO**: {steps.value} steps of {dpo.DPO_BATCH} pairs at "
                f"β = {beta.value:g}, learning rate {learning_rate.value:g}, seed {seed.value}, "
                "then samples of both models on the held-out prompts."
            ),
            kind="info",
        ),
    )
    with mo.status.spinner(title="training DPO, sampling the reference and the policy"):
        reference = task.base_params(seed.value)
        policy, history = dpo.train(
            reference, train_pairs, seed.value, steps.value, beta.value, learning_rate.value
        )
        _, heldout_prompts = task.split_prompts(seed.value)
        _key = jax.random.fold_in(jax.random.key(seed.value), 99)
        reports = {
            "reference (base)": report.policy_report(reference, reference, heldout_prompts, _key),
            "DPO policy": report.policy_report(policy, reference, heldout_prompts, _key),
        }
    _before, _after = (reports[k]["true reward"] for k in ("reference (base)", "DPO policy"))
    mo.vstack(
        [
            mo.md(
                f"Mean true reward of answers to the {len(heldout_prompts)} held-out prompts: "
                f"**{_before:.2f} → {_after:.2f}** (of {task.MAX_REWARD}), at a KL from the "
                f"reference of {reports['DPO policy']['KL k3 (nats)']:.2f} nats per answer."
            ),
            lab.table(
                [{"policy": name, **values} for name, values in reports.items()],
                caption=f"{report.SAMPLES_PER_PROMPT} samples per held-out prompt (temperature "
                "1); KL(π ‖ π_ref) per response by the k1 and k3 estimators",
            ),
        ]
    )
    return heldout_prompts, history, policy, reference, reports


@app.cell
def _(heldout_prompts, policy, reference, seed):
    # One sample per prompt from each model with the same key: where they differ, the policy did.
    _prompts = heldout_prompts[:SHOWN_SAMPLES]
    _key = jax.random.fold_in(jax.random.key(seed.value), 7)
    _rows = [
        {"prompt x": answer_text(p), "right answer": answer_text(task.reverse_response(p))}
        for p in _prompts
    ]
    for _name, _params in (("reference", reference), ("DPO", policy)):
        _answers = task.responses_of(*task.sample(_params, _prompts, _key))
        for _row, _prompt, _answer in zip(_rows, _prompts, _answers, strict=True):
            _row[f"{_name} answer"] = answer_text(_answer)
            _row[f"{_name} true reward"] = task.true_reward(_prompt, _answer)
    lab.table(
        _rows,
        caption="Held-out prompts: one sample of each model (temperature 1, the same key); "
        "\ufffd is a byte that is not printable text",
    )
    return


@app.cell
def _(beta, heldout_pairs, policy, reference):
    # Independent reference: the four log-probabilities from core.lm's NumPy float64 forward
    # pass, then the DPO formula as written, in float64.
    _p = heldout_pairs
    _logp = dpo.policy_logprobs(policy, {**_p.arrays()})
    _ref = dpo.reference_logprobs(reference, _p)
    _loss, _margins = losses.dpo_loss(*_logp, _ref["ref_w_B"], _ref["ref_l_B"], beta.value)

    def _f64(params, side):
        return model.sequence_logprob_reference(
            params, task.MODEL, getattr(_p, f"tokens_{side}_BT"), getattr(_p, f"weights_{side}_BT")
        )

    _f64_logprobs = (
        _f64(policy, "w"),
        _f64(policy, "l"),
        _f64(reference, "w"),
        _f64(reference, "l"),
    )
    _ref_loss, _ref_margins = losses.dpo_reference(*_f64_logprobs, beta.value)
    heldout_accuracy = float(np.mean(np.asarray(_margins) > 0))
    check = lab.Check(
        "DPO loss and implicit reward margins of the held-out pairs, recomputed in NumPy float64",
        {
            "DPO loss": numerics.scaled_max_error(float(_loss), _ref_loss),
            # relative to beta x the log-probabilities a margin is the difference of
            "margins": dpo.margin_error(_margins, _ref_margins, _f64_logprobs, beta.value),
        },
        numerics.tolerance("float32"),
    )
    mo.vstack(
        [
            check,
            mo.md(
                f"On the {len(_p)} held-out pairs the DPO loss is {float(_loss):.4f} nats, and "
                "the policy gives the chosen answer the larger implicit reward (margin > 0) in "
                f"{heldout_accuracy:.0%} of them; before training every margin was 0."
            ),
        ]
    )
    return (check,)


@app.cell
def _(history, reports):
    _rows = pd.DataFrame(
        [
            {"step": s + 1, "what": what, "value": float(v)}
            for what, key in (
                ("mean implicit reward margin", "margin"),
                ("share of pairs with margin > 0", "accuracy"),
                ("DPO loss", "loss"),
            )
            for s, v in enumerate(history[key])
        ]
    )
    curves = (
        alt.Chart(_rows, title="Over training (each training batch)")
        .mark_line()
        .encode(
            x="step:Q",
            y=alt.Y("value:Q"),
            color=alt.Color("what:N", legend=alt.Legend(orient="bottom", title=None)),
        )
        .properties(width=380, height=220)
    )
    bars = report.bars_by_policy(reports, ("true reward", "KL k3 (nats)"), "Gain and cost")
    mo.vstack([curves, bars])
    return


@app.cell(hide_code=True)
def _(beta, history, reports):
    _base, _dpo = reports["reference (base)"], reports["DPO policy"]
    _loss = np.asarray(history["loss"])
    _margin = float(np.asarray(history["margin"])[-1])
    mo.md(f"""
    ## What you saw

    - DPO raised the mean true reward of held-out answers from **{_base["true reward"]:.2f}
      to {_dpo["true reward"]:.2f}** ({_dpo["true reward"] - _base["true reward"]:+.2f}), and
      greedy answers exactly right from {_base["greedy accuracy"]:.0%} to
      {_dpo["greedy accuracy"]:.0%}, without a reward model and without sampling during
      training.
    - It cost **{_dpo["KL k3 (nats)"]:.2f} nats** of KL from the reference per answer (k3;
      k1 says {_dpo["KL k1 (nats)"]:.2f}): the policy drifted from the model the pairs came
      from, which is what β = {beta.value:g} charges for.
    - The loss ended at {_loss[-1]:.4f} after {len(_loss)} steps, and the last batch's mean
      implicit reward margin reached {_margin:.2f}. Where did the loss start, whatever β?
      Exercise 1 asks you to predict it.

    **Try this.** Raise **beta** to 1.0 and press **Train DPO**: watch the KL columns (a
    stronger anchor to the reference) and how much of the true-reward gain is left. Then, back
    at β = 0.1, set **steps** to 600: the margins on the training batches keep growing, but
    compare the held-out true reward with the shorter run: DPO pays for pulling each pair
    apart, not for being right.
    """)
    return


@app.cell
def _():
    rlhf_button = mo.ui.run_button(label="Run RLHF on the same preferences")
    mo.vstack(
        [
            mo.md(
                "## Going further: DPO beside RLHF on the same preferences\n"
                "The RLHF lesson fits a reward to the same training pairs (a Bradley-Terry "
                "proxy on bag-of-letters features) and trains PPO against it with a KL penalty "
                "to the same reference, at that lesson's defaults. Both policies are sampled on "
                "the same held-out prompts with the same key. It depends on the seed only."
            ),
            rlhf_button,
        ]
    )
    return (rlhf_button,)


@app.cell
def _(rlhf_button, seed):
    # PPO (KL penalty to the same reference) against a reward fitted to the same training
    # pairs, at the RLHF lesson's defaults (core.post_training); it reads the seed alone.
    mo.stop(
        lab.interactive() and not rlhf_button.value,
        mo.callout(
            mo.md(
                f"Press **Run RLHF on the same preferences**: a proxy reward and "
                f"{rlhf.STEPS} PPO steps at seed {seed.value} (the longest run of this lesson)."
            ),
            kind="info",
        ),
    )
    with mo.status.spinner(title="RLHF on the same preferences: proxy reward, PPO"):
        _reference = task.base_params(seed.value)
        _train_pairs, _ = preferences.lesson_data(seed.value)
        _train_prompts, _heldout_prompts = task.split_prompts(seed.value)
        _policy, _run = rlhf.rlhf_policy(_reference, _train_pairs, _train_prompts, seed.value)
        _key = jax.random.fold_in(jax.random.key(seed.value), 99)
        rlhf_report = report.policy_report(_policy, _reference, _heldout_prompts, _key)
    rlhf_name = f"RLHF: {_run.config.name} ({rlhf.STEPS} steps)"
    return rlhf_name, rlhf_report


@app.cell
def _(reports, rlhf_name, rlhf_report):
    _shown = ("true reward", "KL k1 (nats)", "KL k3 (nats)", "greedy accuracy")
    lab.table(
        [
            {"policy": name, **{m: values[m] for m in _shown}}
            for name, values in (*reports.items(), (rlhf_name, rlhf_report))
        ],
        caption=f"{report.SAMPLES_PER_PROMPT} samples per held-out prompt; KL(π ‖ π_ref) "
        "per response (k1, k3); the RLHF side at its lesson's defaults",
    )
    return


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson("dpo", ARGS)
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell
def _(heldout_pairs, policy, reference, seed, train_pairs):
    # Which weights and which pairs these numbers came from, for comparing runs.
    mo.accordion(
        {
            "Provenance (hashes)": lab.table(
                [
                    {
                        "identity": "reference = behaviour policy of the pairs (frozen)",
                        "sha256": model.short_hash(reference),
                    },
                    {"identity": "preference pairs (train)", "sha256": train_pairs.hash()},
                    {
                        "identity": "preference pairs (held-out prompts)",
                        "sha256": heldout_pairs.hash(),
                    },
                    {"identity": "DPO policy (trained)", "sha256": model.short_hash(policy)},
                ],
                caption=report.hashes_caption(
                    task.base_origin(seed.value),
                    "the same pairs as the reward model lesson at this seed",
                ),
            )
        }
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("dpo")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_dpo_raises_the_true_reward_at_defaults(beta, learning_rate, reports, seed, steps):
    _values = {
        "beta": beta.value,
        "steps": steps.value,
        "learning_rate": learning_rate.value,
        "seed": seed.value,
    }
    if claims.at_defaults(FLAGS, _values):
        _gain = reports["DPO policy"]["true reward"] - reports["reference (base)"]["true reward"]
        assert _gain >= dpo.REWARD_GAIN
    return


if __name__ == "__main__":
    app.run()
