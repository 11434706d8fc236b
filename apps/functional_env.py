import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="Write a functional environment")

with app.setup:
    import altair as alt
    import jax
    import marimo as mo
    import numpy as np

    from core import lab
    from core.lab import exercises
    from core.lessons.reinforcement_learning import functional_env
    from core.rl import cartpole, gymnasium_parity

    lab.use_cpu_devices()
    FLAGS = lab.Flags(
        lab.Flag("seed", 0, "PRNG seed (resets and random actions)", lo=0, hi=9999),
        lab.Flag("steps", 600, "steps to run side by side with gymnasium", lo=10, hi=1500),
        lab.Flag(
            "policy",
            "mixed",
            "who picks the actions: random, a balancing controller, or the controller "
            "for 500 steps (one truncation) then random",
            choices=gymnasium_parity.POLICIES,
        ),
        lab.Flag("answers", "", "an exercises answers file to grade (see Exercises below)"),
        description="Write a functional environment: CartPole as pure functions, "
        "checked against gymnasium.",
    )
    ARGS = FLAGS.parse()


@app.cell(hide_code=True)
def _():
    mo.md(f"""
    # Write a functional environment
    {lab.phase_line("functional_env")}

    gymnasium's environments are objects: `env.step(action)` changes `env` in place. JAX
    wants **pure functions** of explicit state, so that a step can be jitted, vmapped over
    thousands of environments and scanned over time. In this lesson you will

    - write CartPole as two pure functions: `reset(key) -> (state, obs)` and
      `step(key, state, action) -> (state, obs, reward, terminated, truncated, info)`;
    - keep the two ways an episode ends apart: **terminated** (the pole fell, the cart left
      the track) and **truncated** (the 500-step time limit), as gymnasium and gymnax do;
    - reset automatically inside `step`, keeping the observation the episode ended on in
      `info["final_obs"]`;
    - check it step by step against gymnasium's `CartPole-v1` in float64.
    """)
    return


@app.cell
def _():
    seed = FLAGS.control("seed", ARGS)
    steps = FLAGS.control("steps", ARGS)
    policy = FLAGS.control("policy", ARGS)
    mo.hstack([seed, steps, policy], justify="start", wrap=True)
    return policy, seed, steps


@app.cell(hide_code=True)
def _():
    mo.md("""
    ## The environment as data plus functions

    ```python
    class State(NamedTuple):
        physics_4: jax.Array       # x, x_dot, theta, theta_dot
        time: jax.Array            # steps into this episode
        episode_return: jax.Array

    def step(key, state, action, params=DEFAULT):
        physics_4 = dynamics(state.physics_4, action, params)   # explicit Euler, tau = 0.02 s
        time = state.time + 1
        terminated = is_terminal(physics_4, params)   # |x| > 2.4 or |theta| > 12 degrees
        truncated = time >= params.max_steps          # gymnasium's TimeLimit(500)
        done = terminated | truncated
        reset_state, reset_obs = reset(key, params)   # always computed, selected by `done`
        new_state = tree.map(lambda a, b: jnp.where(done, a, b), reset_state, carried)
        obs = jnp.where(done, reset_obs, physics_4)
        info = {"final_obs": physics_4, ...}          # what the episode ended on
        return new_state, obs, reward, terminated, truncated, info
    ```

    There is no `if done:`: under `jit` and `vmap` both branches are computed and
    `jnp.where` picks one, per environment. The constants are gymnasium's, read from
    `env.unwrapped` in the check (a known third-party port got `polemass_length` wrong).
    """)
    return


@app.cell
def _(policy, seed, steps):
    lab.require("gymnasium", why="our CartPole is checked step by step against gymnasium's")
    # Ours (jitted, in float64 inside jax.enable_x64) and gymnasium's, side by side: before
    # every step gymnasium's env.unwrapped.state is set from ours, both take the same action.
    parity = gymnasium_parity.side_by_side(seed.value, steps.value, policy.value)
    # Reset states cannot be compared value by value (JAX keys vs NumPy's generator): compare
    # 2000 of ours with 2000 of gymnasium's, per state variable (two-sample KS test).
    resets = gymnasium_parity.resets_vs_gymnasium(seed.value)
    lab.table(
        functional_env.parity_rows(parity)
        + [
            {
                "measured": f"reset states, KS p-value vs gymnasium's ({resets['samples']} each)",
                "value": resets["min_p_value"],
            }
        ],
        "Our CartPole vs gymnasium's `CartPole-v1`",
    )
    return parity, resets


@app.cell
def _(parity, resets):
    check = lab.Check(
        f"{parity.steps} steps of our CartPole (JAX, float64{lab.float64_note()}) vs "
        "gymnasium CartPole-v1 "
        f"(its float64 state; {parity.terminations} terminations, {parity.truncations} "
        "truncations by its TimeLimit)",
        {
            "state after each step": parity.state_error,
            "reward": parity.reward_error,
            "terminated/truncated flags (steps that differ)": float(parity.flag_mismatches),
        },
        {
            "state after each step": functional_env.PARITY_TOLERANCE,
            "reward": 0.0,
            "terminated/truncated flags (steps that differ)": 0.0,
        },
        facts={
            "constants equal gymnasium's env.unwrapped": parity.constants_match,
            f"reset states drawn like gymnasium's (KS p >= {gymnasium_parity.RESET_ALPHA:g} "
            "per variable)": resets["min_p_value"] >= gymnasium_parity.RESET_ALPHA,
        },
    )
    check
    return (check,)


@app.cell(hide_code=True)
def _(parity):
    mo.md(f"""
    **How precise can the comparison be?** gymnasium keeps `env.unwrapped.state` as a float64
    NumPy array and hands out a float32 *copy* as the observation. So the check compares
    float64 states: ours computed in JAX inside `jax.enable_x64()` (a context manager: the
    rest of the process stays float32). Both sides evaluate the same equations in the same
    order, and agree to rounding ({parity.state_error:.1g}). Against gymnasium's float32
    observation the difference is its rounding, {parity.obs_error:.1g} (relative). Training
    later runs in float32, where one step is as accurate as float32 allows; CartPole is
    unstable (the pole falls), so two float32 *trajectories* drift apart over many steps
    whatever the implementation.
    """)
    return


@app.cell
def _(parity):
    frame = mo.ui.slider(
        0,
        len(parity.states_OS) - 1,
        value=min(40, len(parity.states_OS) - 1),
        label="frame",
        show_value=True,
    )
    frame
    return (frame,)


@app.cell
def _(frame, parity):
    _state = parity.states_OS[frame.value]
    _angle = np.degrees(_state[2])
    _line = functional_env.states_chart(parity.states_OS)
    _now = (
        alt.Chart(alt.Data(values=[{"frame": frame.value}]))
        .mark_rule(color="black")
        .encode(x="frame:Q")
    )
    mo.vstack(
        [
            functional_env.frame_chart(
                _state,
                cartpole.DEFAULT,
                f"frame {frame.value}: x = {_state[0]:.3f} m, theta = {_angle:.2f} degrees",
            ),
            _line + _now,
            mo.md(
                "A frame is a state after a step, or the reset state that follows an episode's "
                "end (the pole jumps back upright). The red dashes are the track's limits; the "
                f"pole may lean {np.degrees(cartpole.DEFAULT.theta_threshold_radians):.0f} "
                "degrees before the episode terminates."
            ),
        ]
    )
    return


@app.cell
def _():
    # One env, jitted: the same functions vmap over environments (the next lesson).
    _keys = jax.random.split(jax.random.key(0), 3)
    _states, _obs = jax.vmap(cartpole.reset)(_keys)
    vmapped_shape = tuple(_obs.shape)
    mo.md(
        f"`jax.vmap(cartpole.reset)(keys)` for 3 keys gives observations of shape "
        f"`{vmapped_shape}`."
    )
    return (vmapped_shape,)


@app.cell(hide_code=True)
def _():
    exercise_sheet, exercise_forms, solution_switches = exercises.open_lesson(
        "functional_env", ARGS
    )
    return exercise_forms, exercise_sheet, solution_switches


@app.cell(hide_code=True)
def _(exercise_forms, exercise_sheet, solution_switches):
    exercises.lesson_section(exercise_sheet, exercise_forms, solution_switches)
    return


@app.cell(hide_code=True)
def _():
    lab.lesson_end("functional_env")
    return


@app.cell
def test_check_passes(check):
    check.assert_passed()
    return


@app.cell
def test_both_endings_seen_when_mixed(parity, policy, steps):
    if policy.value == "mixed" and steps.value > 520:
        assert parity.truncations >= 1 and parity.terminations >= 1
    return


@app.cell
def test_reset_vmaps(vmapped_shape):
    assert vmapped_shape == (3, 4)
    return


if __name__ == "__main__":
    app.run()
