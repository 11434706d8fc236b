import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics, runtime
from core.lm import attention, attention_torch

# On a chip: float32 matmuls at HIGHEST, bounds from numerics (the CPU's values on the CPU).
pytestmark = pytest.mark.usefixtures("highest_matmul_precision_on_tpu")
# A TPU host's install may leave torch out; CI has it.
TORCH_MISSING = runtime.host_lacks(("torch",), why="the comparison with torch's attention")

# (batch, seq_len, heads, head_dim)
SHAPES = [(1, 1, 1, 1), (2, 8, 2, 4), (1, 16, 4, 8), (3, 5, 1, 16)]


def qkv(shape, dtype, seed=0):
    b, t, h, k = shape
    config = attention.AttentionConfig(seq_len=t, num_heads=h, head_dim=k, dtype=dtype)
    x = attention.example_inputs_BTD(jax.random.key(seed), config, batch=b)
    return attention.project_qkv(attention.init_projections(jax.random.key(seed + 1), config), x)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", attention.DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_torch_and_jax_nn(shape, dtype, causal):
    q, k, v = qkv(shape, dtype)
    out = attention.dot_product_attention(q, k, v, causal=causal)
    assert out.dtype == jnp.dtype(dtype) and out.shape == q.shape
    tolerance = numerics.tolerance(dtype)
    assert numerics.scaled_max_error(out, attention.jax_nn_reference(q, k, v, causal)) <= tolerance
    assert (
        numerics.scaled_max_error(out, attention.reference_float64(q, k, v, causal=causal))
        <= tolerance
    )
    if TORCH_MISSING:  # jax.nn and float64 agreed above
        pytest.skip(TORCH_MISSING)
    torch_out = attention_torch.torch_reference(q, k, v, causal)
    assert numerics.scaled_max_error(out, torch_out) <= tolerance


@pytest.mark.parametrize("t, s", [(1, 6), (3, 7), (5, 5)])
def test_fewer_queries_than_keys_with_a_mask(t, s):
    """New queries at the end of a longer key sequence (the KV-cache case), plus a mask."""
    # NumPy draws: jax.random compiled a sampler per shape (3 of the test's 8 compiles)
    rng = np.random.default_rng(t * 10 + s)
    q = rng.standard_normal((2, t, 2, 4), np.float32)
    k, v = rng.standard_normal((2, 2, s, 2, 4), np.float32)
    mask = rng.random((2, 1, t, s)) < 0.7
    mask[..., 0] = True  # every query sees at least one key
    out = attention.dot_product_attention(q, k, v, mask=mask, causal=True)
    reference = attention.reference_float64(q, k, v, mask=mask, causal=True)
    assert numerics.scaled_max_error(out, reference) <= numerics.tolerance("float32")


def test_causal_mask_closed_form():
    np.testing.assert_array_equal(attention.causal_mask_TS(4), np.tril(np.ones((4, 4), bool)))
    np.testing.assert_array_equal(
        attention.causal_mask_TS(2, 5), np.tril(np.ones((2, 5), bool), k=3)
    )
    with pytest.raises(ValueError, match="key_len"):
        attention.causal_mask_TS(5, 2)


@pytest.mark.parametrize("dtype", attention.DTYPES)
@pytest.mark.parametrize("shape", SHAPES[1:])
def test_pieces_scores_and_probabilities(shape, dtype):
    q, k, v = qkv(shape, dtype, seed=3)
    pieces = attention.attention_pieces(q, k, v, causal=True)
    host = lambda a: np.asarray(a.astype(jnp.float32), np.float64)  # noqa: E731
    scores = np.einsum("bthk,bshk->bhts", host(q), host(k)) / np.sqrt(shape[-1])
    tol = numerics.tolerance("float32")  # scores are float32 for either dtype
    np.testing.assert_allclose(pieces.scores_BHTS, scores, rtol=tol, atol=tol)
    probs = np.asarray(pieces.probs_BHTS)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=numerics.scaled_tolerance(1e-6))
    t = shape[1]
    assert np.all(probs[..., np.triu_indices(t, 1)[0], np.triu_indices(t, 1)[1]] == 0.0)


def test_a_row_masked_everywhere_gives_no_nan():
    q, k, v = qkv((1, 4, 1, 2), "float32")
    mask = jnp.ones((1, 1, 4, 4), bool).at[:, :, 2, :].set(False)
    out = attention.dot_product_attention(q, k, v, mask=mask)
    assert np.all(np.isfinite(np.asarray(out)))


@pytest.mark.parametrize("dtype", attention.DTYPES)
@pytest.mark.parametrize("seq_len, heads, head_dim", [(1, 1, 2), (6, 2, 4), (12, 3, 2)])
def test_causality_by_gradient(seq_len, heads, head_dim, dtype):
    config = attention.AttentionConfig(
        seq_len=seq_len, num_heads=heads, head_dim=head_dim, dtype=dtype
    )
    projections = attention.init_projections(jax.random.key(0), config)
    x_TD = attention.example_inputs_BTD(jax.random.key(1), config)[0]
    norms = {
        causal: attention.jacobian_norms_TS(
            lambda x, causal=causal: attention.self_attention_BTHK(
                projections, x[None], causal=causal
            )[0],
            x_TD,
        )
        for causal in (True, False)
    }
    upper = np.triu_indices(seq_len, 1)
    assert np.all(norms[True][upper] == 0.0), "an output depends on a later input"
    assert np.all(np.diag(norms[True]) > 0)
    if seq_len > 1:
        assert np.all(norms[False][upper] > 0), "without the mask every position sees every other"


def test_jacobian_norms_closed_form():
    """fn(x) = M @ x: d out[t] / d x[s] = M[t, s] * I_D, whose norm is |M[t, s]| sqrt(D)."""
    for t, s, d in [(3, 4, 2), (5, 5, 7)]:
        m = np.random.default_rng(t).normal(size=(t, s)).astype(np.float32)
        x = jnp.ones((s, d))
        norms = attention.jacobian_norms_TS(lambda x, m=m: jnp.asarray(m) @ x, x)
        closed = np.abs(m) * np.sqrt(d)
        np.testing.assert_allclose(norms, closed, rtol=numerics.scaled_tolerance(1e-6))
    with pytest.raises(ValueError, match="T, D"):
        attention.jacobian_norms_TS(lambda x: x, jnp.ones(3))


@pytest.mark.parametrize("shape", SHAPES)
def test_project_qkv_matches_numpy(shape):
    b, t, h, k = shape
    config = attention.AttentionConfig(seq_len=t, num_heads=h, head_dim=k)
    projections = attention.init_projections(jax.random.key(4), config)
    x = attention.example_inputs_BTD(jax.random.key(5), config, batch=b)
    for got, name in zip(attention.project_qkv(projections, x), ("wq", "wk", "wv"), strict=True):
        expected = np.einsum(
            "btd,dhk->bthk", np.asarray(x, np.float64), np.asarray(projections[name], np.float64)
        )
        tol, floor = numerics.tolerance("float32"), numerics.scaled_tolerance(1e-6)
        np.testing.assert_allclose(got, expected, rtol=tol, atol=floor)
    assert projections["wq"].shape == (h * k, h, k)


def test_jit_equals_no_jit():
    q, k, v = qkv((2, 8, 2, 4), "float32")
    jitted = jax.jit(attention.dot_product_attention, static_argnames="causal")(
        q, k, v, causal=True
    )
    with jax.disable_jit():
        eager = attention.dot_product_attention(q, k, v, causal=True)
    rtol, atol = numerics.scaled_tolerance(1e-6), numerics.scaled_tolerance(1e-7)
    np.testing.assert_allclose(jitted, eager, rtol=rtol, atol=atol)


def test_bad_shapes_name_the_problem():
    with pytest.raises(ValueError, match="dtype"):
        attention.AttentionConfig(dtype="float16")
    with pytest.raises(ValueError, match="seq_len"):
        attention.AttentionConfig(seq_len=0)
    q = jnp.ones((1, 4, 2, 8))
    with pytest.raises(ValueError, match="agree in B, H, K"):
        attention.dot_product_attention(q, jnp.ones((1, 4, 2, 4)), jnp.ones((1, 4, 2, 4)))
    with pytest.raises(ValueError, match="B, S, H"):
        attention.dot_product_attention(q, q, jnp.ones((1, 3, 2, 8)))
    with pytest.raises(ValueError, match="batch"):
        attention.example_inputs_BTD(jax.random.key(0), attention.AttentionConfig(), batch=0)


def test_normal_draws_are_a_reproducible_standard_normal_stream():
    key = jax.random.key(9)
    stream = attention.normal_draws(key, 3 * attention.NORMAL_CHUNK // 2)
    np.testing.assert_array_equal(
        attention.normal_draws(key, 100, start=attention.NORMAL_CHUNK - 50),
        stream[attention.NORMAL_CHUNK - 50 : attention.NORMAL_CHUNK + 50],
    )
    np.testing.assert_array_equal(
        stream[: attention.NORMAL_CHUNK],
        jax.random.normal(jax.random.fold_in(key, 0), (attention.NORMAL_CHUNK,)),
    )
    assert abs(stream.mean()) < 0.03 and abs(stream.std() - 1) < 0.03
    assert attention.normal_draws(key, 0).shape == (0,)
    with pytest.raises(ValueError, match="count"):
        attention.normal_draws(key, -1)


@pytest.mark.parametrize("t, d", [(4, 4), (16, 16)])
def test_jacobian_of_a_row_sum_product(t, d):
    """f(x) = x * rowsum(x): J[t, d, s, e] = [t == s] (rowsum(x)[t] [d == e] + x[t, d]).

    At (16, 16), jax.jit(jax.jacrev(f)) on jaxlib 0.10.2's CPU backend returns non-zero
    entries for t != s (a miscompiled batched multiply-reduce); attention.jacobian must not.
    """
    x = jax.random.normal(jax.random.key(0), (t, d))
    host = np.asarray(x, np.float64)
    eye_t, eye_d = np.eye(t), np.eye(d)
    closed = np.einsum("ts,de->tdse", eye_t, eye_d) * host.sum(-1)[:, None, None, None]
    closed += np.einsum("ts,td,e->tdse", eye_t, host, np.ones(d))
    fn = lambda x: x * jnp.sum(x, axis=-1, keepdims=True)  # noqa: E731
    for result in (attention.jacobian(fn, x), jax.jit(attention.jacobian, static_argnums=0)(fn, x)):
        tol, floor = numerics.tolerance("float32"), numerics.scaled_tolerance(1e-4)
        np.testing.assert_allclose(np.asarray(result), closed, rtol=tol, atol=floor)


@pytest.mark.parametrize("dtype", attention.DTYPES)
def test_causality_claims_hold_over_seeds_and_the_lesson_extremes(dtype):
    """apps/attention.py's gradient claims on 6 seeds, at its defaults (T 8, H 2, K 4) and
    at the end of its controls with the most peaked softmax (T 24, H 1, K 1), drawn as the
    app draws them: with the causal mask every d out[t] / d x[s], s > t, is exactly 0;
    without it every one is nonzero. The smallest one is printed relative to the median on
    or below the diagonal (it is exactly 0 only once a probability underflows, < 1e-45)."""
    worst = np.inf
    for seq_len, heads, head_dim in [(8, 2, 4), (24, 1, 1)]:
        config = attention.AttentionConfig(
            seq_len=seq_len, num_heads=heads, head_dim=head_dim, dtype=dtype
        )

        @jax.jit
        def jacobian(projections, x_TD, mask_TS):
            return attention.jacobian(
                lambda z: attention.self_attention_BTHK(projections, z[None], mask=mask_TS)[0],
                x_TD,
            )

        later = np.triu(np.ones((seq_len, seq_len), bool), k=1)
        causal = np.asarray(attention.causal_mask_TS(seq_len))
        for seed in range(6):
            key = jax.random.key(seed)
            x = attention.example_inputs_BTD(jax.random.fold_in(key, 0), config)[0]
            projections = attention.init_projections(jax.random.fold_in(key, 1), config)
            masked = attention.norms_of_jacobian_TS(jacobian(projections, x, causal))
            assert np.all(masked[later] == 0.0), (seq_len, heads, head_dim, seed)
            free = attention.norms_of_jacobian_TS(jacobian(projections, x, np.ones_like(causal)))
            worst = min(worst, free[later].min() / np.median(free[~later]))
    print(f"{dtype}: smallest later gradient without the mask / median {worst:.2e}")
    assert worst > 0


@pytest.mark.parametrize(
    "heads, kv_heads, causal", [(4, 1, True), (4, 2, False), (6, 3, True), (2, 2, True)]
)
def test_grouped_query_attention_matches_repeated_heads_float64(heads, kv_heads, causal):
    rng = np.random.default_rng(heads * 10 + kv_heads)  # NumPy: no sampler compiled per shape
    q = rng.standard_normal((2, 5, heads, 4), np.float32)
    k = rng.standard_normal((2, 5, kv_heads, 4), np.float32)
    v = rng.standard_normal((2, 5, kv_heads, 4), np.float32)
    got = attention.grouped_query_attention(q, k, v, causal=causal)
    reference = attention.gqa_reference_float64(q, k, v, causal=causal)
    assert numerics.scaled_max_error(got, reference) <= numerics.tolerance("float32")


def test_grouped_query_attention_refuses_groups_that_do_not_divide():
    q = jnp.zeros((1, 3, 4, 2))
    k = jnp.zeros((1, 3, 3, 2))
    with pytest.raises(ValueError, match="divide"):
        attention.grouped_query_attention(q, k, k)


def test_kv_cache_bytes_per_token_closed_form():
    # 2 (key and value) x 2 layers x 2 kv heads x 8 channels x 2 bytes (bfloat16)
    assert attention.kv_cache_bytes_per_token(2, 2, 8, 2) == 128
