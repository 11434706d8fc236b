"""The command line end to end on a tiny config: train, eval, generate, cache-report,
export, report, each through ``cli.main`` (the same parsing and dispatch as
``python -m capstones.byte_transformer``), and the module entry point in a fresh process.
Each command's own behaviour is tested in its module's test file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from capstones.byte_transformer import artifact_files, cli, training
from capstones.byte_transformer import config as config_lib
from core import curriculum, runtime
from core.lm import corpus as corpus_lib

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
    loaded = artifact_files.load_artifacts(artifacts)
    assert sorted(loaded.manifest["artifacts"]) == sorted(artifact_files.ENDPOINTS)

    assert cli.main(["report", f"run_dir={run_dir}"]) == 0
    report = json.loads((run_dir / "report" / "report.json").read_text())
    assert report["checks"]["causality"]["passed"]
    assert report["checks"]["valid_token_loss"]["passed"]
    assert "cache_report" not in report["missing"] and "export" not in report["missing"]
    markdown = (run_dir / "report" / "report.md").read_text()
    assert "## 3 · KV cache" in markdown and "(loss.png)" in markdown
    assert (run_dir / "report" / "loss.png").stat().st_size > 1000


def test_report_refuses_a_damaged_piece_naming_the_file_and_field(run_dir, capsys):
    """issue 13: a piece that is not what its command writes was read as 'missing' (not
    JSON) or crashed the report with a KeyError; now: exit 2 naming the file and field."""
    bench_file = run_dir / "bench.json"
    report_dir = run_dir / "report"
    before = _tree(report_dir)
    try:
        bench_file.write_text(json.dumps({"format": "byte_transformer bench", "version": 2}))
        assert cli.main(["report", f"run_dir={run_dir}"]) == 2
        err = capsys.readouterr().err
        assert f"{bench_file}: bench.json lacks 'command'" in err and "Traceback" not in err
        bench_file.write_text("{not json")
        assert cli.main(["report", f"run_dir={run_dir}"]) == 2
        assert f"{bench_file} is not JSON" in capsys.readouterr().err
        bench_file.write_text(json.dumps({"format": "byte_transformer bench", "version": 1}))
        assert cli.main(["report", f"run_dir={run_dir}"]) == 2  # an older bench.json: rerun
        assert f"{bench_file}: version: Input should be 2, got 1" in capsys.readouterr().err
        assert _tree(report_dir) == before  # nothing written
    finally:
        bench_file.unlink(missing_ok=True)


def test_module_entry_point_in_a_fresh_process():
    result = subprocess.run(
        [sys.executable, "-m", "capstones.byte_transformer", "--help"],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=runtime.child_env(JAX_PLATFORMS="cpu"),
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
        env=runtime.child_env(JAX_PLATFORMS="cpu"),
        timeout=120,
    )
    assert bad.returncode == 2 and "invalid config: steps must be >= 1" in bad.stderr
    assert "Traceback" not in bad.stderr


# --- issue 12.2: a command that reads a run refuses a run that is not there -------------------

# every command that reads a run, with the options it needs besides run_dir
READERS = {
    "eval": [],
    "report": [],
    "generate": ["max_new_tokens=2"],
    "cache-report": [],
    "export": ["out={tmp}/artifacts"],
    "profile": [],
    "bench": [],
    "run-manifest": [],
}


def _tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else None


@pytest.mark.parametrize("state", ["missing", "empty", "untrained"])
@pytest.mark.parametrize("command", list(READERS))
def test_commands_that_read_a_run_refuse_one_that_is_not_there(tmp_path, capsys, command, state):
    """Exit 2, one message that says what is missing and the command that makes it, and
    nothing created: eval and report used to raise FileNotFoundError (exit 1, report after
    making DIR/report), run-manifest wrote a manifest of an empty directory."""
    run_dir = tmp_path / "run"
    if state != "missing":
        run_dir.mkdir()
    if state == "untrained":  # train's first file, no checkpoint yet
        config = config_lib.Config.from_overrides(TINY)
        (run_dir / training.CONFIG_FILE).write_text(config.to_json())
        if command == "run-manifest":
            pytest.skip("a run with no checkpoint yet has a manifest (0 checkpoints)")
    before = _tree(tmp_path)
    options = [o.format(tmp=tmp_path) for o in READERS[command]]
    assert cli.main([command, f"run_dir={run_dir}", *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{command}: run_dir={run_dir} ") and "Traceback" not in err
    expected = {
        "missing": "does not exist",
        "empty": "holds no run" if command == "run-manifest" else "is not a training run",
        "untrained": "has no checkpoint yet",
    }[state]
    assert expected in err and f"train run_dir={run_dir}" in err
    assert _tree(tmp_path) == before  # nothing made: no directory, no file


# --- issue 12.3: train validates everything before it writes anything -----------------------


def test_train_refuses_a_bad_config_before_writing_and_the_fix_then_works(tmp_path, capsys):
    """max_bytes=1 passed the config, then core.lm.corpus raised (a traceback) after
    config.json was written, which locked the directory against the corrected config."""
    run_dir = tmp_path / "run"
    assert cli.main(["train", f"run_dir={run_dir}", "mlflow=false", *TINY, "max_bytes=1"]) == 2
    assert "max_bytes must be >= 2" in capsys.readouterr().err
    assert not run_dir.exists()
    with pytest.raises(ValueError, match="max_bytes must be >= 2"):  # the bound it mirrors
        corpus_lib.load_corpus(max_files=4, max_bytes=1)
    assert training.run_config(run_dir, {"max_bytes": 1024}).max_bytes == 1024


def test_train_refuses_unavailable_data_and_an_unwritable_dir_before_writing(
    tmp_path, capsys, monkeypatch
):
    run_dir = tmp_path / "run"
    monkeypatch.setattr(corpus_lib, "stdlib_dir", lambda: tmp_path / "no_stdlib_here")
    (tmp_path / "no_stdlib_here").mkdir()
    assert cli.main(["train", f"run_dir={run_dir}", "mlflow=false", *TINY]) == 2
    err = capsys.readouterr().err
    assert "the training data cannot be prepared: no .py files" in err and "Traceback" not in err
    assert not run_dir.exists()
    monkeypatch.undo()
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    for target in (blocker, blocker / "run"):
        assert cli.main(["train", f"run_dir={target}", "mlflow=false", *TINY]) == 2
        assert "a file, not a directory" in capsys.readouterr().err
    assert blocker.read_text() == "not a directory"
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert cli.main(["train", f"run_dir={locked / 'run'}", "mlflow=false", *TINY]) == 2
        assert "is not writable" in capsys.readouterr().err


def test_train_refuses_another_corpus_without_touching_the_run(run_dir, capsys):
    corpus_file = run_dir / training.CORPUS_FILE
    saved_corpus, saved_config = corpus_file.read_text(), (run_dir / "config.json").read_text()
    forged = json.loads(saved_corpus) | {"train_sha256": "0" * 64}
    corpus_file.write_text(json.dumps(forged))
    try:
        argv = ["train", f"run_dir={run_dir}", "mlflow=false", *TINY, "steps=9"]
        assert cli.main(argv) == 2
        assert "the corpus differs" in capsys.readouterr().err
        assert (run_dir / "config.json").read_text() == saved_config  # steps=9 not written
        assert [r["step"] for r in training.read_metrics(run_dir)] == [1, 2, 3, 4, 5, 6]
    finally:
        corpus_file.write_text(saved_corpus)


def test_a_preset_is_named_on_the_command_line_and_overrides_win():
    import dataclasses

    from capstones.byte_transformer import args as cli_args

    parsed = cli_args.parse(["preset=tpu-v5e", "batch_size=4"], {})
    config = parsed.config()
    assert config == dataclasses.replace(config_lib.preset("tpu-v5e"), batch_size=4)
    assert (config.d_model, config.compute_dtype, config.batch_size) == (2048, "bfloat16", 4)
    with pytest.raises(cli_args.UsageError, match="unknown preset 'tpu-v9'; presets: tpu-v5e"):
        cli_args.parse(["preset=tpu-v9"], {})
    text = cli_args.help_text("train", "Train.", {}, config_overrides=True)
    assert "preset=NAME starts from a named config (tpu-v5e" in text
