import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="RLHF mechanics: a frozen reward and PPO policy updates")

with app.setup:
    import altair as alt
    import marimo as mo
    import pandas as pd

    from core import lab, numerics
    from core.lab import claims
    from core.lessons.post_training import rlhf_ppo
    from core.post_training import losses, report, rlhf, task

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag(
            "kl_coef", 0.2, "KL penalty coefficient (0: no anchor)", lo=0.0, hi=2.0, step=0.05
        ),
        lab.Flag("clip", 0.2, "PPO clip epsilon", lo=0.05, hi=0.5, step=0.05),
        lab.Flag("steps", 30, "RL steps (64 sampled responses each)", lo=5, hi=300, step=5),
        lab.Flag("group", 4, "samples per prompt G (the GRPO group)", lo=1, hi=16),
        lab.Flag(
            "aggregation",
            "sequence",
            "loss aggregation of the PPO runs",
            choices=losses.AGGREGATIONS,
        ),
        lab.Flag("seed", 0, "PRNG seed (base model, pairs, RL sampling)", lo=0, hi=9999),
        description="PPO and GRPO on the byte LM against a frozen learned reward, KL to a "
        "frozen reference.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # RLHF mechanics: a frozen reward and PPO policy updates
    {lab.phase_line("rlhf_ppo")}

    RLHF optimises a policy against a **frozen reward model** learned from preferences, with a
    **KL penalty** to a frozen reference so that it cannot wander where the reward model was
    never trained. Here the reward model is a proxy fitted (Bradley–Terry) to the same
    preference pairs as the reward-model and DPO lessons, on two bag-of-letters features:
    letters taken from the prompt are good, other letters bad. It agrees with the ground
    truth on the base model's samples, but it sees neither order nor the length that earns
    the format point. In this lesson you will

    - train the policy with **PPO** (the KL penalty in the reward, per token, and a value
      head as baseline) and watch proxy reward, true reward and KL over training;
    - see the proxy **over-optimised** at KL coefficient 0: longer and longer responses of
      prompt letters that never end with "." and a KL that runs away, for little true reward;
    - train **GRPO**, the default of today's post-training libraries: advantages normalised
      within a group of G samples per prompt, no value network;
    - measure how the **loss aggregation** (per sequence or per token) weighs long and short
      responses, and check advantages, the per-token KL estimator and the clipped objective
      against NumPy float64.
    """)
    return


@app.cell
def _():
    kl_coef = FLAGS.control("kl_coef", ARGS, label="KL coefficient")
    clip = FLAGS.control("clip", ARGS, label="clip epsilon")
    steps = FLAGS.control("steps", ARGS)
    group = FLAGS.control("group", ARGS, label="samples per prompt G")
    aggregation = FLAGS.control("aggregation", ARGS)
    seed = FLAGS.control("seed", ARGS)
    run_button = mo.ui.run_button(label="Train the four runs")
    mo.vstack(
        [
            mo.hstack([kl_coef, clip, steps], justify="start", wrap=True),
            mo.hstack([group, aggregation, seed], justify="start", wrap=True),
            run_button,
        ]
    )
    return aggregation, clip, group, kl_coef, run_button, seed, steps


@app.cell
def _(group):
    lab.guard(
        rlhf.group_size_problem(group.value),
        headline="GRPO cannot normalise this group.",
    )
    group_ok = True
    return (group_ok,)


@app.cell
def _(aggregation, clip, group, group_ok, kl_coef, run_button, seed, steps):
    _ = group_ok  # runs only once the guard let this group size through
    mo.stop(
        lab.interactive() and not run_button.value,
        mo.md("Press **Train the four runs** (the longest computation of this lesson)."),
    )
    with mo.status.spinner(title="base model, preference pairs, proxy reward, four RL runs"):
        result = rlhf_ppo.run(
            seed.value, kl_coef.value, clip.value, steps.value, group.value, aggregation.value
        )
    penalised = rlhf.ppo_config(kl_coef.value).name
    _rows = [
        {
            "run": r.config.name,
            "method": r.config.method,
            "KL coef": r.config.kl_coef,
            "aggregation": r.config.aggregation,
            **{
                m: rlhf_ppo.at_end(r, m)
                for m in (
                    "proxy reward",
                    "true reward",
                    "KL k3 (nats)",
                    "response letters",
                    "ends with '.'",
                )
            },
        }
        for r in result.runs
    ]
    _start = result.runs[0].metrics_S
    _ends = _start["ends with '.'"][0]
    mo.vstack(
        [
            mo.md(
                f"The proxy reward: **{result.proxy_F[0]:+.3f}** per letter from the prompt, "
                f"**{result.proxy_F[1]:+.3f}** per other token; it orders "
                f"{result.proxy_agreement:.0%} of the held-out pairs like the ground truth. "
                f"At the first step the samples have {_start['response letters'][0]:.2f} "
                f"letters and {_ends:.0%} end with '.'."
            ),
            lab.table(
                _rows,
                caption=f"Means over the last {rlhf_ppo.LAST_STEPS} steps' batches "
                f"({rlhf.BATCH} samples each, temperature 1)",
            ),
            lab.table(
                result.identities(),
                caption=report.hashes_caption(task.base_origin(seed.value)),
            ),
            lab.table(
                rlhf_ppo.samples(result.run("PPO, no KL penalty"))
                + rlhf_ppo.samples(result.run(penalised)),
                caption="Samples of the last batch: without the KL penalty (first rows), with it",
            ),
        ]
    )
    return penalised, result


@app.cell
def _(aggregation, group, penalised, result):
    _pairs = rlhf_ppo.check_pairs(result, group.value, penalised, f"GRPO, per {aggregation.value}")
    _z = _pairs.pop("k3 minus exact KL (mean, standard errors)")
    check = lab.Check(
        f"GRPO advantages (G = {group.value}), proxy and true rewards, per-token KL k3 and the "
        "exact KL, k3's expectation over the vocabulary (unbiased: its closed form is the "
        "exact KL), PPO's clipped loss and the gradient weights of both aggregations "
        "(float32) vs NumPy float64 references and closed forms; on the sampled tokens, k3's "
        f"mean minus the exact KL is {_z:+.2f} standard errors (heavy-tailed far from the "
        "reference)",
        {name: numerics.scaled_max_error(ours, ref) for name, (ours, ref) in _pairs.items()},
        numerics.tolerance("float32"),
    )
    check
    return (check,)


@app.cell
def _(penalised, result):
    _shown = ["PPO, no KL penalty", penalised]
    _rows = pd.DataFrame(
        [
            {"run": name, "step": s + 1, "measure": m, "value": float(v)}
            for name in _shown
            for m in ("proxy reward", "true reward", "KL k3 (nats)", "ends with '.'")
            for s, v in enumerate(result.run(name).metrics_S[m])
        ]
    )
    training_chart = (
        alt.Chart(_rows)
        .mark_line()
        .encode(
            x="step:Q",
            y=alt.Y("value:Q", title=None),
            color=alt.Color("run:N", sort=_shown, legend=alt.Legend(orient="bottom")),
        )
        .properties(width=200, height=160)
        .facet(facet=alt.Facet("measure:N", title=None), columns=2)
        .resolve_scale(y="independent")
        .properties(
            title="PPO over training: without KL the proxy climbs further, the true reward barely"
        )
    )
    _grpo = ["GRPO, per sequence", "GRPO, per token"]
    _lengths = pd.DataFrame(
        [
            {"run": name, "step": s + 1, "response letters": float(v)}
            for name in _grpo
            for s, v in enumerate(result.run(name).metrics_S["response letters"])
        ]
    )
    length_chart = (
        alt.Chart(_lengths, title="GRPO: mean response length over training")
        .mark_line()
        .encode(
            x="step:Q",
            y=alt.Y("response letters:Q", scale=alt.Scale(zero=False)),
            color=alt.Color("run:N", legend=alt.Legend(orient="bottom")),
        )
        .properties(width=300, height=200)
    )
    _b = result.run("GRPO, per sequence").last_batch
    _push = pd.DataFrame(
        [
            {
                "aggregation": f"per {agg}",
                "response tokens": int(n),
                "|total gradient weight| / |A|": float(abs(g.sum()) / max(abs(a), 1e-9)),
            }
            for agg in losses.AGGREGATIONS
            for g, a, n in zip(
                losses.token_gradient_weights_BT(_b["advantages_B"], _b["weights_BT"], agg),
                _b["advantages_B"],
                _b["weights_BT"].sum(1),
                strict=True,
            )
            if abs(a) > 1e-6
        ]
    )
    push_chart = (
        alt.Chart(_push, title="How hard a response is pushed, by its length")
        .mark_point()
        .encode(
            x="response tokens:O",
            y="|total gradient weight| / |A|:Q",
            color=alt.Color("aggregation:N", legend=alt.Legend(orient="bottom")),
        )
        .properties(width=240, height=200)
    )
    _by_length = (
        _push.groupby(["response tokens", "aggregation"])["|total gradient weight| / |A|"]
        .mean()
        .unstack("aggregation")
        .reset_index()
    )
    push_table = lab.table(
        _by_length.to_dict("records"),
        caption="Measured (jax.grad of the loss on the last GRPO batch): mean total gradient "
        "weight of a response per unit advantage, by its length in tokens",
    )
    mo.vstack(
        [
            training_chart,
            mo.hstack([length_chart, push_chart], justify="start"),
            push_table,
            mo.md(
                "Per sequence, every response gets the same total push |A| / B whatever its "
                "length (each of its n tokens gets 1/n of it): a short response's tokens move "
                "more. Per token, each token gets |A| / N: a long response is pushed n times "
                "as hard as a one-token one, for good advantages and bad alike."
            ),
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("rlhf_ppo")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_over_optimisation_without_kl_at_defaults(
    aggregation, clip, group, kl_coef, penalised, result, seed, steps
):
    _values = {
        "kl_coef": kl_coef.value,
        "clip": clip.value,
        "steps": steps.value,
        "group": group.value,
        "aggregation": aggregation.value,
        "seed": seed.value,
    }
    if claims.at_defaults(FLAGS, _values):
        _unpenalised = result.run("PPO, no KL penalty")
        assert rlhf_ppo.over_optimisation_problems(_unpenalised, result.run(penalised)) == []
    return


if __name__ == "__main__":
    app.run()
