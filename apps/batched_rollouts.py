import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Batch environments and scan rollouts")

with app.setup:
    import jax
    import marimo as mo
    import numpy as np

    from core import lab
    from core.lab import exercises
    from core.lessons.reinforcement_learning import batched_rollouts
    from core.rl import gymnasium_parity, rollout

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "PRNG seed (resets and random actions)", lo=0, hi=9999),
        lab.Flag("check_envs", 4, "environments in the checked rollout", lo=1, hi=16),
        lab.Flag("check_steps", 100, "steps of the checked rollout", lo=10, hi=500),
        lab.Flag("min_envs", 1, "smallest env count of the timing sweep", lo=1, hi=4096),
        lab.Flag("max_envs", 256, "largest env count of the timing sweep", lo=1, hi=4096),
        lab.Flag("points", 3, "env counts in the sweep (each compiles once)", lo=1, hi=7),
        lab.Flag("timing_steps", 64, "rollout length T of the timing sweep", lo=8, hi=512),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description="Batch environments and scan rollouts: vmap over envs, lax.scan over time.",
    )
    ARGS = FLAGS.parse()
    MACHINE = f"this {jax.default_backend().upper()}"


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Batch environments and scan rollouts
    {lab.phase_line("batched_rollouts")}

    A pure `step(key, state, action)` for **one** environment is all JAX needs to run
    thousands: `jax.vmap` batches it over environments and `jax.lax.scan` loops it over time,
    inside one compiled program. In this lesson you will

    - write a rollout: `vmap` over N environments, `lax.scan` over T steps, auto-reset inside;
    - check the batched rollout against N gymnasium `CartPole-v1` envs given the same actions;
    - measure environment steps per second against a Python loop over gymnasium envs, as N
      grows, and find the crossover.
    """)
    return


@app.cell
def _():
    seed = FLAGS.control("seed", ARGS)
    check_envs = FLAGS.control("check_envs", ARGS, label="envs (check)")
    check_steps = FLAGS.control("check_steps", ARGS, label="steps (check)")
    min_envs = FLAGS.control("min_envs", ARGS, label="min envs")
    max_envs = FLAGS.control("max_envs", ARGS, label="max envs")
    points = FLAGS.control("points", ARGS)
    timing_steps = FLAGS.control("timing_steps", ARGS, label="steps T (timing)")
    mo.vstack(
        [
            mo.hstack([seed, check_envs, check_steps], justify="start", wrap=True),
            mo.hstack([min_envs, max_envs, points, timing_steps], justify="start", wrap=True),
        ]
    )
    return check_envs, check_steps, max_envs, min_envs, points, seed, timing_steps


@app.cell(hide_code=True)
def _():
    mo.md("""
    ## A rollout is a scan of a vmapped step

    ```python
    def rollout(key, policy, num_envs, num_steps):
        state_N, obs_N4 = jax.vmap(cartpole.reset)(jax.random.split(reset_key, num_envs))

        def one_step(carry, step_key):
            state_N, obs_N4 = carry
            policy_key, env_key = jax.random.split(step_key)
            action_N = policy(policy_key, obs_N4)
            state_N, next_obs_N4, reward_N, term_N, trunc_N, info = jax.vmap(cartpole.step)(
                jax.random.split(env_key, num_envs), state_N, action_N)
            return (state_N, next_obs_N4), Trajectory(obs_N4, action_N, reward_N, ...)

        _, trajectory = jax.lax.scan(one_step, (state_N, obs_N4),
                                     jax.random.split(scan_key, num_steps))
        return trajectory        # every field has shape (T, N, ...)
    ```

    Each environment resets on its own step (a `jnp.where` per environment), so the batch
    never waits for the slowest episode; the trajectory is a pytree with time first.
    """)
    return


@app.cell
def _(check_envs, check_steps, seed):
    _compiled = rollout.compiled_random_rollout(
        check_envs.value, check_steps.value, fast_compile=True
    )
    trajectory = _compiled(jax.random.key(seed.value))
    _returns = rollout.episode_returns(trajectory)
    lab.table(
        [
            {"field": name, "shape": str(tuple(getattr(trajectory, name).shape))}
            for name in trajectory._fields
        ]
        + [
            {"field": "episodes that ended", "shape": str(len(_returns))},
            {
                "field": "their mean return (random actions)",
                "shape": f"{np.mean(_returns):.1f}" if len(_returns) else "-",
            },
        ],
        f"`rollout(key, random_policy, {check_envs.value}, {check_steps.value})`",
    )
    return


@app.cell
def _(check_envs, check_steps, seed):
    # The same rollout in float64 (inside jax.enable_x64) against gymnasium: each gymnasium env
    # gets our actions and runs free within an episode; its state is set from ours only at
    # episode starts, where our reset's randomness enters.
    lab.require("gymnasium", why="the rollout is checked against gymnasium's CartPole-v1")
    versus = gymnasium_parity.rollout_vs_gymnasium(seed.value, check_envs.value, check_steps.value)
    check = lab.Check(
        f"vmap + scan rollout of {check_envs.value} envs x {check_steps.value} steps "
        f"(float64{lab.float64_note()}) "
        f"vs {check_envs.value} gymnasium CartPole-v1 envs given the same actions "
        f"({versus['episodes_ended']} episodes ended)",
        {
            "state after every step": versus["state_error"],
            "terminated/truncated flags (steps that differ)": float(versus["flag_mismatches"]),
        },
        {
            "state after every step": batched_rollouts.ROLLOUT_TOLERANCE,
            "terminated/truncated flags (steps that differ)": 0.0,
        },
    )
    check
    return (check,)


@app.cell
def _(max_envs, min_envs, points):
    _problem = batched_rollouts.sweep_problem(min_envs.value, max_envs.value, points.value)
    lab.guard(_problem, headline="The timing sweep cannot be run as asked.")
    counts = batched_rollouts.env_counts(min_envs.value, max_envs.value, points.value)
    mo.md(f"Timing sweep over env counts {counts}: each count compiles its own program.")
    return (counts,)


@app.cell
def _(counts, timing_steps):
    lab.require("gymnasium", why="the timing sweep races gymnasium's vectorized loop")
    rows = batched_rollouts.sweep(counts, timing_steps.value)
    where = batched_rollouts.crossover(rows)
    if where is None:
        _text = "the JAX rollout never overtook the gymnasium loop in this sweep"
    elif where <= rows[0]["envs"]:
        _text = f"JAX was ahead already at {rows[0]['envs']} environment(s)"
    else:
        _text = f"the JAX rollout overtakes the gymnasium loop near **N = {where:.0f}**"
    mo.vstack(
        [
            batched_rollouts.throughput_chart(rows, MACHINE),
            lab.table(rows, f"T = {timing_steps.value} steps per rollout; {MACHINE}"),
            mo.md(
                f"Crossover: {_text}. The gymnasium loop pays Python's price per step and per "
                "env, so its rate is flat in N; the compiled rollout pays a fixed cost per "
                "scan step (dispatch inside XLA, the policy, the key splits) shared by all N "
                "environments, so its rate grows with N until the arithmetic fills the "
                "machine. Compile time (last column) is paid once per new call signature: here "
                "each env count N, which sets the shapes. "
                "`benchmarks/rl_rollouts.py` runs N = 1 ... 4096."
            ),
        ]
    )
    return (rows,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "batched_rollouts", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("batched_rollouts")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_sweep_rows_are_positive(counts, rows):
    assert [r["envs"] for r in rows] == counts
    assert all(r["jax steps/s"] > 0 and r["gymnasium steps/s"] > 0 for r in rows)
    return


if __name__ == "__main__":
    app.run()
