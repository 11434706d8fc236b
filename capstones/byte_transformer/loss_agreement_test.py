"""loss_agreement: the CPU-vs-TPU loss comparison's bookkeeping and its tolerance, which must
pass an emulated TPU run it was not derived from and fail planted bugs."""

import dataclasses
import math

import pytest

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import loss_agreement, training

TINY = config_lib.Config(
    d_model=32,
    num_layers=2,
    num_heads=2,
    seq_len=32,
    batch_size=4,
    max_files=6,
    max_bytes=4096,
    max_len=64,
    steps=4,
    ckpt_every=4,
    eval_every=4,
    log_every=4,
    async_ckpt=False,
)
STEPS = 12


def test_first_losses_are_training_trains_losses_bit_for_bit(tmp_path):
    run = training.train(TINY, tmp_path / "run", log_mlflow=False)
    assert loss_agreement.first_losses(TINY, TINY.steps) == [r["loss"] for r in run.records]


def _shifted_targets_loss(config, params, batch, dropout_key):
    """A planted bug: the target is the byte the model reads, not the next one."""
    return training.loss_fn(config, params, dict(batch, targets_BT=batch["tokens_BT"]), dropout_key)


def test_the_tolerance_passes_an_emulated_run_it_was_not_derived_from_and_fails_bugs():
    # derived on seed 0, judged on seed 1: the emulated MXU is a new rounding realization
    derive = dataclasses.replace(TINY, seed=0)
    predicted = loss_agreement.relative_differences(
        loss_agreement.first_losses(derive, STEPS),
        loss_agreement.first_losses(derive, STEPS, mxu="DEFAULT"),
    )
    assert max(predicted) > 1e-6  # one bfloat16 pass does move the losses
    judged = dataclasses.replace(TINY, seed=1)
    cpu = loss_agreement.first_losses(judged, STEPS)
    emulated = loss_agreement.first_losses(judged, STEPS, mxu="DEFAULT")
    mxu_only = loss_agreement.tolerance("DEFAULT", predicted, elementwise=0.0)
    verdict = loss_agreement.agreement(cpu, emulated, mxu_only)
    assert verdict["agrees"], verdict
    assert verdict["steps"] == STEPS and verdict["first_step_relative_difference"] > 0
    # planted bugs fail even the full tolerance (with the chip's elementwise error)
    full = loss_agreement.tolerance("DEFAULT", predicted, elementwise=1.1e-4)
    fast = loss_agreement.first_losses(dataclasses.replace(judged, learning_rate=3.3e-3), STEPS)
    shifted = loss_agreement.first_losses(judged, STEPS, loss=_shifted_targets_loss)
    for wrong in (fast, shifted):
        bad = loss_agreement.agreement(cpu, wrong, full)
        assert not bad["agrees"] and bad["max_relative_difference"] > 2 * full["value"], bad
    # the learning rate cannot show before step 2: the first step is the same forward pass
    assert loss_agreement.agreement(cpu, fast, full)["first_step_relative_difference"] == 0.0


def test_tolerance_and_agreement_bookkeeping():
    bound = loss_agreement.tolerance("HIGHEST", [1e-7, 3e-7], elementwise=1e-4, citation="rec")
    assert bound["value"] == pytest.approx(loss_agreement.SAFETY * (3e-7 + 1e-4))
    assert "HIGHEST" in bound["reason"] and "rec" in bound["reason"]
    verdict = loss_agreement.agreement([2.0, 4.0, 8.0], [2.0, 4.002, 8.0], bound)
    assert verdict["at_step"] == 2 and verdict["max_relative_difference"] == pytest.approx(5e-4)
    assert not verdict["agrees"]
    assert loss_agreement.agreement([2.0], [2.0, 9.0], bound)["steps"] == 1
    assert loss_agreement.relative_differences([1.0], [math.nan]) == [math.inf]
    with pytest.raises(ValueError, match="nothing to scale by"):
        loss_agreement.relative_differences([0.0], [1.0])
    with pytest.raises(ValueError, match="empty"):
        loss_agreement.relative_differences([], [1.0])
    with pytest.raises(ValueError, match="precision"):
        loss_agreement.tolerance("HIGH", [1e-7], 0.0)
    with pytest.raises(ValueError, match="mxu"):
        loss_agreement.first_losses(TINY, 1, mxu="HIGH")


def test_the_elementwise_error_is_read_from_the_chips_record():
    value, citation = loss_agreement.elementwise_error()
    assert 1e-5 < value < 1e-3  # float32 log on the v5e: ~1e-4 (core/numerics.py)
    assert "float32_precision" in citation and loss_agreement.ELEMENTWISE_FIGURE in citation
