"""rundir: refusing a run that is not there (creating nothing), and moving history aside."""

from __future__ import annotations

import datetime

import pytest

from capstones.byte_transformer import args, rundir

NOW = datetime.datetime(2026, 12, 1, 12, 30, 5, tzinfo=datetime.UTC)


def _tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_require_run_says_what_is_missing_and_creates_nothing(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(rundir.MissingRun, match="does not exist; make it with: python -m"):
        rundir.require_run(run)
    run.mkdir()
    with pytest.raises(rundir.MissingRun, match="is not a training run .no config.json"):
        rundir.require_run(run)
    (run / rundir.CONFIG_FILE).write_text("{}")
    with pytest.raises(rundir.MissingRun, match="has no checkpoint yet"):
        rundir.require_run(run)
    assert rundir.require_run(run, trained=False) == run
    (run / rundir.CHECKPOINTS / "4.orbax-checkpoint-tmp").mkdir(parents=True)  # partial save
    with pytest.raises(rundir.MissingRun, match="has no checkpoint yet"):
        rundir.require_run(run)
    (run / rundir.CHECKPOINTS / "3").mkdir()
    assert rundir.require_run(str(run)) == run
    assert _tree(tmp_path) == [
        "run", "run/checkpoints", "run/checkpoints/3", "run/checkpoints/4.orbax-checkpoint-tmp",
        "run/config.json",
    ]  # fmt: skip
    with pytest.raises(rundir.MissingRun, match="is a file"):
        rundir.require_run(run / rundir.CONFIG_FILE)
    with pytest.raises(rundir.MissingRun, match="run_dir is empty"):
        rundir.require_run("")
    # a usage error for the CLI (exit 2) and a FileNotFoundError for library callers
    assert issubclass(rundir.MissingRun, args.UsageError)
    assert issubclass(rundir.MissingRun, FileNotFoundError)


def test_require_run_or_job_accepts_a_training_run_or_a_tpu_job(tmp_path):
    with pytest.raises(rundir.MissingRun, match="holds no run"):
        rundir.require_run_or_job(tmp_path)
    for name in (rundir.CONFIG_FILE, *rundir.JOB_FILES):
        folder = tmp_path / name.replace(".", "_")
        folder.mkdir()
        (folder / name).write_text("{}")
        assert rundir.require_run_or_job(folder) == folder


def test_check_writable_looks_up_to_the_nearest_existing_folder(tmp_path):
    rundir.check_writable(tmp_path / "a" / "b" / "c")  # can be made
    assert list(tmp_path.iterdir()) == []  # and was not
    (tmp_path / "f").write_text("x")
    with pytest.raises(args.UsageError, match="is a file"):
        rundir.check_writable(tmp_path / "f")
    with pytest.raises(args.UsageError, match="cannot be made: .* is a file"):
        rundir.check_writable(tmp_path / "f" / "run")


def test_rotate_history_moves_each_piece_into_a_new_folder(tmp_path):
    assert rundir.rotate_history(tmp_path, NOW) is None  # nothing there
    (tmp_path / rundir.METRICS_FILE).write_text("")  # an empty file is no history
    (tmp_path / "artifacts").mkdir()  # nor an empty folder
    assert rundir.rotate_history(tmp_path, NOW) is None
    (tmp_path / rundir.CONFIG_FILE).write_text('{"steps": 3}')
    (tmp_path / rundir.METRICS_FILE).write_text('{"step": 1}\n')
    (tmp_path / rundir.EVAL_FILE).write_text("{}")
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "profile.json").write_text("{}")
    (tmp_path / "plan.json").write_text("{}")  # depends on the config only: stays
    first, names = rundir.rotate_history(tmp_path, NOW)
    assert first == tmp_path / rundir.PREVIOUS / "20261201T123005Z-1"
    assert names == [rundir.METRICS_FILE, rundir.EVAL_FILE, "profile"]
    assert _tree(first) == [
        "config.json", "eval.json", "metrics.jsonl", "profile", "profile/profile.json"
    ]  # fmt: skip
    assert (first / rundir.METRICS_FILE).read_text() == '{"step": 1}\n'
    assert (tmp_path / rundir.CONFIG_FILE).exists() and (tmp_path / "plan.json").exists()
    assert not (tmp_path / rundir.METRICS_FILE).exists()
    # the same second again: a new folder, never a merge into the old one
    (tmp_path / rundir.METRICS_FILE).write_text('{"step": 1}\n{"step": 2}\n')
    second, _ = rundir.rotate_history(tmp_path, NOW)
    assert second.name == "20261201T123005Z-2"
    assert (first / rundir.METRICS_FILE).read_text() == '{"step": 1}\n'
    assert len((second / rundir.METRICS_FILE).read_text().splitlines()) == 2
