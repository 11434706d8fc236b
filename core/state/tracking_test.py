import hashlib
import sqlite3
import subprocess

import numpy as np
import pytest

from core import curriculum
from core.state import tracking


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("mlruns")
    tracker = tracking.Tracker(run_dir)
    runs = {
        "lr=0.01": ({"learning_rate": 0.01, "hidden": 16}, {1: 1.5, 2: 1.25, 3: 1.0}),
        "lr=0.1": ({"learning_rate": 0.1, "hidden": 16}, {1: 1.5, 2: 0.75, 3: 0.5, 4: 0.25}),
    }
    ids = {
        name: tracker.log_run(
            name,
            params,
            {"loss": losses},
            {"data.sha256": "abc", "checkpoint.dir": str(run_dir / name)},
        )
        for name, (params, losses) in runs.items()
    }
    return tracker, runs, ids, run_dir


def test_store_is_a_sqlite_file_inside_the_run_directory(store):
    tracker, _, _, run_dir = store
    assert tracker.uri == f"sqlite:///{run_dir / 'mlflow.db'}"
    assert (run_dir / "mlflow.db").is_file()
    # An independent reader: the runs are rows of MLflow's tables in that SQLite file.
    with sqlite3.connect(run_dir / "mlflow.db") as db:
        names = sorted(row[0] for row in db.execute("select name from runs"))
        artifact_root = db.execute(
            "select artifact_location from experiments where name = ?", (tracking.EXPERIMENT,)
        ).fetchone()[0]
    assert names == ["lr=0.01", "lr=0.1"]
    assert artifact_root == (run_dir / "artifacts").as_uri()
    assert (
        tracking.ui_command(run_dir)
        == f"mlflow ui --backend-store-uri sqlite:///{run_dir}/mlflow.db --host 127.0.0.1"
    )


def test_runs_read_back_params_metrics_and_tags(store):
    tracker, runs, ids, run_dir = store
    summaries = {r.name: r for r in tracker.runs()}
    assert set(summaries) == set(runs)
    for name, (params, losses) in runs.items():
        summary = summaries[name]
        assert summary.run_id == ids[name] and summary.status == "FINISHED"
        assert summary.params == {k: str(v) for k, v in params.items()}
        assert summary.metrics == {"loss": losses[max(losses)]}
        assert summary.tags == {"data.sha256": "abc", "checkpoint.dir": str(run_dir / name)}


def test_history_and_compare_equal_what_was_logged(store):
    tracker, runs, ids, _ = store
    rows = tracker.history("loss")
    for name, (_, losses) in runs.items():
        assert {r["step"]: r["value"] for r in rows if r["run"] == name} == losses
    assert [r["step"] for r in tracker.history("loss", [ids["lr=0.1"]])] == [1, 2, 3, 4]
    compared = {row["run"]: row for row in tracker.compare("loss")}
    assert set(compared["lr=0.1"]) == {
        "run",
        "learning_rate",
        "last loss",
        "min loss",
        "steps",
    }  # hidden is equal
    assert compared["lr=0.1"]["last loss"] == 0.25 and compared["lr=0.01"]["steps"] == 3


def test_reopening_the_store_keeps_the_runs(store):
    tracker, _, _, run_dir = store
    again = tracking.Tracker(run_dir)
    assert again.experiment_id == tracker.experiment_id
    assert len(again.runs()) == 2


def test_long_histories_are_logged_in_batches(tmp_path):
    tracker = tracking.Tracker(tmp_path)
    history = {step: 1.0 / step for step in range(1, 2501)}
    run_id = tracker.log_run("long", {}, {"loss": history})
    assert len(tracker.history("loss", [run_id])) == 2500


@pytest.mark.parametrize("shape,dtype", [((5,), np.float32), ((3, 4), np.int32)])
def test_dataset_sha256_matches_hashlib_over_the_documented_layout(shape, dtype):
    columns = {
        "b": np.arange(np.prod(shape), dtype=dtype).reshape(shape),
        "a": np.ones(2, np.float64),
    }
    reference = hashlib.sha256()
    for name in ("a", "b"):
        array = columns[name]
        reference.update(f"{name}:{array.dtype.str}:{array.shape};".encode() + array.tobytes())
    assert tracking.dataset_sha256(columns) == reference.hexdigest()
    changed = dict(columns, a=np.array([1.0, 2.0]))
    assert tracking.dataset_sha256(changed) != reference.hexdigest()


def test_order_sha256_depends_on_the_order():
    assert (
        tracking.order_sha256([1, 2, 3])
        == hashlib.sha256(np.array([1, 2, 3], "<i8").tobytes()).hexdigest()
    )
    assert tracking.order_sha256([1, 2, 3]) != tracking.order_sha256([2, 1, 3])


def test_git_revision_matches_git_and_outside_a_repository(tmp_path):
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=curriculum.REPO_ROOT, capture_output=True, text=True
    ).stdout.strip()
    assert tracking.git_revision(curriculum.REPO_ROOT).split("+")[0] == head
    assert tracking.git_revision(tmp_path) == "unknown"


def test_the_empty_store_template_is_built_once_atomically(tmp_path, monkeypatch):
    """A missing template is built, written whole (core.documents.write_bytes_atomic: no
    temporary file beside it) and copied byte for byte into each new store. MLflow's
    migrations (~15 s) are stood in for by a client that makes one SQLite table."""
    built = []

    class Client:
        def __init__(self, tracking_uri):
            self.path = tracking_uri.removeprefix("sqlite:///")

        def search_experiments(self):
            built.append(self.path)
            with sqlite3.connect(self.path) as db:
                db.execute("create table runs (name text)")

    class FakeMlflow:
        __version__ = "0"
        MlflowClient = Client

    template = tmp_path / "templates" / "empty.db"
    monkeypatch.setattr(tracking, "_mlflow", lambda: FakeMlflow)
    monkeypatch.setattr(tracking, "_template_path", lambda: template)
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    tracking._empty_store(first)
    assert sorted(p.name for p in template.parent.iterdir()) == ["empty.db"]
    tracking._empty_store(second)  # from the template now: built once
    assert len(built) == 1
    assert first.read_bytes() == second.read_bytes() == template.read_bytes()
    with sqlite3.connect(first) as db:  # an independent reader of the copied file
        assert db.execute("select count(*) from runs").fetchone() == (0,)
