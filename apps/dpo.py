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
    from core.lab import claims
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
        description="DPO on synthetic preferences: the loss vs its closed form, implicit margins.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Direct preference optimization and reference-corrected margins
    {lab.phase_line("dpo")}

    RLHF learns a reward model from preferences, then optimises the policy against it with
    a KL penalty to a reference. **DPO** skips both: the policy that RLHF's objective would
    reach makes `β · log(π(y) / π_ref(y))` an implicit reward, and fitting that reward to the
    preferences with the Bradley–Terry loss is a loss on the policy itself:

    `−log σ(β · ((log π(y_w) − log π_ref(y_w)) − (log π(y_l) − log π_ref(y_l))))`

    In this lesson you will train it on the preference pairs of the reward-model lesson
    (same base model, same labels), check the loss and margins against a NumPy float64
    closed form, watch the implicit reward margins grow, and measure what the policy gained
    (true reward of its samples) and what it cost (KL to the reference).
    """)
    return


@app.cell
def _():
    beta = FLAGS.control("beta", ARGS)
    steps = FLAGS.control("steps", ARGS)
    learning_rate = FLAGS.control("learning_rate", ARGS, label="learning rate")
    seed = FLAGS.control("seed", ARGS)
    mo.hstack([beta, steps, learning_rate, seed], justify="start", wrap=True)
    return beta, learning_rate, seed, steps


@app.cell
def _(beta, learning_rate, seed, steps):
    with mo.status.spinner(title="pretraining the base model, sampling pairs, training DPO"):
        reference = task.base_params(seed.value)
        train_pairs, heldout_pairs = preferences.lesson_data(seed.value)
        policy, history = dpo.train(
            reference, train_pairs, seed.value, steps.value, beta.value, learning_rate.value
        )
        _, heldout_prompts = task.split_prompts(seed.value)
        _key = jax.random.fold_in(jax.random.key(seed.value), 99)
        reports = {
            "reference (base)": report.policy_report(reference, reference, heldout_prompts, _key),
            "DPO policy": report.policy_report(policy, reference, heldout_prompts, _key),
        }
    mo.vstack(
        [
            lab.table(
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
            ),
            lab.table(
                [{"policy": name, **values} for name, values in reports.items()],
                caption=f"{report.SAMPLES_PER_PROMPT} samples per held-out prompt (temperature "
                "1); KL(π ‖ π_ref) per response by the k1 and k3 estimators",
            ),
        ]
    )
    return heldout_pairs, history, policy, reference, reports


@app.cell
def _(policy, reference, reports, seed):
    # The comparison with the RLHF lesson: PPO (KL penalty to the same reference) against a
    # reward fitted to the same training pairs, at that lesson's defaults (core.post_training).
    with mo.status.spinner(title="RLHF on the same preferences: proxy reward, PPO"):
        _train_pairs, _ = preferences.lesson_data(seed.value)
        _train_prompts, _heldout_prompts = task.split_prompts(seed.value)
        rlhf_policy, _run = rlhf.rlhf_policy(reference, _train_pairs, _train_prompts, seed.value)
        _key = jax.random.fold_in(jax.random.key(seed.value), 99)
        _rlhf = report.policy_report(rlhf_policy, reference, _heldout_prompts, _key)
    _shown = ("true reward", "KL k1 (nats)", "KL k3 (nats)", "greedy accuracy")
    _rows = [
        {"policy": name, **{m: values[m] for m in _shown}, "sha256": model.short_hash(p)}
        for name, values, p in (
            ("reference (base)", reports["reference (base)"], reference),
            ("DPO policy", reports["DPO policy"], policy),
            (f"RLHF: {_run.config.name} ({rlhf.STEPS} steps)", _rlhf, rlhf_policy),
        )
    ]
    mo.vstack(
        [
            mo.md(
                "## DPO beside RLHF on the same preferences\n"
                "The RLHF lesson fits a reward to the same training pairs (a Bradley-Terry "
                "proxy on bag-of-letters features) and trains PPO against it with a KL penalty "
                "to the same reference. Both policies are sampled on the same held-out prompts "
                "with the same key."
            ),
            lab.table(
                _rows,
                caption=f"{report.SAMPLES_PER_PROMPT} samples per held-out prompt; KL(π ‖ π_ref) "
                "per response (k1, k3); the RLHF side at its lesson's defaults",
            ),
        ]
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
        f"held-out DPO loss {float(_loss):.4f} and implicit reward margins (float32) vs NumPy "
        f"float64 log-probabilities and the closed form ({_ref_loss:.4f}); margins > 0 on "
        f"{heldout_accuracy:.0%} of held-out pairs",
        {
            "DPO loss": numerics.scaled_max_error(float(_loss), _ref_loss),
            # relative to beta x the log-probabilities a margin is the difference of
            "margins": dpo.margin_error(_margins, _ref_margins, _f64_logprobs, beta.value),
        },
        numerics.tolerance("float32"),
    )
    check
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
def _():
    lab.tpu_results("dpo")
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
