"""The NumPy float64 DigitsNet equals torch.nn.functional in float64 (an independent writing)."""

from __future__ import annotations

import numpy as np
import pytest

from core.lessons.deployment import framework_interop as lesson

SHAPES = {
    "conv1.weight": (8, 1, 3, 3),
    "conv1.bias": (8,),
    "bn1.weight": (8,),
    "bn1.bias": (8,),
    "bn1.running_mean": (8,),
    "bn1.running_var": (8,),
    "conv2.weight": (16, 8, 3, 3),
    "conv2.bias": (16,),
    "fc1.weight": (64, 256),
    "fc1.bias": (64,),
    "ln1.weight": (64,),
    "ln1.bias": (64,),
    "fc2.weight": (10, 64),
    "fc2.bias": (10,),
}


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = {k: rng.normal(0, 0.4, size=s) for k, s in SHAPES.items()}
    w["bn1.running_var"] = rng.uniform(0.2, 2.0, size=8)
    w["bn1.running_mean"] = rng.normal(0.3, 0.2, size=8)
    return w


def _torch_reference(w, x_BHWC) -> np.ndarray:
    torch = pytest.importorskip("torch")
    from torch.nn import functional as F

    t = {k: torch.from_numpy(np.asarray(v, np.float64)) for k, v in w.items()}
    x = torch.from_numpy(np.asarray(x_BHWC, np.float64)).permute(0, 3, 1, 2)
    h = F.conv2d(x, t["conv1.weight"], t["conv1.bias"], stride=1, padding=1)
    h = F.batch_norm(
        h,
        t["bn1.running_mean"],
        t["bn1.running_var"],
        t["bn1.weight"],
        t["bn1.bias"],
        training=False,
        eps=1e-5,
    )
    h = F.gelu(h)
    h = F.gelu(F.conv2d(h, t["conv2.weight"], t["conv2.bias"], stride=2, padding=1))
    h = torch.flatten(h.permute(0, 2, 3, 1), 1)
    h = F.linear(h, t["fc1.weight"], t["fc1.bias"])
    h = F.layer_norm(h, (64,), t["ln1.weight"], t["ln1.bias"], eps=1e-5)
    h = F.gelu(h, approximate="tanh")
    return F.linear(h, t["fc2.weight"], t["fc2.bias"]).numpy()


@pytest.mark.parametrize("seed, batch", [(0, 1), (1, 5), (2, 17)])
def test_logits_equal_torch_float64(seed, batch):
    w = _weights(seed)
    x = np.random.default_rng(seed + 10).uniform(0, 1, size=(batch, 8, 8, 1))
    ours = lesson.logits_float64(w, x)
    assert ours.shape == (batch, 10)
    np.testing.assert_allclose(ours, _torch_reference(w, x), rtol=1e-11, atol=1e-11)


def test_the_layout_rules_matter():
    # Wrong variants the reference must not absorb: fc1 read in NCHW order, a transposed
    # square-free kernel (refused), running statistics ignored.
    w = _weights(3)
    x = np.random.default_rng(4).uniform(0, 1, size=(4, 8, 8, 1))
    reference = lesson.logits_float64(w, x)
    nchw = dict(w)
    columns = np.arange(256).reshape(4, 4, 16).transpose(2, 0, 1).reshape(-1)
    nchw["fc1.weight"] = w["fc1.weight"][:, columns]
    assert np.max(np.abs(lesson.logits_float64(nchw, x) - reference)) > 1e-2
    stats = dict(w, **{"bn1.running_mean": np.zeros(8), "bn1.running_var": np.ones(8)})
    assert np.max(np.abs(lesson.logits_float64(stats, x) - reference)) > 1e-2
    with pytest.raises(ValueError, match="does not fit"):
        lesson.logits_float64(
            dict(w, **{"conv2.weight": w["conv2.weight"].transpose(1, 0, 2, 3)}), x
        )
    with pytest.raises(ValueError, match="x_BHWC"):
        lesson.logits_float64(w, np.zeros((2, 1, 8, 8)))
