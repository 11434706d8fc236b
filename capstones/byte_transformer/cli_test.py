"""The command line end to end on a tiny config: train, eval, generate, cache-report,
export, report, each through ``cli.main`` (the same parsing and dispatch as
``python -m capstones.byte_transformer``), and the module entry point in a fresh process.
Each command's own behaviour is tested in its module's test file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from capstones.byte_transformer import cli, export, training
from core import curriculum, lab

TINY = [
    "d_model=32",
    "num_layers=2",
    "num_heads=2",  # head dim 16
    "max_len=96",
    "seq_len=32",
    "batch_size=2",
    "max_files=6",
    "max_bytes=1024",
    "heldout_fraction=0.34",
    "steps=6",
    "ckpt_every=3",
    "eval_every=3",
    "async_ckpt=false",
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    assert cli.main(["train", f"run_dir={run_dir}", "mlflow=false", *TINY]) == 0
    return run_dir


def test_train_writes_metrics_and_checkpoints(run_dir):
    records = training.read_metrics(run_dir)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert all({"step", "loss", "tokens", "step_time_s"} <= set(r) for r in records)
    assert (run_dir / training.CHECKPOINTS / "6").is_dir()


def test_eval_generate_cache_report_export_report(run_dir, capsys):
    assert cli.main(["eval", f"run_dir={run_dir}"]) == 0
    evaluation = json.loads((run_dir / training.EVAL_FILE).read_text())
    assert evaluation["step"] == 6 and evaluation["overlap_files"] == []
    assert evaluation["bits_per_byte"] < 8.0  # better than a uniform guess after 6 steps

    capsys.readouterr()
    assert cli.main(["generate", f"run_dir={run_dir}", "prompt=def ", "max_new_tokens=8"]) == 0
    assert capsys.readouterr().out.startswith("def ")

    assert (
        cli.main(
            [
                "cache-report",
                f"run_dir={run_dir}",
                "n_tokens=24",
                "max_windows=2",
                "gen_tokens=4",
                "prefill_len=4",
                "prompts=def |import ",
            ]
        )
        == 0
    )
    cache = json.loads((run_dir / "cache_report.json").read_text())
    assert [r["cache"] for r in cache["rows"]] == ["fp32", "bf16", "int8"]

    artifacts = run_dir / "artifacts"
    assert (
        cli.main(
            ["export", f"run_dir={run_dir}", f"out={artifacts}", "prefill_len=16", "capacity=48"]
        )
        == 0
    )
    loaded = export.load_artifacts(artifacts)
    assert sorted(loaded.manifest["artifacts"]) == sorted(export.ENDPOINTS)

    assert cli.main(["report", f"run_dir={run_dir}"]) == 0
    report = json.loads((run_dir / "report" / "report.json").read_text())
    assert report["checks"]["causality"]["passed"]
    assert report["checks"]["valid_token_loss"]["passed"]
    assert "cache_report" not in report["missing"] and "export" not in report["missing"]
    markdown = (run_dir / "report" / "report.md").read_text()
    assert "## 3 · KV cache" in markdown and "(loss.png)" in markdown
    assert (run_dir / "report" / "loss.png").stat().st_size > 1000


def test_module_entry_point_in_a_fresh_process():
    result = subprocess.run(
        [sys.executable, "-m", "capstones.byte_transformer", "--help"],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=lab.child_env(JAX_PLATFORMS="cpu"),
        timeout=120,
    )
    assert result.returncode == 0
    for command in cli.REGISTRY:
        assert f"  {command} " in result.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "capstones.byte_transformer", "train", "run_dir=/tmp/x", "steps=0"],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=lab.child_env(JAX_PLATFORMS="cpu"),
        timeout=120,
    )
    assert bad.returncode == 2 and "invalid config: steps must be >= 1" in bad.stderr
    assert "Traceback" not in bad.stderr
