"""The layer-by-layer diff: finds the first diverging layer, and each injected mistake's layer."""

import numpy as np
import pytest

from core import numerics
from interop import activations, torch_flax, twins


def _run(seed=0):
    rng = np.random.default_rng(seed)
    return [(name, rng.normal(size=(4, 3)).astype(np.float32)) for name in twins.LAYERS]


def test_identical_runs_agree():
    run = _run()
    result = activations.diff(run, run)
    assert result.agrees and result.first_divergent is None
    assert result.tolerance == numerics.tolerance("float32")
    assert [r["verdict"] for r in result.rows()] == ["agrees"] * len(twins.LAYERS)


@pytest.mark.parametrize("index", [0, 3, 9])
def test_a_perturbed_layer_is_the_first_divergence(index):
    reference = _run()
    run = [(n, a.copy()) for n, a in reference]
    for later in range(index, len(run)):  # an error propagates to every later layer
        run[later][1][0, 0] += 1e-3 * (later + 1)
    run[index - 1][1][1, 1] += 1e-7 if index else 0  # below the tolerance: not a divergence
    result = activations.diff(run, reference)
    assert result.first_divergent == twins.LAYERS[index]
    rows = result.rows()
    assert rows[index]["verdict"] == "FIRST DIVERGENCE"
    assert all(r["verdict"] == "agrees" for r in rows[:index])
    assert all(r["verdict"] == "off" for r in rows[index + 1 :])
    assert rows[index]["max abs error"] == pytest.approx(1e-3 * (index + 1), rel=1e-3)


def test_the_tolerance_decides():
    reference = _run()
    run = [(n, a + np.float32(1e-4)) for n, a in reference]
    assert activations.diff(run, reference).first_divergent == "conv1"
    assert activations.diff(run, reference, tolerance=1e-3).agrees


def test_a_nan_diverges():
    reference = _run()
    run = [(n, a.copy()) for n, a in reference]
    run[5][1][0, 0] = np.nan
    assert activations.diff(run, reference).first_divergent == "flatten"


def test_runs_that_do_not_line_up_are_refused():
    reference = _run()
    with pytest.raises(ValueError, match=r"layer 2 is 'conv2' in the run but 'act1'"):
        activations.diff([reference[i] for i in (0, 1, 3)], reference)
    with pytest.raises(ValueError, match=r"layer 10 is None in the run but 'extra'"):
        activations.diff(reference, reference + [("extra", np.zeros(1))])
    shaped = list(reference)
    shaped[4] = ("act2", np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"layer 'act2': shape \(3, 4\) in the run"):
        activations.diff(shaped, reference)
    with pytest.raises(ValueError, match="tolerance"):
        activations.diff(reference, reference, tolerance=-1)
    with pytest.raises(ValueError, match="no layers"):
        activations.diff([], [])


@pytest.mark.parametrize("mistake", list(torch_flax.MISTAKES))
@pytest.mark.parametrize("seed,batch", [(0, 16), (3, 1), (11, 40)])
def test_the_diff_localises_each_injected_mistake(mistake, seed, batch):
    result = torch_flax.parity(seed, batch, mistake)
    assert result.diff.first_divergent == torch_flax.MISTAKES[mistake].first_layer
    if mistake != "none":
        first = [e.layer for e in result.diff.layers].index(result.expected_layer)
        assert result.diff.layers[first].scaled > 10 * result.diff.tolerance
