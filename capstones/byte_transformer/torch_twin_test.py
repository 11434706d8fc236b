"""The PyTorch twin computes what the JAX model computes: logits, loss, one AdamW step.

The reference is the JAX side (core.lm.transformer.TinyLM under training.train_step), itself
tested against numpy float64 in core/lm/transformer_test.py; the twin is written
independently in torch. Dropout is off where values are compared (its random streams
differ by construction); where it is on, the test checks where and how often it applies.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import data, torch_twin, training
from core.lm import tokenizer, transformer
from core.state import checkpoint

torch = pytest.importorskip("torch")

TINY = dict(max_files=4, max_bytes=2048, seq_len=32, batch_size=2, dropout=0.0)
CONFIGS = {
    "d32-L2-H2": config_lib.Config(d_model=32, num_layers=2, num_heads=2, **TINY),
    "d24-L3-H3-F40": config_lib.Config(
        d_model=24, num_layers=3, num_heads=3, mlp_width=40, max_len=64, seed=3, **TINY
    ),
}


def packed_batch(config: config_lib.Config) -> dict:
    """A (B, T) batch of real stdlib bytes with packing: row 0 holds two documents and
    padding, row 1 one document (the segment mask and the valid-token weights matter)."""
    b, t = config.batch_size, config.seq_len
    text = data.training_stream(config, data.load_corpus(config)).next_batch()["tokens_BT"]
    segments = np.ones((b, t), np.int32)
    first, second = t // 3, t // 3 + t // 2
    segments[0, first:second] = 2
    segments[0, second:] = tokenizer.PAD_SEGMENT
    positions = np.zeros((b, t), np.int32)
    for row in range(b):
        for segment in np.unique(segments[row]):
            where = segments[row] == segment
            positions[row, where] = np.arange(where.sum())
    tokens = np.where(segments == tokenizer.PAD_SEGMENT, tokenizer.PAD_ID, text).astype(np.int32)
    return transformer.batch_from_packed(tokenizer.Packed(tokens, segments, positions, ()))


@pytest.fixture(scope="module", params=list(CONFIGS))
def setup(request):
    config = CONFIGS[request.param]
    return config, training.init_state(config), packed_batch(config)


def _relative(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def test_logits_and_loss_equal_jax(setup):
    config, state, batch = setup
    model = training.model_from_params(config, state["params"])
    logits_jax = np.asarray(
        model(batch["tokens_BT"], batch["segment_ids_BT"], batch["positions_BT"])
    )
    loss_jax, count_jax = training.loss_fn(config, state["params"], batch, None)

    twin = torch_twin.from_jax_params(config, state["params"]).eval()
    tb = torch_twin.batch_to_torch(batch)
    with torch.no_grad():
        logits_twin = twin(tb["tokens_BT"], tb["segment_ids_BT"], tb["positions_BT"]).numpy()
        loss_twin, count_twin = twin.loss(tb)
    assert logits_twin.shape == logits_jax.shape
    assert _relative(logits_twin, logits_jax) < 1e-4
    assert float(count_twin) == float(count_jax) == batch["weights_BT"].sum()
    assert abs(float(loss_twin) - float(loss_jax)) <= 1e-5 * abs(float(loss_jax))


@pytest.mark.parametrize("clip_norm", [0.05, 100.0])  # clipping active / inactive
def test_one_adamw_step_equals_jax(setup, clip_norm):
    config, state, batch = setup
    config = dataclasses.replace(config, clip_norm=clip_norm, learning_rate=1e-2)
    new_state, metrics = training.make_train_step(config)(state, batch)

    twin = torch_twin.from_jax_params(config, state["params"]).train()
    optimizer = torch_twin.make_optimizer(config, twin)
    twin_metrics = torch_twin.train_step(
        twin, optimizer, torch_twin.batch_to_torch(batch), config.clip_norm
    )
    assert abs(float(twin_metrics["loss"]) - float(metrics["loss"])) <= 1e-5 * float(
        metrics["loss"]
    )
    grad_norm = float(metrics["grad_norm"])
    assert (grad_norm > clip_norm) == (clip_norm == 0.05)  # the case is what it claims
    assert abs(float(twin_metrics["grad_norm"]) - grad_norm) <= 1e-4 * grad_norm

    # Adam's moments are linear (mu) and quadratic (nu) in the clipped gradient: they test
    # the gradients and the clipping on every element
    mu_twin, nu_twin = torch_twin.adam_moments(config, twin, optimizer)
    adam = checkpoint.adam_state(new_state["opt_state"])
    for ours, theirs in ((mu_twin, adam.mu), (nu_twin, adam.nu)):
        for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
            assert _relative(a, b) < 1e-4

    # Parameters: Adam's first step moves a weight by lr * g / (|g| + eps) ~ lr * sign(g), so
    # where |g| is within float32 noise of eps = 1e-8 rounding decides the step; compare
    # the updates where |g| >> eps (all elements agree through the moments above)
    after = torch_twin.to_jax_params(config, twin)
    worst, compared = 0.0, 0
    leaves = zip(
        jax.tree.leaves(state["params"]),
        jax.tree.leaves(new_state["params"]),
        jax.tree.leaves(after),
        jax.tree.leaves(adam.mu),
        strict=True,
    )
    for old, new_jax, new_twin, mu in leaves:
        clear = np.abs(np.asarray(mu)) / 0.1 > 1e-5  # mu = (1 - b1) * clipped gradient
        update_jax = np.asarray(new_jax, np.float64) - np.asarray(old, np.float64)
        update_twin = np.asarray(new_twin, np.float64) - np.asarray(old, np.float64)
        if clear.any():
            worst = max(worst, float(np.abs(update_twin - update_jax)[clear].max()))
        compared += int(clear.sum())
    block_params = sum(np.size(p) for p in jax.tree.leaves(state["params"]["blocks"]))
    assert compared > 0.9 * block_params  # (unused embedding rows have zero gradient)
    assert worst <= 1e-4 * config.learning_rate
    moved = max(
        float(np.abs(np.asarray(a) - np.asarray(b)).max())
        for a, b in zip(
            jax.tree.leaves(state["params"]), jax.tree.leaves(new_state["params"]), strict=True
        )
    )
    assert moved > 0.5 * config.learning_rate  # the step did something


def test_parameters_round_trip_and_shape_errors(setup):
    config, state, _ = setup
    twin = torch_twin.from_jax_params(config, state["params"])
    back = torch_twin.to_jax_params(config, twin)
    for a, b in zip(jax.tree.leaves(state["params"]), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(np.asarray(a), b)
    other = dataclasses.replace(config, d_model=config.d_model * 2)
    with pytest.raises(ValueError, match="shape"):
        torch_twin.from_jax_params(other, state["params"])


def test_dropout_where_the_jax_model_puts_it(setup, monkeypatch):
    """Dropout: the embeddings and each block's two residual branches, on (B, T, D)
    activations, at config.dropout, only in train mode; eval mode equals dropout off."""
    config, state, batch = setup
    config = dataclasses.replace(config, dropout=0.25)
    calls = []
    original = torch.nn.functional.dropout

    def recording(x, p=0.5, training=True, inplace=False):
        calls.append((tuple(x.shape), p, training))
        return original(x, p, training, inplace)

    monkeypatch.setattr(torch.nn.functional, "dropout", recording)
    twin = torch_twin.from_jax_params(config, state["params"]).train()
    tb = torch_twin.batch_to_torch(batch)
    b, t = batch["tokens_BT"].shape
    torch.manual_seed(0)
    train_logits = twin(tb["tokens_BT"], tb["segment_ids_BT"], tb["positions_BT"])
    assert calls == [((b, t, config.d_model), 0.25, True)] * (1 + 2 * config.num_layers)

    twin.eval()
    with torch.no_grad():
        eval_logits = twin(tb["tokens_BT"], tb["segment_ids_BT"], tb["positions_BT"]).numpy()
    model = training.model_from_params(config, state["params"])
    reference = np.asarray(
        model(batch["tokens_BT"], batch["segment_ids_BT"], batch["positions_BT"])
    )
    assert _relative(eval_logits, reference) < 1e-4
    assert _relative(train_logits.detach().numpy(), reference) > 1e-2  # dropout did act


def test_inverted_dropout_scaling_matches_jax():
    """torch's F.dropout and core.lm.transformer.dropout: same zero rate, same 1/(1-p) scale."""
    x = np.ones((64, 512), np.float32)
    ours = np.asarray(transformer.dropout(x, 0.25, jax.random.key(0)))
    theirs = torch.nn.functional.dropout(torch.from_numpy(x), 0.25, True).numpy()
    for out in (ours, theirs):
        kept = out[out != 0]
        np.testing.assert_allclose(kept, 1 / 0.75, rtol=1e-6)
        assert abs((out == 0).mean() - 0.25) < 0.01
