"""flash_vs_jax in its CPU --tiny mode: the result's schema and bookkeeping (never speed)."""

from __future__ import annotations

import json

from core.kernels import attention_sweep
from tpu_scripts import flash_vs_jax


def test_tiny_run_writes_rows_best_and_agreement(tmp_path):
    out = tmp_path / "flash.json"
    argv = ["--tiny", "--out", str(out), "--kernels", "this,xla", "--backward-top", "1"]
    assert flash_vs_jax.main([*argv, "--record", "flash_vs_jax"]) == 0
    document = json.loads(out.read_text())
    assert document["is_tpu_result"] is False and document["kind"].startswith("cpu rehearsal")
    rows = document["rows"]
    # T=256, blocks 128 and 256: 4 pairs for the kernel, XLA once; fwd+bwd at the best one,
    # then the kernel's matmuls-only ablation at its best forward blocks
    assert [(r["kernel"], r["pass"], r["variant"]) for r in rows] == [
        *[("this", "forward", "attention")] * 4,
        ("this", "forward_backward", "attention"),
        ("this", "forward", "matmuls_only"),
        ("xla", "forward", "attention"),
        ("xla", "forward_backward", "attention"),
    ]
    assert {r["status"] for r in rows} == {"ok"}
    # each timed dispatch chained two calls (--tiny's chain); the notes say how it was timed
    assert {r["chain"] for r in rows} == {2} and document["chain"] == 2
    assert document["timing"].startswith("2 chained kernel calls per timed dispatch")
    fastest = min((r for r in rows[:4]), key=lambda r: r["median_s"])
    assert (rows[4]["block_q"], rows[4]["block_k"]) == (fastest["block_q"], fastest["block_k"])
    assert (rows[5]["block_q"], rows[5]["block_k"]) == (fastest["block_q"], fastest["block_k"])
    # the ablation is not a rival: best and speedups hold attention rows only
    assert len(document["best"]) == 4 and len(document["speedups"]) == 2
    assert all(b["variant"] == "attention" for b in document["best"])
    figures = flash_vs_jax.record_figures(document)
    share = figures["this_matmuls_only_forward_t256_share"]
    assert share == rows[5]["median_s"] / fastest["median_s"]
    assert [a["agrees"] for a in document["agreement"]] == [True] * 4
    assert rows[0]["flops"] == 2 * 1 * 1 * 256 * 256 * 128  # B H T^2 D, causal forward
    assert "record_error" in document or (tmp_path / "records" / "flash_vs_jax").is_dir()


def test_a_spent_budget_skips_with_the_reason(tmp_path):
    out = tmp_path / "flash.json"
    argv = ["--tiny", "--out", str(out), "--kernels", "this", "--budget-s", "1e-9"]
    assert flash_vs_jax.main(argv) == 0
    document = json.loads(out.read_text())
    assert {r["status"] for r in document["rows"]} == {"skipped"}
    assert all("time budget" in r["reason"] for r in document["rows"])
    assert all("time budget" in a["error"] for a in document["agreement"])
    assert document["best"] == [] and attention_sweep.best_per_kernel(document["rows"]) == []


def test_no_ablation_leaves_it_out(tmp_path):
    out = tmp_path / "flash.json"
    argv = ["--tiny", "--out", str(out), "--kernels", "this", "--backward-top", "1"]
    assert flash_vs_jax.main([*argv, "--no-ablation"]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["variant"] for r in rows} == {"attention"} and len(rows) == 5


def test_refuses_bad_arguments(tmp_path, capsys):
    assert flash_vs_jax.main(["--tiny", "--out", str(tmp_path / "x.json"), "--calls", "0"]) == 2
    assert flash_vs_jax.main(["--tiny", "--out", str(tmp_path / "x.json"), "--chain", "0"]) == 2
    assert (
        flash_vs_jax.main(["--tiny", "--out", str(tmp_path / "x.json"), "--kernels", "cudnn"]) == 2
    )
    assert "unknown kernels" in capsys.readouterr().err


def test_record_figures_keep_the_square_block_curve_of_each_forward_sweep():
    rows = [
        {"kernel": "this", "pass": "forward", "T": 4096, "block_q": 256, "block_k": 256,
         "status": "ok", "median_s": 0.002},
        {"kernel": "this", "pass": "forward", "T": 4096, "block_q": 256, "block_k": 512,
         "status": "ok", "median_s": 0.001},
        {"kernel": "this", "pass": "forward", "T": 4096, "block_q": 512, "block_k": 512,
         "status": "error", "median_s": None},
        {"kernel": "this", "pass": "forward_backward", "T": 4096, "block_q": 512,
         "block_k": 512, "status": "ok", "median_s": 0.004},
        {"kernel": "xla", "pass": "forward", "T": 4096, "block_q": 0, "block_k": 0,
         "status": "ok", "median_s": 0.009},
    ]  # fmt: skip
    document = {"device_kind": "TPU v5 lite", "dtype": "bfloat16", "best": [], "speedups": [],
                "rows": rows}  # fmt: skip
    figures = flash_vs_jax.record_figures(document)
    squares = {k: v for k, v in figures.items() if "square" in k}
    assert squares == {"this_forward_t4096_square256_ms": 2.0}


def test_the_timing_statement_names_the_method():
    assert "dispatch and sync included" in flash_vs_jax.timing_statement(1)
    assert flash_vs_jax.timing_statement(8).startswith("8 chained kernel calls")
