"""model_math: the one FLOPs formula against the dots of the real train step (with and
without remat), and by hand; the bench and plan commands use it."""

from __future__ import annotations

import math

import jax
import pytest

from capstones.byte_transformer import bench, data, model_math, plan, training
from capstones.byte_transformer import config as config_lib
from core.lm import tokenizer

TINY = dict(
    d_model=32, num_layers=2, num_heads=2, seq_len=32, batch_size=2, max_files=4, max_bytes=2048
)
OTHER = dict(d_model=24, num_layers=3, num_heads=3, mlp_width=40, seq_len=24, batch_size=3)


def tiny(**overrides) -> config_lib.Config:
    return config_lib.Config(**{**TINY, **overrides})


def jaxpr_dot_flops(jaxpr) -> int:
    """2 * batch * contracted * lhs-free * rhs-free summed over every dot_general, including
    those inside nested jaxprs (jit, custom_jvp, checkpoint...)."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (lhs_contract, _), (lhs_batch, _) = eqn.params["dimension_numbers"]
            lhs, rhs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
            batch = math.prod(lhs[i] for i in lhs_batch)
            contract = math.prod(lhs[i] for i in lhs_contract)
            lhs_free = math.prod(lhs) // (batch * contract)
            rhs_free = math.prod(rhs) // (batch * contract)
            total += 2 * batch * contract * lhs_free * rhs_free
        for value in eqn.params.values():
            for item in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(item, jax.extend.core.ClosedJaxpr):
                    total += jaxpr_dot_flops(item.jaxpr)
                elif isinstance(item, jax.extend.core.Jaxpr):
                    total += jaxpr_dot_flops(item)
    return total


def step_dot_flops(config: config_lib.Config, policy: str | None) -> int:
    """Dot FLOPs of the train step (plan.step_function: training.train_step or its remat
    variant) on the first batch, from its jaxpr."""
    state = training.init_state(config)
    batch = data.training_stream(config, data.load_corpus(config)).next_batch()
    jaxpr = jax.make_jaxpr(plan.step_function(config, policy))(state, batch)
    return jaxpr_dot_flops(jaxpr.jaxpr)


@pytest.mark.parametrize("overrides", [{}, OTHER])
def test_flop_formula_equals_the_dots_of_the_train_step(overrides):
    config = tiny(**overrides)
    state = training.init_state(config)
    batch = data.training_stream(config, data.load_corpus(config)).next_batch()
    training.make_train_step(config)  # builds the model structure outside the trace
    jaxpr = jax.make_jaxpr(lambda s, b: training.train_step(config, s, b))(state, batch)
    counted = jaxpr_dot_flops(jaxpr.jaxpr)
    assert counted > 0
    assert bench.flops_per_step(config)["total"] == counted
    assert model_math.train_flops(config, config.batch_size)["total"] == counted
    assert plan.flops_per_step(config, config.batch_size) == counted


@pytest.mark.parametrize("overrides", [{}, OTHER])
@pytest.mark.parametrize("policy", plan.REMAT_POLICIES)
def test_remat_flops_equal_the_dots_of_the_remat_step(overrides, policy):
    # the old plan formula added a whole forward of every block for any policy: 2 D F b T
    # per layer too many for nothing_saveable (w_out is not recomputed), all of it for
    # dots_saveable (no matmul is recomputed)
    config = tiny(**overrides)
    rows = config.batch_size
    counted = step_dot_flops(config, policy)
    assert model_math.train_flops(config, rows, policy)["total"] == counted
    assert plan.flops_per_step(config, rows, remat=policy) == counted
    if policy == "nothing_saveable":
        assert counted > step_dot_flops(config, None)
        assert plan.flops_per_step(config, rows, remat=True) == counted


def test_flop_formula_by_hand():
    # D=8, L=1, F=32, V=256, T=4, B=1: N = 4*64 + 2*8*32 + 8*256 = 2816
    config = config_lib.Config(
        d_model=8, num_layers=1, num_heads=2, mlp_width=32, seq_len=4, batch_size=1, min_piece=2
    )
    assert tokenizer.VOCAB_SIZE == 256
    flops = bench.flops_per_step(config)
    assert flops["matmul_params"] == 2816
    assert flops["matmul"] == 6 * 2816 * 4
    assert flops["attention"] == 12 * 1 * 1 * 4 * 4 * 8
    assert flops["total"] == 67584 + 1536
    # remat (nothing_saveable) recomputes q, k, v, o (4 x 2 x 4 x 8 x 8), w_in (2 x 4 x 8 x 32)
    # and QK^T, PV (2 x 2 x 4 x 4 x 8) of the one block, not w_out
    assert model_math.recompute_flops(config, 1, "nothing_saveable") == 2048 + 2048 + 512
    assert model_math.recompute_flops(config, 1, "dots_saveable") == 0
    assert model_math.train_flops(config, 1, True)["total"] == 67584 + 1536 + 4608


def test_param_count_and_formula():
    config = tiny()
    d, f, v, s, layers = 32, 128, 256, config.max_len, 2
    assert model_math.param_count(config) == (
        2 * v * d + s * d + layers * (4 * d * d + 2 * d * f + f + 5 * d) + 2 * d
    )
    assert model_math.matmul_params(config) == layers * (4 * d * d + 2 * d * f) + d * v


def test_bad_arguments():
    with pytest.raises(ValueError, match="remat policy"):
        model_math.train_flops(tiny(), 1, "everything")
    with pytest.raises(ValueError, match="rows"):
        model_math.train_flops(tiny(), 0)


def test_mfu_arithmetic():
    assert model_math.mfu(2e9, 0.5, 8e9) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        model_math.mfu(1e9, 1.0, 0.0)


def test_causal_train_flops_count_one_layer_by_hand():
    """Every matmul of the model written out (FLOPs = 2 x multiply-adds; training = forward
    + a backward of twice the forward), causal attention's two T x T products halved."""
    c = config_lib.Config(d_model=8, num_heads=2, mlp_width=24, num_layers=3, seq_len=32)
    b, t, d, f, v = 5, 32, 8, 24, 256
    tokens = b * t
    per_layer_forward = (
        2 * tokens * d * d  # q = x wq
        + 2 * tokens * d * d  # k
        + 2 * tokens * d * d  # v
        + 2 * tokens * d * d  # o = attn wo
        + 2 * tokens * d * f  # MLP in
        + 2 * tokens * f * d  # MLP out
        + (2 * b * t * t * d) // 2  # q k^T over every head (H * K = D), lower half
        + (2 * b * t * t * d) // 2  # p v, lower half
    )
    head_forward = 2 * tokens * d * v
    expected = 3 * (3 * per_layer_forward + head_forward)
    assert model_math.causal_train_flops(c, b)["total"] == expected
    # the full-square count of train_flops is larger by exactly the masked half
    full = model_math.train_flops(c, b)["total"]
    assert full - expected == 3 * 3 * 2 * b * t * t * d


def test_preset_mfu_accounting_at_a_known_step_time():
    c = config_lib.preset("tpu-v5e")
    flops = model_math.causal_train_flops(c, c.batch_size)["total"]
    # 6 N_matmul tokens + 6 L b T^2 D, N_matmul = L (4 D^2 + 2 D F) + D V, by hand
    n_matmul = 6 * (4 * 2048**2 + 2 * 2048 * 8192) + 2048 * 256
    assert flops == 6 * n_matmul * 8 * 2048 + 6 * 6 * 8 * 2048**2 * 2048
    assert model_math.mfu(flops, 0.25, 197e12) == pytest.approx(flops / 0.25 / 197e12)
