"""The scaling items beyond the generic contract (core/assessment/items_test.py): every
planted defect's evidence holds (not only the seeds' planted ones), every wrong byte count
misses on every seed, and the code exercises' feedback names the classic mistakes."""

from __future__ import annotations

import numpy as np
import pytest

from core.assessment.bank import scale
from core.assessment.items import rng


def test_allreduce_wrong_answers_miss_on_every_seed():
    item = scale.AllReduceBytes()
    for seed in range(300):
        params = item.params(rng(item.id, seed))
        assert 3 <= params["devices"] <= 8, "D = 2 makes the ring factor 1"
        expected = item.live(params)
        derived, _text = item.derive(params)
        assert abs(expected - derived) <= 1e-9 * derived
        for mistake, value in item.wrong(params, expected).items():
            assert not item.matches(value, expected), (seed, mistake)


def test_allreduce_hlo_holds_the_whole_gradient():
    item = scale.AllReduceBytes()
    text, holds = item.hlo_evidence(3)
    assert holds and "all-reduce" in text


@pytest.mark.parametrize("defect", sorted(scale.HostSync.defects))
def test_host_sync_every_defect_changes_its_own_count(defect):
    item = scale.HostSync()
    params = item.params(rng(item.id, 0))
    evidence = item.evidence(defect, params)
    assert all(evidence.facts.values()), (defect, evidence.facts)
    assert "| this program | fixed |" in evidence.markdown


@pytest.mark.parametrize("seed", range(4))
def test_weight_conversion_every_defect_shows(seed):
    item = scale.WeightConversion()
    params = item.params(rng(item.id, seed))
    for defect in item.defects:
        evidence = item.evidence(defect, params)
        assert all(evidence.facts.values()), (seed, defect, evidence.markdown)


def test_torch_forward_is_a_linear_layer_on_pooled_conv():
    """The NumPy torch reference: a 1x1-equivalent kernel (only the centre tap) on a
    constant image is a per-pixel matmul, so its pooled output is known by hand."""
    c = 3
    generator = np.random.default_rng(0)
    weight = np.zeros((c, c, 3, 3))
    centre = generator.normal(size=(c, c))
    weight[:, :, 1, 1] = centre
    state = {
        "conv.weight": weight,
        "conv.bias": np.zeros(c),
        "fc.weight": generator.normal(size=(c, c)),
        "fc.bias": generator.normal(size=c),
    }
    pixel = generator.normal(size=c)
    x = np.broadcast_to(pixel[None, :, None, None], (1, c, 4, 4))
    hidden = np.maximum(centre @ pixel, 0.0)
    expected = hidden @ state["fc.weight"].T + state["fc.bias"]
    np.testing.assert_allclose(scale._torch_forward(state, x)[0], expected, rtol=1e-12)


def test_sharded_step_feedback_names_the_factor():
    item = scale.ShardedStep()
    planted = item.planted_wrong()
    messages = " ".join(
        t.message for t in item.run_tests(3, planted["psum instead of pmean (gradient × D)"])
    )
    assert "4x the right one" in messages and "2x the right one" in messages
    source = planted["each shard's loss divided by the global batch, then pmean (gradient / D)"]
    messages = " ".join(t.message for t in item.run_tests(3, source))
    assert "1/4 of the right one" in messages
    source = planted["no collective: each device steps on its own shard's gradient"]
    messages = " ".join(t.message for t in item.run_tests(3, source))
    assert "differ from device 0's" in messages


def test_pallas_solution_refuses_bad_shapes():
    from core.assessment.solutions import pallas_kernel

    x, y = np.ones((16, 8), np.float32), np.ones((8, 16), np.float32)
    with pytest.raises(ValueError, match="does not divide M=16"):
        pallas_kernel.blocked_matmul(x, y, 6, 8, 8)
    with pytest.raises(ValueError, match="K must agree"):
        pallas_kernel.blocked_matmul(x, np.ones((16, 16), np.float32), 8, 8, 8)


def test_blocked_kernel_feedback_locates_wrong_blocks():
    item = scale.BlockedKernel()
    source = item.planted_wrong()[
        "output index map with swapped grid indices (blocks land transposed)"
    ]
    first = item.run_tests(3, source)[0]
    assert not first.passed and "wrong output blocks (i, j): [(0, 1), (1, 0)]" in first.message
