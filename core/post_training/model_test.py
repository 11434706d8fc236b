import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from core import numerics
from core.lm import transformer
from core.post_training import model

CONFIGS = [
    model.ModelConfig(width=32, num_heads=2, num_layers=2, max_len=9),
    model.ModelConfig(width=16, num_heads=4, num_layers=1, max_len=12),
]


@pytest.mark.parametrize("config", CONFIGS)
def test_logits_equal_the_tinylm_forward_and_the_float64_reference(config):
    params = model.init_params(config, jax.random.key(3))
    tokens = np.asarray(jax.random.randint(jax.random.key(4), (3, config.max_len), 0, 256))
    ours = model.logits_BTV(params, tokens)
    tiny = model.to_model(params, config)
    assert numerics.scaled_max_error(ours, transformer.forward(tiny, tokens)) < 1e-5
    assert numerics.scaled_max_error(ours, transformer.lm_reference(tiny, tokens)) < 1e-5


def test_token_and_sequence_logprobs_match_numpy():
    config = CONFIGS[0]
    params = model.init_params(config, jax.random.key(0))
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (4, 9), 0, 256))
    weights = np.zeros((4, 9), np.float32)
    weights[:, 3:7] = 1
    logits = transformer.lm_reference(model.to_model(params, config), tokens)
    log_norm = np.log(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1))
    log_norm += logits.max(-1)
    expected = np.zeros((4, 9))
    for b in range(4):
        for t in range(8):
            expected[b, t] = logits[b, t, tokens[b, t + 1]] - log_norm[b, t]
    assert numerics.scaled_max_error(model.token_logprobs_BT(params, tokens), expected) < 1e-5
    sequence = model.sequence_logprob_B(params, tokens, weights)
    assert numerics.scaled_max_error(sequence, (expected * weights).sum(1)) < 1e-5


def test_hidden_features_project_to_the_logits():
    params = model.init_params(CONFIGS[0], jax.random.key(0))
    tokens = np.arange(18).reshape(2, 9)
    hidden = model.hidden_BTD(params, tokens)
    assert hidden.shape == (2, 9, 32)
    logits = model.logits_BTV(params, tokens)
    assert numerics.scaled_max_error(hidden @ params["head"], logits) < 1e-5


def test_content_hash_is_canonical_and_sensitive():
    params = model.init_params(CONFIGS[1], jax.random.key(0))
    again = jax.tree.map(lambda x: np.array(x, copy=True), params)
    assert model.content_hash(params) == model.content_hash(again)
    reordered = dict(reversed(list(params.items())))
    assert model.content_hash(reordered) == model.content_hash(params)
    flipped = jax.tree.map(np.asarray, params)
    head = np.array(flipped["head"])
    head.view(np.uint32)[0, 0] ^= 1  # one bit of one weight
    assert model.content_hash({**flipped, "head": head}) != model.content_hash(params)
    assert model.content_hash({"a": np.zeros(2, np.float32)}) != model.content_hash(
        {"a": np.zeros(2, np.float64)}
    )
    assert len(model.short_hash(params)) == model.HASH_CHARS


def _quadratic(w, _frozen, batch):
    return jnp.mean((batch["x"] @ w - batch["y"]) ** 2)


def test_train_runs_adam_steps_and_lowers_the_loss():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 8, 3)).astype(np.float32)
    w_true = np.array([1.0, -2.0, 0.5], np.float32)
    batches = {"x": x, "y": x @ w_true}
    trained, losses_S = model.train(_quadratic, jnp.zeros(3), None, batches, 0.1)
    assert losses_S.shape == (50,) and losses_S[-1] < 0.05 * losses_S[0]
    with pytest.raises(ValueError, match="learning_rate"):
        model.train(_quadratic, jnp.zeros(3), None, batches, 0.0)


def _quadratic_with_aux(w, frozen, batch):
    loss = _quadratic(w, frozen, batch)
    return loss, {"w_norm": jnp.sqrt(jnp.sum(w**2))}


@pytest.mark.parametrize("has_aux", [False, True])
def test_train_across_chunks_equals_a_plain_optax_loop(has_aux):
    # 23 steps: two whole chunks of the compiled loop and a remainder of 3
    rng = np.random.default_rng(1)
    x = rng.normal(size=(23, 8, 3)).astype(np.float32)
    batches = {"x": x, "y": x @ np.array([1.0, -2.0, 0.5], np.float32)}
    loss_fn = _quadratic_with_aux if has_aux else _quadratic
    trained, values = model.train(loss_fn, jnp.zeros(3), None, batches, 0.1, has_aux)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(0.1))
    w, want = jnp.zeros(3), []
    state = tx.init(w)
    for s in range(23):
        batch = {k: v[s] for k, v in batches.items()}
        loss, grads = jax.value_and_grad(_quadratic)(w, None, batch)
        updates, state = tx.update(grads, state, w)
        w = optax.apply_updates(w, updates)
        want.append(float(loss))
    losses_S = values[0] if has_aux else values
    np.testing.assert_allclose(losses_S, want, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(trained), np.asarray(w), rtol=1e-5, atol=1e-6)
    if has_aux:
        assert values[1]["w_norm"].shape == (23,)


def test_a_new_step_count_compiles_no_new_training_loop():
    # the lessons' steps controls move by TRAIN_CHUNK: each count they offer reuses one program
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3 * model.TRAIN_CHUNK, 4, 3)).astype(np.float32)
    batches = {"x": x, "y": x.sum(-1)}
    shorter = {k: v[: 2 * model.TRAIN_CHUNK] for k, v in batches.items()}
    model.train(_quadratic, jnp.zeros(3), None, shorter, 0.1)
    programs = model._train_chunk._cache_size()
    _, losses_S = model.train(_quadratic, jnp.zeros(3), None, batches, 0.1)
    assert model._train_chunk._cache_size() == programs and losses_S.shape == (30,)


def test_config_is_validated():
    with pytest.raises(ValueError, match="divide"):
        model.ModelConfig(width=30, num_heads=4)


@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 11), (4, 256)])
def test_gather_logprobs_matches_a_float64_log_softmax_on_any_leading_shape(shape):
    rng = np.random.default_rng(len(shape))
    logits = rng.normal(size=shape).astype(np.float32) * 3
    ids = rng.integers(0, shape[-1], shape[:-1])
    z = logits.astype(np.float64) - logits.max(-1, keepdims=True)
    expected = np.take_along_axis(z - np.log(np.exp(z).sum(-1, keepdims=True)), ids[..., None], -1)
    ours = model.gather_logprobs(logits, ids)
    assert ours.shape == shape[:-1]
    assert numerics.scaled_max_error(ours, expected[..., 0]) < 1e-5


def test_next_token_logprobs_take_each_positions_next_token_and_zero_the_last():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 6, 9)).astype(np.float32)
    tokens = rng.integers(0, 9, (3, 6))
    ours = np.asarray(model.next_token_logprobs_BT(logits, tokens))
    assert np.all(ours[:, -1] == 0)
    for b in range(3):
        for t in range(5):
            row = logits[b, t].astype(np.float64)
            lse = row.max() + np.log(np.exp(row - row.max()).sum())
            assert abs(ours[b, t] - (row[tokens[b, t + 1]] - lse)) < 1e-5
