"""Where the items compute (items.on_grading_backend): on the host's CPU whatever JAX's default
backend is, so a TPU host judges the course's own code where it judges a learner's (a
CPU-only answer process) and computes the same answer keys as a CPU host.

The chip run of 2026-12-06 (apps/assessment_*.py on one v5e chip, the TPU the default
backend) failed three rows this file reproduces here: the reference Pallas kernel and the
reference causal attention failed their hidden tests (float32 matmuls on the MXU at DEFAULT:
one bfloat16 pass, far outside the CPU's 1e-5), and the DPO loss key differed from its
float64 derivation by 4.85e-5 (the chip's float32 log and exp). Here a second CPU device
stands for the chip as JAX's default device, and what lands on it computes as the chip
would: matmuls through core.perf.tpu_emulation (the MXU's bfloat16 passes), the DPO loss
with the chip's measured deviation planted (a TPU's transcendentals have no emulation
here). Each test fails where the items compute on the default device."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core.assessment import items
from core.assessment.bank import pallas, post_training, transformers
from core.perf import tpu_emulation

# The DPO loss's relative deviation on the v5e chip from its float64 derivation (the chip
# run of 2026-12-06: assessment_learn_tpus at seed 0, its self-check row).
CHIP_DPO_DEVIATION = 4.85e-5
SELF_CHECK_TOLERANCE = 1e-6  # the assessment apps' bound on "library vs derivation"


def _fake_chip():
    """The second CPU device, standing for a TPU chip as the default device."""
    devices = jax.devices("cpu")
    if len(devices) < 2:
        pytest.skip("needs two CPU devices (the lab's JAX_NUM_CPU_DEVICES=8)")
    return devices[1]


def _on_fake_chip(chip) -> bool:
    """Whether a computation started now lands on the fake chip (the default device)."""
    return jnp.zeros(()).devices() == {chip}


def _bfloat16(x):
    return np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32))


def _chip_computes(chip, function, on_mxu):
    """``function`` as the fake chip computes it where it is the default device: ``on_mxu``
    (the same function with the MXU's rounding), else ``function`` itself."""

    def wrapped(*args):
        return on_mxu(*args) if _on_fake_chip(chip) else function(*args)

    return wrapped


def _mxu_pallas(function):
    # A one-pass MXU product (DEFAULT) is the float32 product of the operands rounded to
    # bfloat16, accumulated in float32; emulate() cannot enter a pallas_call.
    return lambda x, y, *blocks: function(_bfloat16(x), _bfloat16(y), *blocks)


def _mxu_attention(function):
    return tpu_emulation.emulate(function)


@pytest.fixture
def fresh_runs(monkeypatch):
    """No hidden-test verdict cached from another test (items caches them per source)."""
    monkeypatch.setattr(items, "_RUNS", collections.OrderedDict())


@pytest.mark.parametrize(
    ("item", "on_mxu"),
    [(pallas.BlockedKernel(), _mxu_pallas), (transformers.CausalAttention(), _mxu_attention)],
    ids=["pallas.blocked_kernel", "transformers.causal_attention"],
)
def test_references_pass_their_hidden_tests_on_a_host_whose_default_is_a_chip(
    item, on_mxu, monkeypatch, fresh_runs
):
    chip = _fake_chip()
    load = type(item).load

    def load_on_chip(self, source):
        function = load(self, source)
        return _chip_computes(chip, function, on_mxu(function))

    monkeypatch.setattr(type(item), "load", load_on_chip)
    reference = item.reference_source()
    with jax.default_device(chip):
        # The chip's rounding is real: computed on the default device, the reference fails
        # the CPU's bound (what the chip run showed), so the fake chip is a fair stand-in.
        on_mxu_tests = item.hidden_tests(on_mxu(load(item, reference)), 0)
        assert not all(t.passed for t in on_mxu_tests), [t.message for t in on_mxu_tests]
        check = item.self_check(0)
    assert check.facts == {
        f"{item.id}: the reference passes the hidden tests": True,
        f"{item.id}: the stub fails them": True,
    }
    # The bound is the CPU's own: every planted mistake still fails, on this host and with
    # the chip as the default device.
    for mistake, source in item.planted_wrong().items():
        assert not all(t.passed for t in item.run_tests(0, source)), mistake
        with jax.default_device(chip):
            assert not all(t.passed for t in item._run_now(0, source).tests), mistake


def test_the_grading_backend_is_the_cpu_under_any_default_device():
    chip = _fake_chip()
    with jax.default_device(chip):
        assert _on_fake_chip(chip)
        with items.on_grading_backend() as device:
            assert device == jax.devices("cpu")[0]
            assert jnp.ones(3).sum().devices() == {device}
        assert _on_fake_chip(chip)  # the pin ends with its block


def test_dpo_answer_key_is_the_cpu_value_on_a_host_whose_default_is_a_chip(monkeypatch):
    from core.post_training import losses

    chip = _fake_chip()
    dpo_loss = losses.dpo_loss

    def dpo_loss_on_chip(*args):
        loss, margins = dpo_loss(*args)
        if _on_fake_chip(chip):
            loss = loss * (1 + CHIP_DPO_DEVIATION)
        return loss, margins

    monkeypatch.setattr(losses, "dpo_loss", dpo_loss_on_chip)
    item = post_training.DpoLoss()
    params = item.params(items.rng(item.id, 0))
    derived = item.derive(params)[0]
    with jax.default_device(chip):
        on_chip = item.live(params)  # what the chip run's key was: off by the deviation
        assert abs(on_chip - derived) / derived > SELF_CHECK_TOLERANCE
        monkeypatch.setattr(type(item), "seeded", type(item).seeded.__wrapped__)
        errors = item.self_check(0).errors
    (error,) = errors.values()
    assert error <= SELF_CHECK_TOLERANCE, errors
    # A wrong answer key would still fail: each planted mistake is far from the key.
    for mistake, value in item.wrong_answers(0).items():
        assert not item.grade(0, value).passed, mistake
