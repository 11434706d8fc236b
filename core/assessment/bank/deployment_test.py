"""The item ``deployment.weight_conversion`` beyond the generic contract
(core/assessment/items_test.py): every defect shows, and the NumPy torch reference is checked by
hand."""

from __future__ import annotations

import numpy as np
import pytest

from core.assessment.bank import deployment
from core.assessment.items import rng


@pytest.mark.parametrize("seed", range(4))
def test_weight_conversion_every_defect_shows(seed):
    item = deployment.WeightConversion()
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
    np.testing.assert_allclose(deployment._torch_forward(state, x)[0], expected, rtol=1e-12)
