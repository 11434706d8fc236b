import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.lessons.math_optimization import curvature_hessians as ch
from core.nn import chunked


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("dim, lam_min, lam_max", [(2, 0.1, 4.0), (8, 0.1, 4.0), (32, 0.5, 10.0)])
def test_gradient_descent_diverges_exactly_past_two_over_lambda_max(seed, dim, lam_min, lam_max):
    # The lesson's claim, with the margin the app makes it at (5% from the limit, >= 100 steps):
    # below 2/lambda_max the loss gap never grows; past it the run diverges.
    q = ch.quadratic(jax.random.key(seed), dim, lam_min, lam_max)
    assert np.isclose(q.limit, 2 / lam_max)
    for ratio in (0.2, 0.5, 1 - ch.CLAIM_MARGIN):
        run = ch.descend(q, ratio * q.limit, ch.CLAIM_STEPS)
        assert not run.diverged and run.stopped_at is None
        assert np.all(np.diff(run.gap_S) <= 1e-6 * run.gap_S[0]), "the gap never grows"
    for ratio in (1 + ch.CLAIM_MARGIN, 1.5, 3.0):
        run = ch.descend(q, ratio * q.limit, ch.CLAIM_STEPS)
        assert run.diverged, (ratio, run.gap_S[0], run.gap_S[-1])
        # with DIVERGENCE_FACTOR's margin: the gap grew 1e3x, or overflowed
        assert run.stopped_at is not None or run.gap_S[-1] > ch.DIVERGENCE_FACTOR * run.gap_S[0]


@pytest.mark.parametrize("rate", [0.1, 0.45, 0.55, 0.9])
def test_the_trajectory_is_the_closed_form_and_overflow_is_cut(rate):
    q = ch.quadratic(jax.random.key(5), 8, 0.1, 4.0)
    for steps in (10, 300):
        run = ch.descend(q, rate, steps)
        reference = ch.descent_reference(q, rate, steps)[: len(run.w_SN)]
        bound = numerics.tolerance("float32") + ch.TRAJECTORY_ERROR_PER_STEP * len(run.w_SN)
        assert numerics.scaled_max_error(run.w_SN, reference) <= bound
        assert np.all(np.isfinite(run.gap_S)) and np.all(run.gap_S <= ch.OVERFLOW)
    assert ch.descend(q, 0.9, 300).stopped_at is not None  # |1 - 0.9*4| = 2.6 per step


def test_a_new_step_count_compiles_nothing():
    # the steps control moves by 10: every count it offers reuses the compiled chunks (one
    # scan of the whole run, and one vmap over its iterates, compiled again for every count)
    q = ch.quadratic(jax.random.key(6), 5, 0.1, 4.0)
    ch.descend(q, 0.3, 2 * ch.STEPS_CHUNK)
    with chunked.counting_compiles() as compiled:
        run = ch.descend(q, 0.2, 7 * ch.STEPS_CHUNK)
    assert compiled == [] and run.gap_S.shape == (7 * ch.STEPS_CHUNK + 1,)
    # the gaps are the quadratic's loss at each iterate (NumPy float64)
    h, w_star = np.asarray(q.h_NN, np.float64), np.asarray(q.w_star_N, np.float64)
    want = [0.5 * (w - w_star) @ h @ (w - w_star) for w in run.w_SN]
    np.testing.assert_allclose(run.gap_S, want, rtol=1e-4, atol=1e-7)


def test_mode_factors_mark_the_growing_directions():
    q = ch.quadratic(jax.random.key(0), 4, 0.5, 4.0)
    rows = ch.mode_factors(q, 0.6)  # limit 0.5: only lambda with |1 - 0.6 lambda| > 1 grow
    assert [r["grows"] for r in rows] == [abs(1 - 0.6 * lam) > 1 for lam in q.eigenvalues_N]
    assert rows[0]["grows"] and not rows[-1]["grows"]


@pytest.mark.parametrize("hidden", [1, 4, 8])
@pytest.mark.parametrize("seed", [0, 1])
def test_network_hessians_agree_with_numpy_finite_differences(hidden, seed):
    w, x, y = ch.network(jax.random.key(seed), hidden)
    hessian, from_hvps, eigenvalues, power = ch.network_hessians(w, x, y, jax.random.key(9))
    reference = ch.network_hessian_reference(w, x, y)
    assert numerics.scaled_max_error(hessian, reference) <= 1e-5
    assert numerics.scaled_max_error(from_hvps, reference) <= 1e-5
    assert numerics.scaled_max_error(eigenvalues, np.linalg.eigvalsh(reference)[::-1]) <= 1e-5
    top = np.max(np.abs(np.linalg.eigvalsh(reference)))
    assert abs(abs(float(power)) - top) <= 1e-2 * top


def test_the_numpy_gradient_is_the_jax_gradient():
    w, x, y = ch.network(jax.random.key(3), 5)
    got = jax.grad(ch.network_loss)(w, x, y)
    expected = ch.network_gradient_numpy(*(np.asarray(a, np.float64) for a in (w, x, y)))
    assert numerics.tree_normwise_max_error(got, expected) <= 1e-5


def test_quadratic_hessians_are_h():
    q = ch.quadratic(jax.random.key(2), 6, 0.2, 3.0)
    args = (jnp.asarray(a, jnp.float32) for a in (q.h_NN, q.w_star_N, q.w0_N))
    hessian, from_hvps, eigenvalues = ch.quadratic_hessians(*args)
    assert numerics.scaled_max_error(hessian, q.h_NN) <= 1e-5
    assert numerics.scaled_max_error(from_hvps, q.h_NN) <= 1e-5
    assert numerics.scaled_max_error(eigenvalues, q.eigenvalues_N) <= 1e-5


def test_spectrum_problems():
    assert "no unique minimum" in ch.spectrum_problem(-0.5, 4.0)
    assert "no unique minimum" in ch.spectrum_problem(0.0, 4.0)
    assert "swap" in ch.spectrum_problem(5.0, 1.0)
    assert ch.spectrum_problem(0.1, 0.1) is None
    with pytest.raises(ValueError, match="saddle"):
        ch.quadratic(jax.random.key(0), 3, -1.0, 2.0)
    assert ch.claim_applies(0.3, 0.5, 100) and not ch.claim_applies(0.49, 0.5, 100)
    assert not ch.claim_applies(0.3, 0.5, 50)


def test_asymmetry_is_np_allclose_in_one_number():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 6))
    h = a + a.T
    assert ch.asymmetry(h) == 0.0
    for size in (3e-6, 3e-5):  # entries moved by this relative amount, plus one near zero
        moved = h.copy()
        moved[0, 1] *= 1 + size
        moved[2, 3], moved[3, 2] = 0.0, size * 1e-3
        assert (ch.asymmetry(moved) <= 1e-5) == np.allclose(moved, moved.T)
    assert ch.asymmetry(np.full((2, 2), np.nan)) == float("inf")


@pytest.mark.parametrize("seed", [0, 1])
def test_network_hessian_is_symmetric_on_an_emulated_tpu_only_at_highest(seed):
    # The lesson's "H vs its transpose" on a TPU's MXU, emulated: at DEFAULT (one bfloat16 pass
    # per matmul) H[i, j] and H[j, i] come from different products and np.allclose(H, H.T)
    # fails (it did on the v5e chip); network_hessians pins HIGHEST, where it holds at the CPU's
    # bound, and the TPU's bound still fails a Hessian with one entry's sign flipped.
    from core.perf import tpu_emulation

    k_data, k_power = jax.random.split(jax.random.split(jax.random.key(seed))[1])
    w, x, y = ch.network(k_data, 4)
    with jax.default_matmul_precision("default"):
        one_pass = tpu_emulation.emulate(jax.hessian(ch.network_loss))(w, x, y)
    pinned = tpu_emulation.emulate(lambda *a: ch.network_hessians(*a)[0])(w, x, y, k_power)
    cpu = numerics.tolerance("float32", backend="cpu", precision="HIGHEST")
    tpu = numerics.tolerance("float32", backend="tpu", precision="HIGHEST")
    assert ch.asymmetry(one_pass) > tpu > cpu == 1e-5  # 1e-5: np.allclose's default rtol
    assert ch.asymmetry(pinned) <= cpu
    flipped = np.array(pinned)
    flipped[0, 1] = -flipped[0, 1]
    assert ch.asymmetry(flipped) > 10 * tpu
