"""matmul_blocks_tpu on CPU: refusal, the rehearsal's schema and bookkeeping (never speed)."""

from __future__ import annotations

import json

import pytest

from core.kernels import matmul_sweep
from tpu_scripts import matmul_blocks_tpu


@pytest.mark.cpu_only("on a TPU the script measures for real instead of refusing or rehearsing")
def test_refuses_without_a_tpu_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "mm.json"
    assert matmul_blocks_tpu.main(["--out", str(out)]) == matmul_blocks_tpu.EXIT_REFUSED
    assert "refused: no TPU here" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.cpu_only("on a TPU the script measures for real instead of refusing or rehearsing")
def test_rehearsal_writes_rows_agreement_and_figures(tmp_path):
    out = tmp_path / "mm.json"
    argv = ["--out", str(out), "--allow-cpu-rehearsal", "--record", "pallas_matmul_blocks"]
    assert matmul_blocks_tpu.main(argv) == 0
    document = json.loads(out.read_text())
    assert document["is_tpu_result"] is False and document["kind"].startswith("cpu rehearsal")
    assert document["peak_flops"] is None and document["accumulator"] == "float32"
    rows = document["rows"]
    # N = 256: jnp.dot once, then every rehearsal block shape that divides 256
    assert [(r["kernel"], (r["bm"], r["bk"], r["bn"])) for r in rows] == [
        ("xla", (0, 0, 0)),
        *[("pallas", b) for b in matmul_blocks_tpu.REHEARSAL["blocks"]],
    ]
    assert {r["status"] for r in rows} == {"ok"}
    assert all(r["calls"] == 2 and r["flops"] == 2 * 256**3 for r in rows)
    # each timed dispatch chained two products (the rehearsal's chain), and the notes say so
    assert {r["chain"] for r in rows} == {2}
    assert document["timing"].startswith("2 chained products per timed dispatch")
    assert [(a["kernel"], a["dtype"], a["agrees"]) for a in document["agreement"]] == [
        ("pallas", "bfloat16", True),
        ("xla", "bfloat16", True),
        ("pallas", "float32", True),
        ("xla", "float32", True),
    ]
    figures = matmul_sweep.record_figures(document)
    assert "pallas_n256_b128x256x128_tflops" in figures and "xla_n256_ms" in figures
    # the record is refused when the shared machine is busy; then the reason is kept in OUT
    assert "record_error" in document or (tmp_path / "records" / "pallas_matmul_blocks").is_dir()


@pytest.mark.cpu_only("on a TPU the script measures for real instead of refusing or rehearsing")
def test_a_spent_budget_skips_with_the_reason(tmp_path):
    out = tmp_path / "mm.json"
    argv = ["--out", str(out), "--allow-cpu-rehearsal", "--budget-s", "1e-9"]
    assert matmul_blocks_tpu.main(argv) == 0
    document = json.loads(out.read_text())
    assert {r["status"] for r in document["rows"]} == {"skipped"}
    assert all("time budget" in r["reason"] for r in document["rows"])
    assert all("time budget" in a["error"] for a in document["agreement"])
    assert matmul_sweep.record_figures(document) == {
        "device_kind": document["device_kind"], "dtype": "bfloat16", "accumulator": "float32"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--calls", "0"], "--calls >= 1"),
        (["--chain", "0"], "--chain >= 1"),
        (["--agreement-n", "300"], "multiple of 256"),
        (["--sizes", "4096", "--blocks", "384x128x128"], "no block shape divides"),
    ],
)
def test_refuses_bad_arguments(tmp_path, capsys, argv, words):
    assert matmul_blocks_tpu.main(["--out", str(tmp_path / "x.json"), *argv]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_a_block_shape_off_the_lane_width_is_an_argument_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        matmul_blocks_tpu.main(["--out", str(tmp_path / "x.json"), "--blocks", "100x128x128"])
    assert exit_info.value.code == 2 and "multiple of 128" in capsys.readouterr().err


@pytest.mark.parametrize("blocks", [(0, 0, 0), (128, 128, 128)], ids=["xla", "pallas"])
def test_a_chained_program_multiplies_by_y_chain_times(blocks):
    """chain = 3: x y y y, against NumPy float64 (y scaled by 1/sqrt(N) to keep the sizes)."""
    import jax.numpy as jnp
    import numpy as np

    from core import numerics
    from core.kernels import matmul

    n = 256
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((n, n)), rng.standard_normal((n, n)) / np.sqrt(n)
    program = matmul_blocks_tpu._programs(
        n, blocks, jnp.float32, matmul.interpret_for("hlo"), chain=3
    )
    got = program(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32))
    assert numerics.scaled_max_error(got, x @ y @ y @ y) <= numerics.tolerance("float32")
