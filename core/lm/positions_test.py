import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.lm import positions


def paper_rotation_2d(x_2, position, theta):
    """RoFormer eq. 13 for one pair: [[cos m theta, -sin m theta], [sin, cos]] @ x."""
    angle = position * theta
    return np.array(
        [
            np.cos(angle) * x_2[0] - np.sin(angle) * x_2[1],
            np.sin(angle) * x_2[0] + np.cos(angle) * x_2[1],
        ]
    )


@pytest.mark.parametrize("head_dim", [2, 4, 8, 16])
def test_reference_is_the_papers_pairwise_rotation(head_dim):
    x = np.random.default_rng(head_dim).normal(size=head_dim)
    theta = 10000.0 ** (-2.0 * np.arange(head_dim // 2) / head_dim)  # the paper's theta_i
    expected = np.concatenate(
        [paper_rotation_2d(x[2 * i : 2 * i + 2], 7, theta[i]) for i in range(head_dim // 2)]
    )
    got = positions.rope_reference(x[None, None, None], np.array([[7]]))[0, 0, 0]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "shape, base, packed",
    [((1, 6, 2, 4), 10000.0, False), ((2, 9, 3, 8), 10000.0, True), ((1, 5, 1, 16), 100.0, False)],
)
def test_apply_rope_matches_float64_reference(shape, base, packed):
    x = jax.random.normal(jax.random.key(sum(shape)), shape)
    b, t = shape[:2]
    pos = np.tile(np.arange(t), (b, 1))
    if packed:  # positions restart inside the row, as in a packed batch
        pos = np.concatenate([np.arange(4), np.arange(t - 4)])[None].repeat(b, 0)
    got = positions.apply_rope(x, jnp.asarray(pos), base)
    reference = positions.rope_reference(x, pos, base)
    assert numerics.scaled_max_error(got, reference) <= numerics.tolerance("float32")
    # a rotation keeps every pair's length, so the vector's norm
    np.testing.assert_allclose(
        np.linalg.norm(reference, axis=-1),
        np.linalg.norm(np.asarray(x, np.float64), axis=-1),
        rtol=1e-12,
    )


def test_position_zero_is_the_identity_and_dtype_is_kept():
    x = jax.random.normal(jax.random.key(0), (1, 3, 2, 4)).astype(jnp.bfloat16)
    out = positions.apply_rope(x, jnp.zeros((1, 3), jnp.int32))
    assert out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(x, np.float32))


@pytest.mark.parametrize("head_dim, m, n, shift", [(4, 3, 1, 5), (8, 0, 6, 11), (16, 9, 2, 40)])
def test_scores_depend_only_on_the_offset(head_dim, m, n, shift):
    rng = np.random.default_rng(head_dim + shift)
    q, k = rng.normal(size=(2, head_dim))

    def score_ref(pq, pk):  # float64, from the reference
        rq = positions.rope_reference(q[None, None, None], np.array([[pq]]))[0, 0, 0]
        rk = positions.rope_reference(k[None, None, None], np.array([[pk]]))[0, 0, 0]
        return rq @ rk

    def score_jax(pq, pk):
        rq = positions.apply_rope(jnp.asarray(q, jnp.float32)[None, None, None], jnp.array([[pq]]))
        rk = positions.apply_rope(jnp.asarray(k, jnp.float32)[None, None, None], jnp.array([[pk]]))
        return float(jnp.sum(rq * rk))

    # q R(m)^T R(n) k = q R(n - m) k: the same after shifting both positions ...
    assert score_ref(m, n) == pytest.approx(score_ref(m + shift, n + shift), abs=1e-10)
    assert score_jax(m, n) == pytest.approx(score_jax(m + shift, n + shift), abs=1e-4)
    # ... equal to the score of q at 0 and k at n - m ...
    assert score_ref(m, n) == pytest.approx(score_ref(0, n - m), abs=1e-10)
    # ... and not a constant: another offset gives another score
    assert abs(score_ref(m, n) - score_ref(m, n + 1)) > 1e-3


@pytest.mark.parametrize("head_dim", [0, 3, 7])
def test_odd_head_dim_is_refused(head_dim):
    with pytest.raises(ValueError, match="even"):
        positions.frequencies(head_dim)
