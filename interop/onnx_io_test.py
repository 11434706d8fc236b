"""PyTorch -> ONNX -> onnxruntime: parity at two batch sizes, verification, planted mistakes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core import numerics
from interop import onnx_io

torch = pytest.importorskip("torch")


def _net(seed: int = 0):
    """conv 3x3 -> BatchNorm (non-trivial running statistics) -> GELU -> flatten -> Linear."""
    torch.manual_seed(seed)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.fc = torch.nn.Linear(8 * 8 * 8, 10)

        def forward(self, x_BCHW):
            h = torch.nn.functional.gelu(self.bn(self.conv(x_BCHW)))
            return self.fc(h.permute(0, 2, 3, 1).flatten(1))

    net = Net()
    with torch.no_grad():
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
        net.bn.weight.uniform_(0.5, 1.5)
        net.bn.bias.uniform_(-0.2, 0.2)
    return net.eval()


def _torch(net, x) -> np.ndarray:
    with torch.no_grad():
        return net(torch.as_tensor(x)).numpy()


def _inputs(batch: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(size=(batch, 1, 8, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    net = _net()
    path = tmp_path_factory.mktemp("onnx") / "net.onnx"
    manifest = onnx_io.export(net, _inputs(4, 0), path)
    return net, path, manifest


def test_onnxruntime_equals_torch_at_two_batch_sizes(exported):
    net, path, manifest = exported
    session = onnx_io.load(path)
    for batch, seed in ((1, 1), (13, 2)):
        x = _inputs(batch, seed)
        error = numerics.scaled_max_error(onnx_io.run(session, x), _torch(net, x))
        assert error <= numerics.tolerance("float32"), (batch, error)
    assert manifest.input_shape == [onnx_io.BATCH, 1, 8, 8]
    assert manifest.output_shape[1:] == [10] and manifest.input_name == onnx_io.INPUT_NAME
    assert {"Conv", "Gemm"} & set(onnx_io.op_counts(path))


def test_a_tampered_file_or_manifest_is_refused(exported, tmp_path):
    _, path, manifest = exported
    data = bytearray(path.read_bytes())
    copy = tmp_path / "copy.onnx"
    onnx_io.manifest_path(copy).write_text(onnx_io.manifest_path(path).read_text())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256"):
        onnx_io.load(copy)
    copy.write_bytes(bytes(data[:-1]))
    with pytest.raises(ValueError, match="bytes, its manifest says"):
        onnx_io.load(copy)
    record = json.loads(onnx_io.manifest_path(path).read_text())
    onnx_io.manifest_path(copy).write_text(json.dumps({**record, "size": "big"}))
    with pytest.raises(ValueError, match="not an ONNX manifest"):
        onnx_io.load(copy)
    with pytest.raises(ValueError, match="no manifest"):
        onnx_io.load(tmp_path / "missing.onnx")
    # a manifest that names another input shape than the graph's
    copy.write_bytes(path.read_bytes())
    other = manifest.model_copy(update={"input_shape": [onnx_io.BATCH, 1, 28, 28]})
    with pytest.raises(ValueError, match="inputs/outputs"):
        onnx_io.load(copy, other)


def test_a_stale_export_is_caught(tmp_path):
    # The planted mistake: the file was exported before the weights' last update (here a
    # bias nudged by 0.05), so it no longer computes the module that is being served.
    net = _net()
    onnx_io.export(net, _inputs(4, 0), tmp_path / "stale.onnx")
    with torch.no_grad():
        net.fc.bias.add_(0.05)
    x = _inputs(8, 3)
    stale = onnx_io.run(onnx_io.load(tmp_path / "stale.onnx"), x)
    assert numerics.scaled_max_error(stale, _torch(net, x)) > 100 * numerics.tolerance("float32")


def test_a_fixed_batch_export_refuses_another_batch(tmp_path):
    net = _net()
    manifest = onnx_io.export(net, _inputs(4, 0), tmp_path / "fixed.onnx", dynamic_batch=False)
    assert manifest.input_shape == [4, 1, 8, 8]
    session = onnx_io.load(tmp_path / "fixed.onnx")
    assert onnx_io.run(session, _inputs(4, 1)).shape == (4, 10)
    with pytest.raises(ValueError, match="does not fit the model"):
        onnx_io.run(session, _inputs(5, 1))


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="torch.nn.Module"):
        onnx_io.export(lambda x: x, _inputs(2, 0), tmp_path / "f.onnx")
    with pytest.raises(ValueError, match="a batch"):
        onnx_io.export(_net(), np.zeros(3, np.float32), tmp_path / "f.onnx")

    class Two(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    with pytest.raises(ValueError, match="one input tensor"):
        onnx_io.export(Two(), _inputs(2, 0), tmp_path / "f.onnx")


def test_digitsnet_torch_twin_through_onnx(tmp_path):
    # the interop reference model (BatchNorm statistics, exact and tanh GELU, LayerNorm):
    # onnxruntime agrees with its torch twin and with its NNX twin at two batch sizes
    from interop import torch_flax, twins

    net = twins.seeded_torch(0)
    onnx_io.export(net, np.transpose(twins.digits_batch(4, 0), (0, 3, 1, 2)), tmp_path / "d.onnx")
    session = onnx_io.load(tmp_path / "d.onnx")
    nnx_twin = torch_flax.seeded_nnx(0)
    for batch, seed in ((1, 1), (21, 2)):
        x_BHWC = twins.digits_batch(batch, seed)
        x_BCHW = np.ascontiguousarray(np.transpose(x_BHWC, (0, 3, 1, 2)))
        logits = onnx_io.run(session, x_BCHW)
        assert numerics.scaled_max_error(logits, _torch(net, x_BCHW)) <= numerics.tolerance(
            "float32"
        )
        assert numerics.scaled_max_error(logits, nnx_twin(x_BHWC)) <= numerics.tolerance("float32")
