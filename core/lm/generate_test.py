import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.lm import generate, tokenizer, transformer

# On a chip: float32 matmuls at HIGHEST, bounds from numerics (the CPU's values on the CPU).
pytestmark = pytest.mark.usefixtures("highest_matmul_precision_on_tpu")


def _tokens(seed, shape):
    """Token ids in [0, 256) from NumPy: jax.random compiled a sampler for every new shape."""
    return jnp.asarray(np.random.default_rng(seed).integers(0, 256, shape, dtype=np.int32))


def _normal(seed, shape):
    """float32 N(0, 1) draws from NumPy (no sampler compiled per shape)."""
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape, np.float32))


@pytest.fixture(scope="module")
def model():
    config = transformer.TransformerConfig(width=16, num_heads=2, num_layers=2, max_len=32)
    return transformer.TinyLM(config, jax.random.key(3))


def test_sampling_config_is_validated():
    with pytest.raises(ValueError, match="method"):
        generate.SamplingConfig(method="beam")
    with pytest.raises(ValueError, match="temperature"):
        generate.SamplingConfig(temperature=0.0)
    with pytest.raises(ValueError, match="top_k"):
        generate.SamplingConfig(top_k=0)


def test_greedy_is_argmax():
    logits = _normal(0, (5, 256))
    token = generate.sample_next_B(logits, jax.random.key(1), generate.SamplingConfig("greedy"))
    np.testing.assert_array_equal(token, np.argmax(np.asarray(logits), -1))


@pytest.mark.parametrize(
    "sampling",
    [
        generate.SamplingConfig("temperature", 1.0),
        generate.SamplingConfig("temperature", 0.5),
        generate.SamplingConfig("top-k", 2.0, 3),
    ],
)
def test_sample_frequencies_match_the_distribution(sampling):
    logits = jnp.asarray([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])
    draws = 20000
    keys = jax.random.split(jax.random.key(2), draws)
    samples = np.asarray(jax.vmap(lambda k: generate.sample_next_B(logits, k, sampling))(keys))[
        :, 0
    ]
    frequencies = np.bincount(samples, minlength=6) / draws
    probs = generate.sampling_probs_BV(logits, sampling)[0]
    # 5 standard errors of a binomial proportion
    assert np.all(np.abs(frequencies - probs) <= 5 * np.sqrt(probs * (1 - probs) / draws) + 1e-9)
    if sampling.method == "top-k":
        assert set(np.unique(samples)) <= {0, 1, 2}


def test_sampling_probs_closed_form():
    logits = np.asarray([[1.0, 2.0, 3.0]])
    np.testing.assert_allclose(
        generate.sampling_probs_BV(logits, generate.SamplingConfig("temperature", 2.0)),
        np.exp([[0.5, 1, 1.5]]) / np.exp([0.5, 1, 1.5]).sum(),
    )
    np.testing.assert_allclose(
        generate.sampling_probs_BV(logits, generate.SamplingConfig("top-k", 1.0, 2)),
        [[0, 1 / (1 + np.e), np.e / (1 + np.e)]],
    )
    np.testing.assert_array_equal(
        generate.sampling_probs_BV(logits, generate.SamplingConfig()), [[0, 0, 1]]
    )
    with pytest.raises(ValueError, match="top_k"):
        generate.sample_next_B(
            jnp.asarray(logits), jax.random.key(0), generate.SamplingConfig("top-k", 1.0, 4)
        )


@pytest.mark.parametrize("prompt_len, num_new", [(1, 6), (5, 10), (12, 3)])
def test_cached_greedy_equals_recomputing_everything(model, prompt_len, num_new):
    prompt = _tokens(prompt_len, (2, prompt_len))
    cached = generate.generate(model, prompt, num_new, jax.random.key(0))
    assert cached.tokens_BT.shape == (2, prompt_len + num_new) and cached.prompt_len == prompt_len
    np.testing.assert_array_equal(
        cached.tokens_BT, generate.greedy_without_cache(model, prompt, num_new)
    )
    # the recorded logits are the full forward's logits at the positions that chose each token
    full = np.asarray(transformer.forward(model, cached.tokens_BT))
    tol = numerics.tolerance("float32")
    np.testing.assert_allclose(
        cached.step_logits_BNV, full[:, prompt_len - 1 : -1], rtol=tol, atol=tol
    )


@pytest.mark.parametrize("length, prefill", [(1, 1), (7, 3), (20, 1), (32, 32)])
def test_incremental_logits_equal_full_forward(model, length, prefill):
    tokens = _tokens(length, (1, length))
    incremental = generate.incremental_logits_BTV(model, tokens, prefill)
    tol = numerics.tolerance("float32")
    np.testing.assert_allclose(incremental, transformer.forward(model, tokens), rtol=tol, atol=tol)


def test_sampled_generation_is_reproducible_and_checked(model):
    prompt = tokenizer.encode("def ")[None]
    sampling = generate.SamplingConfig("top-k", 0.8, 5)
    first = generate.generate(model, prompt, 8, jax.random.key(5), sampling)
    again = generate.generate(model, prompt, 8, jax.random.key(5), sampling)
    np.testing.assert_array_equal(first.tokens_BT, again.tokens_BT)
    for i in range(8):  # every sampled token was among the top 5 of its logits
        top5 = np.argsort(first.step_logits_BNV[0, i])[-5:]
        assert first.tokens_BT[0, 4 + i] in top5
    assert isinstance(tokenizer.decode(first.tokens_BT[0], errors="replace"), str)
    with pytest.raises(ValueError, match="max_len"):
        generate.generate(model, prompt, 40, jax.random.key(0))
    with pytest.raises(ValueError, match="prefill_len"):
        generate.incremental_logits_BTV(model, prompt, 0)
    # a cache smaller than the tokens fed through it is refused on the host (under jit the
    # overflowing steps would only come back as NaN logits)
    with pytest.raises(ValueError, match="capacity 3 cannot hold the T=4"):
        generate.incremental_logits_BTV(model, prompt, 1, capacity=3)


def test_sampling_rule_is_traced_so_one_program_serves_all():
    logits = _normal(1, (3, 256))
    sample = jax.jit(generate._sample_B)
    for sampling in (
        generate.SamplingConfig(),
        generate.SamplingConfig("temperature", 0.3),
        generate.SamplingConfig("top-k", 2.0, 1),
    ):
        got = sample(logits, jax.random.key(2), *sampling.as_arrays())
        np.testing.assert_array_equal(
            got, generate.sample_next_B(logits, jax.random.key(2), sampling)
        )
    assert sample._cache_size() == 1
    # top-k with k = 1 is greedy whatever the temperature
    np.testing.assert_array_equal(
        sample(logits, jax.random.key(3), *generate.SamplingConfig("top-k", 5.0, 1).as_arrays()),
        np.argmax(np.asarray(logits), -1),
    )


# logits with a clear winner (index 3, ahead by 1.5): at any temperature <= 1e-3 sampling
# can only pick it (the runner-up's probability is below exp(-1500))
CLEAR_WINNER = jnp.asarray([[0.5, -2.0, 1.0, 2.5, 1.0, -30.0], [40.0, 38.5, -1.0, 0.0, 2.0, 3.0]])
TINY_TEMPERATURES = (1e-3, 1e-20, 1e-38, 1e-40, 1e-310)


@pytest.mark.parametrize("temperature", TINY_TEMPERATURES)
@pytest.mark.parametrize("method", ["temperature", "top-k"])
def test_tiny_temperatures_give_the_argmax_or_a_clear_error(method, temperature):
    """issue 12.4: logits / T overflowed float32 (T=1e-40 sampled tokens unrelated to the
    argmax). Either SamplingConfig refuses T (naming the floor) or every draw is the argmax."""
    argmax = np.argmax(np.asarray(CLEAR_WINNER), -1)
    keys = jax.random.split(jax.random.key(4), 16)
    try:
        sampling = generate.SamplingConfig(method, temperature, 3)
    except ValueError as exc:
        assert temperature < generate.MIN_TEMPERATURE
        assert "temperature" in str(exc) and str(generate.MIN_TEMPERATURE) in str(exc)
    else:
        assert temperature >= generate.MIN_TEMPERATURE
        for key in keys:
            np.testing.assert_array_equal(
                generate.sample_next_B(CLEAR_WINNER, key, sampling), argmax
            )
    # the traced rule (what jitted callers and exported code run) never returns garbage,
    # even for a temperature no SamplingConfig accepts (1e-310 and 0 are 0.0 in float32)
    sample = jax.jit(generate._sample_B)
    rule_method = jnp.asarray(generate.METHODS.index(method), jnp.int32)
    for t in (temperature, 0.0):
        for key in keys:
            got = sample(CLEAR_WINNER, key, rule_method, jnp.asarray(t, jnp.float32), 3)
            np.testing.assert_array_equal(got, argmax)


def test_temperature_must_be_finite_and_huge_ones_are_uniform():
    for bad in (float("inf"), float("nan"), -1.0):
        with pytest.raises(ValueError, match="temperature"):
            generate.SamplingConfig("temperature", bad)
    # a temperature that overflows float32 (1e39 becomes inf) is uniform sampling over the
    # kept tokens, never NaN (-inf / inf): top-3 of the first row keeps {2, 3, 4}
    sample = jax.jit(generate._sample_B)
    top_k = jnp.asarray(generate.METHODS.index("top-k"), jnp.int32)
    draws = np.asarray(
        [
            sample(CLEAR_WINNER[:1], key, top_k, jnp.float32(np.inf), 3)[0]
            for key in jax.random.split(jax.random.key(5), 60)
        ]
    )
    assert set(draws) == {2, 3, 4}


@pytest.mark.parametrize("heads, kv_heads", [(4, 1), (4, 2), (2, None)])
def test_generation_keeps_its_cache_of_g_heads_and_decodes_like_the_full_forward(heads, kv_heads):
    config = transformer.TransformerConfig(
        width=16, num_heads=heads, num_layers=2, max_len=16, num_kv_heads=kv_heads
    )
    model = transformer.TinyLM(config, jax.random.key(heads))
    prompt = _tokens(5, (1, 3))
    generation = generate.generate(model, prompt, 6, jax.random.key(0))
    cache = generation.cache
    g = kv_heads or heads
    # (L, B, S, G, K): G key/value heads, capacity prompt + new, the last new token unfed
    assert cache.k_LBSHK.shape == cache.v_LBSHK.shape == (2, 1, 9, g, 16 // heads)
    assert int(cache.length) == 3 + 6 - 1
    # bytes per cached token: a key and a value per layer, K/V head and channel, float32
    per_token = (cache.k_LBSHK.nbytes + cache.v_LBSHK.nbytes) / (1 * 9)
    assert per_token == 2 * 2 * g * (16 // heads) * 4
    np.testing.assert_array_equal(
        generation.tokens_BT, generate.greedy_without_cache(model, prompt, 6)
    )
