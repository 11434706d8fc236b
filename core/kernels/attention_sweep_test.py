"""The sweep's bookkeeping against closed forms written out here (no timing is asserted)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.kernels import attention_sweep, flash_attention


def test_causal_flops_count_the_lower_half_of_two_matmuls():
    b, h, t, d = 2, 3, 8, 4
    # QK^T: for each (b, h) a (T x D) @ (D x T) product, T*T*D multiply-adds of 2 FLOPs;
    # PV the same; causal keeps the T*T/2 lower half of both
    qk = b * h * t * t * d * 2
    pv = b * h * t * t * d * 2
    forward = (qk + pv) // 2
    assert attention_sweep.causal_flops(b, h, t, d) == forward == 3072
    # backward: dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: four products of that size
    assert attention_sweep.causal_flops(b, h, t, d, backward=True) == forward + 2 * forward


def test_block_pairs_keep_blocks_that_fit_and_divide():
    assert attention_sweep.block_pairs(256, (128, 256, 512)) == [
        (128, 128),
        (128, 256),
        (256, 128),
        (256, 256),
    ]
    assert attention_sweep.block_pairs(384, (128, 256)) == [(128, 128)]


def _row(kernel, pass_, t, blocks, status="ok", seconds=(1.0,)):
    return attention_sweep.row(
        kernel,
        pass_,
        t,
        *blocks,
        status,
        shape=(1, 8, None, 128),
        peak_flops=197e12,
        seconds=seconds if status == "ok" else (),
        reason="" if status == "ok" else "why",
    )


def test_best_per_kernel_picks_each_fastest_ok_row():
    rows = [
        _row("this", "forward", 512, (128, 128), seconds=(3.0, 1.0, 2.0)),  # median 2
        _row("this", "forward", 512, (256, 256), seconds=(1.5,)),
        _row("this", "forward", 512, (512, 512), status="error"),
        _row("splash", "forward", 512, (128, 128), seconds=(1.0,)),
        _row("splash", "forward", 512, (256, 128), status="skipped"),
        _row("this", "forward_backward", 512, (256, 256), seconds=(4.0,)),
        _row("xla", "forward_backward", 512, (0, 0), seconds=(6.0,)),
    ]
    # an ablation faster than everything is not attention: it never becomes a best row
    ablation = attention_sweep.row(
        "this", "forward", 512, 256, 256, "ok", seconds=(0.5,), shape=(1, 1, None, 8),
        variant="matmuls_only",
    )  # fmt: skip
    rows.append(ablation)
    best = attention_sweep.best_per_kernel(rows)
    picked = [(r["pass"], r["kernel"], r["block_q"], r["block_k"], r["median_s"]) for r in best]
    assert picked == [
        ("forward", "splash", 128, 128, 1.0),
        ("forward", "this", 256, 256, 1.5),
        ("forward_backward", "this", 256, 256, 4.0),
        ("forward_backward", "xla", 0, 0, 6.0),
    ]
    speedups = {(s["pass"], s["rival"]): s["speedup"] for s in attention_sweep.speedups(best)}
    assert speedups == {("forward", "splash"): 1.0 / 1.5, ("forward_backward", "xla"): 1.5}


def test_row_rates_from_the_median():
    item = _row("this", "forward", 1024, (512, 512), seconds=(0.002, 0.001, 0.004))
    flops = 2 * 1 * 8 * 1024 * 1024 * 128  # the closed form above at B=1, H=8, T=1024, D=128
    assert item["median_s"] == 0.002 and item["flops"] == flops
    assert item["tflops_per_s"] == pytest.approx(flops / 0.002 / 1e12)
    assert item["fraction_of_peak"] == pytest.approx(flops / 0.002 / 197e12)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"kernel": "cudnn"}, "unknown kernel"),
        ({"status": "ok", "seconds": ()}, "needs its timed calls"),
        ({"kernel": "splash", "variant": "matmuls_only"}, "this kernel's forward only"),
        ({"pass_": "forward_backward", "variant": "matmuls_only"}, "this kernel's forward only"),
    ],
)
def test_row_refuses(kwargs, words):
    base = {"kernel": "this", "pass_": "forward", "t": 128, "block_q": 128, "block_k": 128}
    base.update({"status": "ok", "seconds": (1.0,)}, **kwargs)
    with pytest.raises(ValueError, match=words):
        attention_sweep.row(**base, shape=(1, 1, None, 8))


def test_budget_expires_on_its_clock():
    now = [100.0]
    budget = attention_sweep.Budget(5.0, clock=lambda: now[0])
    assert not budget.expired()
    now[0] = 105.0
    assert budget.expired() and "5 s spent" in budget.reason()
    with pytest.raises(ValueError, match="> 0 seconds"):
        attention_sweep.Budget(0)


@pytest.mark.parametrize("kernel", ["this", "splash", "xla"])
def test_each_kernel_agrees_with_float64_in_interpret_mode(kernel):
    blocks = (0, 0) if kernel == "xla" else (128, 128)
    found = attention_sweep.agreement(kernel, (1, 1, 128, 128), jnp.bfloat16, blocks, True)
    assert found["agrees"], found


def _operands(shape, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(4))


@pytest.mark.parametrize("kernel, blocks", [("xla", (0, 0)), ("this", (8, 8))])
def test_a_chained_forward_is_the_forward_applied_again_to_its_output(kernel, blocks):
    """chain = 3: O3 = attend(attend(attend(q, k, v), k, v), k, v), against NumPy float64
    applied three times to the same inputs."""
    shape = (1, 2, 16, 8)
    q, k, v, _ = _operands(shape)
    attend = attention_sweep.make_attend(kernel, 16, 2, 8, *blocks, True)
    chained = attention_sweep.programs(kernel, attend, True, chain=3)["forward"](q, k, v)
    expected = q
    for _ in range(3):
        expected, _ = flash_attention.attention_numpy(expected, k, v, causal=True)
    assert numerics.scaled_max_error(chained, expected) <= numerics.tolerance("float32")
    once, _ = flash_attention.attention_numpy(q, k, v, causal=True)
    assert numerics.scaled_max_error(chained, once) > 0.01  # the chain did run again


def test_a_chained_forward_backward_feeds_the_gradients_back_as_q_k_v():
    """chain = 2: (dQ, dK, dV) of the first call are the second call's (q, k, v), against
    NumPy float64's closed-form gradient applied twice."""
    shape = (1, 1, 16, 8)
    q, k, v, do = _operands(shape, seed=1)
    attend = attention_sweep.make_attend("xla", 16, 1, 8, 0, 0, True)
    program = attention_sweep.programs("xla", attend, True, chain=2)["forward_backward"]
    grads = program(q, k, v, do)
    expected = (q, k, v)
    for _ in range(2):
        expected = flash_attention.attention_grad_numpy(*expected, do, causal=True)
    for got, want in zip(grads, expected, strict=True):
        assert numerics.scaled_max_error(got, want) <= numerics.tolerance("float32")


def test_a_chain_needs_a_call():
    with pytest.raises(ValueError, match="chain must be >= 1"):
        attention_sweep.programs("xla", None, True, chain=0)


def test_make_attend_refuses_an_ablation_of_another_kernel():
    with pytest.raises(ValueError, match="this kernel's only"):
        attention_sweep.make_attend("splash", 128, 1, 8, 128, 128, True, "matmuls_only")
