import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Policy gradients and PPO")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np

    from core import lab, numerics
    from core.lab import claims, exercises
    from core.lessons.reinforcement_learning import policy_gradients_ppo as lesson
    from core.perf import records, timing
    from core.rl import ppo

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("algorithm", "ppo", "what to train", choices=ppo.ALGORITHMS),
        lab.Flag("total_steps", 8192, "environment steps per seed", lo=1024, hi=500_000),
        lab.Flag("seeds", 2, "seeds trained in one vmapped call", lo=1, hi=8),
        lab.Flag("num_envs", 4, "environments N per rollout", lo=1, hi=64),
        lab.Flag("num_steps", 128, "rollout length T per update", lo=8, hi=512),
        lab.Flag("num_minibatches", 4, "PPO minibatches per epoch", lo=1, hi=32),
        lab.Flag("update_epochs", 4, "PPO epochs per update", lo=1, hi=10),
        lab.Flag(
            "learning_rate",
            2.5e-4,
            "Adam learning rate (annealed to 0)",
            lo=1e-5,
            hi=1e-2,
            step=1e-5,
        ),
        lab.Flag("clip_eps", 0.2, "PPO clip range epsilon", lo=0.01, hi=0.5, step=0.01),
        lab.Flag("gamma", 0.99, "discount gamma", lo=0.5, hi=1.0, step=0.005),
        lab.Flag("gae_lambda", 0.95, "GAE lambda", lo=0.0, hi=1.0, step=0.01),
        lab.Flag("ent_coef", 0.01, "entropy bonus coefficient", lo=0.0, hi=0.1, step=0.005),
        lab.Flag("seed", 0, "PRNG seed", lo=0, hi=9999),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description="Policy gradients and PPO on CartPole: GAE, the clipped objective, make_train.",
    )
    ARGS = FLAGS.parse()
    MACHINE = f"this {jax.default_backend().upper()}"


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Policy gradients and PPO
    {lab.phase_line("policy_gradients_ppo")}

    A policy gradient pushes up the log-probability of actions in proportion to how much
    better than expected they turned out. In this lesson you will

    - write **REINFORCE with a baseline**: the Monte Carlo return minus a learned value;
    - estimate advantages with **GAE**, keeping *terminated* (no future: no bootstrap) and
      *truncated* (time ran out: bootstrap from the final observation, not from the reset one)
      apart, checked against a NumPy float64 reference;
    - write **PPO**'s clipped objective (checked against its closed form), minibatch epochs, an
      entropy bonus and an annealed learning rate;
    - train the whole pipeline as one pure function, `make_train(config) -> train(key)`, jitted
      end to end and vmapped over seeds (the pattern of purejaxrl).
    """)
    return


@app.cell
def _():
    # Every control feeds the run's config, so they live in one mo.ui.dictionary: marimo
    # tracks it (a plain dict of controls is no name it can see) and re-runs its readers.
    # The answers flag names a sheet to grade: no control, and no part of the run's config.
    controls = mo.ui.dictionary(
        {
            name: FLAGS.control(name, ARGS)
            for name in FLAGS.flags
            if name not in claims.GRADING_FLAGS
        }
    )
    _c = controls
    mo.vstack(
        [
            mo.md("**The run**"),
            mo.hstack(
                [_c["algorithm"], _c["total_steps"], _c["seeds"], _c["seed"]],
                justify="start",
                wrap=True,
            ),
            mo.hstack(
                [_c["num_envs"], _c["num_steps"], _c["num_minibatches"], _c["update_epochs"]],
                justify="start",
                wrap=True,
            ),
            mo.md("**The objective**"),
            mo.hstack(
                [
                    _c["learning_rate"],
                    _c["clip_eps"],
                    _c["gamma"],
                    _c["gae_lambda"],
                    _c["ent_coef"],
                ],
                justify="start",
                wrap=True,
            ),
        ]
    )
    return (controls,)


@app.cell(hide_code=True)
def _():
    mo.md(r"""
    ## Advantages: GAE with two kinds of episode end

    With $\delta_t = r_t + \gamma\,(1 - \text{terminated}_t)\,V(s'_t) - V(s_t)$, where
    $s'_t$ is the observation step $t$ **reached** (`info["final_obs"]`, before the auto-reset),

    $$A_t = \delta_t + \gamma\lambda\,(1 - \text{done}_t)\,A_{t+1}, \qquad
    \text{done}_t = \text{terminated}_t \lor \text{truncated}_t .$$

    A truncated episode had a future: its last step bootstraps from $V(s'_t)$. Using the next
    `obs` instead would bootstrap from the *next episode's* first state. A terminated episode
    has no future. $\lambda = 1$ gives the Monte Carlo return minus the baseline: REINFORCE.
    """)
    return


@app.cell
def _(controls):
    _c = controls.value
    # The check runs on a random trajectory of 16 steps x 3 envs with 2 terminations and
    # 2 truncations, at the current gamma and lambda, and on 512 random ratios at the
    # current clip range.
    gae = lesson.gae_errors(_c["seed"], 16, 3, _c["gamma"], _c["gae_lambda"])
    surrogate = lesson.surrogate_error(_c["seed"], _c["clip_eps"])
    check = lab.Check(
        f"ppo.gae (float32 lax.scan) vs NumPy float64 forward sums (gamma {_c['gamma']:g}, "
        f"lambda {_c['gae_lambda']:g}, 2 terminations + 2 truncations); clipped objective "
        f"(eps {_c['clip_eps']:g}) vs its closed form",
        {
            "GAE advantages": gae["advantage"],
            "GAE value targets": gae["target"],
            "clipped objective": surrogate,
        },
        numerics.tolerance("float32"),
    )
    check
    return (check,)


@app.cell
def _(controls):
    _eps = controls.value["clip_eps"]
    alt.Chart(
        lesson.surrogate_frame(_eps), title=f"PPO's objective per sample, eps = {_eps:g}"
    ).mark_line().encode(
        x=alt.X("ratio:Q", title="ratio pi_new / pi_old"), y="objective:Q", color="advantage:N"
    ).properties(width=420, height=220)
    return


@app.cell(hide_code=True)
def _():
    mo.md("""
    With a positive advantage the objective stops rewarding a larger ratio at `1 + eps`; with
    a negative one it stops rewarding a smaller ratio at `1 - eps`: past those points a sample
    gives **no gradient** through the policy term, so there is no *incentive* to move the
    policy further from the one that collected the data. That is all clipping does: it does
    not **bound** the ratio. Other samples' gradients, shared weights and Adam's momentum keep
    moving a clipped sample's probability, so after several epochs on the same rollout some
    ratios lie outside `[1 - eps, 1 + eps]`. Watch the clip fraction and the KL divergence from
    the old policy after training: PPO implementations stop an update's epochs early when the
    KL grows past a target for this reason. REINFORCE takes **one** step per rollout (the
    ratio is then exactly 1, and the objective's gradient is `A * grad log pi`).
    """)
    return


@app.cell
def _(controls):
    _c = controls.value
    _batch = _c["num_envs"] * _c["num_steps"]
    _problem = None
    if _c["algorithm"] == "ppo" and _batch % _c["num_minibatches"]:
        _problem = (
            f"num_minibatches {_c['num_minibatches']} does not divide the batch of "
            f"num_envs x num_steps = {_batch} transitions."
        )
    elif _c["total_steps"] < _batch:
        _problem = f"total_steps {_c['total_steps']} is less than one rollout of {_batch} steps."
    lab.guard(_problem, headline="This run cannot be set up.")
    config = lesson.lesson_config(_c)
    train_button = mo.ui.run_button(
        label=f"Train {_c['seeds']} seeds ({config.num_updates} updates)"
    )
    mo.vstack(
        [
            mo.md(
                f"`{config.algorithm}`: {config.num_updates} updates of {config.batch_size} "
                f"transitions, {config.epochs} epoch(s) x {config.minibatches} minibatch(es) each."
            ),
            train_button,
        ]
    )
    return config, train_button


@app.cell
def _(config, controls, train_button):
    mo.stop(
        lab.interactive() and not train_button.value,
        mo.callout(mo.md("Press **Train** to run."), kind="info"),
    )
    _seeds = controls.value["seeds"]
    # One compiled program for all seeds: jit(vmap(train)); fast-compiled (a short run is
    # mostly compile time).
    _compiled, compile_s = timing.timed_call(lambda: ppo.compile_runs(config, _seeds, True))
    _keys = jax.random.split(jax.random.key(controls.value["seed"]), _seeds)
    (_, metrics), train_s = timing.timed_call(_compiled, _keys, ppo.run_hparams(config, _seeds))
    curves = lesson.curve_frame(metrics, config, config.algorithm)
    eval_mean = np.asarray(metrics["eval_returns_E"]).mean(axis=1)
    claim = lesson.claim_holds(controls.value, eval_mean)
    if claim is None:
        _said = (
            "Away from the default controls the lesson claims nothing about the outcome: "
            "compare the greedy returns with an untrained network's (median under "
            f"{lesson.UNTRAINED_GREEDY_MEDIAN:.0f}) yourself."
        )
    else:
        _said = (
            f"At the default controls the claim is: the greedy return averaged over the seeds "
            f"is at least {lesson.TRAINED_RETURN_CLAIM:.0f} (here {eval_mean.mean():.0f}). "
            "An untrained network's greedy policy has a median return under "
            f"{lesson.UNTRAINED_GREEDY_MEDIAN:.0f} (a random policy ~22), though about one in "
            "six balances past 100 steps by luck. The claim, and the gain over each seed's own "
            "untrained network, hold over 6 seed pairs, not only the ones shown. Solved is 475."
        )
    _f = records.latest("rl_ppo").figures
    mo.vstack(
        [
            alt.Chart(curves, title="Mean return of the training episodes, per seed")
            .mark_line()
            .encode(x="env steps:Q", y=alt.Y("return:Q", title="episode return"), color="seed:N")
            .properties(width=460, height=240),
            lab.table(
                [
                    {
                        "seed": s,
                        f"greedy return ({config.eval_episodes} episodes)": float(eval_mean[s]),
                        "solved (>= 475)": bool(eval_mean[s] >= ppo.SOLVED_RETURN),
                    }
                    for s in range(_seeds)
                ],
                f"compile {compile_s:.1f} s, training {train_s:.1f} s for all seeds ({MACHINE})",
            ),
            mo.md(
                f"{_said} `benchmarks/rl_ppo.py` trains {_f['seeds']} seeds for "
                f"{_f['env_steps_per_seed']:,} steps in one call: {_f['seeds_solved']} of "
                f"{_f['seeds']} solved (greedy returns {_f['eval_mean_return_by_seed']}), "
                f"{_f['train_s']:g} s of training after {_f['compile_s']:g} s of compiling, "
                f"in the record {records.cite('rl_ppo')}."
            ),
        ]
    )
    return claim, curves, eval_mean, metrics


@app.cell
def _(config, controls, metrics):
    # Independent of the run's float32 means: NumPy float64 from every sample's logged
    # log(pi_new / pi_old), per seed, update and epoch.
    _eps = controls.value["clip_eps"]
    drift_reference = lesson.epoch_drift_reference(metrics["log_ratio_by_epoch_U"], _eps)
    drift_check = lab.Check(
        "clip fraction and approximate KL per seed, update and epoch, as the run computed "
        "them (float32, each minibatch before its step), vs NumPy float64 from the run's "
        "logged log ratios",
        {
            "clip fraction": numerics.max_abs_error(
                metrics["clip_fraction_by_epoch_U"], drift_reference["clip_fraction"]
            ),
            "approx KL": numerics.scaled_max_error(
                metrics["approx_kl_by_epoch_U"], drift_reference["approx_kl"]
            ),
        },
        {
            "clip fraction": lesson.CLIP_COUNT_SLACK_SAMPLES / config.batch_size,
            "approx KL": numerics.tolerance("float32"),
        },
    )
    drift_check
    return drift_check, drift_reference


@app.cell
def _(controls, drift_reference, metrics):
    _eps = controls.value["clip_eps"]
    _drift = lesson.epoch_drift_frame(metrics, drift_reference)
    _last = _drift.iloc[-1]
    _long = _drift.melt("epoch", var_name="measure", value_name="value")
    _bars = (
        alt.Chart(_long, title="per PPO epoch, mean over seeds and updates: clip fraction, KL")
        .mark_bar()
        .encode(
            x=alt.X("epoch:O"),
            y=alt.Y("value:Q", title=None),
            color=alt.Color("measure:N", legend=None),
            column=alt.Column("measure:N", title=None),
            tooltip=["epoch", "measure", alt.Tooltip("value:Q", format=".4g")],
        )
        .resolve_scale(y="independent")
        .properties(width=150, height=180)
    )
    _where = "outside" if _last["largest |r - 1|"] > _eps else "inside"
    mo.vstack(
        [
            mo.md(
                f"""
    ### How far the epochs moved the policy
    Each minibatch measures its ratios `r = pi_new / pi_old` before its step. The first
    minibatch of epoch 1 sees `r = 1` exactly; every step after it moves the policy. In the
    last epoch, **{_last["clip fraction"]:.1%}** of the samples had `|r - 1| > eps` on average,
    the estimated KL from the old policy was **{_last["approx KL"]:.2g}**, and the largest
    `|r - 1|` any sample reached was **{_last["largest |r - 1|"]:.3f}**, {_where}
    `eps = {_eps:g}`. Clipping removes the gradient that would push a sample further; it puts
    no bound on `r`: more epochs or a larger learning rate let it drift.
    """
            ),
            _bars,
        ]
    )
    return


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "policy_gradients_ppo", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("policy_gradients_ppo")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_drift_check_passes(drift_check):
    drift_check.assert_passed()
    return


@app.cell
def test_the_default_run_beats_the_untrained_networks(claim, curves, eval_mean):
    assert np.all(np.isfinite(curves["return"])) and np.all(np.isfinite(eval_mean))
    assert claim is not False, "the default run's claim failed: see the table"
    return


if __name__ == "__main__":
    app.run()
