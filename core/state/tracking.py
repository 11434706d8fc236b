"""Experiment tracking with MLflow: params, metric histories and lineage, stored locally.

Lesson "Track experiments and lineage with MLflow". Each run records what is needed to
reproduce and audit it: the config (params), metric histories (one value per step), the
data identity (sha256 of the data set's bytes and of the order examples were consumed in),
the git revision of the code, and the paths of its checkpoints.

The store is a SQLite database inside the run directory (``sqlite:///DIR/mlflow.db``;
MLflow's file store is in maintenance mode), artifacts go to ``DIR/artifacts``: nothing
reaches the network (telemetry is switched off before mlflow is imported) and nothing is
written outside DIR, except one cached empty database in the system temp dir: a fresh
SQLite store runs ~80 schema migrations (seconds on a small CPU), so a migrated empty
store is made once per MLflow version and copied into each new run directory.

Open the same store in the MLflow UI: ``ui_command(run_dir)``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from core import documents

DB_NAME = "mlflow.db"
EXPERIMENT = "jax-tpu-lab"


def _mlflow():
    # Telemetry is decided at import and at each event: switch it off first (no network).
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("DO_NOT_TRACK", "true")
    import mlflow

    return mlflow


def tracking_uri(run_dir: str | os.PathLike) -> str:
    """``sqlite:////abs/path/mlflow.db`` for a run directory."""
    return f"sqlite:///{pathlib.Path(run_dir).absolute() / DB_NAME}"


def ui_command(run_dir: str | os.PathLike) -> str:
    """The shell command that opens this store in the MLflow UI, on this machine only."""
    return f"mlflow ui --backend-store-uri {tracking_uri(run_dir)} --host 127.0.0.1"


def _template_path() -> pathlib.Path:
    mlflow = _mlflow()
    return pathlib.Path(tempfile.gettempdir()) / f"jax-tpu-lab-mlflow-{mlflow.__version__}-empty.db"


def _empty_store(target: pathlib.Path) -> None:
    """Put a migrated, empty MLflow SQLite database at ``target``."""
    template = _template_path()
    if not template.exists():
        mlflow = _mlflow()
        build_dir = pathlib.Path(tempfile.mkdtemp(prefix="mlflow-template-"))
        try:
            mlflow.MlflowClient(tracking_uri=tracking_uri(build_dir)).search_experiments()
            # atomic: concurrent builders both succeed, a reader never sees half of one
            documents.write_bytes_atomic(template, (build_dir / DB_NAME).read_bytes())
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
    shutil.copyfile(template, target)


def dataset_sha256(columns: Mapping[str, np.ndarray]) -> str:
    """sha256 of a data set: field names, dtypes, shapes and bytes, fields sorted by name."""
    digest = hashlib.sha256()
    for name in sorted(columns):
        array = np.ascontiguousarray(columns[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape};".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def order_sha256(example_ids: Sequence[int]) -> str:
    """sha256 of the order examples were consumed in (ids as little-endian int64)."""
    return hashlib.sha256(np.asarray(example_ids, dtype="<i8").tobytes()).hexdigest()


def git_revision(repo_dir: str | os.PathLike | None = None) -> str:
    """The commit of the code that ran (``+dirty`` with uncommitted changes), or "unknown"."""
    cwd = pathlib.Path(repo_dir) if repo_dir else pathlib.Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@dataclasses.dataclass(frozen=True)
class RunSummary:
    run_id: str
    name: str
    status: str
    params: dict[str, str]
    metrics: dict[str, float]  # the last value of each metric
    tags: dict[str, str]  # lineage tags (MLflow's own mlflow.* tags dropped)


class Tracker:
    """One MLflow store in ``run_dir`` and one experiment in it.

    tracker = Tracker(run_dir)
    run_id = tracker.log_run("lr=0.01", params=config, metrics={"loss": losses},
                             tags={"data.sha256": ..., "git.revision": ...})
    tracker.runs(); tracker.history("loss")
    """

    def __init__(self, run_dir: str | os.PathLike, experiment: str = EXPERIMENT):
        mlflow = _mlflow()
        self.run_dir = pathlib.Path(run_dir).absolute()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        database = self.run_dir / DB_NAME
        if not database.exists():
            _empty_store(database)
        self.uri = tracking_uri(self.run_dir)
        with warnings.catch_warnings():
            # MLflow's SQLAlchemy models use a deprecated loader option; not ours to fix.
            warnings.filterwarnings("ignore", message=".*noload.*")
            self.client = mlflow.MlflowClient(tracking_uri=self.uri)
            self.client.search_experiments(max_results=1)  # opens the store (and its models) now
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = (
            found.experiment_id
            if found
            else self.client.create_experiment(
                experiment, artifact_location=(self.run_dir / "artifacts").as_uri()
            )
        )

    def log_run(
        self,
        name: str,
        params: Mapping[str, Any],
        metrics: Mapping[str, Mapping[int, float]],
        tags: Mapping[str, str] | None = None,
    ) -> str:
        """Record one finished run: params, metric histories {name: {step: value}}, tags."""
        from mlflow.entities import Metric, Param, RunTag

        run = self.client.create_run(self.experiment_id, run_name=name)
        run_id = run.info.run_id
        timestamp = run.info.start_time
        params_list = [
            Param(str(k), json.dumps(v) if not isinstance(v, str) else v) for k, v in params.items()
        ]
        tags_list = [RunTag(str(k), str(v)) for k, v in (tags or {}).items()]
        metric_list = [
            Metric(key, float(value), timestamp, int(step))
            for key, history in metrics.items()
            for step, value in sorted(history.items())
        ]
        # log_batch takes at most 1000 metrics, 100 params, 100 tags per call
        for start in range(0, max(len(metric_list), 1), 1000):
            self.client.log_batch(
                run_id,
                metrics=metric_list[start : start + 1000],
                params=params_list if start == 0 else [],
                tags=tags_list if start == 0 else [],
            )
        self.client.set_terminated(run_id, "FINISHED")
        return run_id

    def runs(self) -> list[RunSummary]:
        """Every run of the experiment, oldest first, read back from the store."""
        found = self.client.search_runs(
            [self.experiment_id], order_by=["attributes.start_time ASC"]
        )
        return [
            RunSummary(
                run_id=r.info.run_id,
                name=r.info.run_name,
                status=r.info.status,
                params=dict(r.data.params),
                metrics=dict(r.data.metrics),
                tags={k: v for k, v in r.data.tags.items() if not k.startswith("mlflow.")},
            )
            for r in found
        ]

    def history(self, key: str, run_ids: Iterable[str] | None = None) -> list[dict]:
        """[{run, run_id, step, value}] of metric ``key`` for the given runs (default: all)."""
        names = {r.run_id: r.name for r in self.runs()}
        rows = []
        for run_id in run_ids or names:
            for m in sorted(self.client.get_metric_history(run_id, key), key=lambda m: m.step):
                rows.append(
                    {
                        "run": names.get(run_id, run_id),
                        "run_id": run_id,
                        "step": m.step,
                        "value": m.value,
                    }
                )
        return rows

    def compare(self, metric: str) -> list[dict]:
        """One row per run: the params that differ between runs, the last and best ``metric``."""
        runs = self.runs()
        keys = sorted({k for r in runs for k in r.params})
        varying = [k for k in keys if len({r.params.get(k) for r in runs}) > 1]
        rows = []
        for r in runs:
            values = [row["value"] for row in self.history(metric, [r.run_id])]
            rows.append(
                {
                    "run": r.name,
                    **{k: r.params.get(k, "") for k in varying},
                    f"last {metric}": values[-1] if values else None,
                    f"min {metric}": min(values) if values else None,
                    "steps": len(values),
                }
            )
        return rows
