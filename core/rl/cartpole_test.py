import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.rl import cartpole, gymnasium_parity

# gymnasium's state is float64 and ours is too inside enable_x64: the same equations in the
# same order agree to rounding (~1e-16); 1e-6 is the bound, far above that.
PARITY_TOLERANCE = 1e-6


@pytest.mark.parametrize("seed, steps, policy", [(0, 300, "random"), (1, 700, "mixed")])
def test_steps_match_gymnasium_in_float64(seed, steps, policy):
    parity = gymnasium_parity.side_by_side(seed, steps, policy)
    assert parity.constants_match
    assert parity.state_error <= PARITY_TOLERANCE
    assert parity.reward_error == 0.0 and parity.flag_mismatches == 0
    assert parity.terminations >= 5  # random actions end many episodes


def test_time_limit_truncates_at_500_like_gymnasium():
    parity = gymnasium_parity.side_by_side(3, 520, "balancing")
    assert parity.truncations == 1 and parity.terminations == 0
    assert parity.flag_mismatches == 0 and parity.state_error <= PARITY_TOLERANCE


def test_gymnasium_float32_observation_is_our_state_rounded():
    parity = gymnasium_parity.side_by_side(2, 100, "random")
    assert parity.obs_error <= 2**-23  # float32 rounding of values below ~5


def test_step_resets_and_keeps_the_final_observation():
    params = cartpole.Params(max_steps=3)
    state, _ = cartpole.reset(jax.random.key(0), params)
    keys = jax.random.split(jax.random.key(1), 3)
    for t in range(3):
        state, obs, reward, term, trunc, info = cartpole.step(keys[t], state, 1, params)
    assert bool(trunc) and not bool(term) and int(info["episode_length"]) == 3
    assert float(info["episode_return"]) == 3.0
    assert int(state.time) == 0 and float(state.episode_return) == 0.0
    _, reset_obs = cartpole.reset(keys[2], params)
    np.testing.assert_array_equal(obs, reset_obs)
    assert not np.array_equal(info["final_obs"], obs)


def test_jit_equals_no_jit_and_vmaps():
    state, _ = cartpole.reset(jax.random.key(4))
    out = cartpole.step(jax.random.key(5), state, jnp.int32(0))
    jitted = jax.jit(cartpole.step)(jax.random.key(5), state, jnp.int32(0))
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(jitted), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    keys = jax.random.split(jax.random.key(6), 8)
    states, obs = jax.vmap(cartpole.reset)(keys)
    assert obs.shape == (8, 4) and states.time.shape == (8,)


def test_params_validate():
    with pytest.raises(ValueError, match="tau"):
        cartpole.Params(tau=0.0)
    with pytest.raises(ValueError, match="max_steps"):
        cartpole.Params(max_steps=0)


@pytest.mark.parametrize("seed", [0, 9999])
def test_reset_states_are_distributed_like_gymnasiums(seed):
    resets = gymnasium_parity.resets_vs_gymnasium(seed)
    assert resets["min_p_value"] >= gymnasium_parity.RESET_ALPHA, resets
    assert resets["max_abs"] <= cartpole.DEFAULT.reset_bound


@pytest.mark.parametrize("bound", [0.065, 0.5, 0.04])
def test_a_wrong_reset_range_is_caught(bound):
    # the step-by-step parity sets gymnasium's state from ours, so it cannot see this
    wrong = dataclasses.replace(cartpole.DEFAULT, reset_bound=bound)
    resets = gymnasium_parity.resets_vs_gymnasium(0, params=wrong)
    assert resets["min_p_value"] < gymnasium_parity.RESET_ALPHA, resets


@pytest.mark.parametrize("shift, n, m", [(0.0, 2000, 2000), (0.05, 300, 500), (0.3, 50, 80)])
def test_ks_two_sample_matches_scipy(shift, n, m):
    from scipy import stats

    rng = np.random.default_rng(int(shift * 100) + n)
    a, b = rng.normal(size=n), rng.normal(shift, 1.0, size=m)
    d, p = gymnasium_parity.ks_two_sample(a, b)
    ref = stats.ks_2samp(a, b, method="asymp")
    assert d == pytest.approx(ref.statistic, abs=1e-12)
    # the p-value is Kolmogorov's limit law at sqrt(n m / (n + m)) D (scipy's kstwobign)
    limit = stats.kstwobign.sf(math.sqrt(n * m / (n + m)) * ref.statistic)
    assert p == pytest.approx(limit, rel=1e-9, abs=1e-12)
    assert p == pytest.approx(ref.pvalue, abs=0.02)  # ks_2samp's finite-n "asymp" variant
