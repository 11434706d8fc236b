from __future__ import annotations

import jax
import pytest

from core.kernels import matmul
from core.lessons.pallas import first_tpu_kernel
from core.tpu import topology_compile


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((256, 256, 256, 128, 96, 128, "float32"), "does not divide"),
        ((256, 256, 256, 128, 64, 128, "float32"), "not divisible by 128"),  # x's lanes
        ((256, 256, 256, 128, 128, 64, "float32"), "not divisible by 128"),  # y's lanes
        ((256, 256, 256, 4, 128, 128, "bfloat16"), "not divisible by 8 (sublanes)"),
        ((1024, 256, 256, 8, 128, 128, "float32"), "too slow"),
    ],
)
def test_problem_explains_refusals(args, words):
    assert words in first_tpu_kernel.problem(*args)


def test_defaults_and_whole_dims_are_allowed():
    assert first_tpu_kernel.problem(256, 256, 256, 128, 128, 128, "float32") is None
    assert first_tpu_kernel.problem(16, 256, 256, 16, 256, 128, "bfloat16") is None


def test_schedule_zeroes_at_first_k_and_writes_at_last():
    rows = first_tpu_kernel.schedule(256, 384, 128, 128, 128, 128)
    assert len(rows) == 2 * 1 * 3
    assert rows[0]["body"].startswith("acc = 0") and "out[" not in rows[0]["body"]
    assert rows[2]["body"].endswith("out[0,0] = acc")
    assert rows[3]["(i, j, k)"] == "(1, 0, 0)" and rows[3]["x block"] == "(1, 0)"
    buggy = first_tpu_kernel.schedule(256, 384, 128, 128, 128, 128, init=False)
    assert "not zeroed" in buggy[0]["body"]


def test_vmem_bytes():
    parts = first_tpu_kernel.vmem_bytes(128, 256, 64, "bfloat16")
    assert parts["x blocks (2 buffers)"] == 2 * 128 * 256 * 2
    assert parts["f32 accumulator (scratch)"] == 128 * 64 * 4
    assert parts["total"] == sum(v for name, v in parts.items() if name != "total")


def test_missing_init_rows_show_the_poison():
    kx, ky = jax.random.split(jax.random.key(0))
    x, y = jax.random.normal(kx, (16, 256)), jax.random.normal(ky, (256, 256))
    rows = first_tpu_kernel.missing_init_rows(x, y, (8, 128, 128), matmul.matmul_reference(x, y))
    assert [row["NaN elements"] for row in rows] == ["0%", "100%"]
    assert float(rows[0]["error vs NumPy"]) <= 1e-5


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
def test_compile_rows_report_each_topology(monkeypatch):
    monkeypatch.setattr(first_tpu_kernel, "TOPOLOGIES", ("v6e:2x2", "v5e:1x1"))
    good, refused = first_tpu_kernel.compile_rows(16, 256, 128, 8, 128, 128, "float32")
    assert good["compiled"] == "yes" and good[f"{matmul.TPU_CUSTOM_CALL} in HLO"] == "yes"
    assert good["output (KiB)"] == 16 * 128 * 4 / 2**10
    assert refused["compiled"].startswith("no: ")
